"""``python -m bench.peer``: the peer table of ``make bench``: FastMCP beside the app.

The same ``echo(value: int)`` tool, over MCP (one stateless POST per ``tools/call``,
JSON responses, protocol 2025-11-25), served by one server process each:

* under **uvicorn**: FastMCP (``bench.fastmcp_app``) and the app's ASGI entry
  (``bench.asgi``: Django's ASGI handler in ``guarded_tools.asgi.with_cancellation``);
* under **gunicorn**: FastMCP with one uvicorn worker (``uvicorn_worker.UvicornWorker``:
  FastMCP is ASGI only), and the app with one sync worker (WSGI, ``bench.wsgi``).

Configurations, on each server: FastMCP as shipped (it validates the output against
the schema it derives from ``-> Echo``) and with ``output_schema=None``; the app's
read-only ``echo`` with the same output schema (validated), and ``echo_raw`` without
one; the app's keyed ``echo_keyed`` with a fresh key per call and a DRF token, on
PostgreSQL (FastMCP has no idempotency: that row is the app's own cost). Both sides
are anonymous for the read-only tool. The app runs the middleware of
``project.settings`` (Django's default set), FastMCP none.

wrk drives them from its own process on loopback (``bench/mcp.lua`` checks every
response's status and ``isError``) in rounds whose order rotates; after each keyed run
the operations of its keys are counted in the database. CPU per request is the server
process tree's CPU time (``/proc``) over the requests answered; PostgreSQL's backends
separately. Writes JSON to ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.cpu import CpuMeter, database_server_pid
from bench.run import PYTHON, RESULTS, ROOT, Procs, free_port, log, parse_wrk

MIDDLEWARE_NOTE = ("the app: Django's default middleware (Security, Session, Common, Csrf,"
                   " Authentication, Message, XFrameOptions) and DRF's Token and Session"
                   " authentication; FastMCP: none")

#: server: (framework, server software, command after the executable, path of MCP)
SERVERS: dict[str, tuple[str, str, list[str], str]] = {
    "fastmcp-uvicorn": ("fastmcp", "uvicorn", ["bench.fastmcp_app:app"], "/mcp/"),
    "app-uvicorn": ("app", "uvicorn", ["bench.asgi:application"], "/agent/mcp/"),
    "fastmcp-gunicorn": ("fastmcp", "gunicorn", [
        "bench.fastmcp_app:app", "--worker-class", "uvicorn_worker.UvicornWorker"], "/mcp/"),
    "app-gunicorn": ("app", "gunicorn", [
        "bench.wsgi:application", "--worker-class", "sync"], "/agent/mcp/"),
}

#: name, what, tool, keyed (a fresh key and the DRF token)
CALLS: list[tuple[str, str, str, bool]] = [
    ("FastMCP", "FastMCP as shipped (output validated against its derived schema)", "echo",
     False),
    ("FastMCP-noout", "FastMCP, output_schema=None", "echo_raw", False),
    ("read", "app, read-only tool, anonymous, output schema validated", "echo", False),
    ("read-noout", "app, read-only tool, anonymous, no output schema", "echo_raw", False),
    ("keyed", "app, keyed tool, fresh key, DRF token, PostgreSQL, output validated",
     "echo_keyed", True),
]


def configs() -> list[tuple[str, str, str, str, bool]]:
    """(name, what, server, tool, keyed) for every call on both server programs."""
    out = []
    for software in ("uvicorn", "gunicorn"):
        for name, what, tool, keyed in CALLS:
            framework = "fastmcp" if name.startswith("FastMCP") else "app"
            out.append((f"{software} {name}", what, f"{framework}-{software}", tool, keyed))
    return out


def command(server: str, port: int) -> list[str]:
    _, software, args, _ = SERVERS[server]
    exe = shutil.which(software, path=str(Path(PYTHON).parent)) or software
    if software == "uvicorn":
        return [exe, *args, "--host", "127.0.0.1", "--port", str(port), "--log-level",
                "warning", "--no-access-log"]
    return [exe, *args, "--workers", "1", "--bind", f"127.0.0.1:{port}", "--log-level",
            "warning", "--timeout", "60"]


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited ({proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on {port} after {timeout} s") from None
            time.sleep(0.1)


def run_wrk(url: str, tool: str, prefix: str, token: str, seconds: float,
            args: argparse.Namespace) -> dict[str, Any]:
    result = subprocess.run(
        ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{max(1, round(seconds))}s",
         "--latency", "--timeout", "10s", "-s", str(ROOT / "bench" / "mcp.lua"), url,
         "--", tool, prefix, token],
        capture_output=True, text=True, timeout=seconds + 60, check=True)
    out = parse_wrk(result.stdout)
    line = next(x for x in result.stdout.splitlines() if x.startswith("CHECKED "))
    out.update({k: int(v) for k, v in (part.split("=") for part in line.split()[1:])})
    # wrk calls request() once on its first thread to verify the script: that one is
    # counted in "sent" but never sent.
    out["made"] = out["sent"] - 1
    if result.stderr.strip():
        log(result.stderr.strip()[:600])
    return out


def operations(prefix: str, sent: int, timeout: float = 30) -> dict[str, int]:
    """The states of the operations of ``prefix``'s keys, once none is in flight."""
    from django.db.models import Count

    from guarded_tools.models import Operation, OperationState

    deadline = time.monotonic() + timeout
    while True:
        rows = (Operation.objects.filter(key__startswith=f"{prefix}-")
                .values("state").annotate(n=Count("id")))
        states = {row["state"]: row["n"] for row in rows}
        settled = not states.get(OperationState.IN_FLIGHT)
        if (settled and sum(states.values()) >= sent) or time.monotonic() > deadline:
            return states
        time.sleep(0.05)  # polling the condition: the server finishes what it was sent


def check(result: dict[str, Any], states: dict[str, int] | None) -> str:
    """"ok" when every response answered was a success and, for a keyed run, every
    request made is a succeeded operation; otherwise what is wrong."""
    problems = []
    if result["bad"] or result["socket_errors"]:
        problems.append(f"{result['bad']} bad responses, {result['socket_errors']} socket errors")
    if result["ok"] != result["requests"]:
        problems.append(f"{result['ok']} checked of {result['requests']} answered")
    if states is not None:
        succeeded = states.get("succeeded", 0)
        others = {k: v for k, v in states.items() if k != "succeeded"}
        if succeeded != result["made"] or others:
            problems.append(f"{succeeded} succeeded operations for {result['made']} requests"
                            + (f", others {others}" if others else ""))
    return "; ".join(problems) or "ok"


def measure(args: argparse.Namespace, token: str) -> dict[str, Any]:
    procs = Procs()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "bench.settings"}
    urls, meters = {}, {}
    db_pid = database_server_pid(os.environ["DATABASE_URL"])
    all_configs = configs()
    runs: dict[str, list[dict[str, Any]]] = {c[0]: [] for c in all_configs}
    try:
        for server, (framework, _, _, path) in SERVERS.items():
            port = free_port()
            proc = procs.start(command(server, port), env, RESULTS / f"peer-{server}.log")
            wait_port(port, proc)
            urls[server] = f"http://127.0.0.1:{port}{path}"
            meters[server] = CpuMeter({"app": proc.pid,
                                       "db": db_pid if framework == "app" else None})
        for _name, _, server, tool, keyed in all_configs:  # warm-up
            run_wrk(urls[server], tool, f"w{uuid.uuid4().hex[:8]}" if keyed else "",
                    token if keyed else "", args.warmup, args)
        for round_no in range(args.rounds):
            shift = round_no % len(all_configs)
            for name, _, server, tool, keyed in all_configs[shift:] + all_configs[:shift]:
                prefix = f"p{uuid.uuid4().hex[:10]}" if keyed else ""
                before = meters[server].snapshot()
                result = run_wrk(urls[server], tool, prefix, token if keyed else "",
                                 args.duration, args)
                result["cpu_us"] = CpuMeter.per_request(before, meters[server].snapshot(),
                                                        result["requests"])
                states = operations(prefix, result["made"]) if keyed else None
                result["operations"] = states
                result["check"] = check(result, states)
                runs[name].append(result)
                log(f"[peer] round {round_no + 1}/{args.rounds} {name:24} {result['rps']:7.1f}"
                    f" req/s p50 {result.get('p50_ms', 0):6.2f} p99 {result.get('p99_ms', 0):6.2f}"
                    " ms " + " ".join(f"{k} {v:.0f}" for k, v in result["cpu_us"].items())
                    + f" µs; check: {result['check']}")
    finally:
        procs.stop_all()
    return summarize(all_configs, runs)


def summarize(all_configs: list[tuple[str, str, str, str, bool]],
              runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name, what, server, tool, keyed in all_configs:
        rs = runs[name]
        summary[name] = {
            "what": what, "server": server, "tool": tool, "keyed": keyed, "runs": rs,
            "rps": round(statistics.median(r["rps"] for r in rs), 1),
            "p50_ms": round(statistics.median(r["p50_ms"] for r in rs), 2),
            "p99_ms": round(statistics.median(r["p99_ms"] for r in rs), 2),
            "cpu_us": {part: round(statistics.median(r["cpu_us"][part] for r in rs), 1)
                       for part in rs[0].get("cpu_us", {})},
            "checks": sorted({r["check"] for r in rs}),
        }
    reference = summary["uvicorn FastMCP"]["rps"]
    for entry in summary.values():
        entry["ratio_to_fastmcp"] = round(entry["rps"] / reference, 3)
    return {"configs": summary, "reference": "uvicorn FastMCP", "fairness": MIDDLEWARE_NOTE}


def table(peer: dict[str, Any]) -> str:
    lines = ["\npeer: the same echo(value: int) over MCP, one server process each,"
             " ratio to FastMCP as shipped under uvicorn",
             f"  {'config':26} {'req/s':>8} {'ratio':>6} {'p50':>7} {'p99':>7}"
             f" {'app µs':>7} {'db µs':>6}  checks",]
    for name, c in peer["configs"].items():
        cpu = c["cpu_us"]
        db = f"{cpu['db']:6.0f}" if "db" in cpu and c["keyed"] else f"{'':6}"
        lines.append(f"  {name:26} {c['rps']:8.1f} {c['ratio_to_fastmcp']:6.2f}"
                     f" {c['p50_ms']:7.2f} {c['p99_ms']:7.2f} {cpu.get('app', 0):7.0f} {db}"
                     f"  {', '.join(c['checks'])}")
    lines.append("  gunicorn serves FastMCP with one uvicorn worker (it is ASGI only), the app"
                 " with one sync worker (WSGI)")
    lines.append(f"  same output validation per pair (*-noout: none on either side); same"
                 f" authentication (anonymous) for the read-only tool; {peer['fairness']}")
    return "\n".join(lines)


def markdown(peer: dict[str, Any]) -> str:
    out = ["| configuration | req/s (median) | ratio to FastMCP | p50 ms | p99 ms |"
           " server CPU per call | checks |", "|---|---:|---:|---:|---:|---:|---|"]
    for name, c in peer["configs"].items():
        cpu = c["cpu_us"]
        db = f" + {cpu['db'] / 1000:.1f} ms in PostgreSQL" if c["keyed"] and "db" in cpu else ""
        out.append(f"| {name}: {c['what']} | {c['rps']:.0f} | {c['ratio_to_fastmcp']:.2f} |"
                   f" {c['p50_ms']:.2f} | {c['p99_ms']:.2f} | {cpu.get('app', 0) / 1000:.1f} ms{db}"
                   f" | {', '.join(c['checks'])} |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--out", type=Path, default=RESULTS / "peer.json")
    parser.add_argument("--markdown", type=Path, metavar="PEER_JSON",
                        help="print an earlier run's table as Markdown, and stop")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        log("bench.peer: the keyed tool runs on PostgreSQL: set DATABASE_URL")
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ.setdefault("CONN_MAX_AGE", "600")  # persistent connections, as run.py's servers
    os.environ.setdefault("DJANGO_DEBUG", "0")
    os.environ.setdefault("GT_VAR_DIR", str(RESULTS / "work" / "var"))
    RESULTS.mkdir(exist_ok=True)
    token = subprocess.run([PYTHON, "-m", "bench.prepare"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.strip().splitlines()[-1]
    import django

    django.setup()
    peer = measure(args, token)
    peer["load_average"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(peer, indent=2))
    print(table(peer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
