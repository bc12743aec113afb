"""``python -m bench.profile [TOOL_OR_PATH] [N]``: profile N calls in process with pyinstrument.

Calls go through Django's full request handling (middleware, DRF, the guard) with
the test client, against the database in ``DATABASE_URL`` (or ``GT_SQLITE_PATH``),
as the bench user, with a fresh key each (``replay`` as 3rd argument: one key).
The report shows where the time goes; the figures themselves are in ``make bench``.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable


def caller(argv: list[str], default_n: int) -> tuple[str, int, Callable[[int], None]]:
    """Django set up, then the path, N, and ``call(i)`` that POSTs the i-th call to it.

    ``argv``: ``[TOOL_OR_PATH] [N] [replay]``. Each call is as the bench user, through
    the test client, with a fresh key (``replay``: one key for every call).
    """
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    from django.test import Client

    from bench.prepare import TOKEN

    target = argv[0] if argv else "bench_insert"
    n = int(argv[1]) if len(argv) > 1 else default_n
    replay = len(argv) > 2 and argv[2] == "replay"
    path = target if target.startswith("/") else f"/agent/tools/{target}/"
    client = Client(HTTP_AUTHORIZATION=f"Token {TOKEN}")
    prefix = uuid.uuid4().hex[:8]

    def call(i: int) -> None:
        key = f"{prefix}-replay" if replay else f"{prefix}-{i}"
        response = client.post(path, {"operationId": key, "value": 1},
                               content_type="application/json", HTTP_IDEMPOTENCY_KEY=key)
        assert response.status_code in (200, 201), response.content

    return path, n, call


def main(argv: list[str]) -> None:
    path, n, call = caller(argv, default_n=500)
    from pyinstrument import Profiler

    for i in range(50):  # warm up: imports, connections, caches
        call(-i - 1)
    profiler = Profiler(interval=0.0002)
    started = time.perf_counter()
    with profiler:
        for i in range(n):
            call(i)
    elapsed = time.perf_counter() - started
    print(f"{n} calls to {path}: {elapsed / n * 1e6:.0f} µs per call (profiled)")
    print(profiler.output_text(unicode=True, color=False, show_all=False))


if __name__ == "__main__":
    main(sys.argv[1:])
