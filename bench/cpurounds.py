"""``python -m bench.cpurounds N ROUNDS [--processes K] CHECKOUT...``: CPU per call, side by side.

In process, through Django's full request handling (``bench.profile.caller``): A
(``/plain/``), F (``/floor/``: B's statements without the guard, ``bench.floor``), B (a
fresh ``bench_insert``), C (a replay) and D (``bench_insert_full``)
for every checkout given (a directory with ``manage.py`` and ``bench/``: this one, a
``git worktree`` of another commit). Each checkout runs in K worker processes of its own
(its own code; its database in ``DATABASE_URL`` or ``GT_SQLITE_PATH``, where ``{name}``
becomes the checkout's directory name: without it, the checkouts share one database,
which is fairest when their schemas are the same). The workers take turns, one round
each, the order rotating over rounds; a round is N turns of one call of each
configuration, each call timed alone. What is measured is the worker's own CPU
(``time.process_time``: SQLite's work is in it, PostgreSQL's is not), which the
machine's other load moves less than wall time; still, compare checkouts side by side,
round by round, never the absolute figures. "guard" is X less A: the CPU the guard adds
to the same INSERT.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = [("A", "/plain/", False), ("F", "/floor/", False), ("B", "bench_insert", False),
           ("C", "bench_insert", True), ("F-C", "/floor-replay/", True),
           ("D", "bench_insert_full", False), ("F-D", "/floor-full/", False)]


def worker(n: int) -> None:
    """One checkout's side: on each line read from stdin, one round; one JSON line out.

    A round is ``n`` turns of one call of each configuration (their order rotating), each
    call timed by itself: the configurations share whatever the machine did meanwhile.
    """
    from bench.profile import caller

    calls = {name: caller([target, str(n), "replay" if replay else ""], n)[2]
             for name, target, replay in CONFIGS}
    for name in calls:  # imports, connections, the replay's stored result
        for i in range(60):
            calls[name](-i - 1)
    names, done = [c[0] for c in CONFIGS], 0
    print("ready", flush=True)
    for _line in sys.stdin:
        spent = dict.fromkeys(names, 0.0)
        for turn in range(n):
            for name in names[turn % len(names):] + names[:turn % len(names)]:
                started = time.process_time()
                calls[name](done)
                spent[name] += time.process_time() - started
            done += 1
        print(json.dumps({name: spent[name] / n * 1e6 for name in names}), flush=True)


def main(argv: list[str]) -> None:
    """``N ROUNDS [--processes K] CHECKOUT...``: K workers per checkout (default 2), so that
    one process's luck (its memory layout, its neighbours on the cores) is not taken for
    its code's; the figures of a checkout are the medians over its workers' rounds."""
    n, rounds, checkouts = int(argv[0]), int(argv[1]), argv[2:]
    processes = 2
    if checkouts[:1] == ["--processes"]:
        processes, checkouts = int(checkouts[1]), checkouts[2:]
    python = Path(sys.executable).absolute()
    workers = {}
    for checkout in [c for c in checkouts for _ in range(processes)]:
        name = Path(checkout).name
        env = dict(os.environ)
        if "GT_SQLITE_PATH" in env:
            env["GT_SQLITE_PATH"] = env["GT_SQLITE_PATH"].replace("{name}", name)
        if "DATABASE_URL" in env:
            env["DATABASE_URL"] = env["DATABASE_URL"].replace("{name}", name.replace("-", "_"))
        env.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
        env["CONN_MAX_AGE"] = "600"
        proc = subprocess.Popen(
            [str(python), str(Path(__file__).absolute()), "--worker", str(n)],
            cwd=checkout, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", name
        workers[f"{name}#{len(workers)}"] = proc
    results: dict[str, dict[str, list[float]]] = {}
    order = list(workers)
    names = list(dict.fromkeys(worker.split("#")[0] for worker in order))
    for r in range(rounds):
        for worker in order[r % len(order):] + order[:r % len(order)]:
            proc, name = workers[worker], worker.split("#")[0]
            results.setdefault(name, {})
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            figures = json.loads(proc.stdout.readline())
            for config, value in figures.items():
                results[name].setdefault(config, []).append(value)
            print(f"round {r + 1} {worker:16} " + "  ".join(
                f"{c} {figures[c]:6.0f}" for c, *_ in CONFIGS), flush=True)
    for proc in workers.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    print(f"\nmedians of {rounds} rounds x {processes} processes, {n} calls each, µs of CPU"
          " per call (guard: X less A, per round, median)")
    for name in names:
        res = results[name]
        med = {c: statistics.median(res[c]) for c, *_ in CONFIGS}
        guard = {c: statistics.median([x - a for x, a in zip(res[c], res["A"], strict=True)])
                 for c, *_ in CONFIGS[1:]}
        print(f"{name:14} " + "  ".join(f"{c} {med[c]:6.0f}" for c, *_ in CONFIGS)
              + "   guard " + "  ".join(f"{c} {guard[c]:6.0f}" for c in guard))
    if len(names) > 1:
        base = names[0]
        print(f"\nX/{base} for the same X, round by round (median of the ratios):")
        for name in names[1:]:
            print(f"{name:14} " + "  ".join(
                f"{c} {statistics.median(x / b for x, b in zip(results[name][c], results[base][c], strict=True)):.3f}"  # noqa: E501
                for c, *_ in CONFIGS))
        print("X/A (each process's round: its speed that moment cancels out), median, and"
              " the guard's share of A, (X - A)/A, against the base's:")
        for name in names:
            res = results[name]
            over = {c: statistics.median(x / a for x, a in zip(res[c], res["A"], strict=True))
                    for c in ("B", "C", "D")}
            line = "  ".join(f"{c}/A {value:.3f}" for c, value in over.items())
            if name != base:
                old = results[base]
                line += "   guard/base " + "  ".join(
                    f"{c} {(over[c] - 1) / (statistics.median(x / a for x, a in zip(old[c], old['A'], strict=True)) - 1):.3f}"  # noqa: E501
                    for c in ("B", "D"))
            print(f"{name:14} {line}")
    print(json.dumps(results))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:  # in a checkout's directory: its code, not this one's
        sys.path[0] = os.getcwd()
        worker(int(sys.argv[2]))
    else:
        main(sys.argv[1:])
