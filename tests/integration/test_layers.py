"""The import graph of ``guarded_tools`` (issue 26 item 1): cycles counted by grimp.

Imports inside functions and under ``TYPE_CHECKING`` count: an import in a function
is still a dependency, only a later one. ``lint-imports`` (pyproject.toml) checks the
layers; this counts what its contracts cannot yet forbid, the cycles themselves.
"""

from __future__ import annotations

from collections.abc import Iterator

import grimp
import pytest


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("guarded_tools", include_external_packages=False)


def imported(graph: grimp.ImportGraph, module: str) -> Iterator[str]:
    return iter(sorted(graph.find_modules_directly_imported_by(module)))


def strongly_connected(graph: grimp.ImportGraph) -> list[set[str]]:
    """Tarjan's components of the module graph, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, imported(graph, root))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, imported(graph, child)))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components


def test_no_import_cycle_is_left(graph: grimp.ImportGraph) -> None:
    """Five cycles were measured before the redesign (the eight modules around the
    pipeline, views/mcp/urls/openapi, binding/sources, catalog/errors, admin/template
    tags); none is left, imports inside functions and for type checking included."""
    cycles = [sorted(c) for c in strongly_connected(graph) if len(c) > 1]
    assert cycles == []


def test_no_module_imports_the_package_root(graph: grimp.ImportGraph) -> None:
    assert graph.find_modules_that_directly_import("guarded_tools") == set()


@pytest.mark.parametrize(("importer", "imported"), [
    ("guarded_tools.confirmations", "guarded_tools.tasks"),
    ("guarded_tools.confirmations", "guarded_tools.console"),
    ("guarded_tools.confirmations", "guarded_tools.transports"),
    ("guarded_tools.confirmations", "guarded_tools.pipeline"),
    ("guarded_tools.core.catalog", "guarded_tools.core.errors"),
    ("guarded_tools.tools.binding", "guarded_tools.tools.sources"),
    ("guarded_tools.transports.rest", "guarded_tools.transports.mcp"),
    ("guarded_tools.transports.rest", "guarded_tools.urls"),
    ("guarded_tools.templatetags", "guarded_tools.console.admin"),
    ("guarded_tools.pipeline", "guarded_tools.tools"),
    ("guarded_tools.pipeline", "guarded_tools.contrib"),
    ("guarded_tools.contrib.otel", "guarded_tools.contrib.oauth"),
    ("guarded_tools.contrib", "guarded_tools.tools"),
    ("guarded_tools.tasks", "guarded_tools.transports"),
    ("guarded_tools.permissions", "guarded_tools.tools"),
])
def test_a_lower_module_reaches_a_higher_one_by_name_never_by_import(
    graph: grimp.ImportGraph, importer: str, imported: str
) -> None:
    assert not graph.chain_exists(importer=importer, imported=imported, as_packages=True)


def test_every_import_linter_contract_is_kept_with_no_ignored_imports() -> None:
    """The full layers contract of issue 26 item 1 (pyproject.toml) holds as written."""
    import tomllib

    from importlinter.cli import lint_imports

    from tests.conftest import REPO_ROOT

    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    assert not any("ignore_imports" in contract for contract in contracts)
    assert {"guarded_tools.pipeline", "guarded_tools.tools"} <= set(contracts[0]["layers"])
    assert lint_imports() == 0


def test_no_test_module_imports_another_test_module() -> None:
    """What tests share lives in modules without the ``test_`` prefix (helpers, conftest):
    a test module imported by another runs its module-level code (skips, marks) there, and
    a test function imported by name is collected twice."""
    import ast

    from tests.conftest import REPO_ROOT

    def is_test_module(dotted: str) -> bool:
        return dotted.split(".")[0] == "tests" and dotted.rsplit(".", 1)[-1].startswith("test_")

    found = []
    for path in sorted((REPO_ROOT / "tests").rglob("test_*.py")):
        if "node_modules" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            if any(is_test_module(module) for module in modules):
                found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not found, found
