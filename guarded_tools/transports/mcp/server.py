"""Provides the MCP endpoint: the guarded tools over Streamable HTTP, JSON-RPC in and out."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from django.http import HttpResponse
from django.urls import NoReverseMatch
from rest_framework.request import Request
from rest_framework.utils.encoders import JSONEncoder

from guarded_tools.conf import gt_settings
from guarded_tools.core import hosts
from guarded_tools.core.errors import (
    AuthorizationError,
    ConfirmationRequired,
    GuardError,
    NotAuthenticated,
    ToolNotFound,
)
from guarded_tools.core.repair import Audience
from guarded_tools.core.version import VERSION
from guarded_tools.pipeline import GuardResult, confirmations, get_pipeline, trace_carrier
from guarded_tools.tools.registry import Tool, registry
from guarded_tools.transports.mcp import tasks as tasks_ext
from guarded_tools.transports.rest.base import (
    GuardedAPIView,
    invocation_for,
    prefer_wait,
    visible_tools,
)
from guarded_tools.transports.rest.exception_handler import (
    docs_url,
    log_once,
    timestamp,
    to_guard_error,
)

#: Who reads an error that is about no tool (the transport's own refusals, an unknown tool).
NO_TOOL = Audience(transport="mcp", tool=False)

# -- protocol constants ---------------------------------------------------------------------
MODERN_VERSIONS: tuple[str, ...] = ("2026-07-28",)
HANDSHAKE_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26")
SUPPORTED_VERSIONS: tuple[str, ...] = (*MODERN_VERSIONS, *HANDSHAKE_VERSIONS)
BATCH_VERSION = "2025-03-26"  # the only supported revision whose servers must accept batches
MAX_BATCH = 20

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022
# Application-defined (outside the JSON-RPC reserved range): the site refused the
# request before any method ran — authentication, permission, origin, throttle.
# ``error.data.code`` names which.
REQUEST_REFUSED = -31000
# A task's call ended in a decision the guard owns (declined, expired, outcome unknown):
# the task is ``failed`` with this error; ``error.data`` is the structured error.
TASK_CALL_FAILED = -31001
# ``tasks/cancel`` after the call started, or after the task ended; the message says which.
TASK_NOT_CANCELLABLE = -31002

VERSION_META = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
META_PREFIX = "io.github.guarded-tools"
OPERATION_META = f"{META_PREFIX}/operation"
ERROR_META = f"{META_PREFIX}/error"

TASK_META = f"{META_PREFIX}/mayAnswerWithTask"

CAPABILITIES: dict[str, Any] = {"tools": {"listChanged": False}}
#: 2026-07-28 adds the Tasks extension (``server/discover`` only: it is not defined before).
MODERN_CAPABILITIES: dict[str, Any] = {**CAPABILITIES,
                                       "extensions": {tasks_ext.EXTENSION: {}}}
DISCOVER_TTL_MS = 3_600_000
NAME_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
               "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}
#: The key of the URL elicitation that asks the user to approve on the consent page.
CONSENT_REQUEST = "consent"

_MODERN_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    UNSUPPORTED_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}
# Handshake-era errors about a method travel in a 200 body: a 404 there means
# "session terminated" to some clients.
_HANDSHAKE_STATUS = {PARSE_ERROR: 400, INVALID_REQUEST: 400, UNSUPPORTED_VERSION: 400}

_SENTINEL = re.compile(r"^=\?base64\?(.*)\?=$")
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_INTEGRAL = re.compile(r"^-?[0-9]+(\.0+)?$")
_HEADER_TYPES = ("string", "integer", "boolean")


class RpcError(Exception):
    """A JSON-RPC error for the current message."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


@dataclass(frozen=True)
class Exchange:
    """One POST: the DRF request, the protocol version it speaks and its era.

    ``wait_until`` (``time.monotonic()``) ends the POST's ``Prefer: wait``: the bound is
    for the request, shared by every call of a batch, not granted to each of them.
    """

    request: Request
    version: str
    modern: bool
    wait_until: float = 0.0

    def wait_left(self) -> float:
        """What is left of the request's ``Prefer: wait`` for the next call to use."""
        return max(self.wait_until - time.monotonic(), 0.0)


# -- JSON-RPC framing -----------------------------------------------------------------------
def _json(payload: Any, status: int = 200) -> HttpResponse:
    body = json.dumps(payload, cls=JSONEncoder, ensure_ascii=False)
    return HttpResponse(body.encode("utf-8"), status=status, content_type="application/json")


def _error(rid: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _id_of(message: Any) -> Any:
    rid = message.get("id") if isinstance(message, dict) else None
    return rid if _is_id(rid) else None


def _status(ex: Exchange, reply: dict[str, Any]) -> int:
    if "error" not in reply:
        return 200
    table = _MODERN_STATUS if ex.modern else _HANDSHAKE_STATUS
    return table.get(reply["error"]["code"], 200)


def _respond(ex: Exchange, reply: dict[str, Any] | None) -> HttpResponse:
    """202 with no body for an accepted notification, else the reply with its status."""
    if reply is None:
        return HttpResponse(status=202)
    return _json(reply, status=_status(ex, reply))


# -- one message ----------------------------------------------------------------------------
def _reply(ex: Exchange, message: Any) -> dict[str, Any] | None:
    """The JSON-RPC reply to one message, or None when nothing is owed."""
    if not isinstance(message, dict):
        return _error(None, INVALID_REQUEST, "Each message must be a JSON-RPC object.")
    if "method" not in message:
        if not ex.modern and "id" in message and ("result" in message or "error" in message):
            return None  # a response to a server request we never sent: accepted, ignored
        return _error(_id_of(message), INVALID_REQUEST, "A JSON-RPC request needs a method.")
    if message.get("jsonrpc") != "2.0" or not isinstance(message["method"], str):
        return _error(_id_of(message), INVALID_REQUEST, 'Send {"jsonrpc": "2.0", "method": ...}.')
    if "id" not in message:
        return None  # a notification: accepted, nothing to answer
    rid = message["id"]
    if not _is_id(rid):
        return _error(None, INVALID_REQUEST, "The id must be a string or an integer.")
    try:
        result = _dispatch(ex, message["method"], message.get("params"))
    except RpcError as exc:
        return _error(rid, exc.code, exc.message, exc.data)
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def _dispatch(ex: Exchange, method: str, params: Any) -> dict[str, Any]:
    if params is not None and not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object.")
    params = params or {}
    if ex.modern:
        _check_envelope(ex, method, params)
    handler = (_MODERN_METHODS if ex.modern else _HANDSHAKE_METHODS).get(method)
    if handler is None:
        raise RpcError(METHOD_NOT_FOUND, "Method not found.")
    return _finish(ex, handler(ex, params))


def _finish(ex: Exchange, result: dict[str, Any]) -> dict[str, Any]:
    """2026-07-28 results carry ``resultType`` and the server's identity in ``_meta``."""
    if ex.modern:
        result.setdefault("resultType", "complete")
        result["_meta"] = {**result.get("_meta", {}), SERVER_INFO_META: _server_info()}
    return result


def _batch(ex: Exchange, messages: list[Any]) -> HttpResponse:
    if ex.modern or ex.version != BATCH_VERSION:
        return _json(_error(None, INVALID_REQUEST, "JSON-RPC batches are not accepted in"
                            f" protocol version {ex.version}: send one message per POST."), 400)
    if not messages or len(messages) > MAX_BATCH:
        return _json(_error(None, INVALID_REQUEST,
                            f"A batch holds 1 to {MAX_BATCH} messages."), 400)
    replies = [r for r in (_batch_reply(ex, m) for m in messages) if r is not None]
    return _json(replies) if replies else HttpResponse(status=202)


def _batch_reply(ex: Exchange, message: Any) -> dict[str, Any] | None:
    if isinstance(message, dict) and message.get("method") == "initialize":
        return _error(_id_of(message), INVALID_REQUEST, "initialize must not be part of a batch.")
    return _reply(ex, message)


# -- 2026-07-28 envelope and headers ------------------------------------------------------
def _has_envelope(body: Any) -> bool:
    params = body.get("params") if isinstance(body, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and VERSION_META in meta


def _check_envelope(ex: Exchange, method: str, params: dict[str, Any]) -> None:
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


# -- methods ----------------------------------------------------------------------------------
@functools.cache
def _server_version() -> str:
    """This package's version (looked up once: it cannot change while the process runs)."""
    try:
        return metadata.version("guarded-tools")
    except metadata.PackageNotFoundError:  # used from a checkout, not installed
        return VERSION


def _server_info() -> dict[str, str]:
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


def _initialize(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    requested = params.get("protocolVersion")
    if not isinstance(requested, str):
        raise RpcError(INVALID_PARAMS, "initialize needs params.protocolVersion (a string).")
    version = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[0]
    return {
        "protocolVersion": version,
        "capabilities": CAPABILITIES,
        "serverInfo": _server_info(),
        "instructions": instructions(ex.request),
    }


def _ping(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    return {}


def _discover(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "supportedVersions": list(MODERN_VERSIONS),
        "capabilities": MODERN_CAPABILITIES,
        "instructions": instructions(ex.request),
        "ttlMs": DISCOVER_TTL_MS,
        "cacheScope": "public",
    }


def describe_tool(definition: Tool, modern: bool) -> dict[str, Any]:
    info = definition.describe()
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
    if modern and answers_with_task(definition):
        # The extension declares nothing per tool (the server decides per call); this
        # says which calls may come back as a task, for clients that plan for it.
        entry["_meta"][TASK_META] = True
    return entry


def answers_with_task(definition: Tool) -> bool:
    """Whether a call may answer a task: it waits for a staff approval, or is long-running."""
    if definition.owner_consent:
        return False  # the user's consent is asked in the call itself (input_required)
    return definition.queued_confirmation or (definition.long_running
                                              and definition.confirm_mode is None)


def _list_tools(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "tools": [describe_tool(t, ex.modern) for t in visible_tools(ex.request.user, ex.request)
                  if t.reachable_over_mcp]
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
    if not user.is_authenticated and definition not in visible_tools(user):
        raise NotAuthenticated()
    if ex.modern and (problem := param_header_problem(definition, arguments, ex.request.headers)):
        raise RpcError(HEADER_MISMATCH, problem)
    return definition


def _call_tool(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    name, arguments = _call_arguments(params)
    definition = _find_tool(ex, name, arguments)
    # Agents cannot set a header per call over MCP: the key is an input field. The
    # trace context travels in params._meta (2026-07-28), else in the HTTP headers.
    meta = params.get("_meta")
    invocation = dataclasses.replace(
        invocation_for(ex.request, arguments, header_key=None, transport="mcp",
                       trace=trace_carrier(meta if isinstance(meta, dict) else None)),
        wait=ex.wait_left(),
    )
    try:
        if definition.long_running and answers_with_task(definition) and declares_tasks(
                ex, params):
            started = tasks_ext.start(definition, invocation)
            if isinstance(started, tasks_ext.TaskRef):
                return {"resultType": "task", **_task_fields(started.task_id, started,
                        tasks_ext.TaskState(tasks_ext.WORKING, "Queued; the call runs soon.",
                                            started.created_at))}
            result = started
        else:
            result = get_pipeline(definition).run(invocation)
    except Exception as exc:  # every failure becomes an error the agent can read
        error = to_guard_error(exc)
        # A refusal that challenges the credentials (401, or an OAuth scope step-up's 403)
        # is the transport's: the host reads its status and WWW-Authenticate.
        if isinstance(error, NotAuthenticated) or "WWW-Authenticate" in error.headers:
            raise error from exc
        if isinstance(error, ConfirmationRequired):
            waiting = _awaiting(ex, params, definition, invocation, error)
            if waiting is not None:
                return waiting
        return error_result(definition, error, docs_url(ex.request))
    return success_result(definition, result, modern=ex.modern)


# -- approvals native to MCP: tasks (SEP-2663) and multi round-trip requests (SEP-2322) ------
def _client_capabilities(params: dict[str, Any]) -> dict[str, Any]:
    meta = params.get("_meta")
    caps = meta.get(CAPABILITIES_META) if isinstance(meta, dict) else None
    return caps if isinstance(caps, dict) else {}


def declares_tasks(ex: Exchange, params: dict[str, Any]) -> bool:
    """The request declares the Tasks extension (only 2026-07-28 defines it)."""
    extensions = _client_capabilities(params).get("extensions")
    return ex.modern and isinstance(extensions, dict) and isinstance(
        extensions.get(tasks_ext.EXTENSION), dict)


def accepts_url_elicitation(ex: Exchange, params: dict[str, Any]) -> bool:
    """The request declares URL-mode elicitation, which an ``inputRequests`` may then use."""
    elicitation = _client_capabilities(params).get("elicitation")
    return ex.modern and isinstance(elicitation, dict) and isinstance(elicitation.get("url"),
                                                                      dict)


def _awaiting(ex: Exchange, params: dict[str, Any], definition: Tool, inv: Any,
              error: ConfirmationRequired) -> dict[str, Any] | None:
    """A pending confirmation the MCP way, when the client supports it; else None.

    ``confirm="owner"``: an ``input_required`` result whose URL elicitation opens the
    consent page; the client's retry of the same call runs it once the user approved
    (or withdraws it when the user declined in the client). A staff approval, for a
    client with the Tasks extension: a task bound to the call.
    """
    pending = error.extra.get("confirmation") or {}
    if definition.owner_consent:
        responses = params.get("inputResponses")
        answer = responses.get(CONSENT_REQUEST) if isinstance(responses, dict) else None
        if isinstance(answer, dict) and answer.get("action") in ("decline", "cancel"):
            return _withdrawn(ex, definition, inv, str(pending.get("id")))
        if not accepts_url_elicitation(ex, params) or not pending.get("url"):
            return None
        return {
            "resultType": "input_required",
            "inputRequests": {CONSENT_REQUEST: {
                "method": "elicitation/create",
                "params": {
                    "mode": "url",
                    "message": f"Approve “{definition.annotations['title']}” yourself, signed"
                               " in to the site; then come back here.",
                    "url": pending["url"],
                },
            }},
        }
    if not answers_with_task(definition) or not declares_tasks(ex, params):
        return None
    confirmation = confirmations.hold_for_task(pending.get("id"))
    if confirmation is None:
        return None
    ref = tasks_ext.new_ref(definition, inv.scope, inv.key or "", inv.fingerprint, confirmation)
    return {
        "resultType": "task",
        **_task_fields(ref.task_id, ref, tasks_ext.TaskState(
            tasks_ext.WORKING, "Waiting for a person to approve the call; nothing has run yet.",
            confirmation.created_at)),
    }


def _withdrawn(ex: Exchange, definition: Tool, inv: Any, confirmation_id: str) -> dict[str, Any]:
    from guarded_tools.models import Confirmation

    confirmation = Confirmation.objects.filter(pk=confirmation_id).first()
    if confirmation is not None:
        confirmations.withdraw(confirmation, inv.user, "The user declined in their client.")
        return error_result(definition, confirmations.error_for(confirmation, ex.request),
                            docs_url(ex.request))
    return error_result(definition, ToolNotFound(), docs_url(ex.request))


def _poll_interval_ms() -> int:
    return confirmations.retry_after() * 1000


def _task_fields(task_id: str, ref: tasks_ext.TaskRef, st: tasks_ext.TaskState) -> dict[str, Any]:
    return {
        "taskId": task_id,
        "status": st.status,
        "statusMessage": st.message,
        "createdAt": timestamp(ref.created_at),
        "lastUpdatedAt": timestamp(max(st.updated_at, ref.created_at)),
        "ttlMs": None,  # kept as long as the call's own rows are
        "pollIntervalMs": _poll_interval_ms(),
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


def _get_task(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    task_id, ref, definition = _require_tasks(ex, params)
    st = tasks_ext.state(ref, definition)
    if st is None:
        raise RpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found")
    data = _task_fields(task_id, ref, st)
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


def _update_task(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    # No task of this server asks its client for input (a person approves in the admin):
    # any inputResponses answer no outstanding request, and are ignored, as the
    # extension says.
    _require_tasks(ex, params)
    return {}


def _cancel_task(ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    _, ref, _definition = _require_tasks(ex, params)
    try:
        tasks_ext.cancel(ref, ex.request.user)
    except tasks_ext.CancelRefused as exc:
        raise RpcError(TASK_NOT_CANCELLABLE, str(exc),
                       {"code": "task_not_cancellable"}) from exc
    return {}


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def success_result(definition: Tool, result: GuardResult, *, modern: bool) -> dict[str, Any]:
    output = result.answer()
    data: dict[str, Any] = {
        "content": [_text(json.dumps(output, cls=JSONEncoder, ensure_ascii=False))],
        "isError": False,
    }
    # Up to 2025-11-25 structured content must be an object.
    if isinstance(output, dict) or (modern and definition.output_schema is not None):
        data["structuredContent"] = output
    if result.operation is not None:
        data["_meta"] = {OPERATION_META: result.operation}
    return data


def error_result(definition: Tool, error: GuardError, docs: str = "") -> dict[str, Any]:
    """A guard error as a tool result: the portable message, and the structured error.

    The structured error is always in ``_meta``; it is also ``structuredContent`` unless
    the tool declares an output schema, because some clients validate an error
    result's structured content against that schema and then hide the error. Both
    are worded for an MCP caller of this tool.
    """
    audience = Audience(transport="mcp", keyed=definition.idempotent)
    structured = error.as_dict(docs, audience)
    retry_after = error.headers.get("Retry-After", "")
    if retry_after.isdigit():
        structured["retry_after"] = int(retry_after)
    return error_result_from(definition, structured)


def error_result_from(definition: Tool, structured: dict[str, Any]) -> dict[str, Any]:
    """The tool result of a structured error (:func:`error_result`)."""
    data: dict[str, Any] = {
        "content": [_text(structured["message"])],
        "isError": True,
        "_meta": {ERROR_META: structured},
    }
    if definition.output_schema is None:
        data["structuredContent"] = structured
    if isinstance(structured.get("operation"), dict):
        data["_meta"][OPERATION_META] = structured["operation"]
    return data


Method = Callable[[Exchange, dict[str, Any]], dict[str, Any]]
_HANDSHAKE_METHODS: dict[str, Method] = {
    "initialize": _initialize,
    "ping": _ping,
    "tools/list": _list_tools,
    "tools/call": _call_tool,
}
# ping and initialize are gone from 2026-07-28; server/discover replaces initialize.
_MODERN_METHODS: dict[str, Method] = {
    "server/discover": _discover,
    "tools/list": _list_tools,
    "tools/call": _call_tool,
    # The Tasks extension (io.modelcontextprotocol/tasks), for clients that declare it.
    "tasks/get": _get_task,
    "tasks/update": _update_task,
    "tasks/cancel": _cancel_task,
}


# -- HTTP --------------------------------------------------------------------------------------
def check_origin(request: Request) -> None:
    """DNS-rebinding protection: a browser Origin must be one the site trusts.

    Never the request's own Host: with ``ALLOWED_HOSTS = ["*"]`` a rebound page's Origin
    is its Host. See :func:`guarded_tools.core.hosts.origin_allowed`.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return
    if not hosts.origin_allowed(request, origin):
        raise AuthorizationError(
            "This Origin may not call the MCP endpoint. Call it from an agent, not a web page,"
            " or ask the site to add the origin to MCP_ALLOWED_ORIGINS.",
            status=403,
        )


def _rpc_code(error: GuardError) -> int:
    if error.code == "malformed_request" and error.status_code == 400:
        return PARSE_ERROR
    if error.code in ("malformed_request", "method_not_allowed", "request_too_large"):
        return INVALID_REQUEST
    if error.code == "internal_error":
        return INTERNAL_ERROR
    return REQUEST_REFUSED


def transport_error(exc: Exception, context: dict[str, Any]) -> HttpResponse:
    """DRF's exception handler for this view: a JSON-RPC error with the HTTP status."""
    error = to_guard_error(exc)
    data = error.as_dict(docs_url(context.get("request")), NO_TOOL)
    response = _json(_error(None, _rpc_code(error), data["message"], data), error.status_code)
    for name, value in error.headers.items():
        response[name] = value
    if error.status_code == 401:
        view, request = context.get("view"), context.get("request")
        header = view.get_authenticate_header(request) if view and request else None
        response["WWW-Authenticate"] = header or 'Token realm="api"'
    log_once(error, response)
    return response


def _require_caller(request: Request) -> None:
    """Anonymous callers get in only when some tool is open to them (as over REST)."""
    if not request.user.is_authenticated and not visible_tools(request.user):
        raise NotAuthenticated()


def serve(request: Request, body: Any) -> HttpResponse:
    """Route one POST by its protocol version: unsupported, 2026-07-28, or handshake era.

    Handshake era: ``initialize`` negotiates 2025-11-25, 2025-06-18 or 2025-03-26, and
    later requests name their version in ``MCP-Protocol-Version`` (absent means
    2025-03-26, the only version whose batches are accepted). 2026-07-28: every request
    carries its version and capabilities in ``params._meta``, mirrored in headers that
    must match the body; ``server/discover`` replaces ``initialize``. Nothing is kept
    between POSTs.
    """
    header = request.headers.get("MCP-Protocol-Version")
    if header is not None and header not in SUPPORTED_VERSIONS:
        data = {"supported": list(SUPPORTED_VERSIONS), "requested": header}
        return _json(_error(_id_of(body), UNSUPPORTED_VERSION, "Unsupported protocol version.",
                            data), 400)
    modern = header in MODERN_VERSIONS or (header is None and _has_envelope(body))
    version = header or (MODERN_VERSIONS[0] if modern else BATCH_VERSION)
    ex = Exchange(request=request, version=version, modern=modern,
                  wait_until=time.monotonic() + prefer_wait(request))
    if isinstance(body, list):
        return _batch(ex, body)
    return _respond(ex, _reply(ex, body))


class McpView(GuardedAPIView):
    """``POST mcp/``: MCP Streamable HTTP, JSON responses, stateless.

    The site's DRF authentication, CSRF (session auth), permission and throttle
    classes apply to every POST; their refusals are JSON-RPC errors with the HTTP
    status (401 carries ``WWW-Authenticate``). GET and DELETE answer 405.
    """

    oauth_surface = "mcp"

    def get_exception_handler(self) -> Any:
        return transport_error

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # JSON is the only answer; clients must accept it, so never refuse with 406.
        return super().perform_content_negotiation(request, force=True)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        check_origin(request)
        super().initial(request, *args, **kwargs)

    def post(self, request: Request) -> HttpResponse:
        _require_caller(request)
        return serve(request, self.request_body(request))

