"""``python bench/readpath.py [N] [--profile]``: the read-only MCP ``tools/call`` in process.

Run from a checkout's directory (its code is imported from the working directory, so one
script measures two checkouts side by side): N anonymous ``tools/call`` of ``echo``
(protocol 2025-11-25, one stateless POST each) through Django's full request handling
(the test client: middleware, the view, the guard), each answer checked. Prints calls per
second of this process's CPU; ``--wsgi`` calls Django's WSGI handler instead (as gunicorn
does); ``--profile`` prints cProfile's top functions instead.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

sys.path[0] = os.getcwd()  # not bench/ (its profile.py would shadow the stdlib's)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

HEADERS = {"HTTP_ACCEPT": "application/json, text/event-stream",
           "HTTP_MCP_PROTOCOL_VERSION": "2025-11-25"}


def wsgi_caller(path: str = "/agent/mcp/") -> Callable[[int], None]:
    """``call(i)`` through Django's WSGI handler, as gunicorn calls it (no test client), to
    the MCP endpoint at ``path`` (F-M's, ``/agent/mcp/floor/read/``, answers the same)."""
    import io

    from django.core.wsgi import get_wsgi_application

    handler = get_wsgi_application()

    def call(i: int) -> None:
        body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                           "params": {"name": "echo", "arguments": {"value": i}}}).encode()
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": path, "QUERY_STRING": "",
                   "SERVER_NAME": "localhost", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
                   "wsgi.input": io.BytesIO(body), "CONTENT_TYPE": "application/json",
                   "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1",
                   **HEADERS}
        answer: list[str] = []
        chunks = handler(environ, lambda status, headers: answer.append(status))
        try:
            content = b"".join(chunks)
        finally:
            chunks.close()  # request_finished, as a server calls it
        assert answer[0].startswith("200"), content
        assert json.loads(content)["result"]["structuredContent"] == {"value": i}, content

    return call


def caller() -> object:
    import django

    django.setup()
    if "--wsgi" in sys.argv:
        return wsgi_caller()
    from django.test import Client

    client = Client()

    def call(i: int) -> None:
        body = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"value": i}}}
        response = client.post("/agent/mcp/", json.dumps(body),
                               content_type="application/json", **HEADERS)
        assert response.status_code == 200, response.content
        assert response.json()["result"]["structuredContent"] == {"value": i}, response.content

    return call


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv and argv[0].isdigit() else 2000
    call = caller()
    for i in range(200):
        call(i)
    if "--profile" in argv:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        for i in range(n):
            call(i)
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(60)
        stats.sort_stats("tottime").print_stats(25)
        return
    started = time.process_time()
    for i in range(n):
        call(i)
    spent = time.process_time() - started
    print(json.dumps({"calls_per_s": round(n / spent, 1),
                      "us_per_call": round(spent / n * 1e6, 1)}))


if __name__ == "__main__":
    main(sys.argv[1:])
