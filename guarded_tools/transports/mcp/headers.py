"""Provides the 2026-07-28 envelope checks and the MCP parameter headers (``Mcp-Param-*``)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from guarded_tools.core.definition import Tool
from guarded_tools.transports.mcp.protocol import (
    CAPABILITIES_META,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    VERSION_META,
    Exchange,
    RpcError,
)

NAME_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
               "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}

_SENTINEL = re.compile(r"^=\?base64\?(.*)\?=$")
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_INTEGRAL = re.compile(r"^-?[0-9]+(\.0+)?$")
_HEADER_TYPES = ("string", "integer", "boolean")


def has_envelope(body: Any) -> bool:
    params = body.get("params") if isinstance(body, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and VERSION_META in meta


def check_envelope(ex: Exchange, method: str, params: dict[str, Any]) -> None:
    """Per-request metadata must be present and every mirrored header must match the body."""
    meta = params.get("_meta")
    if not isinstance(meta, dict) or VERSION_META not in meta or CAPABILITIES_META not in meta:
        raise RpcError(INVALID_PARAMS, f"params._meta must carry {VERSION_META!r} and"
                       f" {CAPABILITIES_META!r}.")
    headers = ex.request.headers
    if headers.get("MCP-Protocol-Version") != meta[VERSION_META]:
        raise RpcError(HEADER_MISMATCH, "The MCP-Protocol-Version header does not match the"
                       " protocol version in params._meta.")
    if headers.get("Mcp-Method") != method:
        raise RpcError(HEADER_MISMATCH, "The Mcp-Method header does not match the method.")
    name_key = NAME_PARAMS.get(method)
    if name_key and params.get(name_key) is not None and (
        decode_header_value(headers.get("Mcp-Name")) != params[name_key]
    ):
        raise RpcError(HEADER_MISMATCH, f"The Mcp-Name header does not match params.{name_key}.")


def decode_header_value(value: str | None) -> str | None:
    """A header value as sent, or the UTF-8 text inside a ``=?base64?…?=`` sentinel."""
    match = _SENTINEL.fullmatch(value) if value is not None else None
    if value is None or match is None:
        return value
    try:
        raw = base64.b64decode(match.group(1), validate=True)
        if base64.b64encode(raw).decode("ascii") != match.group(1):
            return None
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def _header_params(schema: Any) -> list[tuple[tuple[str, ...], str, str]]:
    """``x-mcp-header`` annotations reachable through ``properties`` alone; [] if any is invalid."""
    found: list[tuple[tuple[str, ...], str, str]] = []
    stack: list[tuple[tuple[str, ...], Any]] = [((), schema)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        if path and "x-mcp-header" in node:
            token, kind = node["x-mcp-header"], node.get("type")
            if not (isinstance(token, str) and _TOKEN.fullmatch(token) and kind in _HEADER_TYPES):
                return []  # conforming clients drop such a tool and send no headers
            found.append((path, token, str(kind)))
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            stack.extend(((*path, str(k)), v) for k, v in properties.items())
    tokens = [token.lower() for _, token, _ in found]
    return found if len(set(tokens)) == len(tokens) else []


def _value_at(arguments: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = arguments
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _rendered(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, (str, int, float)) else None


def _same_value(kind: str, value: Any, text: str) -> bool:
    numeric = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "integer" and numeric and not isinstance(value, bool) and _INTEGRAL.fullmatch(text):
        return int(text.split(".")[0]) == int(value)
    return text == _rendered(value)


def param_header_problem(
    definition: Tool, arguments: Mapping[str, Any], headers: Mapping[str, str]
) -> str | None:
    """Why the ``Mcp-Param-*`` headers disagree with the arguments, or None."""
    for path, token, kind in _header_params(definition.input_schema):
        name = f"Mcp-Param-{token}"
        raw, value = headers.get(name), _value_at(arguments, path)
        if value is None or _rendered(value) is None:
            if raw is not None:
                return f"The {name} header is present but its argument is absent."
            continue
        if raw is None:
            return f"The {name} header is missing."
        text = decode_header_value(raw)
        if text is None or not _same_value(kind, value, text):
            return f"The {name} header does not match its argument."
    return None
