"""Plain JSON-RPC to the MCP endpoint (protocol 2025-11-25), its answers as HTTP responses."""

from __future__ import annotations

import json
from typing import Any

MCP = "/agent/mcp/"


def rpc(client: Any, method: str, params: dict[str, Any] | None = None) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    return client.post(MCP, data=json.dumps(body), content_type="application/json",
                       headers={"MCP-Protocol-Version": "2025-11-25"})


def call(client: Any, name: str, arguments: dict[str, Any]) -> Any:
    return rpc(client, "tools/call", {"name": name, "arguments": arguments})
