"""Provides the ASGI wrapper that aborts a call's signal when its client disconnects.

    application = with_cancellation(get_asgi_application())

The handler's signal is aborted (and an ``async def`` handler cancelled) when the
client goes away; finalization — journal writes after the effect, verify and
completion — has its own signal and still runs to the end.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from guarded_tools.cancellation import CancelSignal

SCOPE_KEY = "guarded_tools.signal"

ASGIApp = Callable[..., Awaitable[None]]
Scope = dict[str, Any]
Message = Any


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

        await app(scope, watched, send)

    return wrapped


def request_signal(request: Any) -> CancelSignal | None:
    """The signal the ASGI wrapper attached to this request, if any."""
    scope = getattr(getattr(request, "_request", request), "scope", None)
    return scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
