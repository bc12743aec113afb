"""Provides the execution stage: runs the tool's handler (an ``async def`` one on the loop).

The stage list's last stage with ``execute(call, ctx)`` runs the handler; a site replaces
this one to run handlers another way (under a tenant, a timeout, a span). What happens
around the handler (the claim, release, recovery, completion) stays the pipeline's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync

from guarded_tools.pipeline.stages.base import Call, Stage


class ExecutionStage(Stage):
    """Calls the handler with the input and its ``ToolContext``; returns the output."""

    name = "execution"
    stateless = True

    def execute(self, call: Call, ctx: Any) -> Any:
        """Run the handler; an ``async def`` one runs on the server's event loop.

        Under ASGI the coroutine runs natively on the server's loop (asgiref's
        ``async_to_sync`` from the request thread); when the caller's signal is
        aborted (the client went away) the coroutine is cancelled.
        """
        handler = call.tool.handler
        if call.tool.is_async:
            return async_to_sync(_cancellable)(handler, dict(call.inv.input), ctx)
        return handler(dict(call.inv.input), ctx)


def _cancel_soon(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
    loop.call_soon_threadsafe(task.cancel)


async def _cancellable(handler: Callable[..., Any], input: dict[str, Any], ctx: Any) -> Any:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        ctx.signal.on_abort(lambda reason: _cancel_soon(loop, task))
    return await handler(input, ctx)
