"""``python -m bench.calls [--diff]``: the functions a guarded call runs, beside its floor's.

Timing the guard's frame in microseconds is noisy; counting the Python functions a call
runs is not. This counts them (``sys.setprofile``, this thread) for one call of each side,
through Django's WSGI handler, against the database in ``DATABASE_URL`` prepared by
``python -m bench.prepare`` (PostgreSQL, as the keyed floors are):

- the keyed ``tools/call`` of ``echo_keyed`` (a fresh key, the bench user's DRF token):
  F-K, F-K+ and the app (see :mod:`bench.frame`);
- the anonymous read-only ``tools/call`` of ``echo``: F-M and the app;
- configuration D over REST (``bench_insert_full``: an atomic tool with a permission, a
  journal entry and ``verify``, a fresh key): F-D and the app.

It prints each side's Python functions by where they live (Django, DRF, psycopg, the
standard library, each part of ``guarded_tools``) and its calls of built-in functions,
then the app's beyond its floor; ``--diff`` also lists the Python functions the app runs
more often than its floor, by name. Each side's CPU per call is timed too (the median of
a few blocks, one side after the other: rougher than ``bench.frame``'s turns), to say
about what one more function costs on this machine, inside a request.
"""

from __future__ import annotations

import os
import statistics
import sys
import sysconfig
import time
from collections import Counter
from collections.abc import Callable
from types import FrameType
from typing import Any

#: Where a function lives, by the first part of its file's path that matches (checked in
#: this order), as the table's columns name it.
PLACES = [
    ("guarded_tools/transports/mcp/", "transports.mcp"),
    ("guarded_tools/transports/", "transports.rest"),
    ("guarded_tools/pipeline/stages/", "stages"),
    ("guarded_tools/pipeline/", "pipeline"),
    ("guarded_tools/store/", "store"),
    ("guarded_tools/", "core"),  # core, models, contrib, the app's modules
    ("rest_framework/", "DRF"),
    ("django/db/", "Django db"),
    ("django/", "Django"),
    ("psycopg", "psycopg"),
]
STDLIB = sysconfig.get_paths()["stdlib"]


def place(filename: str) -> str:
    """Where the function of a code object in ``filename`` lives (see ``PLACES``)."""
    if filename.startswith(os.path.join(os.getcwd(), "bench", "")):
        return "bench"
    path = filename.replace(os.sep, "/")
    for prefix, name in PLACES:
        if prefix in path:
            return name
    return "stdlib" if filename.startswith(STDLIB) or filename.startswith("<") else "other"


def counted(call: Callable[[], None]) -> tuple[Counter[tuple[str, str]], int]:
    """The Python functions ``call()`` runs, each ``(file, name)`` with its count, and how
    many built-in (C) functions it calls from Python."""
    seen: Counter[tuple[str, str]] = Counter()
    builtins = [0]

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            seen[code.co_filename, code.co_qualname] += 1
        elif event == "c_call":
            builtins[0] += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen, builtins[0]


def by_place(seen: Counter[tuple[str, str]]) -> Counter[str]:
    places: Counter[str] = Counter()
    for (filename, _), n in seen.items():
        places[place(filename)] += n
    return places


def cpu_per_call(call: Callable[[], None], n: int = 200, blocks: int = 5) -> float:
    """The median of ``blocks`` blocks of ``n`` calls, in µs of this process's CPU."""
    spent = []
    for _ in range(blocks):
        start = time.process_time()
        for _ in range(n):
            call()
        spent.append((time.process_time() - start) / n * 1e6)
    return statistics.median(spent)


def sides() -> dict[str, dict[str, Callable[[], None]]]:
    """The calls counted, by path: each side a call of no argument (a new id, a new key)."""
    from bench.keyedpath import caller
    from bench.readpath import wsgi_caller

    counter = iter(range(1, 10**9))  # keyed calls: a fresh key prefix per run

    def numbered(call: Callable[[int], None]) -> Callable[[], None]:
        return lambda: call(next(counter))

    return {
        "keyed": {name: numbered(caller(path, rest=False)) for name, path in (
            ("F-K", "/agent/mcp/floor/"), ("F-K+", "/agent/mcp/floor/features/"),
            ("app", "/agent/mcp/"))},
        "read": {name: numbered(wsgi_caller(path)) for name, path in (
            ("F-M", "/agent/mcp/floor/read/"), ("app", "/agent/mcp/"))},
        "D (REST)": {name: numbered(caller(path, rest=True)) for name, path in (
            ("F-D", "/floor-full/"), ("app", "/agent/tools/bench_insert_full/"))},
    }


def main(argv: list[str]) -> None:
    import django

    django.setup()
    order = [name for _, name in PLACES] + ["bench", "stdlib", "other"]
    for path, calls in sides().items():
        for call in calls.values():  # warm up: imports, caches, the shared pipelines
            for _ in range(100):
                call()
        counts = {name: counted(call) for name, call in calls.items()}
        places = {name: by_place(seen) for name, (seen, _) in counts.items()}
        cpu = {name: cpu_per_call(call) for name, call in calls.items()}
        columns = [p for p in order if any(p in found for found in places.values())]
        print(f"{path} call: functions run per call (Python by where they live, and built-in)")
        print(f"  {'side':5} {'µs CPU':>7} {'Python':>7} {'built-in':>8}  "
              + " ".join(f"{c:>15}" for c in columns))
        for name, (seen, builtin) in counts.items():
            print(f"  {name:5} {cpu[name]:7.0f} {sum(seen.values()):7} {builtin:8}  "
                  + " ".join(f"{places[name][c]:15}" for c in columns))
        floor = next(iter(calls))
        more = counts["app"][0] - counts[floor][0]
        python = sum(counts["app"][0].values()) - sum(counts[floor][0].values())
        builtin = counts["app"][1] - counts[floor][1]
        print(f"  the app, beyond {floor}: {python:+} Python and {builtin:+} built-in functions,"
              f" {cpu['app'] - cpu[floor]:+.0f} µs of CPU"
              f" ({(cpu['app'] - cpu[floor]) / max(python + builtin, 1):.2f} µs per function)\n")
        if "--diff" in argv:
            for (filename, name), n in sorted(more.items(), key=lambda i: (place(i[0][0]), i[0])):
                print(f"    {place(filename):16} {n:3}  {name}")
            print()


if __name__ == "__main__":
    sys.path[0] = os.getcwd()  # not bench/ (its profile.py would shadow the stdlib's)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    main(sys.argv[1:])
