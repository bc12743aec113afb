"""The MCP transport's modules (issue 26): one concern each, none above 600 lines, no cycles.

``guarded_tools.transports.mcp.server`` keeps the view and the dispatch table; every other
name is imported from the module that defines it.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import grimp
import pytest

import guarded_tools.transports.mcp as package

FOLDER = Path(package.__file__).parent
MODULES = sorted(p for p in FOLDER.glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_each_module_is_one_concern_under_600_lines(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 600
    docstring = ast.get_docstring(ast.parse(text)) or ""
    assert docstring.startswith("Provides "), path.name


def test_the_split_is_more_than_one_module() -> None:
    names = {p.stem for p in MODULES}
    assert {"protocol", "headers", "task_methods", "server"} <= names


def test_the_server_exports_only_what_it_defines() -> None:
    server = importlib.import_module("guarded_tools.transports.mcp.server")
    assert set(server.__all__) == {"McpView", "check_origin", "serve", "transport_error"}
    for name in server.__all__:
        assert getattr(server, name).__module__ == server.__name__, name


def test_no_module_of_the_transport_imports_the_server_or_closes_a_cycle() -> None:
    graph = grimp.build_graph("guarded_tools", include_external_packages=False)
    prefix = "guarded_tools.transports.mcp."
    server = prefix + "server"
    for path in MODULES:
        module = prefix + path.stem
        if module != server:
            assert server not in graph.find_modules_directly_imported_by(module), module
            assert not graph.chain_exists(importer=module, imported=server), module
