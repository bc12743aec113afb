"""``python -m bench.stages [TOOL_OR_PATH] [N] [replay]``: where a call's time goes, by stage.

Calls go through Django's full request handling with the test client, as the bench
user, against the database in ``DATABASE_URL`` (PostgreSQL), a fresh key each
(``replay``: one key, so every call but the first replays). Each stage of the view,
the pipeline and the store is timed (wall clock), and so is every wait of psycopg for
the server, which is charged to the stages it happened in: a stage's time less its
waits is what this process spent on it (Python, the driver, the kernel). Nested
stages are included in their callers. A profiler's sampling would distort exactly
these small costs; timers around a few dozen calls do not.

``bench_remote`` calls the 5 ms stub: start one (``python -m bench.stub 8765 5``)
and point ``BENCH_STUB_URL`` at it. Prints a table; figures are per call.
"""

from __future__ import annotations

import functools
import sys
import time
from collections import Counter
from typing import Any

#: (module, class or None, attribute): the stages timed.
STAGES = [
    ("rest_framework.authentication", "TokenAuthentication", "authenticate"),
    ("guarded_tools.transports.rest.views", "GuardedAPIView", "request_body"),
    ("guarded_tools.transports.rest.views", "ToolCallView", "post"),
    ("guarded_tools.pipeline", "Pipeline", "guarded"),
    ("guarded_tools.pipeline.stages.validation", "ValidationStage", "before_claim"),
    ("guarded_tools.pipeline.stages.authorization", "AuthorizationStage", "before_claim"),
    ("guarded_tools.pipeline", "Pipeline", "execute_locked"),
    ("guarded_tools.pipeline", "Pipeline", "execute_fresh"),
    ("guarded_tools.pipeline", "Pipeline", "call_handler"),
    ("guarded_tools.pipeline.stages.output_budget", "OutputBudgetStage", "after_execute"),
    ("guarded_tools.pipeline", "Pipeline", "finalize"),
    ("guarded_tools.store", "OperationStore", "claim"),
    ("guarded_tools.store", "OperationStore", "lock_key"),
    ("guarded_tools.store", "OperationStore", "pending"),
    ("guarded_tools.store", "OperationStore", "insert_completed"),
    ("guarded_tools.store", "OperationStore", "complete"),
    ("guarded_tools.store", None, "fingerprint"),
    ("guarded_tools.store.replays", "ReplayCache", "put"),
    ("guarded_tools.store.replays", "ReplayCache", "get"),
    ("guarded_tools.pipeline", "Pipeline", "replay_remembered"),
    ("guarded_tools.pipeline.stages.verification", "VerificationStage", "verify"),
]


class Timers:
    def __init__(self) -> None:
        self.wall: Counter[str] = Counter()
        self.waited: Counter[str] = Counter()
        self.active: list[str] = []

    def wrap(self, label: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            self.active.append(label)
            try:
                return fn(*args, **kwargs)
            finally:
                self.active.pop()
                self.wall[label] += time.perf_counter() - started

        return timed

    def wrap_wait(self, fn: Any) -> Any:
        @functools.wraps(fn)
        def wait(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - started
                self.waited["(all)"] += spent
                for label in set(self.active):
                    self.waited[label] += spent

        return wait

    def clear(self) -> None:
        self.wall.clear()
        self.waited.clear()


def instrument(timers: Timers) -> None:
    import importlib

    import psycopg

    psycopg.Connection.wait = timers.wrap_wait(psycopg.Connection.wait)  # type: ignore[method-assign]
    for module_name, owner_name, name in STAGES:
        module = importlib.import_module(module_name)
        owner = getattr(module, owner_name) if owner_name else module
        label = f"{owner_name}.{name}" if owner_name else name
        setattr(owner, name, timers.wrap(label, getattr(owner, name)))
    # Modules that imported a function by name call their own reference.
    pipeline = importlib.import_module("guarded_tools.pipeline")
    pipeline.fingerprint = importlib.import_module("guarded_tools.store").fingerprint  # type: ignore[attr-defined]


def main(argv: list[str]) -> None:
    from bench.profile import caller

    path, n, call = caller(argv, default_n=2000)
    from django.db import connection

    if connection.vendor != "postgresql":
        raise SystemExit("bench.stages times psycopg's waits: run it against PostgreSQL")
    timers = Timers()
    instrument(timers)

    def calls(first: int, count: int) -> float:
        started = time.perf_counter()
        for i in range(first, first + count):
            call(i)
        return time.perf_counter() - started

    calls(-200, 200)  # imports, connections, compiled statements
    timers.clear()
    cpu = time.process_time()
    total = calls(0, n)
    cpu = time.process_time() - cpu
    print(f"{n} calls to {path}: {total / n * 1e6:.0f} µs each, of which "
          f"{timers.waited['(all)'] / n * 1e6:.0f} waiting for PostgreSQL; "
          f"{cpu / n * 1e6:.0f} µs of this process's CPU")
    print(f"{'wall µs':>9} {'waiting':>9} {'the rest':>9}  stage (nested stages included)")
    for label, wall in timers.wall.most_common():
        waited = timers.waited[label]
        print(f"{wall / n * 1e6:9.1f} {waited / n * 1e6:9.1f} {(wall - waited) / n * 1e6:9.1f}"
              f"  {label}")


if __name__ == "__main__":
    main(sys.argv[1:])
