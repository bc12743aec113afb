#!/usr/bin/env python
"""Multi-node run: two web processes and two Celery workers on one PostgreSQL, under load.

Sends duplicate and distinct calls of the demo's add_order_note to both web nodes while a
web node and a worker are killed with SIGKILL and restarted, waits for the sweep, retries
every key once more, and checks that every key's effect happened exactly once.

    .venv/bin/python scripts/multinode.py            # 300 keys x 3 duplicates
    .venv/bin/python scripts/multinode.py --quick    # the bounded version CI runs

Uses DATABASE_URL when set (PostgreSQL), else starts a throwaway cluster with scripts/pg.sh.
Everything listens on 127.0.0.1 and stops by itself; exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import collections
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
from concurrent.futures import ThreadPoolExecutor
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


def call(port: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/agent/tools/add_order_note/", data=json.dumps(body).encode(),
        headers={"Authorization": f"Token {TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        return 0, {}  # the node died under us: the client does not know what happened


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=300)
    parser.add_argument("--dupes", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="100 keys: the CI version")
    args = parser.parse_args()
    if args.quick:
        args.keys = 100

    work = Path(tempfile.mkdtemp(prefix="gt-multinode-"))
    pg_dir = None
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        pg_dir = Path(tempfile.mkdtemp(prefix="gt-multinode-pg-", dir="/tmp"))
        url = subprocess.run([str(ROOT / "scripts/pg.sh"), "start", str(pg_dir)], check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()[-1]
    env = {**os.environ, "DATABASE_URL": url, "GT_VAR_DIR": str(work / "var"),
           "GT_LEASE_SECONDS": "3", "GT_SWEEP_EVERY": "1", "GT_EFFECT_DELAY": "0.15",
           "DJANGO_SETTINGS_MODULE": "project.settings", "PYTHONUNBUFFERED": "1"}
    nodes: list[Node] = []
    try:
        for command in (["migrate", "--noinput", "-v", "0"], ["demo_seed"]):
            subprocess.run([PY, "manage.py", *command], cwd=ROOT, env=env, check=True,
                           capture_output=True)
        os.environ.update(DATABASE_URL=url, GT_VAR_DIR=env["GT_VAR_DIR"],
                          DJANGO_SETTINGS_MODULE="project.settings")
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from guarded_tools.models import Operation
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
        for node in nodes:
            node.start()
        web2, worker2 = nodes[1], nodes[3]

        run = os.urandom(4).hex()
        keys = [f"mn-{run}-{i}" for i in range(args.keys)]
        jobs = [k for k in keys for _ in range(args.dupes)]
        random.shuffle(jobs)
        statuses: collections.Counter[str] = collections.Counter()
        lock = threading.Lock()

        def one(k: str) -> None:
            for _attempt in range(10):  # like a real client: retry a lost connection
                status, body = call(random.choice(ports), {"operationId": k,
                                                           "orderId": order_id,
                                                           "text": "leave at the door"})
                label = str(status) if status else "connection lost (retried)"
                if status == 200 and body.get("operation", {}).get("replayed"):
                    label = "200 replay"
                elif status >= 400:
                    label = f"{status} {body.get('error', {}).get('code')}"
                with lock:
                    statuses[label] += 1
                if status:
                    return
                time.sleep(0.3)

        killed: list[str] = []

        def chaos() -> None:
            time.sleep(1)
            for node in (web2, worker2):  # both, even if the load is over by then
                print(f"  kill -9 {node.name}", flush=True)
                node.kill()
                killed.append(node.name)
                time.sleep(1)
                node.start()
                print(f"  restarted {node.name}", flush=True)

        started = time.monotonic()
        killer = threading.Thread(target=chaos, daemon=True)
        killer.start()
        with ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(one, jobs))
        killer.join(60)
        load_seconds = time.monotonic() - started

        # Let leases expire and the sweep decide (until nothing of this run is in flight,
        # not for a guessed while: a busy machine sweeps late), then every key once more.
        deadline = time.monotonic() + 120
        while (Operation.objects.filter(key__startswith=f"mn-{run}-", state="in_flight").exists()
               and time.monotonic() < deadline):
            time.sleep(0.5)
        final: collections.Counter[str] = collections.Counter()
        deadline = time.monotonic() + 120
        for k in keys:
            while True:
                status, _body = call(ports[0], {"operationId": k, "orderId": order_id,
                                               "text": "leave at the door"})
                if status not in (0, 409) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            final[str(status)] += 1

        notes = collections.Counter(
            OrderNote.objects.filter(reference__startswith=f"mn-{run}-").values_list(
                "reference", flat=True))
        wrong = {k: notes.get(k, 0) for k in keys if notes.get(k, 0) != 1}
        states = collections.Counter(Operation.objects.filter(
            key__startswith=f"mn-{run}-").values_list("state", flat=True))
        recovered = Operation.objects.filter(key__startswith=f"mn-{run}-", recovered=True).count()
        server_errors = {s: n for s, n in statuses.items() if s.startswith("5")}

        print(f"\n{len(jobs)} calls ({args.keys} keys x {args.dupes}) to 2 web nodes in "
              f"{load_seconds:.1f} s; killed with SIGKILL and restarted: {', '.join(killed)}")
        for label, count in sorted(statuses.items()):
            print(f"  {label:<34} {count}")
        print(f"final retry of every key: {dict(final)}")
        print(f"operations: {dict(states)}; completed by recovery: {recovered}")
        print(f"effects per key: exactly 1 for {args.keys - len(wrong)} of {args.keys}")
        problems = []
        if wrong:
            problems.append(f"keys without exactly one effect: {dict(list(wrong.items())[:10])}")
        if server_errors:
            problems.append(f"5xx answers: {server_errors}")
        if set(final) != {"200"}:
            problems.append(f"final retries not all 200: {dict(final)}")
        for problem in problems:
            print(f"FAIL: {problem}")
        print("multinode: OK" if not problems else "multinode: FAILED")
        return 1 if problems else 0
    finally:
        for node in nodes:
            node.stop()
        if pg_dir is not None:
            subprocess.run([str(ROOT / "scripts/pg.sh"), "stop", str(pg_dir)],
                           capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
