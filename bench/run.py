"""``python bench/run.py [--quick]``: the benchmark suite behind ``make bench``.

For each database (PostgreSQL from ``DATABASE_URL``, and SQLite in WAL mode) it:

1. migrates a fresh database and creates the bench user (``bench.prepare``);
2. serves ``bench.wsgi`` with gunicorn, 2 sync workers on 127.0.0.1, persistent
   database connections (``CONN_MAX_AGE``), and a 5 ms stub service for the
   realistic handler (``bench.stub``);
3. drives every configuration with ``wrk`` (a separate process; ``bench/post.lua``
   sends a fresh key per request, or the same one for replays), in several rounds
   whose order rotates, so that every configuration is measured beside the others
   throughout the run; medians are quoted, and ratios come from the same run;
4. runs the in-process figures (``bench.micro``), the statement counts
   (``bench.statements``), recovery (``bench.recovery``) and the admin at scale
   (``bench.admin_scale``).

It prints a table and the ratios, writes ``bench-results/results.json`` and the chart
``docs/performance.png``. Everything listens on 127.0.0.1 only, and every load run is
bounded in time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench-results"
CHART = ROOT / "docs" / "performance.png"
PYTHON = sys.executable
sys.path.insert(0, str(ROOT))  # run as a script: bench/ is on the path, the project is not

from bench.cpu import CpuMeter, database_server_pid  # noqa: E402

# name, what, path, key mode
CONFIGS: list[tuple[str, str, str, str]] = [
    ("A", "plain DRF view, one INSERT, no guard", "/plain/", "fresh"),
    ("F", "the floor: B's statements (lock and read, INSERT, history, COMMIT), no guard",
     "/floor/", "fresh"),
    ("B", "guarded tool, fresh key per call", "/agent/tools/bench_insert/", "fresh"),
    ("C", "guarded replay (same key)", "/agent/tools/bench_insert/", "replay"),
    ("F-C", "C's floor: A's answer replayed from memory, no guard", "/floor-replay/", "replay"),
    ("D", "guarded + validation, permission, journal, verify",
     "/agent/tools/bench_insert_full/", "fresh"),
    ("F-D", "D's floor: F with D's permission query and journal entry, no guard",
     "/floor-full/", "fresh"),
    ("E", "django-idempotency-key on A, database cache (reference)",
     "/idempotency-key/", "fresh"),
    ("E-mem", "django-idempotency-key on A, per-process memory (reference)",
     "/idempotency-key-mem/", "fresh"),
    ("R-plain", "5 ms remote call + INSERT, plain view", "/plain-remote/", "fresh"),
    ("R-guarded", "5 ms remote call + INSERT, guarded tool",
     "/agent/tools/bench_remote/", "fresh"),
    ("F-R", "R-guarded's floor: its claim and completion around the handler, no guard",
     "/floor-remote/", "fresh"),
]
#: Configurations whose statements are PostgreSQL's only (left out on SQLite).
POSTGRESQL_ONLY = {"F-R"}
RATIOS = [("F/A", "F", "A"), ("B/A", "B", "A"), ("F-C/A", "F-C", "A"), ("C/A", "C", "A"),
          ("F-D/A", "F-D", "A"), ("D/A", "D", "A"), ("E/A", "E", "A"), ("E-mem/A", "E-mem", "A"),
          ("F-R/R-plain", "F-R", "R-plain"), ("R-guarded/R-plain", "R-guarded", "R-plain")]
#: The targets, restated against the floors (what the statements alone cost, bench/floor.py):
#: the guard's own cost beyond each floor is what must stay small. (label, configuration,
#: its floor, what is compared, the limit): "cpu" is the app server's CPU per request, at
#: most limit times the floor's; "rps" is requests per second, at least limit times the
#: floor's. Each is the median of the ratios taken round by round (the two measured in the
#: same round); judged on PostgreSQL, where F-R exists and the targets were set. The keyed
#: MCP call's, against F-K, is the peer table's (``bench.peer.FLOOR_TARGETS``).
FLOOR_TARGETS: list[tuple[str, str, str, str, float]] = [
    ("B's app CPU ≤ 1.10x F's", "B", "F", "cpu", 1.10),
    ("D's app CPU ≤ 1.05x F-D's", "D", "F-D", "cpu", 1.05),
    ("C ≥ 0.97x F-C's throughput", "C", "F-C", "rps", 0.97),
    ("R-guarded ≥ 0.97x F-R's throughput", "R-guarded", "F-R", "rps", 0.97),
]

#: ``--ablation``: B, C and D again on servers with some of the store's speed-ups off
#: (``BENCH_ABLATE``, see bench/settings.py), each beside A and the shipped B, C, D in the
#: same rounds. name, the configuration it repeats, the switches, the A it is divided by.
#: "ssb" is psycopg's server-side binding with its automatic preparation, which changes
#: A's statements too, so A is measured there as well. C-public runs the same code as C
#: (a cached replay sends no statement): its gain is the run's noise.
ABLATION: list[tuple[str, str, str, str]] = [
    ("B-nomulti", "B", "multi", "A"),
    ("D-nomulti", "D", "multi", "A"),
    ("D-noperm", "D", "perm", "A"),
    ("B-public", "B", "perm,multi", "A"),
    ("C-public", "C", "perm,multi", "A"),
    ("D-public", "D", "perm,multi", "A"),
    ("B-orm", "B", "orm", "A"),
    ("D-orm", "D", "orm", "A"),
    ("A-ssb", "A", "perm,multi,ssb", "A"),
    ("B-public-ssb", "B", "perm,multi,ssb", "A-ssb"),
    ("D-public-ssb", "D", "perm,multi,ssb", "A-ssb"),
]
#: What each configuration's server turns off (the shipped server: nothing).
SWITCHES: dict[str, str] = {}
#: Switches that change anything on SQLite (the others are PostgreSQL's only).
SQLITE_SWITCHES = {"perm"}


def use_ablation() -> None:
    """Replace the configurations with A, B, C, D and the ablation's variants."""
    base = {c[0]: c for c in CONFIGS}
    CONFIGS[:] = [base[n] for n in ("A", "B", "C", "D")]
    RATIOS[:] = [r for r in RATIOS if r[0] in ("B/A", "C/A", "D/A")]
    for name, of, switches, divisor in ABLATION:
        _, what, path, mode = base[of]
        CONFIGS.append((name, f"{what}; off: {switches}", path, mode))
        SWITCHES[name] = switches
        RATIOS.append((f"{name}/{divisor}", name, divisor))


def configs_for(db: str) -> list[tuple[str, str, str, str]]:
    """The configurations measured on ``db``; on SQLite, only variants that differ there."""
    if db == "postgresql":
        return list(CONFIGS)
    return [c for c in CONFIGS if c[0] not in POSTGRESQL_ONLY and (
        c[0] not in SWITCHES or set(SWITCHES[c[0]].split(",")) <= SQLITE_SWITCHES)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Procs:
    """Child processes this run started; all stopped at the end, by their own pids."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, args: list[str], env: dict[str, str], log_path: Path,
              cwd: Path = ROOT) -> subprocess.Popen[bytes]:
        out = log_path.open("wb")
        proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.procs):
            self.stop(proc)


class Laps:
    """Seconds spent per phase: ``lap("http")`` closes the phase that began at the last lap."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.mark = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(now - self.mark, 1)
        self.mark = now


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout} s")
        time.sleep(0.2)


def helper(module: str, env: dict[str, str], *args: str, timeout: float = 900) -> Any:
    """Run ``python -m bench.<module>`` and return the JSON it prints last."""
    result = subprocess.run([PYTHON, "-m", f"bench.{module}", *args], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"bench.{module} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- wrk ---------------------------------------------------------------------------------
_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text.strip())
    if not match:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match.group(1)) * _UNIT[match.group(2)]


def parse_wrk(output: str) -> dict[str, Any]:
    """Requests/s, latency percentiles, errors, from ``wrk --latency`` output."""
    result: dict[str, Any] = {}
    rps = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if not rps:
        raise ValueError(f"no Requests/sec in wrk output:\n{output}")
    result["rps"] = float(rps.group(1))
    for pct in ("50", "75", "90", "99"):
        match = re.search(rf"^\s+{pct}%\s+(\S+)", output, re.M)
        if match:
            result[f"p{pct}_ms"] = round(_ms(match.group(1)), 3)
    total = re.search(r"(\d+) requests in", output)
    result["requests"] = int(total.group(1)) if total else 0
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    result["non_2xx"] = int(non2xx.group(1)) if non2xx else 0
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                     output)
    result["socket_errors"] = sum(int(x) for x in sock.groups()) if sock else 0
    return result


def run_wrk(base: str, path: str, mode: str, prefix: str, token: str, seconds: float,
            threads: int, connections: int) -> dict[str, Any]:
    duration = f"{max(1, round(seconds))}s"  # wrk takes whole seconds
    args = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}", "--latency",
            "--timeout", "10s", "-s", str(ROOT / "bench" / "post.lua"), base + path,
            "--", mode, prefix, token]
    result = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 60,
                            check=True)
    return parse_wrk(result.stdout)


def peer_table(env: dict[str, str], args: argparse.Namespace) -> Any:
    """``bench.peer``'s figures (it prints its own table as it ends), same rounds and length."""
    out = RESULTS / "peer.json"
    subprocess.run([PYTHON, "-m", "bench.peer", "--rounds", str(args.rounds), "--duration",
                    str(args.duration), "--warmup", str(args.warmup), "--out", str(out)],
                   env=env, cwd=ROOT, check=True, timeout=3600)
    return json.loads(out.read_text())


# -- one database ------------------------------------------------------------------------
def bench_http(db: str, env: dict[str, str], token: str, args: argparse.Namespace,
               procs: Procs, stub_url: str) -> dict[str, Any]:
    configs = configs_for(db)
    gunicorn = shutil.which("gunicorn", path=str(Path(PYTHON).parent)) or "gunicorn"
    bases: dict[str, str] = {}  # one server per set of switches; "" is the shipped code
    servers = []
    for switches in dict.fromkeys(SWITCHES.get(c[0], "") for c in configs):
        port = free_port()
        bases[switches] = f"http://127.0.0.1:{port}"
        servers.append(procs.start(
            [gunicorn, "bench.wsgi:application", "--workers", "2", "--worker-class", "sync",
             "--bind", f"127.0.0.1:{port}", "--log-level", "warning", "--timeout", "60"],
            {**env, "BENCH_STUB_URL": stub_url, "BENCH_ABLATE": switches},
            RESULTS / f"gunicorn-{db}{'-' + switches if switches else ''}.log",
        ))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in configs}
    # Whose CPU each request costs: the app server's, the database server's (PostgreSQL
    # when it runs here; SQLite works inside the app's processes), the whole machine's.
    db_pid = database_server_pid(env["DATABASE_URL"]) if db == "postgresql" else None
    meters = {switches: CpuMeter({"app": proc.pid, "db": db_pid})
              for switches, proc in zip(bases, servers, strict=True)}
    try:
        for url in bases.values():
            wait_http(url + "/ping/")
        replay_key = f"replay-{db}-{uuid.uuid4().hex[:8]}"
        log(f"[{db}] warm-up: {len(configs)} configurations, {args.warmup} s each")
        for name, _, path, mode in configs:  # the replay key is created here
            key = replay_key if mode == "replay" else f"w-{db}-{name}-{uuid.uuid4().hex[:6]}"
            base = bases[SWITCHES.get(name, "")]
            run_wrk(base, path, mode, key, token, args.warmup, args.threads, args.connections)
        for round_no in range(args.rounds):
            shift = round_no % len(configs)
            order = configs[shift:] + configs[:shift]  # rotate: no configuration always first
            for name, _, path, mode in order:
                key = replay_key if mode == "replay" else (
                    f"{db}-{name}-{round_no}-{uuid.uuid4().hex[:6]}")
                base = bases[SWITCHES.get(name, "")]
                meter = meters[SWITCHES.get(name, "")]
                before = meter.snapshot()
                result = run_wrk(base, path, mode, key, token, args.duration, args.threads,
                                 args.connections)
                result["cpu_us"] = CpuMeter.per_request(before, meter.snapshot(),
                                                        result["requests"])
                result["round"] = round_no
                runs[name].append(result)
                log(f"[{db}] round {round_no + 1}/{args.rounds} {name:10} "
                    f"{result['rps']:8.1f} req/s  p50 {result.get('p50_ms', 0):6.2f} ms  "
                    f"p99 {result.get('p99_ms', 0):7.2f} ms"
                    + "".join(f"  {k} {v:.0f} µs" for k, v in result["cpu_us"].items())
                    + (f"  NON-2XX {result['non_2xx']}" if result["non_2xx"] else ""))
    finally:
        for proc in servers:
            procs.stop(proc)
    summary: dict[str, Any] = {}
    for name, what, path, mode in configs:
        rs = runs[name]
        summary[name] = {
            "what": what, "path": path, "mode": mode, "runs": rs,
            "rps": round(statistics.median(r["rps"] for r in rs), 1),
            "rps_min": min(r["rps"] for r in rs), "rps_max": max(r["rps"] for r in rs),
            "p50_ms": round(statistics.median(r["p50_ms"] for r in rs), 2),
            "p99_ms": round(statistics.median(r["p99_ms"] for r in rs), 2),
            "errors": sum(r["non_2xx"] + r["socket_errors"] for r in rs),
            "cpu_us": {part: round(statistics.median(r["cpu_us"][part] for r in rs), 1)
                       for part in rs[0].get("cpu_us", {})},
        }
    ratios = {}
    for label, num, den in RATIOS:
        if num not in runs or den not in runs:
            continue
        ratios[label] = round(summary[num]["rps"] / summary[den]["rps"], 3)
        # Per round too: the spread of a ratio says more than the spread of its parts.
        per_round = [n["rps"] / d["rps"] for n, d in zip(runs[num], runs[den], strict=True)]
        ratios[label + " (per round)"] = [round(x, 3) for x in per_round]
    return {"configs": summary, "ratios": ratios, "floor_targets": floor_targets(runs)}


def floor_targets(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each of ``FLOOR_TARGETS`` whose configuration and floor were measured: its ratio per
    round and their median, and whether the limit is met. Not met when either side had an
    error response, nor when the CPU could not be read (no ``/proc``: no figure at all)."""
    out: dict[str, Any] = {}
    for label, name, floor, measure, limit in FLOOR_TARGETS:
        if name not in runs or floor not in runs:
            continue

        def value(run: dict[str, Any], measure: str = measure) -> float:
            if measure == "cpu":
                return float(run.get("cpu_us", {}).get("app", 0.0))
            return float(run["rps"])

        rounds = [value(n) / value(f) for n, f in zip(runs[name], runs[floor], strict=True)
                  if value(f) and value(n)]
        if not rounds:
            continue
        median = statistics.median(rounds)
        errors = sum(r["non_2xx"] + r["socket_errors"] for r in runs[name] + runs[floor])
        within = median <= limit if measure == "cpu" else median >= limit
        out[label] = {"configuration": name, "floor": floor, "measure": measure,
                      "limit": limit, "bound": "≤" if measure == "cpu" else "≥",
                      "median": round(median, 3), "rounds": [round(x, 3) for x in rounds],
                      "errors": errors, "met": within and not errors}
    return out


def database_env(db: str, base_env: dict[str, str], work: Path) -> dict[str, str]:
    env = dict(base_env)
    if db == "postgresql":
        env["DATABASE_URL"] = base_env["BENCH_PG_URL"]
    else:
        env.pop("DATABASE_URL", None)
        path = work / "bench.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        env["GT_SQLITE_PATH"] = str(path)
    return env


def versions(env: dict[str, str]) -> dict[str, str]:
    def out(cmd: list[str]) -> str:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60,
                               check=False)
            return (r.stdout or r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    code = ("import django, sqlite3, gunicorn, rest_framework, jsonschema;"
            "print(f'Django {django.__version__}, DRF {rest_framework.__version__},"
            " jsonschema {jsonschema.__version__}, gunicorn {gunicorn.__version__},"
            " SQLite {sqlite3.sqlite_version}')")
    return {"python": platform.python_version(), "packages": out([PYTHON, "-c", code]),
            "wrk": out(["wrk", "--version"]), "cpus": str(os.cpu_count()),
            "platform": platform.platform()}


# -- output ------------------------------------------------------------------------------
def table(results: dict[str, Any]) -> str:
    lines = []
    for db, data in results["databases"].items():
        http = data.get("http")
        if not http:
            continue
        lines.append(f"\n{db}: req/s (median of {len(http['configs']['A']['runs'])} runs),"
                     " p50 and p99 latency (ms)")
        lines.append(f"  {'config':10} {'req/s':>9} {'min':>8} {'max':>8} {'p50':>8} {'p99':>8}"
                     "  what")
        for name, c in http["configs"].items():
            lines.append(f"  {name:10} {c['rps']:9.1f} {c['rps_min']:8.1f} {c['rps_max']:8.1f}"
                         f" {c['p50_ms']:8.2f} {c['p99_ms']:8.2f}  {c['what']}"
                         + (f"  [{c['errors']} errors]" if c["errors"] else ""))
        cpu = {name: c["cpu_us"] for name, c in http["configs"].items() if c.get("cpu_us")}
        if cpu:
            lines.append("  CPU per request (µs, median): " + "; ".join(
                f"{name} " + " ".join(f"{k} {v:.0f}" for k, v in parts.items())
                for name, parts in cpu.items()))
        lines.append("  ratios (same run):")
        for label, *_ in RATIOS:
            if label not in http["ratios"]:
                continue
            value = http["ratios"][label]
            rounds = ", ".join(f"{x:.2f}" for x in http["ratios"][label + " (per round)"])
            lines.append(f"    {label:18} {value:6.3f}  (per round: {rounds})")
        if http.get("floor_targets"):
            lines.append("  targets against the floors (same run, median of the per-round"
                         " ratios):")
            lines.extend(f"    {line}" for line in floor_target_lines(db, http["floor_targets"]))
    for db, data in results["databases"].items():
        rec = data.get("recovery")
        if rec:
            lines.append(f"\n{db}: recovery of {rec['operations']} abandoned operations")
            for n in (1, 2):
                rates = [r["per_second"] for r in rec["runs"] if r["sweepers"] == n]
                lines.append(f"  {n} sweeper{'s' if n > 1 else ' '}: "
                             f"{statistics.median(rates):8.1f} ops/s (runs: "
                             + ", ".join(f"{x:.0f}" for x in rates) + ")")
            lines.append(f"  two / one: {rec['scaling']:.2f}"
                         + ("  target ≥ 1.60: " + ("met" if rec["scaling"] >= 1.6 else "MISSED")
                            if db == "postgresql" else ""))
        adm = data.get("admin")
        if adm:
            lines.append(f"\n{db}: admin changelists at {adm['rows']['operations']:,} rows"
                         f" (and at {adm['small_rows']:,})")
            pages = [page for page in adm["large"] if page in adm["small"]]
            for page in pages:
                big, small = adm["large"][page], adm["small"][page]
                lines.append(f"  {page:13} {big['ms_median']:8.1f} ms ({small['ms_median']:.1f}"
                             f" ms)  queries {big['queries']} ({small['queries']})")
            lines.append(f"  constant number of queries: {adm['constant_queries']}")
            if db == "postgresql" and adm["rows"]["operations"] >= 1_000_000:
                worst = max(adm["large"][page]["ms_median"] for page in pages)
                lines.append("  under 250 ms at 1,000,000 rows (issue 18): "
                             + ("met" if worst < 250 else "MISSED"))
        stm = data.get("statements")
        if stm:
            lines.append(f"\n{db}: SQL statements per call (data + transaction control),"
                         " round trips")
            for tool in ("B", "D"):
                parts = [f"{k} {v['statements']} ({len(v['data'])}+{len(v['transaction_control'])})"
                         f" {v.get('round_trips', '?')} RT" for k, v in stm[tool].items()]
                lines.append(f"  {tool}: " + ", ".join(parts))
    if SWITCHES:
        lines.append("\nablation: what each speed-up buys (ratio with it / without it - 1)")
        lines.extend("  " + line for line in ablation_markdown(results))
    micro = results.get("micro")
    if micro:
        lines.append("\nin process (µs per call): "
                     f"validation {micro['validation_valid_us']} (invalid input:"
                     f" {micro['validation_invalid_us']}), five-step repair plan"
                     f" {micro['repair_plan_render_us']} (whole error body:"
                     f" {micro['repair_plan_error_body_us']})")
    return "\n".join(lines)


def floor_target_lines(db: str, targets: dict[str, Any]) -> list[str]:
    """One line per target against its floor; the verdict on PostgreSQL only."""
    lines = []
    for label, t in targets.items():
        what = "app CPU" if t["measure"] == "cpu" else "req/s"
        rounds = ", ".join(f"{x:.2f}" for x in t["rounds"])
        verdict = "met" if t["met"] else "MISSED"
        if t["errors"]:
            verdict += f" ({t['errors']} errors)"
        if db != "postgresql":
            verdict = "(judged on PostgreSQL)"
        lines.append(f"{label:36} {t['configuration']}/{t['floor']} {what}: {t['median']:.3f}"
                     f" (per round: {rounds}): {verdict}")
    return lines


def ablation_markdown(results: dict[str, Any]) -> list[str]:
    """The ablation as a Markdown table: each variant's ratio beside the shipped one's.

    The gain is what the switches buy: the shipped configuration's ratio over the
    variant's, less one (the variant is the code without them). Beside it, the same
    from the CPU each request costs the app server and PostgreSQL (medians): on a
    machine that others load, requests per second move with their load too, the CPU a
    request costs its own processes much less.
    """
    out = ["| database | variant | off | ratio | shipped | gain (per round) |"
           " app+db µs/request: variant, shipped | gain by CPU |",
           "|---|---|---|---:|---:|---|---:|---:|"]
    for db, data in results["databases"].items():
        http = data.get("http")
        if not http:
            continue
        ratios, configs = http["ratios"], http["configs"]
        cost = {name: sum(c.get("cpu_us", {}).get(p, 0.0) for p in ("app", "db"))
                for name, c in configs.items()}
        for name, of, switches, divisor in ABLATION:
            label, shipped = f"{name}/{divisor}", f"{of}/A"
            if label not in ratios or shipped not in ratios:
                continue
            rounds = ", ".join(f"{a / b - 1:+.0%}" for a, b in zip(
                ratios[shipped + " (per round)"], ratios[label + " (per round)"], strict=True))
            by_cpu = ""
            if cost[name] and cost[of]:  # the variant's cost over the shipped one's, per A
                by_cpu = f"{cost[name] / cost[divisor] / (cost[of] / cost['A']) - 1:+.1%}"
            out.append(f"| {db} | {name} | {switches} | {ratios[label]:.3f} |"
                       f" {ratios[shipped]:.3f} | **{ratios[shipped] / ratios[label] - 1:+.1%}**"
                       f" ({rounds}) | {cost[name]:.0f}, {cost[of]:.0f} | {by_cpu} |")
    return out


def markdown(results: dict[str, Any]) -> str:
    """The figures as Markdown tables, for bench/NOTEBOOK.md."""
    out: list[str] = []
    dbs = [db for db, d in results["databases"].items() if d.get("http")]
    if results["meta"].get("ablation"):
        use_ablation()
        return "\n".join(ablation_markdown(results))
    if dbs:
        out.append("| config | what | " + " | ".join(
            f"{db} req/s | p50 ms | p99 ms" for db in dbs) + " |")
        out.append("|---|---|" + "---:|---:|---:|" * len(dbs))
        for name, what, *_ in CONFIGS:
            cells = []
            for db in dbs:
                c = results["databases"][db]["http"]["configs"].get(name)
                if c is None:  # not measured on this database (POSTGRESQL_ONLY)
                    cells.append("n/a | n/a | n/a")
                    continue
                cells.append(f"{c['rps']:.0f} ({c['rps_min']:.0f} to {c['rps_max']:.0f})"
                             f" | {c['p50_ms']:.2f} | {c['p99_ms']:.2f}")
            out.append(f"| {name} | {what} | " + " | ".join(cells) + " |")
        out.append("")
        out.append("| ratio (same run) | " + " | ".join(dbs) + " |")
        out.append("|---|" + "---:|" * len(dbs))
        for label, *_ in RATIOS:
            cells = []
            for db in dbs:
                r = results["databases"][db]["http"]["ratios"]
                if label not in r:  # a configuration not measured there (POSTGRESQL_ONLY)
                    cells.append("n/a")
                    continue
                rounds = ", ".join(f"{x:.2f}" for x in r[label + " (per round)"])
                cells.append(f"**{r[label]:.2f}** ({rounds})")
            out.append(f"| {label} | " + " | ".join(cells) + " |")
        out.append("")
        out.extend(floor_targets_markdown(results, dbs))
        out.extend(cpu_markdown(results, dbs))
    return "\n".join(out)


def floor_targets_markdown(results: dict[str, Any], dbs: list[str]) -> list[str]:
    """The targets against the floors: each database's ratio per round, the verdict on
    PostgreSQL."""
    rows, measured = [], False
    for label, name, floor, measure, limit in FLOOR_TARGETS:
        cells = []
        for db in dbs:
            t = results["databases"][db]["http"].get("floor_targets", {}).get(label)
            if t is None:  # not measured there (POSTGRESQL_ONLY), or no CPU figures
                cells.append("n/a")
                continue
            measured = True
            verdict = (" met" if t["met"] else " MISSED") if db == "postgresql" else ""
            cells.append(f"**{t['median']:.3f}** ("
                         + ", ".join(f"{x:.2f}" for x in t["rounds"]) + f"){verdict}")
        what = "app CPU per request" if measure == "cpu" else "req/s"
        bound = "≤" if measure == "cpu" else "≥"
        rows.append(f"| {label} | {name}/{floor} {what} | {bound} {limit:.2f} | "
                    + " | ".join(cells) + " |")
    if not measured:
        return []
    return ["| target against the floor | ratio | limit | " + " | ".join(dbs) + " |",
            "|---|---|---:|" + "---:|" * len(dbs), *rows, ""]


def cpu_markdown(results: dict[str, Any], dbs: list[str]) -> list[str]:
    """CPU per request (medians), beside A's: where a configuration's extra cost goes."""
    out: list[str] = []
    for db in dbs:
        configs = results["databases"][db]["http"]["configs"]
        if not configs.get("A", {}).get("cpu_us"):
            continue
        parts = list(configs["A"]["cpu_us"])
        out.append(f"| {db}: CPU µs per request | " + " | ".join(parts) + " |")
        out.append("|---|" + "---:|" * len(parts))
        base = configs["A"]["cpu_us"]
        for name, *_ in CONFIGS:
            if name not in configs:  # not measured on this database (POSTGRESQL_ONLY)
                continue
            mine = configs[name].get("cpu_us") or {}
            out.append(f"| {name} | " + " | ".join(
                f"{mine.get(p, 0):.0f}" + ("" if name == "A" else
                                           f" ({mine.get(p, 0) - base[p]:+.0f})")
                for p in parts) + " |")
        out.append("")
    return out


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dbs = [db for db, d in results["databases"].items() if d.get("http")]
    names = [name for name, *_ in CONFIGS  # those measured on every database charted
             if all(name in results["databases"][db]["http"]["configs"] for db in dbs)]
    fig, ax = plt.subplots(figsize=(11, 5.2), dpi=110)
    width = 0.8 / max(len(dbs), 1)
    colors = {"postgresql": "#336791", "sqlite": "#8a9a5b"}
    for i, db in enumerate(dbs):
        configs = results["databases"][db]["http"]["configs"]
        values = [configs[n]["rps"] for n in names]
        low = [max(0.0, configs[n]["rps"] - configs[n]["rps_min"]) for n in names]
        high = [max(0.0, configs[n]["rps_max"] - configs[n]["rps"]) for n in names]
        xs = [x + (i - (len(dbs) - 1) / 2) * width for x in range(len(names))]
        bars = ax.bar(xs, values, width, yerr=[low, high], capsize=3,
                      label=f"{db} (median, min-max of rounds)", color=colors.get(db))
        for bar, value in zip(bars, values, strict=True):  # inside the bar, clear of whiskers
            ax.annotate(f"{value:.0f}", (bar.get_x() + bar.get_width() / 2, value * 0.5),
                        ha="center", va="center", fontsize=7, color="white", rotation=90)
    labels = {"A": "A\nplain", "F": "F\nfloor", "F-C": "F-C\nreplay\nfloor",
              "F-D": "F-D\nD's floor", "B": "B\nguarded", "C": "C\nreplay",
              "D": "D\nall guards",
              "E": "E\nidem-key\n(db cache)", "E-mem": "E-mem\nidem-key\n(memory)",
              "R-plain": "R plain\n5 ms call", "R-guarded": "R guarded\n5 ms call"}
    ax.set_xticks(range(len(names)), [labels.get(n, n) for n in names], fontsize=8)
    ax.set_ylabel("requests per second")
    meta = results["meta"]
    ax.set_title("guarded_tools: throughput per configuration (gunicorn, 2 sync workers,"
                 f" {meta['cpus']} cores, wrk on the same machine)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="one round of 3 s, 2,000 recovery ops, 100,000 admin rows")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--connections", type=int, default=4, help="wrk connections")
    parser.add_argument("--db", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--skip", default="", help="comma-separated: http,peer,micro,"
                        "statements,recovery,admin")
    parser.add_argument("--configs", default="",
                        help="comma-separated subset of the HTTP configurations (default all)")
    parser.add_argument("--ablation", action="store_true",
                        help="only A, B, C, D and their variants with the store's speed-ups off"
                        " (no chart, no in-process, statement, recovery or admin figures)")
    parser.add_argument("--recovery-ops", type=int, default=10_000)
    parser.add_argument("--recovery-rounds", type=int, default=3)
    parser.add_argument("--admin-rows", type=int, default=1_000_000)
    parser.add_argument("--against", metavar="REF",
                        help="only A, B, C, D, R of this checkout and of REF's (a temporary git"
                        " worktree) side by side in the same rounds (bench/sidebyside.py)")
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--keep-db", action="store_true",
                        help="keep bench-results/work (the SQLite database) after the run")
    parser.add_argument("--out", type=Path, default=RESULTS / "results.json",
                        help="where to write the results (default bench-results/results.json)")
    parser.add_argument("--markdown", type=Path, metavar="RESULTS_JSON",
                        help="print the figures of an earlier run as Markdown tables, and stop")
    args = parser.parse_args()
    if args.markdown:
        earlier = json.loads(args.markdown.read_text())
        if earlier["meta"].get("against"):
            from bench import sidebyside

            print(sidebyside.table(earlier))
        else:
            print(markdown(earlier))
        return 0
    if args.quick:
        args.rounds, args.duration = 1, 3.0
        args.recovery_ops, args.recovery_rounds = 2_000, 1
        args.admin_rows = min(args.admin_rows, 100_000)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.ablation:
        use_ablation()
        skip |= {"peer", "micro", "statements", "recovery", "admin"}
        args.no_chart = True
    if args.configs:
        wanted = {c.strip() for c in args.configs.split(",") if c.strip()}
        CONFIGS[:] = [c for c in CONFIGS if c[0] in wanted]
        RATIOS[:] = [r for r in RATIOS if r[1] in wanted and r[2] in wanted]
    if "http" not in skip and shutil.which("wrk") is None:
        log("run.py: wrk is not installed (apt-get install wrk; scripts/bench.sh does it)")
        return 2

    started = time.monotonic()
    RESULTS.mkdir(exist_ok=True)
    work = RESULTS / "work"
    work.mkdir(exist_ok=True)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("GT_")}
    base_env.update(DJANGO_SETTINGS_MODULE="bench.settings", CONN_MAX_AGE="600",
                    DJANGO_DEBUG="0", PYTHONPATH=str(ROOT), GT_VAR_DIR=str(work / "var"),
                    PYTHONUNBUFFERED="1")
    if os.environ.get("DATABASE_URL"):
        base_env["BENCH_PG_URL"] = os.environ["DATABASE_URL"]
    dbs = ["postgresql", "sqlite"] if args.db == "both" else [args.db]
    if "postgresql" in dbs and "BENCH_PG_URL" not in base_env:
        log("run.py: no DATABASE_URL: PostgreSQL skipped (scripts/bench.sh starts one)")
        dbs.remove("postgresql")

    results: dict[str, Any] = {
        "meta": {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "argv": sys.argv[1:],
                 "rounds": args.rounds, "duration_s": args.duration,
                 "ablation": args.ablation,
                 "wrk_options": {"threads": args.threads, "connections": args.connections},
                 "load_average_start": load_average(), **versions(base_env)},
        "databases": {},
    }
    if args.against:
        return side_by_side(args, base_env, dbs, results)
    procs = Procs()
    try:
        stub_port = free_port()
        stub_url = f"http://127.0.0.1:{stub_port}/"
        procs.start([PYTHON, "-m", "bench.stub", str(stub_port), "5"], base_env,
                    RESULTS / "stub.log")
        for db in dbs:
            env = database_env(db, base_env, work)
            log(f"[{db}] preparing the database")
            token = subprocess.run([PYTHON, "-m", "bench.prepare"], env=env, cwd=ROOT,
                                   capture_output=True, text=True, check=True
                                   ).stdout.strip().splitlines()[-1]
            data: dict[str, Any] = {}
            results["databases"][db] = data
            lap = Laps()
            data["seconds"] = lap.phases

            if "http" not in skip:
                data["http"] = bench_http(db, env, token, args, procs, stub_url)
                lap("http")
            if "peer" not in skip and db == "postgresql":
                log(f"[{db}] the peer table: FastMCP 4 and django-mcpz beside the app (bench.peer)")
                results["peer"] = peer_table(env, args)
                lap("peer")
            if "statements" not in skip:
                data["statements"] = helper("statements", env)
            if "micro" not in skip and "micro" not in results:
                log(f"[{db}] in-process figures")
                results["micro"] = helper("micro", env)
            lap("statements+micro")
            if "recovery" not in skip:
                log(f"[{db}] recovery: {args.recovery_ops} operations, one then two sweepers")
                rec = helper("recovery", env, "--ops", str(args.recovery_ops),
                             "--rounds", str(args.recovery_rounds))
                one = statistics.median(r["per_second"] for r in rec["runs"] if r["sweepers"] == 1)
                two = statistics.median(r["per_second"] for r in rec["runs"] if r["sweepers"] == 2)
                data["recovery"] = {**rec, "operations": args.recovery_ops,
                                    "one_per_second": one, "two_per_second": two,
                                    "scaling": round(two / one, 3)}
                lap("recovery")
            if "admin" not in skip:
                log(f"[{db}] admin: seeding {args.admin_rows:,} operations and confirmations")
                data["admin"] = helper("admin_scale", env, "--rows", str(args.admin_rows))
                lap("admin")
            log(f"[{db}] done: " + ", ".join(f"{k} {v:.0f} s" for k, v in lap.phases.items()))
    finally:
        procs.stop_all()
        if not args.keep_db:  # the SQLite database is as throwaway as the PostgreSQL cluster
            shutil.rmtree(work, ignore_errors=True)
    results["meta"]["load_average_end"] = load_average()
    results["meta"]["seconds"] = round(time.monotonic() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(table(results))
    if not args.no_chart and any(d.get("http") for d in results["databases"].values()):
        chart(results, CHART)
        print(f"\nchart: {CHART.relative_to(ROOT)}")
    print(f"results: {args.out}  ({results['meta']['seconds']:.0f} s)")
    return 0


def side_by_side(args: argparse.Namespace, base_env: dict[str, str], dbs: list[str],
                 results: dict[str, Any]) -> int:
    """``--against REF``: bench/sidebyside.py's run; its tables, and the JSON in ``--out``."""
    from bench import sidebyside  # imports this module as bench.run: no cycle at load

    started = time.monotonic()
    RESULTS.mkdir(exist_ok=True)
    try:
        sidebyside.against(args, base_env, dbs, results)
    finally:
        shutil.rmtree(RESULTS / "work", ignore_errors=True)
    results["meta"]["load_average_end"] = load_average()
    results["meta"]["seconds"] = round(time.monotonic() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(sidebyside.table(results))
    print(f"results: {args.out}  ({results['meta']['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
