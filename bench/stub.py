"""A stand-in for a remote service: answers every POST after 5 ms, on 127.0.0.1 only.

``python -m bench.stub PORT [DELAY_MS]`` serves it (one thread per connection,
HTTP/1.1 keep-alive); :func:`call` is what the realistic handlers use: one
persistent connection per thread, so a call costs the delay plus one loopback
round trip, the same for the plain and the guarded handler.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any
from urllib.parse import urlsplit

_local = threading.local()


def call(url: str, key: str) -> str:
    """POST ``{"key": key}`` to the stub and return its reference."""
    parts = urlsplit(url)
    body = json.dumps({"key": key}).encode()
    for attempt in (1, 2):
        conn = getattr(_local, "conn", None)
        if conn is None:
            conn = _local.conn = http.client.HTTPConnection(
                parts.hostname or "127.0.0.1", parts.port or 80, timeout=5
            )
            conn.connect()
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            conn.request("POST", parts.path or "/", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            data = json.loads(response.read())
            return str(data["ref"])
        except (OSError, http.client.HTTPException):
            conn.close()
            _local.conn = None
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body leave at once: no delayed-ACK stall
    delay = 0.005
    refs = count(1)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        time.sleep(self.delay)
        body = json.dumps({"ok": True, "ref": f"r{next(self.refs)}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(port: int, delay_ms: float = 5.0) -> None:
    _Handler.delay = delay_ms / 1000
    server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    server.daemon_threads = True
    print(f"stub listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 5.0)
