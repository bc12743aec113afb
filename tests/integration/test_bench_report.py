"""``bench/run.py``'s report: configurations of one database only, and the floor targets.

The floor of R-guarded (F-R) sends PostgreSQL's statements and is left out on SQLite
(``POSTGRESQL_ONLY``); a run of both databases must still print its tables, with the
missing cells marked, as the text report and the chart already skip them. The targets
are restated against the floors (B's and D's app CPU, C's and R-guarded's throughput),
each judged on the median of its per-round ratios, on PostgreSQL.
"""

from __future__ import annotations

from typing import Any

from bench import run


def measured(names: list[str]) -> dict[str, Any]:
    configs = {name: {"rps": 100.0 + i, "rps_min": 90.0, "rps_max": 110.0 + i, "p50_ms": 1.0,
                      "p99_ms": 2.0, "cpu_us": {"app": 1000.0 + i, "machine": 1500.0 + i},
                      "what": name, "runs": [{}], "errors": 0}
               for i, name in enumerate(names)}
    ratios: dict[str, Any] = {}
    for label, num, den in run.RATIOS:
        if num in configs and den in configs:
            ratios[label] = configs[num]["rps"] / configs[den]["rps"]
            ratios[label + " (per round)"] = [ratios[label]] * 2
    return {"http": {"configs": configs, "ratios": ratios}}


def test_a_configuration_of_one_database_only_is_marked_in_the_other_column() -> None:
    every = [name for name, *_ in run.CONFIGS]
    assert "F-R" in run.POSTGRESQL_ONLY and "F-R" in every
    sqlite = [name for name, *_ in run.configs_for("sqlite")]
    assert "F-R" not in sqlite and "F" in sqlite
    results = {"meta": {}, "databases": {"postgresql": measured(every),
                                         "sqlite": measured(sqlite)}}
    report = run.markdown(results)
    row = next(line for line in report.splitlines() if line.startswith("| F-R |"))
    assert row.endswith("| n/a | n/a | n/a |"), row
    ratio = next(line for line in report.splitlines() if line.startswith("| F-R/R-plain |"))
    assert ratio.endswith("| n/a |"), ratio
    sqlite_cpu = report.split("| sqlite: CPU µs per request |", 1)[1]
    assert "| F-R |" not in sqlite_cpu and "| F |" in sqlite_cpu


# -- the targets against the floors --------------------------------------------------------
def floor_runs(rps: dict[str, list[float]], app: dict[str, list[float]],
               errors: dict[str, int] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Runs per configuration, in round order: throughput and app CPU per request."""
    return {name: [{"rps": x, "cpu_us": {"app": app[name][i], "db": 50.0},
                    "non_2xx": (errors or {}).get(name, 0), "socket_errors": 0}
                   for i, x in enumerate(values)]
            for name, values in rps.items()}


def test_the_targets_are_judged_against_each_floor_round_by_round() -> None:
    runs = floor_runs(
        # B costs 1.05x F's CPU in round 1, 1.2x in round 2 and 1.0x in round 3: 1.05,
        # met, though the ratio of the medians (1150/1000) would say 1.15.
        {"F": [500, 500, 500], "B": [450, 450, 450],
         "F-D": [400, 400, 400], "D": [380, 380, 380],
         "F-C": [1000, 2000, 1000], "C": [980, 1960, 900],
         "F-R": [100, 100, 100], "R-guarded": [98, 99, 95]},
        {"F": [1000, 1000, 1200], "B": [1050, 1200, 1200],
         "F-D": [1000, 1000, 1000], "D": [1060, 1100, 1040],
         "F-C": [100, 100, 100], "C": [100, 100, 100],
         "F-R": [900, 900, 900], "R-guarded": [950, 950, 950]})
    targets = run.floor_targets(runs)
    assert set(targets) == {t[0] for t in run.FLOOR_TARGETS}
    b = targets["B's app CPU ≤ 1.10x F's"]
    assert (b["median"], b["rounds"], b["met"]) == (1.05, [1.05, 1.2, 1.0], True)
    d = targets["D's app CPU ≤ 1.05x F-D's"]
    assert (d["median"], d["met"]) == (1.06, False)
    c = targets["C ≥ 0.97x F-C's throughput"]
    assert (c["median"], c["rounds"], c["met"]) == (0.98, [0.98, 0.98, 0.9], True)
    r = targets["R-guarded ≥ 0.97x F-R's throughput"]
    assert (r["median"], r["met"]) == (0.98, True)
    # an error response on either side: not met, whatever the ratio
    failed = run.floor_targets({**runs, "F-R": floor_runs({"F-R": [100] * 3},
                                                          {"F-R": [900] * 3},
                                                          {"F-R": 2})["F-R"]})
    assert failed["R-guarded ≥ 0.97x F-R's throughput"]["met"] is False
    # a floor not measured (F-R on SQLite, or --configs): no line for it
    assert "R-guarded ≥ 0.97x F-R's throughput" not in run.floor_targets(
        {k: v for k, v in runs.items() if k != "F-R"})


def test_the_report_prints_the_targets_against_the_floors_with_their_verdicts() -> None:
    runs = floor_runs({"F": [500], "B": [450], "F-D": [400], "D": [380], "F-C": [1000],
                       "C": [990], "F-R": [100], "R-guarded": [90]},
                      {"F": [1000], "B": [1200], "F-D": [1000], "D": [1000], "F-C": [100],
                       "C": [100], "F-R": [900], "R-guarded": [950]})
    http = measured([name for name, *_ in run.CONFIGS])["http"]
    http["floor_targets"] = run.floor_targets(runs)
    sqlite = measured([name for name, *_ in run.configs_for("sqlite")])["http"]
    sqlite["floor_targets"] = run.floor_targets({k: v for k, v in runs.items() if k != "F-R"})
    results = {"meta": {}, "databases": {"postgresql": {"http": http},
                                         "sqlite": {"http": sqlite}}}
    text = run.table(results)
    postgresql, sqlite_text = text.split("\nsqlite:", 1)
    assert "B's app CPU ≤ 1.10x F's" in postgresql
    line = next(x for x in postgresql.splitlines() if "B's app CPU" in x)
    assert line.endswith("B/F app CPU: 1.200 (per round: 1.20): MISSED"), line
    line = next(x for x in postgresql.splitlines() if "R-guarded ≥" in x)
    assert line.endswith("R-guarded/F-R req/s: 0.900 (per round: 0.90): MISSED"), line
    line = next(x for x in postgresql.splitlines() if "C ≥ 0.97x" in x)
    assert line.endswith(": met"), line
    assert "(judged on PostgreSQL)" in sqlite_text and "MISSED" not in sqlite_text
    md = run.markdown(results)
    row = next(x for x in md.splitlines() if x.startswith("| R-guarded ≥ 0.97x F-R's"))
    assert row == "| R-guarded ≥ 0.97x F-R's throughput | R-guarded/F-R req/s | ≥ 0.97 |" \
        " **0.900** (0.90) MISSED | n/a |", row
    row = next(x for x in md.splitlines() if x.startswith("| D's app CPU"))
    assert row.endswith("| ≤ 1.05 | **1.000** (1.00) met | **1.000** (1.00) |"), row
