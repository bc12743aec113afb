"""``python -m bench.ablation [N] [ROUNDS]``: what each of the store's speed-ups costs in CPU.

The CPU side of ``bench/run.py --ablation``. In process, through Django's full request
handling (``bench.profile.caller``), against the PostgreSQL database in
``DATABASE_URL``: A, B, C and D (``bench/run.py``'s configurations) with the shipped
code and with each variant's switches off (``bench/settings.py``, ``BENCH_ABLATE``),
in rounds whose order rotates. Per call it measures this process's CPU and the CPU of
the PostgreSQL backend serving its connection (``/proc``: the server must be on this
machine). Throughput on a saturated machine is its cores over what a request costs
it, so ``cost(A) / cost(X)`` is what X's ratio to A would be with nobody else on the
machine; the CPU a request costs its own processes moves much less with the
neighbours' load than requests per second do. A is measured in every variant: only
"ssb" changes what it runs, so its spread across the others is this method's noise.
Prints each round, then the medians, the ratios and what each speed-up buys.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
#: variant, its switches (``""``: the shipped code).
VARIANTS = [
    ("shipped", ""),
    ("nomulti", "multi"),
    ("noperm", "perm"),
    ("public", "perm,multi"),
    ("public-ssb", "perm,multi,ssb"),
    ("orm", "orm"),
]
#: configuration, tool or path, replay
CONFIGS = [("A", "/plain/", False), ("B", "bench_insert", False),
           ("C", "bench_insert", True), ("D", "bench_insert_full", False)]


def main(argv: list[str]) -> None:
    from bench.cpu import CpuMeter
    from bench.profile import caller

    n = int(argv[0]) if argv else 300
    rounds = int(argv[1]) if len(argv) > 1 else 6
    calls = {name: caller([target, str(n), "replay" if replay else ""], default_n=n)[2]
             for name, target, replay in CONFIGS}
    from django.conf import settings
    from django.db import connection
    from django.test import override_settings

    from bench.switches import store_for

    if connection.vendor != "postgresql":
        raise SystemExit("bench.ablation measures PostgreSQL's CPU: set DATABASE_URL")
    base = dict(getattr(settings, "GUARDED_TOOLS", {}) or {})
    options = dict(connection.settings_dict.get("OPTIONS") or {})
    done = 0

    def switch(switches: str) -> Any:
        off = set(filter(None, switches.split(",")))
        connection.close()  # a new session: nothing prepared, the binding as asked
        connection.settings_dict["OPTIONS"] = (
            {**options, "server_side_binding": True} if "ssb" in off else dict(options))
        backends = ([MODEL_BACKEND] if "perm" in off else list(settings.AUTHENTICATION_BACKENDS))
        return override_settings(GUARDED_TOOLS={**base, "STORE_CLASS": store_for(off)},
                                 AUTHENTICATION_BACKENDS=backends)

    def measure(name: str) -> float:
        nonlocal done
        call = calls[name]
        for i in range(20):  # the session's statements, the replay's stored result
            call(done + i)
        done += 20
        meter = CpuMeter({"backend": connection.connection.info.backend_pid})
        server, cpu = meter.snapshot(), time.process_time()
        for i in range(done, done + n):
            call(i)
        done += n
        spent = time.process_time() - cpu + meter.snapshot()["backend"] - server["backend"]
        return spent / n * 1e6

    results: dict[tuple[str, str], list[float]] = {}
    with switch(""):
        for i in range(100):  # imports, connections, compiled statements
            calls["B"](-i - 1)
    print(f"{rounds} rounds of {n} calls per configuration and variant; app + PostgreSQL"
          " CPU, µs per call")
    for r in range(rounds):
        order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
        for variant, switches in order:
            with switch(switches):
                figures = {name: measure(name) for name, *_ in CONFIGS}
            for name, value in figures.items():
                results.setdefault((variant, name), []).append(value)
            print(f"round {r + 1} {variant:11} " + "  ".join(
                f"{name} {value:6.0f}" for name, value in figures.items()), flush=True)
    switch("").__enter__()  # leave the modules as shipped
    median = {key: statistics.median(values) for key, values in results.items()}
    print("\nmedians, µs per call (app + PostgreSQL), and X/A by CPU = cost(A) / cost(X):")
    for variant, _ in VARIANTS:
        print(f"{variant:11} " + "  ".join(f"{name} {median[variant, name]:6.0f}"
                                           for name, *_ in CONFIGS)
              + "   " + "  ".join(f"{name}/A {median[variant, 'A'] / median[variant, name]:.3f}"
                                  for name, *_ in CONFIGS[1:]))
    spread = [median[v, "A"] for v, s in VARIANTS if "ssb" not in s]
    print(f"\nA across the variants that run its code unchanged: {min(spread):.0f} to"
          f" {max(spread):.0f} µs ({max(spread) / min(spread) - 1:.1%}: the noise)")
    print("\nwhat each speed-up buys: the shipped ratio by CPU over the variant's, less one")

    def relative(variant: str, name: str) -> float:
        return median[variant, name] / median[variant, "A"]

    for variant, switches in VARIANTS[1:]:
        print(f"{variant:11} (off: {switches:28}) " + "  ".join(
            f"{name}/A {relative(variant, name) / relative('shipped', name) - 1:+.1%}"
            for name, *_ in CONFIGS[1:]))


if __name__ == "__main__":
    main(sys.argv[1:])
