"""A call's view, DRF request and response are freed when the answer is let go, by
reference counting, not left in cycles for the garbage collector (whose every collection
costs more for what is left to it).

DRF links them in cycles (``parser_context`` and ``renderer_context``); the app's views
make those links weak once the answer is made. Checked with the collector off: whatever
is still alive once the test drops the response is held by a cycle. Over REST (a DRF
``Response``) with token and session authentication, over MCP (the JSON-RPC answer) with
a token and anonymously, and for a refusal.
"""

from __future__ import annotations

import gc
import io
import json
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from rest_framework.authtoken.models import Token

from guarded_tools.transports.rest.base import GuardedAPIView

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]

MCP = {"HTTP_ACCEPT": "application/json, text/event-stream",
       "HTTP_MCP_PROTOCOL_VERSION": "2025-11-25"}


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[weakref.ref[Any]]]:
    """Weak references to each view, DRF request and response the app's views answer
    with, taken as the answer is made; the collector is off until the test ends."""
    refs: list[weakref.ref[Any]] = []
    unlink = GuardedAPIView.unlink

    def watching(self: GuardedAPIView, response: Any) -> Any:
        refs.extend(weakref.ref(x) for x in (self, self.request, response))
        return unlink(self, response)

    monkeypatch.setattr(GuardedAPIView, "unlink", watching)
    gc.collect()
    gc.disable()
    try:
        yield refs
    finally:
        gc.enable()


def assert_freed(refs: list[weakref.ref[Any]]) -> None:
    assert len(refs) == 3, refs
    alive = [type(obj).__name__ for obj in (ref() for ref in refs) if obj is not None]
    assert not alive, f"kept alive by a reference cycle: {alive}"


def serve(path: str, body: Any, headers: dict[str, str]) -> tuple[int, bytes, list[Any]]:
    """One POST through Django's WSGI handler, as a server makes it (the test client would
    tie a cycle of its own to the response): its status, its body, and the response
    object, to be dropped by the caller."""
    data = json.dumps(body).encode()
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": path, "QUERY_STRING": "",
               "SERVER_NAME": "testserver", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
               "wsgi.input": io.BytesIO(data), "CONTENT_TYPE": "application/json",
               "CONTENT_LENGTH": str(len(data)), "REMOTE_ADDR": "127.0.0.1", **headers}
    started: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        started.append(status)
        return lambda data: None

    response = WSGIHandler()(environ, start_response)
    try:
        content = b"".join(response)
    finally:
        response.close()  # request_finished, as a server calls it
    return int(started[0].split()[0]), content, [response]


def credentials(kind: str, user: Any, session_client_for: Callable[[Any], Any]
                ) -> dict[str, str]:
    """The headers ``user``'s calls carry: a DRF token, or a logged-in session's cookies
    and its CSRF token."""
    if kind == "anonymous":
        return {}
    if kind == "token":
        return {"HTTP_AUTHORIZATION": f"Token {Token.objects.create(user=user).key}"}
    client = session_client_for(user)
    csrf = client.cookies[settings.CSRF_COOKIE_NAME].value
    return {"HTTP_COOKIE": "; ".join(f"{k}={m.value}" for k, m in client.cookies.items()),
            "HTTP_X_CSRFTOKEN": csrf, "HTTP_HOST": "testserver",
            "HTTP_REFERER": "http://testserver/"}


@pytest.mark.parametrize("kind", ["token", "session"])
def test_a_rest_call_is_freed_when_its_answer_is(
    kind: str, make_tool: Any, alice: Any, session_client_for: Any, watched: Any,
) -> None:
    definition = make_tool(lambda input, ctx: {"echo": input["operationId"]})
    headers = credentials(kind, alice, session_client_for)
    key = uuid.uuid4().hex
    status, content, held = serve(f"/agent/tools/{definition.name}/", {"operationId": key},
                                  headers)
    assert status == 200, content
    assert json.loads(content)["output"] == {"echo": key}
    # While the response lives, its context's entries answer as before.
    response = held.pop()
    assert response.renderer_context["response"] is not None
    assert response.renderer_context["response"].status_code == 200
    request = response.renderer_context["request"]
    assert request.parser_context["request"].user == alice
    assert request.data == {"operationId": key}
    del request
    del response
    assert_freed(watched)


def test_a_refusal_is_freed_when_its_answer_is(make_tool: Any, watched: Any) -> None:
    definition = make_tool()
    status, content, held = serve(f"/agent/tools/{definition.name}/", {"operationId": "k"},
                                  {})
    assert status == 401, content
    held.clear()
    assert_freed(watched)


@pytest.mark.parametrize("kind", ["token", "session", "anonymous"])
def test_an_mcp_call_is_freed_when_its_answer_is(
    kind: str, make_tool: Any, alice: Any, session_client_for: Any, watched: Any,
) -> None:
    definition = make_tool(lambda input, ctx: {"value": input["value"]},
                           input_schema={"type": "object",
                                         "properties": {"value": {"type": "integer"}}},
                           idempotency_key=None, read_only=True, allow_anonymous=True)
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": definition.name, "arguments": {"value": 3}}}
    status, content, held = serve("/agent/mcp/", body,
                                  {**MCP, **credentials(kind, alice, session_client_for)})
    assert status == 200, content
    assert json.loads(content)["result"]["structuredContent"] == {"value": 3}
    held.clear()
    assert_freed(watched)
