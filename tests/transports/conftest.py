"""Fixtures of the transport tests: who parses a body, and what a site's handler reads."""

from __future__ import annotations

from typing import Any

import pytest

from guarded_tools.core.schema import parsers
from tests.transports import body_reads


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every body the strict JSON parser parses during the test."""
    seen: list[bytes] = []
    original = parsers.parse_json

    def counting(raw: bytes, *, max_depth: int) -> Any:
        seen.append(raw)
        return original(raw, max_depth=max_depth)

    monkeypatch.setattr(parsers, "parse_json", counting)
    return seen


@pytest.fixture
def handler_reads(settings: Any) -> list[Any]:
    """The site's ``EXCEPTION_HANDLER`` reads ``request.data``; what it saw, in order."""
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS,
                              "EXCEPTION_HANDLER": f"{body_reads.__name__}.reading"}
    body_reads.SEEN.clear()
    return body_reads.SEEN
