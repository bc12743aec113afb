"""An allowance granted to an OAuth application covers the calls made with its tokens, and
only those: the same user's call through another credential waits for a person."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("oauth2_provider", reason="django-oauth-toolkit (guarded-tools[oauth])")

from django.test import Client as DjangoClient
from django.utils import timezone
from oauth2_provider.models import get_access_token_model, get_application_model

from guarded_tools.confirmations import allowances
from tests.conftest import Effects
from tests.pipeline.allowance_support import SCHEMA, allowing, bounds, payment, people
from tests.pipeline.policy_support import call as rest_call
from tests.transports.mcp_rpc import call

pytestmark = pytest.mark.django_db

RESOURCE = "http://testserver/agent/mcp"


@pytest.fixture(autouse=True)
def _oauth_on(settings: Any) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "OAUTH_PROTECTS": ["mcp", "rest"]}


def test_an_applications_allowance_covers_its_tokens_only(make_tool: Any, alice: Any,
                                                           client_for: Any,
                                                           user_factory: Any) -> None:
    host = get_application_model().objects.create(
        name="Payments host", client_type="public",
        authorization_grant_type="authorization-code",
        redirect_uris="http://127.0.0.1:33418/callback", client_secret="")
    value = secrets.token_urlsafe(24)
    get_access_token_model().objects.create(
        user=alice, application=host, token=value, scope="orders:write",
        expires=timezone.now() + timedelta(hours=1), resource=[RESOURCE])
    handler = Effects()
    definition = make_tool(handler, confirm=allowing(), input_schema=SCHEMA,
                           scopes=["orders:write"])
    allowance = allowances.propose(
        bounds(definition.name, None, application=host.client_id), *people(
            user_factory, "approver"))
    assert allowance.principal == f"application {host.client_id}"
    client = DjangoClient(headers={"Authorization": f"Bearer {value}"})
    ran = call(client, definition.name, payment(120))
    assert ran.status_code == 200 and ran.json()["result"]["isError"] is False, ran.content
    assert handler.count == 1
    # alice herself, with another credential: not the application's call.
    assert rest_call(client_for(alice), definition.name, payment(120)).status_code == 202
    assert handler.count == 1
