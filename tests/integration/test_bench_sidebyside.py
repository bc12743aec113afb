"""``bench/run.py --against REF``: how the two sides' rounds become ratios, noise, verdicts."""

from __future__ import annotations

from typing import Any

from bench import sidebyside


def runs(rps: dict[str, list[float]]) -> dict[str, list[dict[str, Any]]]:
    return {name: [{"rps": x, "p50_ms": 1.0, "non_2xx": 0, "socket_errors": 0,
                    "cpu_us": {"app": 1000.0 / x * 100, "db": 100.0}} for x in values]
            for name, values in rps.items()}


def side(a: list[float], b: list[float]) -> dict[str, list[dict[str, Any]]]:
    """A side whose A serves ``a`` and B ``b`` per round; C, D, R level with A."""
    return runs({"A": a, "B": b, "C": a, "D": a, "R-plain": a, "R-guarded": a})


def test_new_over_old_is_taken_round_by_round_and_judged_against_its_spread() -> None:
    new = side([100, 200, 100], [50, 100, 50])  # B/A 0.5 in every round
    old = side([100, 100, 200], [60, 60, 120])  # B/A 0.6 in every round
    result = sidebyside.summarize({"new": new, "old": old})
    b = result["new_over_old"]["B/A"]
    assert b["rounds"] == [0.833, 0.833, 0.833]
    assert b["verdict"] == "slower beyond noise"  # below 1 in every round
    assert result["new_over_old"]["C/A"]["verdict"] == "within noise"  # level: 1.0 each round
    assert result["sides"]["new"]["ratios"]["B/A"] == {"median": 0.5, "rounds": [0.5] * 3}


def test_a_drop_in_some_rounds_only_is_within_the_noise() -> None:
    new = side([100, 100, 100], [50, 70, 50])
    old = side([100, 100, 100], [60, 60, 60])
    verdict = sidebyside.summarize({"new": new, "old": old})["new_over_old"]["B/A"]
    assert verdict["min"] < 1 < verdict["max"] and verdict["verdict"] == "within noise"


def test_the_table_shows_both_sides_and_the_cpu_per_request() -> None:
    data = sidebyside.summarize({"new": side([100], [50]), "old": side([100], [60])})
    results = {"meta": {"new": "a" * 40, "old": "b" * 40, "against": "main", "rounds": 1,
                        "duration_s": 4, "load_average_start": [1.0],
                        "load_average_end": [2.0]},
               "databases": {"postgresql": data}}
    text = sidebyside.table(results)
    assert "| B/A | **0.500** (0.50) | **0.600** (0.60) | **0.833** (0.83)" in text
    assert "| B | 50 (50 to 50) | 60 (60 to 60) | 2100 | 1767 | 1.189 |" in text
