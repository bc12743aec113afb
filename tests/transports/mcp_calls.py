"""MCP calls in the test client: requests of 2026-07-28, a task's reads, a web process."""

from __future__ import annotations

import json
from typing import Any

from tests import forkserver
from tests.transports import mcp_tasks_schema as ext

#: The official SDK's 2026-07-28 models and client are in the mcp 2.x line; with 1.x (the
#: Django 5.2 environment) the tasks replies are still parsed by the extension's models.
SDK_2026 = __import__("importlib.metadata").metadata.version("mcp").startswith("2")


def validate_call_result(method: str, data: dict[str, Any]) -> None:
    """Parse a 2026-07-28 result with the official SDK's models, where it has them."""
    if SDK_2026:
        from mcp_types import methods

        methods.validate_server_result(method, MODERN, data)


URL = "/agent/mcp/"

MODERN = "2026-07-28"

TASKS = "io.modelcontextprotocol/tasks"

ITEM = {
    "type": "object",
    "properties": {"operationId": {"type": "string", "title": "Operation"},
                   "qty": {"type": "integer", "minimum": 1, "title": "Quantity"}},
    "required": ["operationId", "qty"],
    "additionalProperties": False,
}


def meta(*, tasks: bool = True, url_elicitation: bool = False) -> dict[str, Any]:
    caps: dict[str, Any] = {}
    if tasks:
        caps["extensions"] = {TASKS: {}}
    if url_elicitation:
        caps["elicitation"] = {"url": {}}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "1"},
    }


def send(client: Any, method: str, params: dict[str, Any], *, rid: int = 1,
         **caps: bool) -> Any:
    params = {**params, "_meta": meta(**caps)}
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    name = params.get("name") if method == "tools/call" else params.get("taskId")
    if name is not None:
        headers["Mcp-Name"] = name
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    return client.post(URL, data=json.dumps(body), content_type="application/json",
                       headers=headers)


def result(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.content
    body = response.json()
    assert "error" not in body, body
    return body["result"]


def rpc_error(response: Any) -> dict[str, Any]:
    body = response.json()
    assert "error" in body, body
    return body["error"]


def call(client: Any, name: str, arguments: dict[str, Any], **caps: bool) -> dict[str, Any]:
    return result(send(client, "tools/call", {"name": name, "arguments": arguments}, **caps))


def get_task(client: Any, task_id: str) -> dict[str, Any]:
    reply = result(send(client, "tasks/get", {"taskId": task_id}))
    ext.GetTaskResult.model_validate(reply)
    assert reply["resultType"] == "complete"
    return reply


# -- a restart of the web process between creation and polling -------------------------------
def start_web(tmp_path: Any, test_database_url: str) -> tuple[Any, int]:
    """The demo under uvicorn (with ``tests.integration.asgi_app``'s tools), on the test
    database."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT, free_port, wait_for_port

    port = free_port()
    env = {**os.environ, "DATABASE_URL": test_database_url, "GT_TEST_MARKERS": str(tmp_path),
           "GT_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "project.settings"}
    process = forkserver.popen(
        [sys.executable, "-m", "uvicorn", "tests.integration.asgi_app:application",
         "--host", "127.0.0.1",
         "--port", str(port), "--lifespan", "off", "--log-level", "warning"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port, process)
    return process, port
