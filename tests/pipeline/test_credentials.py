"""A site's own kind of credential (``guarded_tools.credentials``, issue 26 item 1).

The pipeline records what a waiting call authenticated with and re-checks it when the
approval runs, through the registered kinds (DRF tokens built in, OAuth registered by the
app config): a kind a site registers first records its own reference, and its verdict
decides whether the approved call runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client as DjangoClient

from guarded_tools import confirmations, credentials, registry
from guarded_tools.core.credentials import DRF_TOKEN
from guarded_tools.core.registry import registry as core_registry
from guarded_tools.models import Confirmation, ConfirmationStatus, Operation
from tests.conftest import Effects, key
from tests.transports.mcp_calls import ITEM, call

SITE = "site-token:"


class SiteTokens:
    """Records a DRF token by its row; stands while the site has not listed it as revoked."""

    prefixes: tuple[str, ...] = (SITE,)
    revoked: set[str] = set()

    def reference(self, auth: Any) -> str | None:
        from rest_framework.authtoken.models import Token

        return f"{SITE}{auth.pk}" if isinstance(auth, Token) else None

    def live(self, reference: str, user: Any) -> Any:
        if reference in self.revoked:
            raise credentials.CredentialRevoked()
        return None


@pytest.fixture
def site_kind() -> Iterator[SiteTokens]:
    kind = SiteTokens()
    kind.revoked = set()
    credentials.register(kind, first=True)
    yield kind
    credentials.unregister(kind)


def token_client(user: Any) -> DjangoClient:
    from rest_framework.authtoken.models import Token

    return DjangoClient(headers={"Authorization": f"Token {Token.objects.create(user=user).key}"})


@pytest.mark.parametrize("revoked", [False, True])
def test_a_registered_kind_records_the_credential_and_decides_the_approved_run(
        revoked: bool, site_kind: SiteTokens, make_tool: Any, user_factory: Any,
        approver: Any, eager: Any) -> None:
    definition = make_tool(Effects(), confirm="effect-only", input_schema=ITEM)
    call(token_client(user_factory()), definition.name, {"operationId": key(), "qty": 1})
    row = Confirmation.objects.get()
    assert row.credential.startswith(SITE)  # the site's kind answered before DRF's
    if revoked:
        site_kind.revoked.add(row.credential)
    eager(confirmations.approve, row, approver)
    row.refresh_from_db()
    assert definition.handler.count == (0 if revoked else 1)
    assert Operation.objects.filter(state="succeeded").exists() is not revoked
    if revoked:
        assert row.status == ConfirmationStatus.CONSUMED
        assert row.task_error["code"] == "authorization_denied"


def test_without_the_site_kind_the_built_in_drf_kind_records_the_token(
        make_tool: Any, user_factory: Any) -> None:
    definition = make_tool(Effects(), confirm="effect-only", input_schema=ITEM)
    call(token_client(user_factory()), definition.name, {"operationId": key(), "qty": 1})
    assert Confirmation.objects.get().credential.startswith(DRF_TOKEN)


def test_the_tools_registry_is_the_one_in_core(make_tool: Any) -> None:
    """``@tool`` fills the registry the pipeline reads (``guarded_tools.core.registry``)."""
    definition = make_tool()
    assert registry is core_registry
    assert core_registry.find(definition.name) is definition
