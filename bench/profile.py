"""``python -m bench.profile [TOOL_OR_PATH] [N]``: profile N calls in process with pyinstrument.

``python -m bench.profile stages [N]`` (``make profile``): a fresh call (B), a replay (C)
and a D call, N each under cProfile, and the time per stage, aggregated by the stage's
functions (cumulative time, see ``STAGE_FUNCTIONS``); "DRF/Django overhead" is the call's
time less the pipeline, authentication, body parsing and rendering.

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
from typing import Any


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


#: stage: (file the function is in, ending; function names). Cumulative times: a stage
#: includes what it calls, and the stages here do not nest in one another ("pipeline,
#: whole" contains the pipeline's stages).
STAGE_FUNCTIONS: list[tuple[str, str, tuple[str, ...]]] = [
    ("transaction (atomic: begin, commit)", "django/db/transaction.py", ("__enter__",
                                                                         "__exit__")),
    ("DRF authentication", "rest_framework/authentication.py", ("authenticate",)),
    ("request body parsing", "transports/rest/views.py", ("request_body",)),
    ("validation", "pipeline/__init__.py", ("validate_input",)),
    ("authorization", "pipeline/__init__.py", ("check_authorization",)),
    ("confirmation", "pipeline/__init__.py", ("confirm",)),
    ("idempotency claim", "pipeline/__init__.py", ("claim",)),
    ("idempotency claim (key lock, atomic tools)", "store/__init__.py", ("lock_key",)),
    ("replay lookup and answer", "pipeline/__init__.py", ("remembered", "replay",
                                                          "replay_remembered")),
    ("execution (handler)", "pipeline/__init__.py", ("call_handler",)),
    ("completion (store)", "pipeline/__init__.py", ("finalize",)),
    ("completion (atomic: one INSERT of the done operation)", "store/__init__.py",
     ("insert_completed",)),
    ("verification", "pipeline/__init__.py", ("verify",)),
    ("output budget", "pipeline/__init__.py", ("measure_output",)),
    ("response rendering", "rest_framework/response.py", ("rendered_content",)),
]
PIPELINE = ("pipeline/__init__.py", ("run",))
#: B, C, D: label, tool, replay
SCENARIOS = [("fresh call (B)", "bench_insert", False), ("replay (C)", "bench_insert", True),
             ("D call (validation, permission, journal, verify)", "bench_insert_full", False)]


def cumulative(stats: dict[Any, Any], where: str, names: tuple[str, ...]) -> float:
    """Seconds spent in the functions ``names`` of the file ending ``where``, inclusive."""
    return sum(entry[3] for (filename, _, name), entry in stats.items()
               if name in names and filename.replace("\\", "/").endswith(where))


def stage_table(label: str, path: str, n: int, total: float, stats: dict[Any, Any]) -> str:
    per = 1e6 / n
    rows = [(stage, cumulative(stats, where, names)) for stage, where, names in STAGE_FUNCTIONS]
    pipeline = cumulative(stats, *PIPELINE)
    outside = pipeline + sum(t for stage, t in rows if stage in (
        "DRF authentication", "request body parsing", "response rendering",
        "transaction (atomic: begin, commit)"))
    lines = [f"\n{label}: {n} calls to {path}, {total * per:.0f} µs of this process's CPU"
              " per call under cProfile"]
    lines += [f"  {t * per:8.1f} µs  {stage}" for stage, t in rows if t]
    lines.append(f"  {pipeline * per:8.1f} µs  pipeline, whole (validation to output budget,"
                 " and the rest of the guard; not the transaction)")
    lines.append(f"  {(total - outside) * per:8.1f} µs  DRF/Django overhead (middleware, URL"
                 " resolution, the view, the test client: the call less the rows above)")
    return "\n".join(lines)


def stages(argv: list[str]) -> None:
    """The stage table of B, C and D (``make profile``)."""
    import cProfile
    import pstats

    n = int(argv[0]) if argv else 500
    for label, tool, replay in SCENARIOS:
        path, _, call = caller([tool, str(n)] + (["replay"] if replay else []), n)
        for i in range(50):  # warm up; for a replay this stores the key
            call(-i - 1)
        # This process's CPU, not the wall clock: PostgreSQL's time and the machine's other
        # load stay out, what is left is the Python (and driver) work of each stage.
        profiler = cProfile.Profile(time.process_time)
        started = time.process_time()
        profiler.enable()
        for i in range(n):
            call(i)
        profiler.disable()
        total = time.process_time() - started
        print(stage_table(label, path, n, total, pstats.Stats(profiler).stats))  # type: ignore[attr-defined]
    print("\ncProfile's own cost inflates small functions alike on every row; compare"
          " rows with one another, and the figures of `make bench` for absolute cost.")


def main(argv: list[str]) -> None:
    if argv and argv[0] == "stages":
        stages(argv[1:])
        return
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
