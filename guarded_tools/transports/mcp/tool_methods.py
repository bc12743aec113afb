"""Provides the tools methods: tools/list and tools/call."""

from __future__ import annotations

from typing import Any

from guarded_tools.core.definition import Tool
from guarded_tools.core.errors import ConfirmationRequired, NotAuthenticated, ToolNotFound
from guarded_tools.core.registry import registry
from guarded_tools.pipeline import budget_status, trace_carrier
from guarded_tools.pipeline.gateway import Gateway, agent_error
from guarded_tools.transports.mcp import tasks as tasks_ext
from guarded_tools.transports.mcp.approvals import answers_with_task, awaiting
from guarded_tools.transports.mcp.headers import param_header_problem
from guarded_tools.transports.mcp.protocol import (
    BUDGETS_META,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    META_PREFIX,
    NO_TOOL,
    TASK_META,
    Exchange,
    RpcError,
    declares_tasks,
)
from guarded_tools.transports.mcp.results import error_result, success_result
from guarded_tools.transports.mcp.task_methods import task_fields
from guarded_tools.transports.rest.base import (
    described,
    invocation_for,
    open_to_anonymous,
    visible_tools,
)
from guarded_tools.transports.rest.exception_handler import docs_url


def describe_tool(definition: Tool, modern: bool, request: Any = None) -> dict[str, Any]:
    info = described(definition, request)
    entry = {k: info[k] for k in ("name", "title", "description", "inputSchema", "annotations")}
    schema = info.get("outputSchema")
    # Up to 2025-11-25 an output schema must describe an object.
    if schema is not None and (modern or schema.get("type") == "object"):
        entry["outputSchema"] = schema
    entry["_meta"] = {
        f"{META_PREFIX}/confirmation": info["confirmation"],
        f"{META_PREFIX}/idempotencyKey": info["idempotencyKey"],
    }
    if "policy" in info:  # in words, where every client shows it: the description
        entry["_meta"][f"{META_PREFIX}/policy"] = info["policy"]
        entry["description"] = f"{info['description']}\n\nApproval policy: {info['policy']}"
    if "allowances" in info:
        entry["_meta"][f"{META_PREFIX}/allowances"] = info["allowances"]
    if modern and answers_with_task(definition):
        # The extension declares nothing per tool (the server decides per call); this
        # says which calls may come back as a task, for clients that plan for it.
        entry["_meta"][TASK_META] = True
    return entry



def list_tools(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "tools": [describe_tool(t, ex.modern, ex.request)
                  for t in visible_tools(ex.request.user, ex.request) if t.reachable_over_mcp]
    }
    if ex.modern:
        # Per caller (permissions decide the list), and never stale after a change.
        result.update(ttlMs=0, cacheScope="private")
    return result


def _call_arguments(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    name, arguments = params.get("name"), params.get("arguments")
    if not isinstance(name, str):
        raise RpcError(INVALID_PARAMS, "tools/call needs params.name, the tool's name.")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise RpcError(INVALID_PARAMS, "params.arguments must be an object: the tool's input.")
    return name, arguments


def _find_tool(ex: Exchange, name: str, arguments: dict[str, Any]) -> Tool:
    definition = registry.find(name)
    if definition is None or not definition.reachable_over_mcp:
        error = ToolNotFound()
        raise RpcError(INVALID_PARAMS, "Unknown tool: call tools/list for the tools you may call.",
                       error.as_dict(docs_url(ex.request), NO_TOOL))
    user = ex.request.user
    if not user.is_authenticated and not open_to_anonymous(definition):
        raise NotAuthenticated()
    if ex.modern and (problem := param_header_problem(definition, arguments, ex.request.headers)):
        raise RpcError(HEADER_MISMATCH, problem)
    return definition


def call_tool(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    name, arguments = _call_arguments(params)
    definition = _find_tool(ex, name, arguments)
    result = _call(ex, params, definition, arguments)
    # What the caller has left of each of the tool's budgets, and when it frees.
    _fields, budgets = budget_status.for_answer(definition, ex.request.user)
    if budgets and isinstance(result, dict):
        result["_meta"] = {**result.get("_meta", {}), BUDGETS_META: budgets}
    return result


def _call(ex: Exchange, params: dict[str, Any], definition: Tool,
          arguments: dict[str, Any]) -> dict[str, Any]:
    # Agents cannot set a header per call over MCP: the key is an input field. The
    # trace context travels in params._meta (2026-07-28), else in the HTTP headers.
    meta = params.get("_meta")
    invocation = invocation_for(ex.request, arguments, header_key=None, transport="mcp",
                                trace=trace_carrier(meta if isinstance(meta, dict) else None),
                                wait=ex.wait_left())
    try:
        if definition.long_running and answers_with_task(definition) and declares_tasks(
                ex, params):
            started = tasks_ext.start(definition, invocation)
            if isinstance(started, tasks_ext.TaskRef):
                return {"resultType": "task", **task_fields(started.task_id, started,
                        tasks_ext.TaskState(tasks_ext.WORKING, "Queued; the call runs soon.",
                                            started.created_at))}
            result = started
        else:
            result = Gateway(definition).run(invocation)
    except Exception as exc:  # every failure becomes an error the agent can read
        error = agent_error(exc)
        # A refusal that challenges the credentials (401, or an OAuth scope step-up's 403)
        # is the transport's: the host reads its status and WWW-Authenticate.
        if isinstance(error, NotAuthenticated) or "WWW-Authenticate" in error.headers:
            raise error from exc
        if isinstance(error, ConfirmationRequired):
            waiting = awaiting(ex, params, definition, invocation, error)
            if waiting is not None:
                return waiting
        return error_result(definition, error, docs_url(ex.request))
    return success_result(definition, result, modern=ex.modern)
