"""The MCP transport's modules (issue 26): one concern each, none above 600 lines, no cycles.

``guarded_tools.transports.mcp.server`` was one 816-line module; it keeps the view and
the dispatch table, and every name it offered stays importable from it.
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

#: What tests, the URLconf and sites imported from the single module before the split.
SERVER_NAMES = [
    "McpView", "serve", "check_origin", "transport_error", "RpcError", "Exchange", "Method",
    "decode_header_value", "param_header_problem", "describe_tool", "answers_with_task",
    "declares_tasks", "accepts_url_elicitation", "instructions", "success_result",
    "error_result", "error_result_from", "_poll_interval_ms", "_require_caller",
    "CONSENT_REQUEST", "ERROR_META", "OPERATION_META", "TASK_META", "META_PREFIX",
    "INVALID_PARAMS", "INVALID_REQUEST", "METHOD_NOT_FOUND", "MISSING_CAPABILITY",
    "PARSE_ERROR", "INTERNAL_ERROR", "HEADER_MISMATCH", "UNSUPPORTED_VERSION",
    "REQUEST_REFUSED", "TASK_CALL_FAILED", "TASK_NOT_CANCELLABLE", "MAX_BATCH",
    "SUPPORTED_VERSIONS", "MODERN_VERSIONS", "HANDSHAKE_VERSIONS", "BATCH_VERSION",
    "CAPABILITIES", "MODERN_CAPABILITIES", "NAME_PARAMS", "NO_TOOL", "time",
]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_each_module_is_one_concern_under_600_lines(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 600
    docstring = ast.get_docstring(ast.parse(text)) or ""
    assert docstring.startswith("Provides "), path.name


def test_the_split_is_more_than_one_module() -> None:
    names = {p.stem for p in MODULES}
    assert {"protocol", "headers", "task_methods", "server"} <= names


@pytest.mark.parametrize("name", SERVER_NAMES)
def test_every_name_of_the_old_module_is_still_importable_from_server(name: str) -> None:
    server = importlib.import_module("guarded_tools.transports.mcp.server")
    assert hasattr(server, name)


def test_no_module_of_the_transport_imports_the_server_or_closes_a_cycle() -> None:
    graph = grimp.build_graph("guarded_tools", include_external_packages=False)
    prefix = "guarded_tools.transports.mcp."
    server = prefix + "server"
    for path in MODULES:
        module = prefix + path.stem
        if module != server:
            assert server not in graph.find_modules_directly_imported_by(module), module
            assert not graph.chain_exists(importer=module, imported=server), module
