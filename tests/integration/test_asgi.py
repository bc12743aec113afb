"""Async handlers under a real uvicorn; client disconnects cancel, finalization finishes."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from guarded_tools.models import Operation
from tests.conftest import key, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def raw_call(port: int, token: str, name: str, body: dict[str, Any], *,
             disconnect_when: Callable[[], bool] | None = None,
             transport: str = "rest") -> bytes:
    """POST a call to ``name`` over REST (its tool URL) or MCP (``tools/call``).

    ``disconnect_when``: go away (close the socket) once it holds, e.g. once the handler
    has started, never after a guessed delay that a busy machine can outlast.
    """
    path, extra = f"/agent/tools/{name}/", ""
    if transport == "mcp":
        path, extra = "/agent/mcp/", "MCP-Protocol-Version: 2025-11-25\r\n"
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": name, "arguments": body}}
    payload = json.dumps(body).encode()
    request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}"
               f"Authorization: Token {token}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode() + payload
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(request)
        if disconnect_when is not None:
            wait_until(disconnect_when, timeout=30, message="the call never got that far")
            return b""
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_sync_and_async_handlers_answer_under_uvicorn(server: dict[str, Any], token: str) -> None:
    response = raw_call(server["port"], token, "sync_under_asgi", {"operationId": key()})
    assert b"200 OK" in response and b'"sync":true' in response
    response = raw_call(server["port"], token, "sync_under_asgi", {"operationId": key()},
                        transport="mcp")
    assert b"200 OK" in response and b'"isError":false' in response.replace(b" ", b"")


@pytest.mark.parametrize("transport", ["rest", "mcp"])
def test_disconnect_cancels_an_async_handler_and_releases_the_claim(
        server: dict[str, Any], token: str, transport: str) -> None:
    k = key()
    markers: Path = server["markers"]
    raw_call(server["port"], token, "slow_async", {"operationId": k},
             disconnect_when=(markers / "async-started").exists, transport=transport)
    wait_until(lambda: (markers / "async-cancelled").exists())
    assert not (markers / "async-finished").exists()
    # Nothing was journaled, so the cancelled claim is released: the key is fresh.
    wait_until(lambda: Operation.objects.filter(key=k, state="released").exists())


@pytest.mark.parametrize("transport", ["rest", "mcp"])
def test_disconnect_aborts_a_sync_handlers_signal(
        server: dict[str, Any], token: str, transport: str) -> None:
    """Over either transport a sync handler sees ``ctx.signal.aborted`` when the client
    goes away, and can stop early."""
    markers: Path = server["markers"]
    raw_call(server["port"], token, "watching_sync", {"operationId": key()},
             disconnect_when=(markers / "sync-started").exists, transport=transport)
    wait_until(lambda: (markers / "sync-aborted").exists(), timeout=20)
    assert not (markers / "sync-finished").exists()


def test_finalization_survives_a_disconnect(server: dict[str, Any], token: str) -> None:
    k = key()
    markers: Path = server["markers"]
    raw_call(server["port"], token, "slow_finalization", {"operationId": k},
             disconnect_when=(markers / "verify-started").exists)
    wait_until(lambda: (markers / "verify-finished").exists(), timeout=40)
    # The server saw the client go away while verify ran, and finalization went on.
    assert (markers / "verify-saw-disconnect").exists()
    wait_until(lambda: Operation.objects.filter(key=k, state="succeeded").exists())
    # The agent's retry replays the completed result.
    response = raw_call(server["port"], token, "slow_finalization", {"operationId": k})
    assert b"idempotent-replayed: true" in response.lower()


def chunked_call(port: int, token: str, name: str, payload: bytes) -> bytes:
    head = (f"POST /agent/tools/{name}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Token {token}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
    chunks = b"".join(f"{len(payload[i:i + 1000]):x}\r\n".encode() + payload[i:i + 1000]
                      + b"\r\n" for i in range(0, len(payload), 1000))
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(head + chunks + b"0\r\n\r\n")
        received = []
        while chunk := sock.recv(65536):
            received.append(chunk)
    return b"".join(received)


def test_chunked_bodies_under_asgi(server: dict[str, Any], token: str) -> None:
    k = key()
    ok = chunked_call(server["port"], token, "sync_under_asgi",
                      json.dumps({"operationId": k}).encode())
    assert b"200 OK" in ok and b'"sync":true' in ok
    huge = json.dumps({"operationId": "x" * 400_000}).encode()  # over the 256 KiB default
    refused = chunked_call(server["port"], token, "sync_under_asgi", huge)
    assert b"413" in refused.split(b"\r\n", 1)[0] and b"request_too_large" in refused
    assert Operation.objects.filter(key=k).count() == 1
    assert Operation.objects.count() == 1
