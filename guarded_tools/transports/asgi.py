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
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from guarded_tools.core.cancellation import CancelSignal

SCOPE_KEY = "guarded_tools.signal"

ASGIApp = Callable[..., Awaitable[None]]
Scope = dict[str, Any]
Message = Any


Headers = dict[bytes, bytes]


def _unframed(headers: Headers) -> bool:
    return b"content-length" not in headers and b"chunked" in headers.get(
        b"transfer-encoding", b""
    ).lower()


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
    """
    from django.urls import NoReverseMatch, reverse

    try:
        paths = (reverse("guarded_tools:tool-list"), reverse("guarded_tools:mcp"))
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


def with_cancellation(app: ASGIApp) -> ASGIApp:
    async def wrapped(
        scope: Scope,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
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

        downstream = watched
        from guarded_tools.conf import gt_settings

        limit = int(gt_settings.MAX_BODY_BYTES)
        headers = dict(scope.get("headers") or [])
        declared = _declared_length(headers)
        oversized = declared is not None and declared > limit
        if (oversized or _unframed(headers)) and str(scope.get("path", "")).startswith(
            _agent_paths()
        ):
            if declared is not None:  # over the limit (an unframed body declares none)
                await _refuse_declared(headers, watched, send, declared, limit)
                return
            body = b""
            while True:
                message = await watched()
                if message.get("type") != "http.request":
                    return  # the client went away before sending its body
                body += message.get("body", b"")
                if len(body) > limit:
                    # Read (and drop) a bounded rest first: a server that closes with
                    # unread input resets the connection, and the 413 would be lost.
                    await _drain(watched, message, 4 * limit)
                    await _too_large(send)
                    return
                if not message.get("more_body"):
                    break
            scope["headers"] = [*scope["headers"], (b"content-length", str(len(body)).encode())]
            replayed = False

            async def framed() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await watched()

            downstream = framed
        await app(scope, downstream, send)

    return wrapped


def request_signal(request: Any) -> CancelSignal | None:
    """The signal the ASGI wrapper attached to this request, if any."""
    scope = getattr(getattr(request, "_request", request), "scope", None)
    return scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
