"""What an agent's error must hold, over REST and MCP: its fields, an MCP request and its error."""

from __future__ import annotations

import json
import re
from typing import Any

from rest_framework.test import APIClient

MCP_URL = "/agent/mcp/"

MCP_VERSION = "2025-11-25"

#: Talk of an idempotency key: wrong where the call has none.
KEY_TALK = re.compile(r"idempotency|\bkeys?\b", re.IGNORECASE)


def assert_fits(data: dict[str, Any], code: str, transport: str, where: str) -> None:
    """``where``: ``keyed``, ``keyless`` (a tool without a key) or ``none`` (no tool)."""
    assert data["code"] == code
    text = blob(data)
    if transport == "rest":
        assert "tools/list" not in text, text
    else:
        assert "GET tools/" not in text, text
    if where != "keyed":
        assert not KEY_TALK.search(text), text
    if where == "none":
        assert "this tool" not in text.lower(), text
    if data["retry"] == "after_repair":
        assert data.get("repair"), data
        assert "repair below" in data["message"]
    else:
        assert "repair below" not in data["message"]


def mcp_post(client: APIClient, method: str, params: dict[str, Any] | None = None) -> Any:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        message["params"] = params
    return client.post(MCP_URL, data=json.dumps(message), content_type="application/json",
                       headers={"MCP-Protocol-Version": MCP_VERSION})


def mcp_error(response: Any) -> dict[str, Any]:
    """The structured error of an MCP answer: a tool result's, or a JSON-RPC error's data."""
    body = response.json()
    if "error" in body:
        data = dict(body["error"]["data"])
        assert "GET tools/" not in body["error"]["message"]
        return data
    result = body["result"]
    assert result["isError"] is True
    data = dict(result["_meta"]["io.github.guarded-tools/error"])
    assert result["content"][0]["text"] == data["message"]
    return data


def blob(data: dict[str, Any]) -> str:
    """Everything an agent reads of an error: message, why, fix, repair."""
    return " ".join([data["message"], data.get("why", ""), data.get("fix", ""),
                     json.dumps(data.get("repair", {}))])
