"""Requests straight to the ASGI application, without a server: a body sent in chunks."""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.asgi import get_asgi_application

from guarded_tools.asgi import with_cancellation

CHUNK = b" " * 65536


def run_asgi(path: str, declared: int, chunks: int, *,
             headers: list[tuple[bytes, bytes]] | None = None) -> tuple[list[Any], list[int]]:
    """Run one request through the wrapped app; what it sent and how many chunks it read
    before its answer started."""
    app = with_cancellation(get_asgi_application())
    received = 0
    sent: list[Any] = []
    read_before_answer: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received >= chunks:
            await asyncio.Future()  # the client sends nothing more: wait until cancelled
        received += 1
        return {"type": "http.request", "body": CHUNK, "more_body": received < chunks}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            read_before_answer.append(received)
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "server": ("testserver", 80), "client": ("127.0.0.1", 1234),
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                    (b"content-length", str(declared).encode()), *(headers or [])],
    }
    asyncio.run(asyncio.wait_for(app(scope, receive, send), 30))
    return sent, read_before_answer
