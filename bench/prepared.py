"""``python -m bench.prepared [TOOL_OR_PATH] [N] [ROUNDS]``: the store's statements
prepared or planned on every call, side by side.

Calls go through Django's full request handling in process (as ``bench.stages``),
against the PostgreSQL database in ``DATABASE_URL``, a fresh key each, in rounds that
alternate ``PREPARED_STATEMENTS`` on and off. Per call, each round measures the wall
time, this process's CPU and the CPU of the PostgreSQL backend serving its
connection (``/proc``: the server must be on this machine). Prints each round, the
medians and their ratios.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any


def main(argv: list[str]) -> None:
    from bench.cpu import CpuMeter
    from bench.profile import caller

    path, n, call = caller(argv, default_n=2000)
    rounds = int(argv[2]) if len(argv) > 2 else 4
    from django.conf import settings
    from django.db import connection
    from django.test import override_settings

    if connection.vendor != "postgresql":
        raise SystemExit("bench.prepared measures PostgreSQL's CPU: set DATABASE_URL")
    base = dict(getattr(settings, "GUARDED_TOOLS", {}) or {})
    done = 0

    def measure(prepared: bool) -> tuple[float, float, float]:
        nonlocal done
        with override_settings(GUARDED_TOOLS={**base, "PREPARED_STATEMENTS": prepared}):
            call(done)  # the connection is open, and prepared if it is to be
            meter = CpuMeter({"backend": connection.connection.info.backend_pid})
            server, cpu, wall = meter.snapshot(), time.process_time(), time.perf_counter()
            for i in range(done + 1, done + 1 + n):
                call(i)
            figures = (time.perf_counter() - wall, time.process_time() - cpu,
                       meter.snapshot()["backend"] - server["backend"])
        done += n + 1
        return tuple(value / n * 1e6 for value in figures)  # type: ignore[return-value]

    for i in range(200):  # imports, connections, compiled statements
        call(-i - 1)
    print(f"{path}: {rounds} rounds of {n} calls each way, alternating; µs per call")
    print(f"{'round':>5} {'statements':>11} {'wall':>8} {'app CPU':>8} {'PG CPU':>8}")
    results: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    for r in range(rounds):
        for prepared in ((True, False) if r % 2 == 0 else (False, True)):
            figures = measure(prepared)
            results[prepared].append(figures)
            label = "prepared" if prepared else "planned"
            print(f"{r + 1:>5} {label:>11} " + " ".join(f"{v:8.0f}" for v in figures))
    medians: dict[bool, Any] = {
        key: [statistics.median(f[i] for f in found) for i in range(3)]
        for key, found in results.items()
    }
    print("median:")
    for key, label in ((True, "prepared"), (False, "planned")):
        print(f"{'':>5} {label:>11} " + " ".join(f"{v:8.0f}" for v in medians[key]))
    print(f"{'':>5} {'ratio':>11} " + " ".join(
        f"{a / b:8.2f}" for a, b in zip(medians[True], medians[False], strict=True)))


if __name__ == "__main__":
    main(sys.argv[1:])
