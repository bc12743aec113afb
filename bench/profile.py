"""``python -m bench.profile [TOOL_OR_PATH] [N]``: profile N calls in process with pyinstrument.

``python -m bench.profile stages [N]`` (``make profile``): a fresh call (B), a replay (C)
and a D call, N each, and this process's CPU per stage (the stages of
``bench.stages.STAGES``, each timed around its function, inclusive); the last row is the
request less its outermost stages (authentication, the view, the response).

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
from collections import Counter
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


#: A, B, C, D: label, tool or path, replay
SCENARIOS = [("plain DRF view (A)", "/plain/", False),
             ("fresh call (B)", "bench_insert", False), ("replay (C)", "bench_insert", True),
             ("D call (validation, permission, journal, verify)", "bench_insert_full", False)]
#: The statements of the PostgreSQL side's table: the costliest, with execution and planning.
TOP_STATEMENTS = 12
#: ``make profile``'s configurations take turns in this many rounds of N / ROUNDS calls each:
#: a configuration measured alone, its code hot in the caches, would look cheaper than when
#: requests of every kind follow one another, as they do on a server.
ROUNDS = 10


class PostgreSQLSide:
    """What a call costs the PostgreSQL server, when it runs on this machine.

    The CPU of the backend this process's connection talks to (``/proc``), and, where the
    server loads ``pg_stat_statements`` (``make profile``'s cluster does), each statement's
    execution and planning time: client-side binding (Django's default) sends every
    statement as new text, which the server parses and plans on every call. ``/proc``
    counts CPU in clock ticks (10 ms on most Linux machines): below a few hundred calls the
    backend's figure is coarse.
    """

    #: Resets this database's statistics only: a shared server keeps everyone else's.
    RESET = ("SELECT pg_stat_statements_reset(0, oid, 0) FROM pg_database"
             " WHERE datname = current_database()")
    READ = ("SELECT calls, total_exec_time, total_plan_time, query FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND query NOT LIKE %s ORDER BY total_exec_time + total_plan_time DESC LIMIT %s")

    def __init__(self) -> None:
        from django.db import DatabaseError, connection, transaction

        from bench.cpu import PROC, CpuMeter

        self.meter: CpuMeter | None = None
        self.statements = False
        self.before: dict[str, float] = {}
        self.cpu: dict[str, float] = {}  # label: the backend's CPU seconds over its calls
        self.rows: dict[str, dict[str, list[float]]] = {}  # label: statement: calls, ms, ms
        self.failure = ""
        if connection.vendor != "postgresql":
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        try:  # the backend's process, if the server runs here (not some other local pid)
            here = (PROC / str(pid) / "comm").read_text().startswith("postgres")
        except OSError:
            here = False
        if here:
            self.meter = CpuMeter({"backend": pid})
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                # (reading the setting needs a superuser or pg_read_all_settings)
                cursor.execute("SELECT current_setting('shared_preload_libraries')")
                if "pg_stat_statements" not in cursor.fetchone()[0]:
                    return  # nothing created in a database whose server does not load it
                cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                cursor.execute(self.RESET)
            self.statements = True
        except DatabaseError:  # not allowed to read, create or reset: no statement table
            self.statements = False

    def start(self) -> None:
        """Before a batch of calls: the statistics reset, the backend's CPU read."""
        from django.db import connection

        if self.statements:
            with connection.cursor() as cursor:
                cursor.execute(self.RESET)
        self.before = self.meter.snapshot() if self.meter else {}

    def stop(self, label: str) -> None:
        """After a batch of ``label``'s calls: its backend CPU and statements, added up."""
        from django.db import DatabaseError, connection

        if self.meter is not None:  # read first: the statistics' own query is not the calls'
            after = self.meter.snapshot()
            self.cpu[label] = self.cpu.get(label, 0.0) + after["backend"] - self.before["backend"]
        if not self.statements:
            return
        # In autocommit (no BEGIN of its own among the calls' statements); the columns of
        # pg_stat_statements 1.8 (PostgreSQL 13) and later.
        try:
            with connection.cursor() as cursor:
                cursor.execute(self.READ, ["%pg_stat_statements%", 4 * TOP_STATEMENTS])
                rows = cursor.fetchall()
        except DatabaseError as exc:
            self.failure = f"  pg_stat_statements could not be read: {exc}"
            self.statements = False
            return
        seen = self.rows.setdefault(label, {})
        for calls, executing, planning, query in rows:
            text = " ".join(query.split())
            total = seen.setdefault(text, [0.0, 0.0, 0.0])
            total[0] += calls
            total[1] += executing
            total[2] += planning

    def report(self, label: str, n: int) -> str:
        """``label``'s backend CPU per call, then its costliest statements per call."""
        lines = []
        if self.meter is not None:
            lines.append(f"  PostgreSQL: {self.cpu.get(label, 0.0) / n * 1e6:.0f} µs of its"
                         " backend's CPU per call")
        if self.failure:
            lines.append(self.failure)
        if label in self.rows:
            lines.append(f"  {'per call':>8} {'exec µs':>8} {'plan µs':>8}  statement"
                         " (planning: pg_stat_statements.track_planning)")
            costliest = sorted(self.rows[label].items(), key=lambda item: -item[1][1] - item[1][2])
            for text, (calls, executing, planning) in costliest[:TOP_STATEMENTS]:
                lines.append(f"  {calls / n:8.2f} {executing * 1e3 / n:8.1f}"
                             f" {planning * 1e3 / n:8.1f}  {text[:100]}")
        return "\n".join(lines)


def stage_table(label: str, path: str, n: int, total: float, spent: dict[str, float]) -> str:
    """The stages' CPU per call in ``bench.stages.STAGES``' order (those the call ran),
    then what is left of the request."""
    from bench.stages import OUTERMOST, STAGES

    per = 1e6 / n
    lines = [f"\n{label}: {n} calls to {path}, {total * per:.0f} µs of this process's CPU"
             " per call"]
    lines += [f"  {spent[stage] * per:8.1f} µs  {stage}" for stage, *_ in STAGES
              if spent.get(stage)]
    rest = total - sum(spent.get(stage, 0.0) for stage in OUTERMOST)
    lines.append(f"  {rest * per:8.1f} µs  the rest of the request (Django's handler and"
                 " middleware, DRF's view, the test client)")
    return "\n".join(lines)


def stages(argv: list[str]) -> None:
    """The stage table of A, B, C and D (``make profile``).

    Each stage of ``bench.stages.STAGES`` is timed by this process's CPU clock
    (``time.process_time``) around its function: a stage includes the stages it calls.
    PostgreSQL's own work and the machine's other load stay out; what is left is the
    Python (and driver) work of each stage. No profiler runs: a deterministic
    profiler's cost per function call (cProfile's made a call 4 times dearer) would
    weigh most on the stages made of many small calls. The configurations take turns
    (``ROUNDS``), as ``bench.cpurounds``' do.
    """
    from bench.stages import Timers, instrument, store_in_use

    n = int(argv[0]) if argv else 500
    rounds = min(ROUNDS, n)
    callers = [(label, *caller([tool, str(n)] + (["replay"] if replay else []), n))
               for label, tool, replay in SCENARIOS]
    timers = Timers(clock=time.process_time)
    instrument(timers, store_in_use(), waits=False)
    server = PostgreSQLSide()
    for _, _, _, call in callers:
        for i in range(50):  # warm up; for a replay this stores the key
            call(-i - 1)
    spent: dict[str, Counter[str]] = {label: Counter() for label, *_ in callers}
    totals = dict.fromkeys(spent, 0.0)
    done = dict.fromkeys(spent, 0)
    for turn in range(rounds):  # the configurations take turns, in rotating order
        batch = n // rounds + (1 if turn < n % rounds else 0)
        first = turn % len(callers)
        for label, _, _, call in callers[first:] + callers[:first]:
            timers.clear()
            server.start()
            started = time.process_time()
            for i in range(done[label], done[label] + batch):
                call(i)
            totals[label] += time.process_time() - started
            server.stop(label)
            spent[label].update(timers.wall)
            done[label] += batch
    for label, path, _, _ in callers:
        print(stage_table(label, path, n, totals[label], dict(spent[label])))
        print(server.report(label, n))
    print("\nCPU per call in process (the test client, the bench user's DRF token); the"
          " figures of `make bench` are the server's.")


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
