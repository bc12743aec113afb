"""``python -m bench.peer``: the peer table of ``make bench``: FastMCP 4 and django-mcpz
beside the app.

The same ``echo(value: int)`` tool, over MCP (one stateless POST per ``tools/call``,
JSON responses, protocol 2025-11-25), served by one server process each:

* under **uvicorn**, with its event loop uvloop and its HTTP parser httptools (as
  ``uvicorn[standard]`` installs it): FastMCP (``bench.fastmcp_app``), django-mcpz
  through Django's ASGI handler (``bench.mcpz.asgi``) and the app's ASGI entry
  (``bench.asgi``: Django's ASGI handler in ``guarded_tools.asgi.with_cancellation``);
* under **gunicorn**: FastMCP with one uvicorn worker (``uvicorn_worker.UvicornWorker``,
  which picks uvloop and httptools too: FastMCP is ASGI only), django-mcpz and the app
  with one sync worker each (WSGI, ``bench.mcpz.wsgi`` and ``bench.wsgi``).

Calls, on each server: FastMCP 4.1.6 as shipped, django-mcpz 1.2.0 as documented, the
app's read-only ``echo`` (anonymous) and its keyed ``echo_keyed`` with a fresh key per call
and a DRF token on PostgreSQL (neither peer keeps anything: that row is the app's own
cost). Beside the keyed call, on the same server, its floor F-K
(``bench.floor.keyed_mcp_floor`` at ``/agent/mcp/floor/``, which the ASGI entry serves as
MCP): the same token, the same statements, the same answer, nothing of the guard; beside
the read-only call, its floor F-M (``bench.floor.read_mcp_floor`` at
``/agent/mcp/floor/read/``, served the same way): the same authentication, strict parse,
input and output validation and answer bytes, nothing of the guard. The report prints
keyed/F-K (req/s and app CPU), F-K/FastMCP, read/F-M, F-M/django-mcpz under gunicorn (req/s
and app CPU: whether the read call's peer target lies below its floor), and
``FLOOR_TARGETS`` judged.
``SIDES`` says what each does and does not do, and the report prints it.

wrk drives them from its own process on loopback, in rounds whose order rotates over every
(server, call) pair; ``bench/mcp.lua`` checks every response (status, JSON-RPC result, the
id of a request awaiting its answer, the echoed value in ``structuredContent`` and in the
text, and for a keyed call its own key, not replayed), and after each keyed run the
operations of its keys are counted in the database. CPU per request is the server process
tree's CPU time (``/proc``) over the requests answered; PostgreSQL's backends separately.
Ratios are taken round by round (each pair measured in the same round) and their median
quoted, to FastMCP under uvicorn and to django-mcpz under gunicorn. Writes JSON to
``--out`` and prints the table, what each side does, and the targets.
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
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.cpu import CpuMeter, database_server_pid
from bench.run import PYTHON, RESULTS, ROOT, Procs, free_port, log, parse_wrk

MIDDLEWARE_NOTE = ("Django's seven middleware on both Django sides (Security, Session, Common,"
                   " Csrf, Authentication, Message, XFrameOptions: project.settings), the same"
                   " Django; FastMCP runs none")

#: server: (framework, server software, command after the executable, path of MCP,
#: the Django settings module it runs with, or None)
SERVERS: dict[str, tuple[str, str, list[str], str, str | None]] = {
    "fastmcp-uvicorn": ("fastmcp", "uvicorn", ["bench.fastmcp_app:app"], "/mcp/", None),
    "mcpz-uvicorn": ("mcpz", "uvicorn", ["bench.mcpz.asgi:application"], "/mcp/",
                     "bench.mcpz.settings"),
    "app-uvicorn": ("app", "uvicorn", ["bench.asgi:application"], "/agent/mcp/",
                    "bench.settings"),
    "fastmcp-gunicorn": ("fastmcp", "gunicorn", [
        "bench.fastmcp_app:app", "--worker-class", "uvicorn_worker.UvicornWorker"], "/mcp/",
        None),
    "mcpz-gunicorn": ("mcpz", "gunicorn", [
        "bench.mcpz.wsgi:application", "--worker-class", "sync"], "/mcp/",
        "bench.mcpz.settings"),
    "app-gunicorn": ("app", "gunicorn", [
        "bench.wsgi:application", "--worker-class", "sync"], "/agent/mcp/", "bench.settings"),
}

#: name, framework, tool, keyed (a fresh key and the DRF token)
CALLS: list[tuple[str, str, str, bool]] = [
    ("FastMCP", "fastmcp", "echo", False),
    ("django-mcpz", "mcpz", "echo", False),
    ("read", "app", "echo", False),
    ("keyed", "app", "echo_keyed", True),
    ("F-K", "app", "echo_keyed", True),
    ("F-M", "app", "echo", False),
]
#: call: its path on its server, when not the server's MCP path
PATHS: dict[str, str] = {"F-K": "/agent/mcp/floor/", "F-M": "/agent/mcp/floor/read/"}

#: What each call is, and what it does and does not do.
SIDES: dict[str, dict[str, str]] = {
    "FastMCP": {
        "what": "FastMCP 4.1.6 as shipped, `-> Echo` (structuredContent)",
        "authentication": "none: anonymous, no auth provider, no middleware",
        "validation": "arguments by pydantic from `value: int`, lax (\"7\" passes as 7);"
                      " the output is not validated against its derived schema",
        "persistence": "none: nothing kept; the function runs in a worker thread",
    },
    "django-mcpz": {
        "what": "django-mcpz 1.2.0, `MCPServer(auth=public)`, a plain synchronous Django view",
        "authentication": "none: `public` (its bearer tokens and OAuth not used); Django's"
                          " middleware runs",
        "validation": "arguments decoded by msgspec into a Struct, strict (an int, no unknown"
                      " field); the output is encoded, not validated",
        "persistence": "none: no statement, nothing kept",
    },
    "read": {
        "what": "the app's read-only `echo`, anonymous (allow_anonymous)",
        "authentication": "DRF Token and Session authentication run, anonymous allowed for a"
                          " read-only tool; Django's middleware runs",
        "validation": "arguments by JSON Schema (no unknown field, an integer); the output"
                      " measured (its JSON size), not validated against its output schema",
        "persistence": "none: no statement, no operation row",
    },
    "keyed": {
        "what": "the app's keyed `echo_keyed`, a fresh key per call, DRF token, PostgreSQL",
        "authentication": "DRF token (one SELECT); Django's middleware runs",
        "validation": "arguments by JSON Schema; the output measured, not validated against"
                      " its output schema",
        "persistence": "an operation per key in PostgreSQL, claimed and completed (two"
                       " commits), so that a retry of the key is answered from it",
    },
    "F-K": {
        "what": "the keyed call's floor: its statements and nothing of the guard"
                " (bench.floor.keyed_mcp_floor), served as the keyed call is",
        "authentication": "the same: DRF token through the site's authentication classes (one"
                          " SELECT); Django's middleware runs",
        "validation": "none: the body read with json.loads, no schema, no fingerprint",
        "persistence": "the keyed call's: its claim and its completion with the history, the"
                       " same statements; no replay remembered",
    },
    "F-M": {
        "what": "the read-only call's floor: what the anonymous `echo` must do and nothing of"
                " the guard (bench.floor.read_mcp_floor), served as the read call is",
        "authentication": "the same: the site's DRF authentication classes run, anonymous"
                          " allowed; Django's middleware runs",
        "validation": "the same checks: the body read with the size limit and parsed once by"
                      " the strict parser (no duplicate key, no NaN), the arguments by the"
                      " tool's compiled input validator; the output by its output schema"
                      " compiled once (more than the app, which does not validate it); no"
                      " registry lookup per call, no stage, no event, no budget",
        "persistence": "none: no statement, no operation row",
    },
}

#: label: the configuration every ratio in its column is taken to
REFERENCES: dict[str, str] = {"FastMCP 4.1.6": "uvicorn FastMCP",
                              "django-mcpz (gunicorn)": "gunicorn django-mcpz"}

#: The peer targets: (what, configuration, reference, the least ratio of throughput)
TARGETS: list[tuple[str, str, str, float]] = [
    ("read-only call under gunicorn ≥ 1.0x django-mcpz under gunicorn", "gunicorn read",
     "gunicorn django-mcpz", 1.0),
    ("read-only call under uvicorn ≥ 1.5x FastMCP 4.1.6", "uvicorn read", "uvicorn FastMCP",
     1.5),
    ("keyed fresh call, PostgreSQL, under uvicorn ≥ 0.6x FastMCP 4.1.6", "uvicorn keyed",
     "uvicorn FastMCP", 0.6),
]

#: The keyed and read-only calls against their floors, as ``bench/run.py``'s
#: ``FLOOR_TARGETS``: (label,
#: configuration, its floor, what is compared, the limit); "cpu": the app server's CPU per
#: call at most limit times the floor's. The median of the ratios taken round by round.
FLOOR_TARGETS: list[tuple[str, str, str, str, float]] = [
    ("keyed's app CPU ≤ 1.10x F-K's, under uvicorn", "uvicorn keyed", "uvicorn F-K", "cpu",
     1.10),
    ("read-only call's app CPU ≤ 1.10x F-M's, under gunicorn", "gunicorn read", "gunicorn F-M",
     "cpu", 1.10),
]

PACKAGES = ["fastmcp", "django-mcpz", "mcp", "msgspec", "pydantic", "Django",
            "djangorestframework", "uvicorn", "uvloop", "httptools", "gunicorn"]


def configs() -> list[tuple[str, str, str, str, bool]]:
    """(name, what, server, tool, keyed) for every call on both server programs."""
    out = []
    for software in ("uvicorn", "gunicorn"):
        for name, framework, tool, keyed in CALLS:
            out.append((f"{software} {name}", SIDES[name]["what"], f"{framework}-{software}",
                        tool, keyed))
    return out


def server_env(server: str, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the server's own Django settings (none for FastMCP)."""
    settings = SERVERS[server][4]
    out = dict(env)
    if settings is None:
        out.pop("DJANGO_SETTINGS_MODULE", None)
    else:
        out["DJANGO_SETTINGS_MODULE"] = settings
    return out


def packages() -> dict[str, str]:
    """The versions of the packages the table compares, as installed here."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "missing"
    return found


def command(server: str, port: int) -> list[str]:
    _, software, args, _, _ = SERVERS[server]
    exe = shutil.which(software, path=str(Path(PYTHON).parent)) or software
    if software == "uvicorn":
        # By name, not "auto": a bench without them fails instead of measuring h11 and
        # asyncio's loop (gunicorn's uvicorn worker picks them when they are installed).
        return [exe, *args, "--host", "127.0.0.1", "--port", str(port), "--log-level",
                "warning", "--no-access-log", "--loop", "uvloop", "--http", "httptools"]
    return [exe, *args, "--workers", "1", "--bind", f"127.0.0.1:{port}", "--log-level",
            "warning", "--timeout", "60"]


def path_of(name: str, server: str) -> str:
    """The path the configuration ``name`` ("uvicorn F-K") is served at on ``server``."""
    return PATHS.get(name.split(" ", 1)[1], SERVERS[server][3])


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
    """"ok" when every response answered was a correct answer to its own request
    (``bench/mcp.lua``'s check) and, for a keyed run, every request made is a succeeded
    operation; otherwise what is wrong."""
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
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    urls, meters = {}, {}
    db_pid = database_server_pid(os.environ["DATABASE_URL"])
    all_configs = configs()
    runs: dict[str, list[dict[str, Any]]] = {c[0]: [] for c in all_configs}
    try:
        for server, (framework, *_) in SERVERS.items():
            port = free_port()
            proc = procs.start(command(server, port), server_env(server, env),
                               RESULTS / f"peer-{server}.log")
            wait_port(port, proc)
            urls[server] = f"http://127.0.0.1:{port}"
            meters[server] = CpuMeter({"app": proc.pid,
                                       "db": db_pid if framework == "app" else None})
        for name, _, server, tool, keyed in all_configs:  # warm-up
            run_wrk(urls[server] + path_of(name, server), tool,
                    f"w{uuid.uuid4().hex[:8]}" if keyed else "", token if keyed else "",
                    args.warmup, args)
        for round_no in range(args.rounds):
            shift = round_no % len(all_configs)
            for name, _, server, tool, keyed in all_configs[shift:] + all_configs[:shift]:
                prefix = f"p{uuid.uuid4().hex[:10]}" if keyed else ""
                before = meters[server].snapshot()
                result = run_wrk(urls[server] + path_of(name, server), tool, prefix,
                                 token if keyed else "",
                                 args.duration, args)
                result["cpu_us"] = CpuMeter.per_request(before, meters[server].snapshot(),
                                                        result["requests"])
                states = operations(prefix, result["made"]) if keyed else None
                result["operations"] = states
                result["check"] = check(result, states)
                result["round"] = round_no
                runs[name].append(result)
                log(f"[peer] round {round_no + 1}/{args.rounds} {name:22} {result['rps']:7.1f}"
                    f" req/s p50 {result.get('p50_ms', 0):6.2f} p99 {result.get('p99_ms', 0):6.2f}"
                    " ms " + " ".join(f"{k} {v:.0f}" for k, v in result["cpu_us"].items())
                    + f" µs; check: {result['check']}")
    finally:
        procs.stop_all()
    return summarize(all_configs, runs)


def per_round(runs: dict[str, list[dict[str, Any]]], num: str, den: str,
              value: Callable[[dict[str, Any]], float]) -> dict[str, Any]:
    """``value(run)`` of ``num`` over that of ``den``, round by round (the lists are in
    round order, one run per round each), and the median of those ratios."""
    rounds = [value(n) / value(d) for n, d in zip(runs[num], runs[den], strict=True)
              if value(d)]
    if not rounds:
        return {"median": None, "rounds": []}
    return {"median": round(statistics.median(rounds), 3), "rounds": [round(x, 3) for x in rounds]}


def rps(run: dict[str, Any]) -> float:
    return float(run["rps"])


def app_cpu(run: dict[str, Any]) -> float:
    return float(run.get("cpu_us", {}).get("app", 0.0))


def summarize(all_configs: list[tuple[str, str, str, str, bool]],
              runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians per configuration, its ratios to each reference, and the targets judged."""
    summary: dict[str, Any] = {}
    for name, what, server, tool, keyed in all_configs:
        rs = runs[name]
        call = name.split(" ", 1)[1]
        summary[name] = {
            "what": what, "server": server, "tool": tool, "keyed": keyed, "call": call,
            "runs": rs,
            "rps": round(statistics.median(r["rps"] for r in rs), 1),
            "rps_min": min(r["rps"] for r in rs), "rps_max": max(r["rps"] for r in rs),
            "p50_ms": round(statistics.median(r["p50_ms"] for r in rs), 2),
            "p99_ms": round(statistics.median(r["p99_ms"] for r in rs), 2),
            "cpu_us": {part: round(statistics.median(r["cpu_us"][part] for r in rs), 1)
                       for part in rs[0].get("cpu_us", {})},
            "checks": sorted({r["check"] for r in rs}),
            "ratios": {label: per_round(runs, name, ref, rps)
                       for label, ref in REFERENCES.items()},
            # app CPU per call over django-mcpz's under gunicorn (a sync worker, no thread)
            "cpu_ratio": per_round(runs, name, REFERENCES["django-mcpz (gunicorn)"], app_cpu),
        }
    targets = []
    for label, name, ref, least in TARGETS:
        ratio = per_round(runs, name, ref, rps)
        judged = all(c == "ok" for c in summary[name]["checks"] + summary[ref]["checks"])
        met = ratio["median"] is not None and ratio["median"] >= least and judged
        targets.append({"target": label, "config": name, "reference": ref, "least": least,
                        **ratio, "met": met,
                        "verdict": "met" if met else ("MISSED" if judged else
                                                      "not judged: a check failed")})
    return {"configs": summary, "references": REFERENCES, "targets": targets,
            "floor": floor(runs, summary), "floor_targets": floor_targets(runs, summary),
            "sides": SIDES, "fairness": MIDDLEWARE_NOTE}


def floor(runs: dict[str, list[dict[str, Any]]], summary: dict[str, Any]) -> dict[str, Any]:
    """Per server program measured, round by round: the keyed call over its floor F-K
    (req/s and app CPU) and F-K over FastMCP under uvicorn (req/s); the read-only call over
    its floor F-M (req/s and app CPU) and F-M over django-mcpz under gunicorn (req/s and app
    CPU); with the checks of the calls and floors compared."""
    out: dict[str, Any] = {}
    mcpz = REFERENCES["django-mcpz (gunicorn)"]
    for software in ("uvicorn", "gunicorn"):
        keyed, fk = f"{software} keyed", f"{software} F-K"
        read, fm = f"{software} read", f"{software} F-M"
        entry: dict[str, Any] = {}
        checks: set[str] = set()
        if keyed in runs and fk in runs:
            entry.update({
                "keyed/F-K rps": per_round(runs, keyed, fk, rps),
                "keyed/F-K app CPU": per_round(runs, keyed, fk, app_cpu),
                "F-K/FastMCP rps": per_round(runs, fk, REFERENCES["FastMCP 4.1.6"], rps),
            })
            checks.update(summary[keyed]["checks"] + summary[fk]["checks"])
        if read in runs and fm in runs and mcpz in runs:
            entry.update({
                "read/F-M rps": per_round(runs, read, fm, rps),
                "read/F-M app CPU": per_round(runs, read, fm, app_cpu),
                "F-M/django-mcpz rps": per_round(runs, fm, mcpz, rps),
                "F-M/django-mcpz app CPU": per_round(runs, fm, mcpz, app_cpu),
            })
            checks.update(summary[read]["checks"] + summary[fm]["checks"])
        if entry:
            out[software] = {**entry, "checks": sorted(checks)}
    return out


def floor_targets(runs: dict[str, list[dict[str, Any]]],
                  summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Each of ``FLOOR_TARGETS`` measured, judged as ``bench/run.py`` judges its own: the
    median of the per-round ratios within the limit, and every answer of both checked."""
    out = []
    for label, name, floor_name, measure, limit in FLOOR_TARGETS:
        if name not in runs or floor_name not in runs:
            continue
        ratio = per_round(runs, name, floor_name, app_cpu if measure == "cpu" else rps)
        judged = all(c == "ok" for c in summary[name]["checks"] + summary[floor_name]["checks"])
        within = ratio["median"] is not None and (
            ratio["median"] <= limit if measure == "cpu" else ratio["median"] >= limit)
        out.append({"target": label, "config": name, "floor": floor_name, "measure": measure,
                    "limit": limit, **ratio, "met": within and judged,
                    "verdict": "met" if within and judged else (
                        "MISSED" if judged else "not judged: a check failed")})
    return out


def _rounds(entry: dict[str, Any]) -> str:
    return ", ".join(f"{x:.2f}" for x in entry["rounds"])


def floor_lines(peer: dict[str, Any]) -> list[str]:
    """The keyed and read-only calls against their floors, and where the keyed and the
    read-only peer targets lie against them."""
    lines = []
    for software, f in peer.get("floor", {}).items():
        if "keyed/F-K rps" in f:
            lines.append(f"    {software}: keyed/F-K req/s {_ratio(f['keyed/F-K rps'])}, app CPU"
                         f" {_ratio(f['keyed/F-K app CPU'])}; F-K/FastMCP 4.1.6 (uvicorn) req/s"
                         f" {_ratio(f['F-K/FastMCP rps'])} (per round: "
                         f"{_rounds(f['F-K/FastMCP rps'])})")
        if "read/F-M rps" in f:
            lines.append(f"    {software}: read/F-M req/s {_ratio(f['read/F-M rps'])}, app CPU"
                         f" {_ratio(f['read/F-M app CPU'])}; F-M/django-mcpz (gunicorn) req/s"
                         f" {_ratio(f['F-M/django-mcpz rps'])} (per round: "
                         f"{_rounds(f['F-M/django-mcpz rps'])}), app CPU"
                         f" {_ratio(f['F-M/django-mcpz app CPU'])} (per round: "
                         f"{_rounds(f['F-M/django-mcpz app CPU'])})")
    for t in peer.get("floor_targets", []):
        lines.append(f"    {t['target']}: {_ratio(t)} (per round: {_rounds(t)}): {t['verdict']}")
    # (peer target's configuration, the floor's server, its ratio, the floor, the reference)
    against = [("uvicorn keyed", "uvicorn", "F-K/FastMCP rps", "F-K", "FastMCP"),
               ("gunicorn read", "gunicorn", "F-M/django-mcpz rps", "F-M", "django-mcpz")]
    for t in peer["targets"]:
        for config, software, ratio, name, reference in against:
            entry = peer.get("floor", {}).get(software, {}).get(ratio)
            if t["config"] != config or entry is None or entry["median"] is None:
                continue
            ceiling = entry["median"]
            where = "below" if ceiling < t["least"] else "at or above"
            lines.append(f"    the peer target's {t['least']:.2f}x {reference} against the floor:"
                         f" {name} serves {ceiling:.2f}x under {software}, {where} it")
    return lines


def _ratio(entry: dict[str, Any]) -> str:
    return "-" if entry["median"] is None else f"{entry['median']:.2f}"


def table(peer: dict[str, Any]) -> str:
    refs = list(peer["references"])
    versions = peer.get("packages", {})
    lines = ["\npeer: the same echo(value: int) over MCP, one server process each"
             + (" (" + ", ".join(f"{k} {v}" for k, v in versions.items()) + ")"
                if versions else ""),
             "  ratios of throughput, round by round (median): to " + " and to ".join(
                 f"{label} ({ref})" for label, ref in peer["references"].items()),
             f"  {'config':22} {'req/s':>8} {'app µs':>7} {'db µs':>6}"
             + "".join(f" {'x ' + label:>24}" for label in refs)
             + f" {'CPU x mcpz':>10} {'p50':>7} {'p99':>7}  checks"]
    for name, c in peer["configs"].items():
        cpu = c["cpu_us"]
        db = f"{cpu['db']:6.0f}" if "db" in cpu and c["keyed"] else f"{'':6}"
        lines.append(f"  {name:22} {c['rps']:8.1f} {cpu.get('app', 0):7.0f} {db}"
                     + "".join(f" {_ratio(c['ratios'][label]):>24}" for label in refs)
                     + f" {_ratio(c['cpu_ratio']):>10}"
                     f" {c['p50_ms']:7.2f} {c['p99_ms']:7.2f}  {', '.join(c['checks'])}")
    lines.append("  gunicorn serves FastMCP with one uvicorn worker (it is ASGI only), django-mcpz"
                 " and the app with one sync worker (WSGI)")
    lines.append(f"  {peer['fairness']}")
    lines.append("  what each side does and does not do:")
    for call, side in peer["sides"].items():
        lines.append(f"    {call}: {side['what']}")
        for aspect in ("authentication", "validation", "persistence"):
            lines.append(f"      {aspect}: {side[aspect]}")
    lines.append("  targets (same run):")
    for t in peer["targets"]:
        rounds = ", ".join(f"{x:.2f}" for x in t["rounds"])
        lines.append(f"    {t['target']}: {_ratio(t)} (per round: {rounds}): {t['verdict']}")
    floor_part = floor_lines(peer)
    if floor_part:
        lines.append("  the keyed and read-only calls against their floors F-K and F-M (same run,"
                     " median of the per-round ratios):")
        lines.extend(floor_part)
    return "\n".join(lines)


def markdown(peer: dict[str, Any]) -> str:
    refs = list(peer["references"])
    out = ["| configuration | req/s (median) | app CPU per call | "
           + " | ".join(f"ratio to {label}" for label in refs)
           + " | app CPU to django-mcpz (gunicorn) | p50 ms | p99 ms | checks |",
           "|---|---:|---:|" + "---:|" * len(refs) + "---:|---:|---:|---|"]
    for name, c in peer["configs"].items():
        cpu = c["cpu_us"]
        db = f" + {cpu['db']:,.0f} µs in PostgreSQL" if c["keyed"] and "db" in cpu else ""
        out.append(f"| {name}: {c['what']} | {c['rps']:,.0f} | {cpu.get('app', 0):,.0f} µs{db} | "
                   + " | ".join(_ratio(c["ratios"][label]) for label in refs)
                   + f" | {_ratio(c['cpu_ratio'])} | {c['p50_ms']:.2f} | {c['p99_ms']:.2f} |"
                   f" {', '.join(c['checks'])} |")
    out += ["", "| side | authentication | validation | persistence |", "|---|---|---|---|"]
    out += [f"| {call} | {s['authentication']} | {s['validation']} | {s['persistence']} |"
            for call, s in peer["sides"].items()]
    out += ["", "| target | ratio (per round) | verdict |", "|---|---:|---|"]
    out += [f"| {t['target']} | **{_ratio(t)}** ("
            + ", ".join(f"{x:.2f}" for x in t["rounds"]) + f") | {t['verdict']} |"
            for t in peer["targets"]]
    keyed = {software: f for software, f in peer.get("floor", {}).items()
             if "keyed/F-K rps" in f}
    if keyed:
        out += ["", "| server | keyed/F-K req/s | keyed/F-K app CPU | F-K/FastMCP 4.1.6 req/s |",
                "|---|---:|---:|---:|"]
        out += [f"| {software} | {_ratio(f['keyed/F-K rps'])} | {_ratio(f['keyed/F-K app CPU'])}"
                f" | {_ratio(f['F-K/FastMCP rps'])} |" for software, f in keyed.items()]
    read = {software: f for software, f in peer.get("floor", {}).items()
            if "read/F-M rps" in f}
    if read:
        out += ["", "| server | read/F-M req/s | read/F-M app CPU | F-M/django-mcpz (gunicorn)"
                " req/s | F-M/django-mcpz (gunicorn) app CPU |", "|---|---:|---:|---:|---:|"]
        out += [f"| {software} | {_ratio(f['read/F-M rps'])} | {_ratio(f['read/F-M app CPU'])}"
                f" | {_ratio(f['F-M/django-mcpz rps'])} | {_ratio(f['F-M/django-mcpz app CPU'])} |"
                for software, f in read.items()]
    if peer.get("floor_targets"):
        out += ["", "| target against the floor | ratio (per round) | verdict |", "|---|---:|---|"]
        out += [f"| {t['target']} | **{_ratio(t)}** ("
                + ", ".join(f"{x:.2f}" for x in t["rounds"]) + f") | {t['verdict']} |"
                for t in peer["floor_targets"]]
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
    load_start = [round(x, 2) for x in os.getloadavg()]
    peer = measure(args, token)
    peer.update(packages=packages(), rounds=args.rounds, duration_s=args.duration,
                load_average_start=load_start,
                load_average=[round(x, 2) for x in os.getloadavg()])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(peer, indent=2))
    print(table(peer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
