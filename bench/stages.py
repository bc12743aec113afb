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
import importlib
import pkgutil
import sys
import time
from collections import Counter
from typing import Any

#: Stands for the class of the store the calls use (``STORE_CLASS``: by default the
#: database vendor's backend), whose methods may be its own or inherited.
STORE = "<store>"
#: label, module, owner (a class, ``STORE``, or None for a module function), attribute:
#: the stages timed, inclusive (a stage includes the stages it calls).
STAGES: list[tuple[str, str, str | None, str]] = [
    ("DRF authentication", "rest_framework.authentication", "TokenAuthentication",
     "authenticate"),
    ("the tool's view, whole", "guarded_tools.transports.rest.views", "ToolCallView", "post"),
    ("request body parsing", "guarded_tools.transports.rest.base", "GuardedAPIView",
     "request_body"),
    ("pipeline, whole", "guarded_tools.pipeline", "Pipeline", "run"),
    ("stages before the claim", "guarded_tools.pipeline", "Pipeline", "prepare"),
    ("validation", "guarded_tools.pipeline.stages.validation", "ValidationStage",
     "before_claim"),
    ("authorization", "guarded_tools.pipeline.stages.authorization", "AuthorizationStage",
     "before_claim"),
    ("fingerprint", "guarded_tools.pipeline.stages.base", "Call", "fingerprint"),
    ("replay lookup (this process)", "guarded_tools.store.replays", "ReplayCache", "get"),
    ("replay this process answers", "guarded_tools.pipeline", "Pipeline", "replay_remembered"),
    ("atomic call in one transaction: lock, run, insert", "guarded_tools.pipeline",
     "Pipeline", "execute_locked"),
    ("key lock and read (store)", "guarded_tools.store", STORE, "lock_key"),
    ("pending operation (store)", "guarded_tools.store", STORE, "pending"),
    ("claim, committed first (store)", "guarded_tools.store", STORE, "claim"),
    ("fresh call after its claim", "guarded_tools.pipeline", "Pipeline", "execute_fresh"),
    ("execution (handler)", "guarded_tools.pipeline", "Pipeline", "call_handler"),
    ("output budget", "guarded_tools.pipeline.stages.output_budget", "OutputBudgetStage",
     "after_execute"),
    ("verification", "guarded_tools.pipeline.stages.verification", "VerificationStage",
     "verify"),
    ("finalization: budget, verify, complete", "guarded_tools.pipeline", "Pipeline",
     "finalize"),
    ("completion (store)", "guarded_tools.store", STORE, "complete"),
    ("operation's INSERT, journal, history (store)", "guarded_tools.store", STORE,
     "insert_completed"),
    ("replay from the database", "guarded_tools.pipeline", "Pipeline", "replay"),
    ("remembered for replays", "guarded_tools.store.replays", "ReplayCache", "put"),
    ("end of a transaction block (commit)", "django.db.transaction", "Atomic", "__exit__"),
    ("response (finalize, render)", "guarded_tools.transports.rest.base", "GuardedAPIView",
     "finalize_response"),
]
#: The stages no other stage contains: the request's time less theirs is Django's, DRF's
#: and the test client's own.
OUTERMOST = ("DRF authentication", "the tool's view, whole", "response (finalize, render)")


class Timers:
    """Time per stage by ``clock`` (``time.perf_counter``: wall; ``time.process_time``:
    this process's CPU), and psycopg's waits for the server charged to the stages."""

    def __init__(self, clock: Any = time.perf_counter) -> None:
        self.clock = clock
        self.wall: Counter[str] = Counter()
        self.waited: Counter[str] = Counter()
        self.active: list[str] = []

    def wrap(self, label: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if label in self.active:  # an override calling the method it overrides
                return fn(*args, **kwargs)
            started = self.clock()
            self.active.append(label)
            try:
                return fn(*args, **kwargs)
            finally:
                self.active.pop()
                self.wall[label] += self.clock() - started

        timed.bench_stage = label  # type: ignore[attr-defined]  # (wraps copies the name)
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


def resolve(store_class: type) -> list[tuple[str, Any, str]]:
    """Every stage as (label, the object whose attribute is wrapped, attribute name).

    A store method is wrapped on the class of ``store_class``'s MRO that defines it, so
    that a backend's override is what is timed. A stage that does not resolve (a module,
    class or method moved or renamed) raises, naming it: the table never drops a row.
    """
    resolved = []
    for label, module_name, owner_name, name in STAGES:
        try:
            module = importlib.import_module(module_name)
            if owner_name == STORE:
                owner: Any = next(cls for cls in store_class.__mro__ if name in vars(cls))
            else:
                owner = getattr(module, owner_name) if owner_name else module
                getattr(owner, name)
        except (ImportError, AttributeError, StopIteration) as exc:
            where = f"{module_name}.{owner_name or ''}.{name}".replace("..", ".")
            raise LookupError(f"stage {label!r}: {where} is not there ({exc!r})") from exc
        resolved.append((label, owner, name))
    return resolved


def instrument(timers: Timers, store_class: type, *, waits: bool = True,
               patch: Any = setattr) -> None:
    """Wrap every stage (``patch(owner, name, wrapped)``: a test passes its monkeypatch's),
    and with ``waits`` psycopg's waits for the server."""
    if waits:
        import psycopg

        patch(psycopg.Connection, "wait", timers.wrap_wait(psycopg.Connection.wait))
    # The modules a call goes through are loaded first: one imported later would take a
    # wrapped function by name, and keep it after a test's monkeypatch undoes the rest.
    for package in ("guarded_tools.pipeline", "guarded_tools.store", "guarded_tools.transports"):
        for found in pkgutil.walk_packages(importlib.import_module(package).__path__,
                                           f"{package}."):
            try:
                importlib.import_module(found.name)
            except ImportError:  # an optional integration this site does not install
                continue
    functions: dict[int, tuple[Any, Any]] = {}  # id of a module's function: it, its wrapper
    for label, owner, name in resolve(store_class):
        if not isinstance(owner, type):  # a module's function
            original = getattr(owner, name)
            functions[id(original)] = (original, timers.wrap(label, original))
            patch(owner, name, functions[id(original)][1])
            continue
        # as defined (on the class or the one it inherits it from): a static or class
        # method stays one
        raw = next(vars(cls)[name] for cls in owner.__mro__ if name in vars(cls))
        if isinstance(raw, (staticmethod, classmethod)):
            patch(owner, name, type(raw)(timers.wrap(label, raw.__func__)))
        else:
            patch(owner, name, timers.wrap(label, raw))
    # A module that imported a function by name calls its own reference: each of the app's
    # modules that holds one of those functions gets the wrapped one.
    for key, module in list(sys.modules.items()):
        if not key.startswith("guarded_tools") or module is None:
            continue
        for attribute, value in list(vars(module).items()):
            found = functions.get(id(value))
            if found is not None and found[0] is value:
                patch(module, attribute, found[1])


def store_in_use() -> type:
    """The class of the store the calls use (``STORE_CLASS``, after ``django.setup()``)."""
    from guarded_tools.conf import gt_settings

    return type(gt_settings.STORE_CLASS())


def main(argv: list[str]) -> None:
    from bench.profile import caller

    path, n, call = caller(argv, default_n=2000)
    from django.db import connection

    if connection.vendor != "postgresql":
        raise SystemExit("bench.stages times psycopg's waits: run it against PostgreSQL")
    timers = Timers()
    instrument(timers, store_in_use())

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
