#!/usr/bin/env python
"""Multi-node run: two web processes and two Celery workers on one PostgreSQL and Redis.

Sends duplicate and distinct calls of the demo's add_order_note to both web nodes while a
web node, a worker and the Redis broker are killed with SIGKILL and restarted. While the
broker is down a web node is killed holding a claim, whose lease then expires with no
sweep able to run; once the broker is back the sweep (one beat, two workers) must settle
it before any client retries it. Then every key is retried once more, and every key's
effect must have happened exactly once, with no 5xx answer at any time (no tool call
needs the broker, so its outage explains none).

    .venv/bin/python scripts/multinode.py            # 300 keys x 3 duplicates
    .venv/bin/python scripts/multinode.py --quick    # the bounded version CI runs

Needs Debian's redis-server and the redis package (guarded-tools[redis]). Uses
DATABASE_URL when set (PostgreSQL), else starts a throwaway cluster with scripts/pg.sh.
Everything listens on 127.0.0.1 and stops by itself; exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import io
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
TOKEN = "demo-agent-token-0000000000000000000000"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


class Node:
    """One process of the cluster that can be killed and started again."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path,
                 port: int | None = None) -> None:
        self.name, self.argv, self.env, self.log, self.port = name, argv, env, log, port
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        if self.port:
            wait_port(self.port)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_for(what: str, predicate: Callable[[], bool], timeout: float) -> float:
    """Poll ``predicate`` until it holds; seconds it took. Raises after ``timeout``."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - started


def call(port: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/agent/tools/add_order_note/", data=json.dumps(body).encode(),
        headers={"Authorization": f"Token {TOKEN}", "Content-Type": "application/json"},
    )
    try:
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
    except (OSError, ValueError, http.client.HTTPException):
        # The node died under us, before or while it answered (IncompleteRead): the
        # client does not know what happened.
        return 0, {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=300)
    parser.add_argument("--dupes", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="100 keys: the CI version")
    parser.add_argument("--keep", action="store_true",
                        help="keep the nodes' logs (they are kept after a failure anyway)")
    args = parser.parse_args()
    if args.quick:
        args.keys = 100
    redis_server = shutil.which("redis-server")
    if redis_server is None or find_spec("redis") is None:
        print("multinode: needs redis-server (apt-get install redis-server) and the redis"
              " package (pip install 'guarded-tools[redis]')", file=sys.stderr)
        return 2

    work = Path(tempfile.mkdtemp(prefix="gt-multinode-"))
    pg_dir = None
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        pg_dir = Path(tempfile.mkdtemp(prefix="gt-multinode-pg-", dir="/tmp"))
        url = subprocess.run([str(ROOT / "scripts/pg.sh"), "start", str(pg_dir)], check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()[-1]
    redis_port = free_port()
    env = {**os.environ, "DATABASE_URL": url, "GT_VAR_DIR": str(work / "var"),
           "CELERY_BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
           "GT_LEASE_SECONDS": "3", "GT_SWEEP_EVERY": "1", "GT_EFFECT_DELAY": "0.15",
           "DJANGO_SETTINGS_MODULE": "project.settings", "PYTHONUNBUFFERED": "1"}
    (work / "redis").mkdir()
    # No snapshot, no append-only file: a restarted broker has lost every queued message.
    broker = Node("redis", [redis_server, "--port", str(redis_port), "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no", "--dir", str(work / "redis")],
                  env, work / "redis.log", redis_port)
    nodes: list[Node] = [broker]
    ok = False
    try:
        broker.start()
        os.environ.update(DATABASE_URL=url, GT_VAR_DIR=env["GT_VAR_DIR"],
                          CELERY_BROKER_URL=env["CELERY_BROKER_URL"],
                          DJANGO_SETTINGS_MODULE="project.settings")
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        # In this process, which sets Django up anyway: two Python starts fewer than
        # `manage.py migrate` and `manage.py demo_seed` (the test's CPU 37.1 s, now 34.0 s).
        call_command("migrate", interactive=False, verbosity=0)
        call_command("demo_seed", stdout=io.StringIO())

        from guarded_tools.models import Operation, OperationState
        from project.demo.models import Order, OrderNote

        order_id = Order.objects.filter(customer__username="agent").values_list(
            "pk", flat=True).first()
        ports = [free_port(), free_port()]
        for i, port in enumerate(ports):
            nodes.append(Node(f"web{i + 1}", [PY, "-m", "uvicorn", "project.asgi:application",
                                              "--host", "127.0.0.1", "--port", str(port),
                                              "--log-level", "warning"], env,
                              work / f"web{i + 1}.log", port))
        for i in range(2):
            beat = ["-B"] if i == 0 else []  # exactly one beat
            nodes.append(Node(f"worker{i + 1}", [PY, "-m", "celery", "-A", "project", "worker",
                                                 *beat, "--pool=solo", "-n", f"w{i + 1}@%h",
                                                 "--loglevel=WARNING"], env,
                              work / f"worker{i + 1}.log"))
        for node in nodes[1:]:
            node.start()
        web2, worker2 = nodes[2], nodes[4]

        run = os.urandom(4).hex()
        keys = [f"mn-{run}-{i}" for i in range(args.keys)]
        shuffled = [k for k in keys for _ in range(args.dupes)]
        random.shuffle(shuffled)
        jobs = collections.deque(shuffled)
        statuses: collections.Counter[str] = collections.Counter()
        outage: collections.Counter[str] = collections.Counter()  # answered while it is down
        lock = threading.Lock()
        broker_down = threading.Event()
        chaos_done = threading.Event()
        started = time.monotonic()

        def body(k: str) -> dict[str, Any]:
            return {"operationId": k, "orderId": order_id, "text": "leave at the door"}

        def say(text: str) -> None:
            print(f"  {time.monotonic() - started:5.1f} s  {text}", flush=True)

        def one(k: str) -> None:
            for _attempt in range(10):  # like a real client: retry a lost connection
                status, answer = call(random.choice(ports), body(k))
                label = str(status) if status else "connection lost (retried)"
                if status == 200 and answer.get("operation", {}).get("replayed"):
                    label = "200 replay"
                elif status >= 400:
                    label = f"{status} {answer.get('error', {}).get('code')}"
                with lock:
                    statuses[label] += 1
                    if broker_down.is_set():
                        outage[label] += 1
                if status:
                    return
                time.sleep(0.3)

        def client() -> None:
            while True:
                with lock:
                    k = jobs.popleft() if jobs else None
                if k is None:
                    if chaos_done.is_set():
                        return
                    k = random.choice(keys)  # the load lasts until every node is back
                one(k)

        def answered(counter: collections.Counter[str]) -> int:
            with lock:
                return sum(counter.values())

        killed: list[str] = []
        probes: list[str] = []  # keys only the script calls: nobody retries them
        orphans: list[str] = []  # probes whose claim a killed node left behind
        failures: list[BaseException] = []
        caught_up = [0.0]  # seconds from the broker's return to the sweep's takeover
        overdue = [0]  # orphans nobody had taken over when the broker came back

        def in_flight(k: str) -> bool:
            return Operation.objects.filter(key=k, state=OperationState.IN_FLIGHT).exists()

        def kill_holding_claim(node: Node) -> None:
            """SIGKILL ``node`` while its handler runs a probe's call, so the claim is left."""
            for attempt in range(10):
                probe = f"mn-{run}-probe{attempt}"
                probes.append(probe)
                sender = threading.Thread(target=call, args=(node.port, body(probe)),
                                          daemon=True)
                sender.start()

                def claimed(p: str = probe, t: threading.Thread = sender) -> bool:
                    return in_flight(p) or not t.is_alive()

                wait_for("the probe's claim", claimed, 60)
                if sender.is_alive():
                    node.kill()
                    killed.append(node.name)
                    sender.join(30)
                    node.start()
                    if in_flight(probe):  # not completed just before the kill
                        say(f"kill -9 {node.name} holding the claim of {probe}; restarted")
                        orphans.append(probe)
                        return
                    say(f"kill -9 {node.name} just after {probe} completed; restarted")
                sender.join(30)
            raise RuntimeError(f"{node.name} never died holding a claim")

        def chaos() -> None:
            try:
                wait_for("the first answers", lambda: answered(statuses) >= len(keys) // 10, 60)
                for node in (web2, worker2):  # under load
                    node.kill()
                    killed.append(node.name)
                    say(f"kill -9 {node.name}")
                    node.start()
                    say(f"restarted {node.name}")
                broker.kill()
                killed.append(broker.name)
                broker_down.set()
                say("kill -9 redis (the broker)")
                kill_holding_claim(web2)
                seconds = wait_for("the orphaned lease to expire", lambda: Operation.objects.filter(
                    key__in=orphans).abandoned().count() == len(orphans), 30)
                say(f"its lease expired {seconds:.1f} s later: the sweep is overdue")
                wait_for("answers during the outage", lambda: answered(outage) >= 30, 60)
                overdue[0] = Operation.objects.filter(key__in=orphans, fence=1).abandoned().count()
                broker.start()
                broker_down.clear()
                say("restarted redis (empty: no snapshot)")
                caught_up[0] = wait_for("the sweep to take the orphaned claim over", lambda: (
                    Operation.objects.filter(key__in=orphans, fence__gt=1).count()
                    == len(orphans)), 90)
                say(f"the sweep took it over {caught_up[0]:.1f} s after the broker returned")
            except BaseException as exc:  # the main thread reports it
                failures.append(exc)
            finally:
                chaos_done.set()
                connection.close()

        killer = threading.Thread(target=chaos, daemon=True)
        killer.start()
        with ThreadPoolExecutor(args.clients) as pool:
            for future in [pool.submit(client) for _ in range(args.clients)]:
                future.result()
        killer.join(120)
        if failures:
            raise failures[0]
        load_seconds = time.monotonic() - started

        # No client calls now: whatever is still claimed, only the sweep can settle.
        mine = Operation.objects.filter(key__startswith=f"mn-{run}-")
        left = mine.filter(state__in=[OperationState.IN_FLIGHT, OperationState.ABANDONED])
        left_count = left.count()
        settled = wait_for("the sweep to settle every claim", lambda: not left.exists(), 90)
        taken_over = mine.filter(key__in=orphans, fence__gt=1).count()

        final: collections.Counter[str] = collections.Counter()
        for k in keys + probes:
            for _attempt in range(20):
                status, _body = call(ports[0], body(k))
                if status not in (0, 409):
                    break
                time.sleep(0.5)
            final[str(status)] += 1

        every = keys + probes
        notes = collections.Counter(
            OrderNote.objects.filter(reference__startswith=f"mn-{run}-").values_list(
                "reference", flat=True))
        wrong = {k: notes.get(k, 0) for k in every if notes.get(k, 0) != 1}
        states = collections.Counter(mine.values_list("state", flat=True))
        recovered = mine.filter(recovered=True).count()
        server_errors = {s: n for s, n in statuses.items() if s.startswith("5")}

        print(f"\n{sum(statuses.values())} calls ({args.keys} keys x {args.dupes}, then more"
              f" until every node was back) to 2 web nodes in {load_seconds:.1f} s; killed"
              f" with SIGKILL and restarted: {', '.join(killed)}")
        for label, count in sorted(statuses.items()):
            print(f"  {label:<34} {count}")
        print(f"answered while the broker was down: {dict(sorted(outage.items()))}")
        print(f"of the claims orphaned during the outage, {overdue[0]} of {len(orphans)} waited"
              f" for it and the sweep took over {taken_over}, {caught_up[0]:.1f} s after the"
              f" broker returned; claims left when the load ended: {left_count}, settled by"
              f" the sweep in {settled:.1f} s")
        print(f"final retry of every key: {dict(final)}")
        print(f"operations: {dict(states)}; completed by recovery: {recovered}")
        print(f"effects per key: exactly 1 for {len(every) - len(wrong)} of {len(every)}")
        problems = []
        if wrong:
            problems.append(f"keys without exactly one effect: {dict(list(wrong.items())[:10])}")
        if server_errors:
            problems.append(f"5xx answers: {server_errors}")
        if not orphans or overdue[0] != len(orphans) or taken_over != len(orphans):
            problems.append(f"claims orphaned during the outage: {len(orphans)}, still waiting"
                            f" when the broker returned: {overdue[0]}, then taken over by the"
                            f" sweep: {taken_over}")
        if set(final) != {"200"}:
            problems.append(f"final retries not all 200: {dict(final)}")
        for problem in problems:
            print(f"FAIL: {problem}")
        print("multinode: OK" if not problems else "multinode: FAILED")
        ok = not problems
        return 0 if ok else 1
    finally:
        for node in reversed(nodes):
            node.stop()
        if pg_dir is not None:
            subprocess.run([str(ROOT / "scripts/pg.sh"), "stop", str(pg_dir)],
                           capture_output=True)
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"logs of every node: {work}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
