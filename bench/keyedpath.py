"""``python bench/keyedpath.py [N] [--rest] [--regions | --profile [FILE]]``: a keyed fresh call.

Run from a checkout's directory (its code is imported from the working directory, so one
script measures two checkouts side by side), with ``DJANGO_SETTINGS_MODULE=bench.settings``
and the bench database prepared (``python -m bench.prepare``): N keyed ``tools/call`` of
``echo_keyed`` (protocol 2025-11-25, one stateless POST each, a fresh key per call, the bench
user's DRF token), through Django's WSGI handler, as the app's ASGI entry runs a tool
endpoint (``guarded_tools.asgi``: one crossing into a thread, then the WSGI handler) and as
gunicorn does; each answer checked. ``--rest`` posts the same call to the REST endpoint
(``/agent/tools/echo_keyed/``).

Prints calls per second of this process's CPU (PostgreSQL's backend is another process:
its work is not in it); ``--profile`` runs cProfile on this process's CPU clock instead and
prints its top functions
(``--profile FILE`` also dumps the statistics to FILE, for ``pstats``); ``--regions``
times the request's parts and each statement instead (this process's CPU, no profiler).

``python bench/keyedpath.py --against N ROUNDS [--rest] CHECKOUT...``: the same call in
every checkout given (one worker process each, run from its directory), taking turns
round by round; prints the median ratio of each to the first, round by round.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

sys.path[0] = os.getcwd()  # not bench/ (its profile.py would shadow the stdlib's)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")


def caller(path: str, rest: bool) -> Callable[[int], None]:
    """``call(i)``: the i-th keyed call through Django's WSGI handler, its answer checked."""
    import django

    django.setup()
    from django.core.wsgi import get_wsgi_application

    from bench.prepare import TOKEN

    handler = get_wsgi_application()
    prefix = uuid.uuid4().hex[:8]
    headers = {"HTTP_AUTHORIZATION": f"Token {TOKEN}"}
    if not rest:
        headers |= {"HTTP_ACCEPT": "application/json, text/event-stream",
                    "HTTP_MCP_PROTOCOL_VERSION": "2025-11-25"}

    def call(i: int) -> None:
        key = f"{prefix}-{i}"
        arguments = {"operationId": key, "value": i}
        if rest:
            body = json.dumps(arguments).encode()
        else:
            body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                               "params": {"name": "echo_keyed", "arguments": arguments}}).encode()
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": path, "QUERY_STRING": "",
                   "SERVER_NAME": "localhost", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
                   "wsgi.input": io.BytesIO(body), "CONTENT_TYPE": "application/json",
                   "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1", **headers}
        answer: list[str] = []
        result = handler(environ, lambda status, headers: answer.append(status))
        try:
            content = b"".join(result)
        finally:
            result.close()  # request_finished, as a server calls it
        assert answer[0][:3] in ("200", "201"), content
        data = json.loads(content)
        if not rest:
            data = data["result"]
            assert not data.get("isError"), content
            data = data["structuredContent"]
        assert data.get("value", data.get("output", {}).get("value")) == i, content

    return call


#: label, module, class (None: a module function), attribute: the regions ``--regions``
#: times (this process's CPU, inclusive; the table also shows each less its inner rows).
REGIONS: list[tuple[str, str, str | None, str]] = [
    ("Django's WSGI handler, whole", "django.core.handlers.wsgi", "WSGIHandler", "__call__"),
    ("DRF view dispatch (after middleware, URL)", "rest_framework.views", "APIView",
     "dispatch"),
    ("DRF token authentication", "rest_framework.authentication", "TokenAuthentication",
     "authenticate"),
    ("request body parsing", "guarded_tools.transports.rest.base", "GuardedAPIView",
     "request_body"),
    ("MCP tools/call (find the tool, invocation, result)",
     "guarded_tools.transports.mcp.tool_methods", None, "call_tool"),
    ("invocation (key, scope, fingerprint)", "guarded_tools.transports.mcp.tool_methods",
     None, "invocation_for"),
    ("pipeline, whole", "guarded_tools.pipeline", "Pipeline", "run"),
    ("stages before the claim", "guarded_tools.pipeline", "Pipeline", "prepare"),
    ("claim (store)", "guarded_tools.store.backends.base", "OperationStore", "claim"),
    ("after the claim: stages, handler", "guarded_tools.pipeline", "Pipeline",
     "execute_fresh"),
    ("finalization: stages, completion", "guarded_tools.pipeline", "Pipeline", "finalize"),
    ("completion (store)", "guarded_tools.store.backends.postgresql",
     "PostgreSQLOperationStore", "complete"),
    ("remembered for replays", "guarded_tools.store.replays", "ReplayCache", "put"),
    ("MCP result (success_result)", "guarded_tools.transports.mcp.tool_methods", None,
     "success_result"),
    ("response (finalize, render)", "rest_framework.views", "APIView", "finalize_response"),
    ("request_finished (response.close)", "django.http.response", "HttpResponseBase",
     "close"),
]


def regions(call: Callable[[int], None], n: int) -> None:
    """Each of ``REGIONS`` and each statement's execute and fetch, timed by this
    process's CPU clock around its function (no profiler: its cost per function call
    would weigh most on what is made of many small calls)."""
    import functools
    import importlib
    from collections import Counter

    from django.db.backends.utils import CursorWrapper

    spent: Counter[str] = Counter()
    clock = time.process_time
    active: list[str] = []

    def wrap(label: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if label in active:
                return fn(*args, **kwargs)
            started = clock()
            active.append(label)
            try:
                return fn(*args, **kwargs)
            finally:
                active.pop()
                spent[label] += clock() - started
        return timed

    for label, module_name, owner_name, name in REGIONS:
        module = importlib.import_module(module_name)
        owner = getattr(module, owner_name) if owner_name else module
        setattr(owner, name, wrap(label, getattr(owner, name)))
        # the names imported elsewhere before the patch
        if owner_name is None:
            for other in list(sys.modules.values()):
                if getattr(other, name, None) is getattr(module, name).__wrapped__:
                    setattr(other, name, getattr(module, name))

    def statement(sql: str) -> str:
        text = " ".join(sql.split())[:60]
        if "authtoken_token" in text:
            return "SQL token SELECT (with its user)"
        if text.startswith("INSERT"):
            return "SQL claim INSERT … RETURNING"
        if text.startswith("WITH") or text.startswith("UPDATE"):
            return "SQL completion WITH UPDATE … INSERT history"
        return "SQL " + text[:30]

    import psycopg

    execute = CursorWrapper.execute
    last = [""]

    def timed_execute(self: Any, sql: str, params: Any = None) -> Any:
        label = last[0] = statement(sql)
        started = clock()
        try:
            return execute(self, sql, params)
        finally:
            spent[label + ": execute (compose, adapt, send, wait, read)"] += clock() - started

    def timed_fetch(fetch: Any) -> Any:
        def fetched(self: Any, *args: Any) -> Any:
            started = clock()
            try:
                return fetch(self, *args)
            finally:
                spent[last[0] + ": fetch"] += clock() - started
        return fetched

    CursorWrapper.execute = timed_execute  # type: ignore[method-assign]
    for name in ("fetchall", "fetchone", "fetchmany", "nextset"):  # the ORM reads by fetchmany
        setattr(psycopg.Cursor, name, timed_fetch(getattr(psycopg.Cursor, name)))
    for i in range(100):
        call(-10_000 - i)
    spent.clear()
    started = clock()
    for i in range(n):
        call(i)
    total = clock() - started
    print(f"{n} calls, {total / n * 1e6:.0f} µs of this process's CPU per call (timed)")
    print(f"{'µs/call':>8} {'share':>6}  region (inclusive)")
    for label, *_ in REGIONS:
        print(f"{spent[label] / n * 1e6:8.1f} {spent[label] / total:6.1%}  {label}")
    for label in sorted(k for k in spent if k.startswith("SQL")):
        print(f"{spent[label] / n * 1e6:8.1f} {spent[label] / total:6.1%}  {label}")
    print(json.dumps({k: round(v / n * 1e6, 1) for k, v in spent.items()} | {
        "total": round(total / n * 1e6, 1)}))


def side_by_side(argv: list[str]) -> None:
    """``--against N ROUNDS [--rest] CHECKOUT...``: one worker per checkout (its own code,
    run from its directory), taking turns round by round, the order rotating; prints each
    round's CPU per call and the median ratio of each checkout to the first, per round."""
    import statistics
    import subprocess

    n, rounds = int(argv[0]), int(argv[1])
    flags = [a for a in argv[2:] if a.startswith("--")]
    checkouts = [a for a in argv[2:] if not a.startswith("--")]
    workers = []
    for checkout in checkouts:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", str(n),
                                 *flags], cwd=checkout, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        workers.append(proc)
    spent: list[list[float]] = [[] for _ in workers]
    for r in range(rounds):
        order = list(range(len(workers)))
        order = order[r % len(order):] + order[:r % len(order)]
        for i in order:
            proc = workers[i]
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            spent[i].append(float(proc.stdout.readline()))
        print(f"round {r + 1}: " + "  ".join(
            f"{os.path.basename(c)} {spent[i][-1]:7.1f}" for i, c in enumerate(checkouts)),
            flush=True)
    for proc in workers:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    print(f"µs of CPU per call, medians of {rounds} rounds of {n} calls:")
    for i, checkout in enumerate(checkouts):
        ratio = statistics.median(x / b for x, b in zip(spent[i], spent[0], strict=True))
        print(f"  {checkout:30} {statistics.median(spent[i]):7.1f}  x{ratio:.3f} of the first"
              " (median of the per-round ratios)")


def worker(argv: list[str]) -> None:
    n = int(argv[0])
    rest = "--rest" in argv
    call = caller("/agent/tools/echo_keyed/" if rest else "/agent/mcp/", rest)
    for i in range(200):
        call(-i - 1)
    print("ready", flush=True)
    done = 0
    for _line in sys.stdin:
        started = time.process_time()
        for i in range(done, done + n):
            call(i)
        done += n
        print((time.process_time() - started) / n * 1e6, flush=True)


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv and argv[0].isdigit() else 2000
    rest = "--rest" in argv
    call = caller("/agent/tools/echo_keyed/" if rest else "/agent/mcp/", rest)
    for i in range(200):
        call(-i - 1)
    if "--regions" in argv:
        regions(call, n)
        return
    if "--profile" in argv:
        import cProfile
        import pstats

        # This process's CPU, not wall time: waiting for PostgreSQL is not the app's cost.
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        for i in range(n):
            call(i)
        profiler.disable()
        at = argv.index("--profile") + 1
        if at < len(argv) and not argv[at].startswith("--"):
            profiler.dump_stats(argv[at])
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(80)
        stats.sort_stats("tottime").print_stats(30)
        return
    started = time.process_time()
    for i in range(n):
        call(i)
    spent = time.process_time() - started
    print(json.dumps({"calls_per_s": round(n / spent, 1),
                      "us_per_call": round(spent / n * 1e6, 1)}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--against"]:
        side_by_side(sys.argv[2:])
    elif sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2:])
    else:
        main(sys.argv[1:])
