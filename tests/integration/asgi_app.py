"""The demo's ASGI application plus tools that tests drive through a real uvicorn."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from guarded_tools import tool
from project.asgi import application  # noqa: F401 - what uvicorn serves

MARKERS = Path(os.environ.get("GT_TEST_MARKERS", "/tmp"))
SCHEMA = {"type": "object", "properties": {"operationId": {"type": "string"}},
          "required": ["operationId"]}


def mark(name: str) -> None:
    (MARKERS / name).write_text(str(time.time()))


@tool(name="slow_async", input_schema=SCHEMA, idempotency_key="operationId",
      allow_anonymous=False)
async def slow_async(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    mark("async-started")
    try:
        for _ in range(300):  # 30 s: far longer than the test takes to go away
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        mark("async-cancelled")
        raise
    mark("async-finished")
    return {"done": True}


#: The caller's signal of each slow_finalization call, by operationId, for its verify.
CALLER_SIGNALS: dict[str, Any] = {}


def slow_verify(*, input: dict[str, Any], **kw: Any) -> bool:
    """Finalization that lasts until the server has seen its client go away (30 s at most)."""
    caller = CALLER_SIGNALS.pop(input["operationId"], None)
    if caller is None:  # a replay: nothing is finalizing
        return True
    mark("verify-started")
    if caller.wait(30):
        mark("verify-saw-disconnect")
    mark("verify-finished")
    return True


@tool(name="slow_finalization", input_schema=SCHEMA, idempotency_key="operationId",
      verify=slow_verify)
def slow_finalization(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.operation.write({"effect": "done"})
    CALLER_SIGNALS[input["operationId"]] = ctx.signal
    return {"effect": "done", "aborted_during_handler": ctx.signal.aborted}


@tool(name="sync_under_asgi", input_schema=SCHEMA, idempotency_key="operationId")
def sync_under_asgi(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"sync": True}


@tool(name="watching_sync", input_schema=SCHEMA, idempotency_key="operationId")
def watching_sync(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A sync handler that stops when its caller's signal says the client went away."""
    mark("sync-started")
    for _ in range(600):  # 30 s: far longer than the test takes to go away
        if ctx.signal.aborted:
            mark("sync-aborted")
            return {"aborted": True}
        time.sleep(0.05)
    mark("sync-finished")
    return {"aborted": False}


@tool(name="tasks_after_restart", input_schema=SCHEMA, idempotency_key="operationId",
      confirm="effect-only")
def tasks_after_restart(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A call a person approves; its MCP task is polled from another process."""
    return {"ran": input["operationId"]}
