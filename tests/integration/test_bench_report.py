"""``bench/run.py``'s Markdown report when a configuration ran on one database only.

The floor of R-guarded (F-R) sends PostgreSQL's statements and is left out on SQLite
(``POSTGRESQL_ONLY``); a run of both databases must still print its tables, with the
missing cells marked, as the text report and the chart already skip them.
"""

from __future__ import annotations

from typing import Any

from bench import run


def measured(names: list[str]) -> dict[str, Any]:
    configs = {name: {"rps": 100.0 + i, "rps_min": 90.0, "rps_max": 110.0 + i, "p50_ms": 1.0,
                      "p99_ms": 2.0, "cpu_us": {"app": 1000.0 + i, "machine": 1500.0 + i}}
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
