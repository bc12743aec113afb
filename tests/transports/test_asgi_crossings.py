"""The tool endpoints under ASGI cross into a thread once per call (issue 29 item 2).

Driven through the app's ASGI entry (``with_cancellation`` around Django's ASGI handler,
as the docs' production guide documents), in process, with every ``sync_to_async`` call counted: the
site's middleware, DRF's authentication and the guarded call, database steps included,
run in one crossing, whoever calls (anonymous, DRF token, session with CSRF).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import SyncToAsync
from django.core.asgi import get_asgi_application
from django.test import Client
from rest_framework.authtoken.models import Token

from guarded_tools.asgi import with_cancellation
from guarded_tools.models import Operation
from tests.conftest import key

pytestmark = pytest.mark.django_db(transaction=True)

CSRF = "k" * 32
KEYED = {"type": "object", "properties": {"operationId": {"type": "string"}},
         "required": ["operationId"]}


@pytest.fixture
def crossings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``sync_to_async`` call made while the test runs, by the function it runs."""
    seen: list[str] = []
    original = SyncToAsync.__call__

    def counted(self: SyncToAsync, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(self.func, "__qualname__", repr(self.func)))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    return seen


def serve(path: str, payload: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    """One POST through the app's ASGI entry; the status and the JSON answer."""
    application = with_cancellation(get_asgi_application())
    body = json.dumps(payload).encode()
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "server": ("testserver", 80), "client": ("127.0.0.1", 50000),
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *((k.lower().encode(), v.encode()) for k, v in headers.items())],
    }

    async def run() -> list[dict[str, Any]]:
        pending = [{"type": "http.request", "body": body, "more_body": False}]
        answered = asyncio.Event()
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if pending:
                return pending.pop()
            await answered.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await application(scope, receive, send)
        answered.set()
        return sent

    sent = asyncio.run(run())
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(content)


def mcp_call(name: str, arguments: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    return serve("/agent/mcp/", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                 "params": {"name": name, "arguments": arguments}},
                 {"MCP-Protocol-Version": "2025-11-25", **headers})


def rest_call(name: str, arguments: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    return serve(f"/agent/tools/{name}/", arguments, headers)


@pytest.fixture
def credentials(django_user_model: Any) -> dict[str, dict[str, str]]:
    """Request headers per way of calling: anonymous, a DRF token, a session with CSRF."""
    user = django_user_model.objects.create_user("crossing-agent", password="pw")
    client = Client()
    client.force_login(user)
    session = client.cookies["sessionid"].value
    return {
        "anonymous": {},
        "token": {"Authorization": f"Token {Token.objects.create(user=user).key}"},
        "session": {"Cookie": f"sessionid={session}; csrftoken={CSRF}", "X-CSRFToken": CSRF},
    }


Call = Callable[[str, dict[str, Any], dict[str, str]], tuple[int, Any]]
TRANSPORTS: dict[str, Call] = {"mcp": mcp_call, "rest": rest_call}


def succeeded(transport: str, status: int, answer: Any) -> bool:
    if transport == "mcp":
        return status == 200 and answer["result"]["isError"] is False
    return status == 200


@pytest.mark.parametrize("transport", ["mcp", "rest"])
def test_a_read_only_call_crosses_into_a_thread_once(make_tool: Any, crossings: list[str],
                                                      transport: str) -> None:
    echo = make_tool(lambda input, ctx: {"value": 1}, read_only=True, allow_anonymous=True,
                     idempotency_key=None)
    status, answer = TRANSPORTS[transport](echo.name, {}, {})
    assert succeeded(transport, status, answer), answer
    assert len(crossings) == 1, crossings


@pytest.mark.parametrize("who", ["token", "session"])
@pytest.mark.parametrize("transport", ["mcp", "rest"])
def test_a_keyed_call_crosses_once_with_its_database_steps(
        make_tool: Any, credentials: dict[str, dict[str, str]], crossings: list[str],
        transport: str, who: str) -> None:
    keyed = make_tool(lambda input, ctx: {"stored": True}, input_schema=KEYED)
    operation_id = key()
    status, answer = TRANSPORTS[transport](keyed.name, {"operationId": operation_id},
                                           credentials[who])
    assert succeeded(transport, status, answer), answer
    assert len(crossings) == 1, crossings
    assert Operation.objects.filter(tool=keyed.name, key=operation_id,
                                    state="succeeded").count() == 1


def test_an_async_handler_still_runs_and_crosses_once(
        make_tool: Any, credentials: dict[str, dict[str, str]], crossings: list[str]) -> None:
    async def handler(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"async": True}

    definition = make_tool(handler, input_schema=KEYED)
    status, answer = mcp_call(definition.name, {"operationId": key()}, credentials["token"])
    assert succeeded("mcp", status, answer), answer
    assert answer["result"]["structuredContent"] == {"async": True}
    assert len(crossings) == 1, crossings


def test_a_session_call_without_csrf_is_still_refused(
        make_tool: Any, credentials: dict[str, dict[str, str]]) -> None:
    keyed = make_tool(lambda input, ctx: {"stored": True}, input_schema=KEYED)
    session = {"Cookie": credentials["session"]["Cookie"]}
    status, answer = rest_call(keyed.name, {"operationId": key()}, session)
    assert status == 403, answer
    assert not Operation.objects.filter(tool=keyed.name).exists()


def test_a_request_finds_its_signal_through_drf_on_either_entry() -> None:
    """``request_signal``: the signal the app's ASGI entry puts in ``META`` (one crossing
    into a thread), or the one ``with_cancellation`` puts in the scope that Django's own
    ASGI handler keeps on its request; asked of the HttpRequest or of the DRF Request
    wrapping it; None over WSGI."""
    import io

    from django.core.handlers.asgi import ASGIRequest
    from django.test import RequestFactory
    from rest_framework.request import Request

    from guarded_tools.core.cancellation import CancelSignal
    from guarded_tools.transports.asgi import SCOPE_KEY, request_signal

    signal = CancelSignal()
    entry = RequestFactory().post("/agent/tools/x/", data=b"{}", content_type="application/json",
                                  **{SCOPE_KEY: signal})
    scope = {"type": "http", "method": "POST", "path": "/own/tool/", "query_string": b"",
             "headers": [], SCOPE_KEY: signal}
    django_asgi = ASGIRequest(scope, io.BytesIO(b""))
    plain = RequestFactory().post("/own/tool/", data=b"{}", content_type="application/json")
    for request in (entry, django_asgi):
        assert request_signal(request) is signal
        assert request_signal(Request(request)) is signal
    assert request_signal(plain) is None and request_signal(Request(plain)) is None


@pytest.mark.parametrize("spoof_first", [False, True])
def test_a_header_spelled_with_an_underscore_is_dropped_as_djangos_asgi_handler_drops_it(
        make_tool: Any, credentials: dict[str, dict[str, str]], spoof_first: bool) -> None:
    """``Idempotency_Key`` would read as ``Idempotency-Key`` in META (and be joined to it):
    the app's ASGI entry drops it, as Django's ASGI handler and WSGI servers do."""
    definition = make_tool(idempotency_key=None)
    real, spoof = key(), key()
    headers = {**credentials["token"]}
    pairs = [("Idempotency_Key", spoof), ("Idempotency-Key", real)]
    for name, value in (pairs if spoof_first else pairs[::-1]):
        headers[name] = value
    status, answer = rest_call(definition.name, {}, headers)
    assert status == 200, answer
    assert list(Operation.objects.filter(tool=definition.name).values_list("key", flat=True)) \
        == [real]
