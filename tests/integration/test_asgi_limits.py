"""Declared body sizes under a real uvicorn: refused before the body is read, 413 intact."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from guarded_tools.models import Operation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def head(port: int, credential: str, length: int, *, close: bool) -> bytes:
    return (f"POST /agent/tools/sync_under_asgi/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Token {credential}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n"
            + ("Connection: close\r\n" if close else "") + "\r\n").encode()


def read_response(sock: socket.socket) -> bytes:
    """Read until the 413's JSON body is complete (or the server closes)."""
    received = b""
    while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def test_huge_declared_body_is_refused_before_it_is_sent(server: dict[str, Any],
                                                         token: str) -> None:
    """The client sends 64 KiB of a declared 64 MiB: the 413 must not wait for the rest."""
    with socket.create_connection(("127.0.0.1", server["port"]), timeout=10) as sock:
        sock.sendall(head(server["port"], token, 64 * 1024 * 1024, close=False)
                     + b" " * 65536)
        try:
            response = read_response(sock)
        except TimeoutError:
            pytest.fail("no answer before the declared body was sent")
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    body = json.loads(response.split(b"\r\n\r\n", 1)[1])
    assert body["error"]["code"] == "request_too_large"
    assert Operation.objects.count() == 0


def test_body_a_little_over_the_limit_gets_its_413_before_close(server: dict[str, Any],
                                                                token: str) -> None:
    """Sent whole with ``Connection: close``: the 413 arrives, not a connection reset."""
    payload = json.dumps({"operationId": "x" * 400_000}).encode()  # over the 256 KiB default
    with socket.create_connection(("127.0.0.1", server["port"]), timeout=15) as sock:
        sock.sendall(head(server["port"], token, len(payload), close=True) + payload)
        response = read_response(sock)
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    assert b"request_too_large" in response
    assert Operation.objects.count() == 0
