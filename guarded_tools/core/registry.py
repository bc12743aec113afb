"""Provides the registry of tool definitions: how every layer reaches a definition by name.

As Django's ``apps`` registry lets any module find an installed app, this registry lets
the pipeline (recovery, confirmations, reconciliation, presentation) find the definition
of a stored call without importing the tools layer that fills it (``@tool``,
``autodiscover()`` in ``guarded_tools.tools.registry``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from guarded_tools.core.definition import Tool

__all__ = ["AlreadyRegistered", "NotRegistered", "ToolRegistry", "registry"]


class AlreadyRegistered(Exception):
    pass


class NotRegistered(KeyError):
    pass


class ToolRegistry:
    """Every tool registered in this process, by name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tools: dict[str, Tool] = {}

    def register(self, definition: Tool) -> Tool:
        with self._lock:
            if definition.name in self._tools:
                raise AlreadyRegistered(f"A tool named {definition.name!r} is already registered.")
            self._tools[definition.name] = definition
        return definition

    def unregister(self, name: str) -> None:
        with self._lock:
            if self._tools.pop(name, None) is None:
                raise NotRegistered(name)

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise NotRegistered(name) from None

    def find(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def reset(self) -> None:
        with self._lock:
            self._tools.clear()

    def __iter__(self) -> Iterator[Tool]:
        return iter(sorted(self._tools.values(), key=lambda t: t.name))

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)


registry = ToolRegistry()
