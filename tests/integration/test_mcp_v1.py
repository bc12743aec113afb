"""The official ``mcp`` client of the 1.x line, end to end (run in the Django 5.2 env).

The main environment tests the current 2.x line in test_mcp.py; the two lines do not
install side by side, so each environment carries one.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

if __import__("importlib.metadata").metadata.version("mcp").startswith("2"):
    pytest.skip("the mcp 2.x line is tested in test_mcp.py", allow_module_level=True)

import anyio
from django.utils import timezone
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from rest_framework.authtoken.models import Token

from project.demo.models import Slot
from tests.conftest import key

pytestmark = pytest.mark.django_db(transaction=True)
ITEM = {"type": "object", "required": ["operationId", "qty"],
        "properties": {"operationId": {"type": "string"},
                       "qty": {"type": "integer", "minimum": 1}}}


def test_the_1x_client_lists_calls_replays_and_reads_repairs(live_server: Any, user_factory: Any,
                                                             make_tool: Any) -> None:
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    user = user_factory("v1-agent")
    token = Token.objects.create(user=user).key
    taken = Slot.objects.create(starts_at=timezone.now(), resource="B",
                                booked_by=user_factory("other"))
    add = make_tool(lambda input, ctx: {"added": input["qty"]}, input_schema=ITEM)
    seen: dict[str, Any] = {}

    async def main() -> None:
        transport = streamablehttp_client(f"{live_server.url}/agent/mcp/",
                                          headers={"Authorization": f"Token {token}"})
        async with transport as (read, write, _), ClientSession(read, write) as session:
            seen["init"] = await session.initialize()
            seen["tools"] = [t.name for t in (await session.list_tools()).tools]
            k = key()
            seen["ok"] = await session.call_tool(add.name, {"operationId": k, "qty": 4})
            seen["replay"] = await session.call_tool(add.name, {"operationId": k, "qty": 4})
            seen["invalid"] = await session.call_tool(add.name, {"operationId": key(), "qty": 0})
            seen["stale"] = await session.call_tool("book_slot",
                                                    {"operationId": key(), "slotId": taken.pk})

    anyio.run(main)
    assert seen["init"].protocolVersion in ("2025-11-25", "2025-06-18")
    assert add.name in seen["tools"] and "book_slot" in seen["tools"]
    ok, replay = seen["ok"], seen["replay"]
    assert ok.isError is False and ok.structuredContent == {"added": 4}
    assert json.loads(ok.content[0].text) == {"added": 4}
    first = ok.meta["io.github.guarded-tools/operation"]
    again = replay.meta["io.github.guarded-tools/operation"]
    assert (first["replayed"], again["replayed"], again["id"]) == (False, True, first["id"])
    invalid = seen["invalid"]
    assert invalid.isError is True
    assert invalid.meta["io.github.guarded-tools/error"]["code"] == "invalid_input"
    stale = seen["stale"]
    assert stale.isError is True and stale.structuredContent["code"] == "slot_stale"
    assert stale.structuredContent["repair"]["tool"] == "list_available_slots"
