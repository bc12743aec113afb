"""The bench's function counter (``bench.calls``): what it counts, and where it files it."""

from __future__ import annotations

import json
from pathlib import Path

import rest_framework.views

import bench.floor
import guarded_tools.pipeline
import guarded_tools.pipeline.stages.base
import guarded_tools.transports.mcp.server
from bench.calls import by_place, counted, place


def test_each_python_function_is_counted_each_time_it_runs_and_builtins_apart() -> None:
    def leaf(text: str) -> int:
        return len(text)

    def branch() -> int:
        return leaf("ab") + leaf("abc") + len("d")

    seen, builtins = counted(branch)
    _, nothing = counted(lambda: None)  # what counting itself adds (turning it off)
    names = {name: n for (filename, name), n in seen.items() if filename == __file__}
    assert names == {
        "test_each_python_function_is_counted_each_time_it_runs_and_builtins_apart"
        ".<locals>.branch": 1,
        "test_each_python_function_is_counted_each_time_it_runs_and_builtins_apart"
        ".<locals>.leaf": 2,
    }
    assert builtins - nothing == 3  # len, three times


def test_functions_are_filed_where_they_live() -> None:
    assert place(guarded_tools.pipeline.__file__) == "pipeline"
    assert place(guarded_tools.pipeline.stages.base.__file__) == "stages"
    assert place(guarded_tools.transports.mcp.server.__file__) == "transports.mcp"
    assert place(rest_framework.views.__file__) == "DRF"
    assert place(json.__file__) == "stdlib"
    assert place(str(Path(bench.floor.__file__).resolve())) == "bench"
    seen, _ = counted(lambda: json.dumps({"a": 1}))
    places = by_place(seen)
    assert places["stdlib"] >= 1 and places["pipeline"] == 0
