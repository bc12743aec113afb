"""Provides the Tasks extension's methods (tasks/get, tasks/update, tasks/cancel), their fields."""

from __future__ import annotations

import math
from typing import Any

from guarded_tools.conf import gt_settings
from guarded_tools.confirmations import queue as confirmations
from guarded_tools.core.definition import Tool
from guarded_tools.core.errors import GuardError
from guarded_tools.core.repair import Audience
from guarded_tools.core.times import timestamp
from guarded_tools.pipeline import GuardResult
from guarded_tools.transports.mcp import tasks as tasks_ext
from guarded_tools.transports.mcp.protocol import (
    INVALID_PARAMS,
    MISSING_CAPABILITY,
    TASK_CALL_FAILED,
    TASK_NOT_CANCELLABLE,
    Exchange,
    RpcError,
    declares_tasks,
)
from guarded_tools.transports.mcp.results import error_result_from, success_result
from guarded_tools.transports.rest.exception_handler import docs_url


def poll_interval_ms(waits_for_person: bool = True) -> int:
    """How long a client waits between polls: a person's pace while the task waits for
    one (``CONFIRMATION_RETRY_AFTER_SECONDS``), else the guard's own poll, at least 1 s."""
    if waits_for_person:
        return confirmations.retry_after() * 1000
    return max(math.ceil(gt_settings.CONFIRMATION_POLL_INTERVAL), 1) * 1000


def task_fields(task_id: str, ref: tasks_ext.TaskRef, st: tasks_ext.TaskState) -> dict[str, Any]:
    return {
        "taskId": task_id,
        "status": st.status,
        "statusMessage": st.message,
        "createdAt": timestamp(ref.created_at),
        "lastUpdatedAt": timestamp(max(st.updated_at, ref.created_at)),
        "ttlMs": None,  # kept as long as the call's own rows are
        "pollIntervalMs": poll_interval_ms(st.waits_for_person),
    }


def _require_tasks(ex: Exchange, params: dict[str, Any]) -> tuple[str, tasks_ext.TaskRef, Tool]:
    if not declares_tasks(ex, params):
        raise RpcError(MISSING_CAPABILITY, "Missing required client capability: declare the"
                       f" {tasks_ext.EXTENSION} extension.",
                       {"requiredCapabilities": {"extensions": {tasks_ext.EXTENSION: {}}}})
    task_id = params.get("taskId")
    found = tasks_ext.resolve(task_id, ex.request.user)
    if found is None:
        # An unknown, forged or expired id, or another principal's: the same answer.
        raise RpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found")
    ref, definition = found
    tasks_ext.authorize(ref, definition, ex.request)  # as the call's replay would be
    return str(task_id), ref, definition


def _structured(ex: Exchange, definition: Tool,
                error: GuardError | dict[str, Any]) -> dict[str, Any]:
    if isinstance(error, dict):
        return error
    return error.as_dict(docs_url(ex.request), Audience(transport="mcp",
                                                        keyed=definition.idempotent))


def get_task(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    task_id, ref, definition = _require_tasks(ex, params)
    st = tasks_ext.state(ref, definition)
    if st is None:
        raise RpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found")
    data = task_fields(task_id, ref, st)
    if st.status == tasks_ext.COMPLETED:
        if st.error is not None:
            call = error_result_from(definition, _structured(ex, definition, st.error))
        else:
            call = success_result(definition, GuardResult(
                output=st.output, operation=st.operation, replayed=True,
                recovered=st.recovered), modern=True)
        # The CallToolResult the call would have answered, as 2026-07-28 frames every
        # result (the official Tasks client parses it with that schema).
        data["result"] = {**call, "resultType": "complete"}
    elif st.status == tasks_ext.FAILED:
        structured = _structured(ex, definition, st.error or {})
        data["error"] = {"code": TASK_CALL_FAILED, "message": structured.get("message", ""),
                         "data": structured}
    return data


def update_task(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    # No task of this server asks its client for input (a person approves in the admin):
    # any inputResponses answer no outstanding request, and are ignored, as the
    # extension says.
    _require_tasks(ex, params)
    return {}


def cancel_task(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    _, ref, _definition = _require_tasks(ex, params)
    try:
        tasks_ext.cancel(ref, ex.request.user)
    except tasks_ext.CancelRefused as exc:
        raise RpcError(TASK_NOT_CANCELLABLE, str(exc),
                       {"code": "task_not_cancellable"}) from exc
    return {}
