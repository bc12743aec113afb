"""Provides the ASGI wrapper for tool endpoints: cancellation on disconnect, bounded bodies.

    application = with_cancellation(get_asgi_application())

- The handler's signal is aborted (and an ``async def`` handler cancelled) when the
  client goes away; finalization — journal writes after the effect, verify and
  completion — has its own signal and still runs to the end.
- A chunked body without Content-Length is read here, up to ``MAX_BODY_BYTES``
  (413 beyond it, before Django buffers it), and handed on with its length, because
  Django reads nothing of a body whose length it was not told.
- A declared Content-Length over ``MAX_BODY_BYTES`` is refused here with the same 413,
  because Django would otherwise read (and spool to disk) the whole body before the
  view's parser could refuse it.
- The tool endpoints (the tool list and calls, MCP) cross into a thread **once** per
  request: the body is read here, and the site's middleware, DRF's authentication,
  throttles and parsing, and the whole guarded call run in one ``sync_to_async``
  through Django's WSGI handler (the one a WSGI server runs), while this coroutine
  listens for the client going away. Django's ASGI handler would cross once per
  middleware hook, again for the view and again to close the response. An ``async def``
  handler still runs on this event loop (the pipeline's ``async_to_sync`` from that
  thread) and is cancelled on disconnect. Every other path goes to ``app`` unchanged.
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async

from guarded_tools.core.cancellation import CancelSignal

SCOPE_KEY = "guarded_tools.signal"

ASGIApp = Callable[..., Awaitable[None]]
Scope = dict[str, Any]
Message = Any


Headers = dict[bytes, bytes]


def _declared_length(headers: Headers) -> int | None:
    """The request's Content-Length, None when absent or not a number."""
    value = headers.get(b"content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _expects_continue(headers: Headers) -> bool:
    """The client waits for ``100 Continue`` before it sends the body."""
    return headers.get(b"expect", b"").strip().lower() == b"100-continue"


def _agent_paths() -> tuple[str, ...]:
    """Where agents send bodies: the tool calls and MCP (nothing else of the site's).

    Prefixes without the trailing slash: the app serves ``mcp`` as it serves ``mcp/``.
    Reversed once per URLconf and script prefix (two ``reverse()`` calls cost more than a
    tool call's other ASGI work), which is what the answer depends on.
    """
    from django.conf import settings
    from django.urls import get_script_prefix

    return _agent_paths_of(settings.ROOT_URLCONF, get_script_prefix())


@functools.lru_cache(maxsize=16)
def _agent_paths_of(urlconf: Any, prefix: str) -> tuple[str, ...]:
    """``_agent_paths`` for the URLconf ``urlconf`` under the script prefix ``prefix``."""
    from django.urls import NoReverseMatch, reverse

    try:
        paths = (reverse("guarded_tools:tool-list", urlconf=urlconf),
                 reverse("guarded_tools:mcp", urlconf=urlconf))
    except NoReverseMatch:
        return ()
    return tuple(p.rstrip("/") for p in paths)


async def _too_large(send: Callable[[Message], Awaitable[None]]) -> None:
    from guarded_tools.core.errors import RequestTooLarge

    body = json.dumps({"error": RequestTooLarge().as_dict()}).encode()
    await send({"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _drain(receive: Callable[[], Awaitable[Message]], message: Message, bound: int) -> None:
    """Discard a bounded rest of the body, so the client can read the 413."""
    seen = 0
    while message.get("more_body") and seen < bound:
        message = await receive()
        if message.get("type") != "http.request":
            return
        seen += len(message.get("body", b""))


async def _refuse_declared(
    headers: Headers,
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
    declared: int,
    limit: int,
) -> None:
    """413 for a declared length over the limit, reading at most a bounded body first.

    Only a body the drain's bound consumes whole is read: the rest of a longer one
    would reset the connection anyway. A client awaiting ``100 Continue`` has sent
    nothing, and is told before it does.
    """
    if declared <= 4 * limit and not _expects_continue(headers):
        await _drain(receive, {"more_body": True}, declared)
    await _too_large(send)


Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


async def _read_body(receive: Receive, send: Send, limit: int) -> bytes | None:
    """The whole body, or None when it was refused (413) or the client went away first."""
    body = b""
    while True:
        message = await receive()
        if message.get("type") != "http.request":
            return None  # the client went away before sending its body
        body += message.get("body", b"")
        if len(body) > limit:
            # Read (and drop) a bounded rest first: a server that closes with
            # unread input resets the connection, and the 413 would be lost.
            await _drain(receive, message, 4 * limit)
            await _too_large(send)
            return None
        if not message.get("more_body"):
            return body


@functools.cache
def _wsgi_handler() -> Any:
    """Django's WSGI handler: the site's middleware loaded once, in sync mode."""
    from django.core.handlers.wsgi import WSGIHandler

    return WSGIHandler()


@functools.lru_cache(maxsize=64)
def meta_key(header: str) -> str:
    """The ``META`` key of the HTTP header ``header`` (``Idempotency-Key`` is
    ``HTTP_IDEMPOTENCY_KEY``; ``Content-Type`` and ``Content-Length`` have no prefix), as
    a WSGI server names it and ``request.headers`` finds it."""
    name = header.upper().replace("-", "_")
    return name if name in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{name}"


def _wsgi_headers(scope: Scope, environ: dict[str, Any]) -> None:
    for raw_name, raw_value in scope.get("headers") or []:
        name = raw_name.decode("latin-1")
        if "_" in name:
            # Dropped, as Django's ASGI handler and WSGI servers drop it: in META it would
            # read as the header spelled with "-" (a client's ``X_Forwarded_Proto`` as the
            # proxy's ``X-Forwarded-Proto``).
            continue
        key = meta_key(name)
        value = raw_value.decode("latin-1")
        if key in environ:  # repeated header: joined as one (cookies with "; ")
            value = environ[key] + ("; " if key == "HTTP_COOKIE" else ",") + value
        environ[key] = value


def _environ(scope: Scope, body: bytes, signal: CancelSignal) -> dict[str, Any]:
    """The WSGI environ (PEP 3333) of an ASGI HTTP request whose body was read whole."""
    root = scope.get("root_path", "")
    path = scope["path"].removeprefix(root) if root else scope["path"]
    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client") or ("", 0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": root.encode("utf-8").decode("latin-1"),
        "PATH_INFO": path.encode("utf-8").decode("latin-1"),
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "SERVER_NAME": str(server[0]), "SERVER_PORT": str(server[1] or 80),
        "REMOTE_ADDR": str(client[0]), "REMOTE_PORT": str(client[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "wsgi.version": (1, 0), "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body), "wsgi.errors": sys.stderr,
        "wsgi.multithread": True, "wsgi.multiprocess": True, "wsgi.run_once": False,
        SCOPE_KEY: signal,
    }
    _wsgi_headers(scope, environ)
    environ["CONTENT_LENGTH"] = str(len(body))
    return environ


def _answer(environ: dict[str, Any]) -> Answer:
    """Run the request through Django's WSGI handler, in this (one) thread, to its end."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started[:] = [int(status.split(" ", 1)[0]), headers]

    result = _wsgi_handler()(environ, start_response)
    try:
        body = b"".join(result)
    finally:
        result.close()  # request_finished: the site's connections are closed or kept here
    status, headers = started
    return status, [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers], body


async def _until_disconnect(receive: Receive) -> None:
    while (await receive()).get("type") != "http.disconnect":
        pass


async def _serve_once(scope: Scope, receive: Receive, send: Send, signal: CancelSignal,
                      limit: int) -> None:
    """A tool endpoint: one crossing into a thread, the client watched meanwhile."""
    body = await _read_body(receive, send, limit)
    if body is None:
        return
    listener = asyncio.ensure_future(_until_disconnect(receive))
    try:
        status, headers, content = await sync_to_async(_answer, thread_sensitive=False)(
            _environ(scope, body, signal))
    finally:
        listener.cancel()
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


def with_cancellation(app: ASGIApp) -> ASGIApp:
    """Wrap Django's ASGI app: a client's disconnect aborts its call's signal (module doc)."""
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return
        signal = CancelSignal()
        scope = {**scope, SCOPE_KEY: signal}

        async def watched() -> Message:
            message = await receive()
            if message.get("type") == "http.disconnect":
                signal.abort("client_disconnected")
            return message

        if not str(scope.get("path", "")).startswith(_agent_paths()):
            await app(scope, watched, send)
            return
        from guarded_tools.conf import gt_settings

        limit = int(gt_settings.MAX_BODY_BYTES)
        headers = dict(scope.get("headers") or [])
        declared = _declared_length(headers)
        if declared is not None and declared > limit:
            await _refuse_declared(headers, watched, send, declared, limit)
            return
        await _serve_once(scope, watched, send, signal, limit)

    return wrapped


def request_signal(request: Any) -> CancelSignal | None:
    """The signal the ASGI wrapper attached to this request, if any."""
    # Read on the HttpRequest a DRF Request wraps: asked of the DRF Request, an attribute
    # goes through its __getattr__, and a missing one (``scope`` over WSGI) costs two
    # exceptions there.
    http = getattr(request, "_request", request)
    signal = getattr(http, "META", {}).get(SCOPE_KEY)  # a tool endpoint's (one crossing)
    if signal is not None:
        return signal  # type: ignore[no-any-return]
    scope = getattr(http, "scope", None)  # Django's own ASGI handler's request
    return scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
