"""Provides the methods that present the server: initialize, ping, server/discover."""

from __future__ import annotations

import functools
from importlib import metadata
from typing import Any

from django.urls import NoReverseMatch
from rest_framework.request import Request

from guarded_tools.conf import gt_settings
from guarded_tools.core import hosts
from guarded_tools.core.version import VERSION
from guarded_tools.transports.mcp import tasks as tasks_ext
from guarded_tools.transports.mcp.protocol import (
    HANDSHAKE_VERSIONS,
    INVALID_PARAMS,
    MODERN_VERSIONS,
    Exchange,
    RpcError,
)

CAPABILITIES: dict[str, Any] = {"tools": {"listChanged": False}}
#: 2026-07-28 adds the Tasks extension (``server/discover`` only: it is not defined before).
MODERN_CAPABILITIES: dict[str, Any] = {**CAPABILITIES,
                                       "extensions": {tasks_ext.EXTENSION: {}}}
DISCOVER_TTL_MS = 3_600_000


@functools.cache
def _server_version() -> str:
    """This package's version (looked up once: it cannot change while the process runs)."""
    try:
        return metadata.version("guarded-tools")
    except metadata.PackageNotFoundError:  # used from a checkout, not installed
        return VERSION


def server_info() -> dict[str, str]:
    return {"name": gt_settings.SERVER_NAME, "version": _server_version()}


def _catalog_url(request: Request, name: str, fallback: str) -> str:
    try:
        return hosts.absolute_url(request, hosts.app_path(request, name))
    except NoReverseMatch:
        return fallback


def instructions(request: Request) -> str:
    errors = _catalog_url(request, "errors-json", "errors.json")
    llms = _catalog_url(request, "llms-txt", "llms.txt")
    return (
        f"{gt_settings.SERVER_NAME} exposes guarded tools: every call is validated and"
        " authorized, and some need a person's approval before they run. A refused call"
        " comes back as a tool result with isError true: its text names the error code, the"
        " retry policy and the next action; structuredContent holds code, retry, repair, why,"
        " fix and link. Tools that change state take an operation id field: use a new UUID"
        " for each intended operation and send the same id, unchanged, when you retry it, so"
        f" it never runs twice. Load the error catalog once: {errors} (JSON) or {llms}."
    )


def initialize(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    requested = params.get("protocolVersion")
    if not isinstance(requested, str):
        raise RpcError(INVALID_PARAMS, "initialize needs params.protocolVersion (a string).")
    version = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[0]
    return {
        "protocolVersion": version,
        "capabilities": CAPABILITIES,
        "serverInfo": server_info(),
        "instructions": instructions(ex.request),
    }


def ping(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    return {}


def discover(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "supportedVersions": list(MODERN_VERSIONS),
        "capabilities": MODERN_CAPABILITIES,
        "instructions": instructions(ex.request),
        "ttlMs": DISCOVER_TTL_MS,
        "cacheScope": "public",
    }
