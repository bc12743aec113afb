"""``python bench/run.py --against REF``: this checkout and REF's, side by side in one run.

Issue 26 asks that the redesign costs no speed against the main before it, measured
"side by side in one run". This checks REF out into a temporary git worktree
(``git worktree add --detach``, removed at the end), prepares a database for each side
(PostgreSQL: two databases in the same cluster; SQLite: two files), serves each side's
own ``bench.wsgi`` with the same gunicorn (2 sync workers, same settings module, same
virtualenv) and drives A, B, C, D, R-plain and R-guarded of both sides in the same
rounds, in an order that rotates over the twelve (side, configuration) pairs. It prints,
for each side, B/A, C/A, D/A and R (R-guarded/R-plain) per round and their medians, the
CPU each request costs (app server and database server), and the ratio new/old of each
with the spread of its per-round values: the run's noise.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.cpu import CpuMeter, database_server_pid
from bench.run import PYTHON, RESULTS, ROOT, Procs, free_port, log, run_wrk, versions, wait_http

CONFIGS = ["A", "B", "C", "D", "R-plain", "R-guarded"]
PATHS = {"A": ("/plain/", "fresh"), "B": ("/agent/tools/bench_insert/", "fresh"),
         "C": ("/agent/tools/bench_insert/", "replay"),
         "D": ("/agent/tools/bench_insert_full/", "fresh"),
         "R-plain": ("/plain-remote/", "fresh"),
         "R-guarded": ("/agent/tools/bench_remote/", "fresh")}
RATIOS = [("B/A", "B", "A"), ("C/A", "C", "A"), ("D/A", "D", "A"), ("R", "R-guarded", "R-plain")]


@dataclass
class Side:
    """One checkout: "new" (this one) or "old" (REF's temporary worktree)."""

    label: str
    root: Path
    commit: str


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout.strip()


def checkout(ref: str) -> Side:
    """REF in a detached temporary worktree (the caller removes it with ``remove``)."""
    path = Path(tempfile.mkdtemp(prefix="bench-ref-"))
    path.rmdir()  # git worktree add wants to create it
    git("worktree", "add", "--detach", str(path), ref)
    return Side("old", path, git("rev-parse", "HEAD", cwd=path))


def remove(side: Side) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(side.root)], cwd=ROOT,
                   check=False, capture_output=True)
    shutil.rmtree(side.root, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False, capture_output=True)


def pg_database(url: str, name: str) -> str:
    """A fresh database ``name`` in the cluster of ``url`` (dropped first); its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:  # CREATE DATABASE runs outside one
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def side_env(db: str, side: Side, base_env: dict[str, str], work: Path) -> dict[str, str]:
    """The environment of one side's helpers and server: its code, its own database."""
    env = {**base_env, "PYTHONPATH": str(side.root), "GT_VAR_DIR": str(work / side.label)}
    if db == "postgresql":
        env["DATABASE_URL"] = pg_database(base_env["BENCH_PG_URL"], f"bench_{side.label}")
    else:
        env.pop("DATABASE_URL", None)
        path = work / f"bench-{side.label}.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        env["GT_SQLITE_PATH"] = str(path)
    return env


def prepare(side: Side, env: dict[str, str]) -> str:
    """Migrate the side's database with its own code; the bench token."""
    return subprocess.run([PYTHON, "-m", "bench.prepare"], env=env, cwd=side.root,
                          capture_output=True, text=True, check=True
                          ).stdout.strip().splitlines()[-1]


def serve(db: str, side: Side, env: dict[str, str], procs: Procs) -> tuple[str, Any]:
    """The side's gunicorn (cwd: its checkout, so that its bench and guarded_tools load)."""
    gunicorn = shutil.which("gunicorn", path=str(Path(PYTHON).parent)) or "gunicorn"
    port = free_port()
    proc = procs.start([gunicorn, "bench.wsgi:application", "--workers", "2", "--worker-class",
                        "sync", "--bind", f"127.0.0.1:{port}", "--log-level", "warning",
                        "--timeout", "60"], env, RESULTS / f"gunicorn-{db}-{side.label}.log",
                       cwd=side.root)
    return f"http://127.0.0.1:{port}", proc


def measure(db: str, sides: list[Side], envs: dict[str, dict[str, str]], tokens: dict[str, str],
            args: argparse.Namespace, procs: Procs) -> dict[str, Any]:
    """Both sides' configurations in the same rounds; per side, per configuration, the runs."""
    bases, meters, servers = {}, {}, []
    # One cluster serves both sides' databases: one server tree to meter.
    db_pid = database_server_pid(envs[sides[0].label]["DATABASE_URL"]) if db == "postgresql" \
        else None
    for side in sides:
        base, proc = serve(db, side, envs[side.label], procs)
        bases[side.label] = base
        servers.append(proc)
        meters[side.label] = CpuMeter({"app": proc.pid, "db": db_pid})
    pairs = [(s.label, c) for c in CONFIGS for s in sides]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {s.label: {c: [] for c in CONFIGS}
                                                        for s in sides}
    replay = {s.label: f"replay-{db}-{s.label}-{uuid.uuid4().hex[:8]}" for s in sides}
    try:
        for base in bases.values():
            wait_http(base + "/ping/")
        log(f"[{db}] warm-up: {len(pairs)} (side, configuration) pairs, {args.warmup} s each")
        for label, name in pairs:  # the replay keys are created here
            path, mode = PATHS[name]
            key = replay[label] if mode == "replay" else f"w-{label}-{name}-{uuid.uuid4().hex[:6]}"
            run_wrk(bases[label], path, mode, key, tokens[label], args.warmup, args.threads,
                    args.connections)
        for round_no in range(args.rounds):
            shift = round_no % len(pairs)
            for label, name in pairs[shift:] + pairs[:shift]:
                path, mode = PATHS[name]
                key = replay[label] if mode == "replay" else (
                    f"{label}-{name}-{round_no}-{uuid.uuid4().hex[:6]}")
                before = meters[label].snapshot()
                result = run_wrk(bases[label], path, mode, key, tokens[label], args.duration,
                                 args.threads, args.connections)
                result["cpu_us"] = CpuMeter.per_request(before, meters[label].snapshot(),
                                                        result["requests"])
                result["round"] = round_no
                runs[label][name].append(result)
                log(f"[{db}] round {round_no + 1}/{args.rounds} {label} {name:10}"
                    f" {result['rps']:8.1f} req/s  app {result['cpu_us'].get('app', 0):.0f} µs"
                    f"  db {result['cpu_us'].get('db', 0):.0f} µs"
                    + (f"  NON-2XX {result['non_2xx']}" if result["non_2xx"] else ""))
    finally:
        for proc in servers:
            procs.stop(proc)
    return summarize(runs)


def summarize(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {"sides": {}}
    for label, configs in runs.items():
        side: dict[str, Any] = {"configs": {}, "ratios": {}}
        for name, rs in configs.items():
            side["configs"][name] = {
                "runs": rs, "rps": round(statistics.median(r["rps"] for r in rs), 1),
                "rps_min": min(r["rps"] for r in rs), "rps_max": max(r["rps"] for r in rs),
                "p50_ms": round(statistics.median(r.get("p50_ms", 0) for r in rs), 2),
                "errors": sum(r["non_2xx"] + r["socket_errors"] for r in rs),
                "cpu_us": {p: round(statistics.median(r["cpu_us"].get(p, 0) for r in rs), 1)
                           for p in rs[0]["cpu_us"]},
            }
        for label_r, num, den in RATIOS:
            per_round = [n["rps"] / d["rps"] for n, d in zip(configs[num], configs[den],
                                                                 strict=True)]
            side["ratios"][label_r] = {"median": round(statistics.median(per_round), 3),
                                       "rounds": [round(x, 3) for x in per_round]}
        out["sides"][label] = side
    if {"new", "old"} <= set(runs):
        out["new_over_old"] = compare(out["sides"]["new"], out["sides"]["old"])
    return out


def compare(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """new/old of each ratio, per round; the noise is the spread of those per-round values.

    A drop is "beyond the noise" when new/old is below 1 in every round (and so its
    highest value is too): the rounds never once put the two sides level.
    """
    out: dict[str, Any] = {}
    for label, *_ in RATIOS:
        rounds = [n / o for n, o in zip(new["ratios"][label]["rounds"],
                                        old["ratios"][label]["rounds"], strict=True)]
        median = statistics.median(rounds)
        out[label] = {"median": round(median, 3), "rounds": [round(x, 3) for x in rounds],
                      "min": round(min(rounds), 3), "max": round(max(rounds), 3),
                      "noise": round((max(rounds) - min(rounds)) / 2, 3),
                      "verdict": "slower beyond noise" if max(rounds) < 1 else
                      ("faster beyond noise" if min(rounds) > 1 else "within noise")}
    for name in CONFIGS:  # CPU per request, app + database server: new over old
        cost = {s: sum(side["configs"][name]["cpu_us"].get(p, 0) for p in ("app", "db"))
                for s, side in (("new", new), ("old", old))}
        if cost["old"]:
            out[f"cpu {name}"] = {"new_us": round(cost["new"]), "old_us": round(cost["old"]),
                                  "median": round(cost["new"] / cost["old"], 3)}
    return out


def against(args: argparse.Namespace, base_env: dict[str, str], dbs: list[str],
            results: dict[str, Any]) -> dict[str, Any]:
    """The whole side-by-side run on ``dbs``; REF's worktree is removed whatever happens."""
    new = Side("new", ROOT, git("rev-parse", "HEAD"))
    old = checkout(args.against)
    results["meta"].update(new=new.commit, old=old.commit, against=args.against,
                           old_packages=versions({**base_env, "PYTHONPATH": str(old.root)})
                           ["packages"])
    work = RESULTS / "work"
    procs = Procs()
    try:
        stub_port = free_port()  # the 5 ms service R calls, shared by both sides
        procs.start([PYTHON, "-m", "bench.stub", str(stub_port), "5"], base_env,
                    RESULTS / "stub.log")
        base_env = {**base_env, "BENCH_STUB_URL": f"http://127.0.0.1:{stub_port}/"}
        for db in dbs:
            envs, tokens = {}, {}
            for side in (new, old):
                log(f"[{db}] preparing the {side.label} side's database ({side.commit[:7]})")
                envs[side.label] = side_env(db, side, base_env, work)
                tokens[side.label] = prepare(side, envs[side.label])
            results["databases"][db] = measure(db, [new, old], envs, tokens, args, procs)
    finally:
        procs.stop_all()
        remove(old)
    return results


def table(results: dict[str, Any]) -> str:
    """Both sides' ratios and the ratio new/old, per database, as Markdown tables."""
    meta = results["meta"]
    lines = [f"new {meta['new'][:7]} against old {meta['old'][:7]} ({meta['against']}),"
             f" {meta['rounds']} rounds of {meta['duration_s']:.0f} s, load average"
             f" {meta.get('load_average_start')} at the start, {meta.get('load_average_end')}"
             " at the end"]
    for db, data in results["databases"].items():
        sides, cmp = data["sides"], data["new_over_old"]
        lines += ["", f"**{db}**", "",
                  "| ratio | new (per round) | old (per round) | new/old (per round) | verdict |",
                  "|---|---:|---:|---:|---|"]
        for label, *_ in RATIOS:
            cells = [f"**{s['ratios'][label]['median']:.3f}** ("
                     + ", ".join(f"{x:.2f}" for x in s['ratios'][label]["rounds"]) + ")"
                     for s in (sides["new"], sides["old"])]
            c = cmp[label]
            lines.append(f"| {label} | {cells[0]} | {cells[1]} | **{c['median']:.3f}** ("
                         + ", ".join(f"{x:.2f}" for x in c["rounds"]) + f") | {c['verdict']} |")
        lines += ["", "| config | new req/s (min to max) | old req/s (min to max) |"
                  " new app+db CPU µs/request | old | new/old CPU |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name in CONFIGS:
            n, o = sides["new"]["configs"][name], sides["old"]["configs"][name]
            c = cmp.get(f"cpu {name}", {})
            lines.append(f"| {name} | {n['rps']:.0f} ({n['rps_min']:.0f} to {n['rps_max']:.0f}) |"
                         f" {o['rps']:.0f} ({o['rps_min']:.0f} to {o['rps_max']:.0f}) |"
                         f" {c.get('new_us', 0)} | {c.get('old_us', 0)} |"
                         f" {c.get('median', 0):.3f} |"
                         + (f" errors: {n['errors']}/{o['errors']}" if n["errors"] or o["errors"]
                            else ""))
    return "\n".join(lines)
