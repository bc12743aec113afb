"""The REST call reads its idempotency key's header from ``META`` by name: the same answer
``request.headers`` gives, for any spelling of the name, the site's own header included."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import RequestFactory
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from guarded_tools.transports.asgi import meta_key
from guarded_tools.transports.rest.base import header


@pytest.mark.parametrize("name", ["Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY",
                                  "X-Operation-Key", "Content-Type", "content-length",
                                  "Traceparent", "X-Absent"])
def test_a_header_reads_as_request_headers_reads_it(name: str) -> None:
    request = RequestFactory().post(
        "/", data=b"{}", content_type="application/json",
        headers={"Idempotency-Key": "k-1", "X-Operation-Key": "k-2",
                 "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
    assert header(request, name) == request.headers.get(name)
    assert meta_key(name) in request.META or request.headers.get(name) is None


@pytest.mark.django_db
@pytest.mark.parametrize("auth", ["token", "session"])
@pytest.mark.parametrize("configured", [None, "X-Operation-Key", "x-operation-key"])
def test_a_rest_call_finds_its_key_in_the_header_the_site_names(
    auth: str, configured: str | None, make_tool: Any, alice: Any, session_client_for: Any,
    settings: Any,
) -> None:
    """The default header, and the site's own however the setting spells it."""
    spelled = "Idempotency-Key"
    if configured is not None:
        settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "IDEMPOTENCY_HEADER": configured}
        spelled = "X-Operation-Key"
    runs: list[int] = []

    def handler(input: Any, ctx: Any) -> Any:
        runs.append(1)
        return {"run": len(runs)}

    definition = make_tool(handler, idempotency_key=None)
    if auth == "token":
        client: Any = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")
    else:
        client = session_client_for(alice)
    key = uuid.uuid4().hex
    first = client.post(f"/agent/tools/{definition.name}/", {}, format="json",
                        headers={spelled: key})
    again = client.post(f"/agent/tools/{definition.name}/", {}, format="json",
                        headers={spelled.upper(): key})
    assert first.status_code == 200, first.content
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["output"] == first.json()["output"] == {"run": 1}
    assert len(runs) == 1
