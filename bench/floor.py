"""Provides the bench's floors: what a guarded call must send the database, and nothing else.

``floor_call`` is configuration F (``/floor/``), an atomic tool's fresh call (B) without
the guard: B less F is the guard's own Python, F less A what the statements the guard
must send cost; with the permission query and a journal entry it is F-D
(``/floor-full/``), D's statements. ``floor_claimed_call`` is F-R (``/floor-remote/``),
R-guarded's claim and completion around the realistic handler; ``floor_replay`` is F-C
(``/floor-replay/``), a replay answered from memory with no guard at all.
``keyed_mcp_floor`` is F-K (``/agent/mcp/floor/``, which the app's ASGI entry serves as
it serves MCP: one crossing into a thread, then Django's WSGI handler), the keyed MCP
call's floor in the peer table (``bench.peer``): the site's middleware and its DRF
authentication (the token's query), the JSON-RPC ``tools/call`` read, the claim and the
completion of ``floor_claimed_call`` around the echo, and the answer ``bench/mcp.lua``
checks, with nothing of the guard. The statements are the store's own, written by the
store in use, so the database does for a floor what it does for the guarded call;
``tests/store/test_sql_counts.py`` checks that F, F-D, F-R and F-K send what the guarded
calls send, round trip for round trip.
``keyed_features_floor`` is F-K+ (``/agent/mcp/floor/features/``): F-K with everything the
keyed call does for its caller written inline (the strict parse, the input validator,
the fingerprint, the replay cache, the events, the output encoded once, the app's answer)
and none of the guard's frame; ``bench.frame`` measures the frame with it.
``read_mcp_floor`` is F-M (``/agent/mcp/floor/read/``, served by the ASGI entry as F-K is),
the read-only MCP call's floor: what the app's anonymous ``tools/call`` of ``echo`` must do
and nothing of the guard: the site's middleware and DRF authentication, the body read with
the size limit and parsed once by the app's strict parser, the arguments checked by the
tool's compiled input validator, the output by its output schema compiled once, and the
app's answer, byte for byte. ``tests/integration/test_bench_floor_read.py`` checks that it
answers what the app answers and refuses what the app refuses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, cast

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.settings import api_settings

from guarded_tools.conf import gt_settings
from guarded_tools.core.definition import Tool
from guarded_tools.core.errors import GuardError, MalformedRequest
from guarded_tools.core.jsonvalues import JSON_ENCODER, Spliced
from guarded_tools.core.registry import registry
from guarded_tools.core.schema.fast import compile_fast_check
from guarded_tools.core.schema.parsers import read_limited
from guarded_tools.core.schema.validation import compile_schema, parse_json, validate
from guarded_tools.pipeline import principal_scope
from guarded_tools.pipeline.events import Events
from guarded_tools.store.history import Event
from guarded_tools.store.replays import replays
from guarded_tools.store.values import canonical, digest, fresh_values
from guarded_tools.transports.mcp.protocol import (
    ENCODER,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    OPERATION_META,
    id_of,
    is_id,
    json_response,
    json_string,
    rpc_error,
)
from guarded_tools.transports.mcp.results import error_result
from guarded_tools.transports.mcp.server import rpc_response
from guarded_tools.transports.rest.exception_handler import docs_url


def floor_call(*, tool: str, scope: str, key: str, user: Any, input: Any,
               effect: Callable[[], Any], journal: Sequence[Any] = ()) -> Any:
    """``effect()`` and the operation of ``key`` (succeeded, with its history: claimed, a
    row per ``journal`` entry, succeeded) in one transaction, after the key's lock and read
    (the store's ``lock_key``): an atomic tool's fresh call without the guard. ``journal``:
    the entries its handler writes (D's one), inserted with the operation. Raises
    ``AssertionError`` when the key is not free."""
    store = gt_settings.STORE_CLASS()  # the SQL store of the database in use
    statements, connection = store.statements, store.connection
    with transaction.atomic(using=connection.alias):
        assert store.lock_key(tool=tool, scope=scope, key=key).state == "locked", key
        output = effect()
        values = {**fresh_values(tool=tool, scope=scope, key=key, fp="", input=input,
                                 user=user), "state": "succeeded", "owner": "", "output": output}
        pk, now, actor = values["id"], timezone.now(), f"agent {user.get_username()}"
        history = [Event(pk, now, "claimed", actor, 1, {}),
                   *[Event(pk, now, "journal", actor, 1, {"data": data}) for data in journal],
                   Event(pk, now, "succeeded", actor, 1, {})]
        parts = [(statements.completed, statements.params(values, connection, claim=False))]
        if journal:
            ref = statements.pk.get_db_prep_value(pk, connection)  # the entries' operation
            parts.append(statements.journal_params(ref, 1, [(data, False) for data in journal],
                                                   connection))
        store.send([*parts, statements.events(history, connection)], connection=connection)
    return output


def floor_claimed_call(*, tool: str, scope: str, key: str, user: Any, input: Any,
                       effect: Callable[[], Any]) -> Any:
    """``effect()`` between the claim and the completion, as a tool that is not atomic runs
    (R-guarded): the claim (``INSERT … ON CONFLICT DO NOTHING RETURNING``, committed), the
    effect, then the completion with its history of two rows in one statement (PostgreSQL's
    data-modifying ``WITH``). PostgreSQL only: SQLite's store records the history with the
    ORM. Raises ``AssertionError`` when the key already exists."""
    return floor_claimed_operation(tool=tool, scope=scope, key=key, user=user, input=input,
                                   effect=effect)[0]


def floor_claimed_operation(*, tool: str, scope: str, key: str, user: Any, input: Any,
                            effect: Callable[[], Any], fp: str = "") -> tuple[Any, str]:
    """:func:`floor_claimed_call`'s output, and the id of the operation it completed
    (with the input's fingerprint ``fp``, where a floor computes one)."""
    store = gt_settings.STORE_CLASS()
    statements, connection = store.statements, store.connection
    assert connection.vendor == "postgresql", "the claim-first floor is PostgreSQL's"
    values = fresh_values(tool=tool, scope=scope, key=key, fp=fp, input=input, user=user)
    params = statements.params(values, connection, claim=True, lease_seconds=300)
    assert store.send([(statements.claim, params)], rows=True, connection=connection)[0], \
        f"the key {key!r} exists"
    output = effect()
    pk, actor = values["id"], f"agent {user.get_username()}"
    ref = statements.pk.get_db_prep_value(pk, connection)
    events = [Event(pk, timezone.now(), kind, actor, 1, {}) for kind in ("claimed", "succeeded")]
    sql, event_params = statements.recording(statements.complete, events, connection)
    done = store.send([(sql, [
        "succeeded", statements.output.get_db_prep_save(output, connection), False, "",
        ref, values["owner"], 1, "in_flight", *event_params,
    ])], rows=True, connection=connection)[0][0][0]
    assert done == 1
    return output, str(pk)


def _rpc(rid: Any, result: dict[str, Any], status: int = 200) -> HttpResponse:
    return HttpResponse(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}),
                        status=status, content_type="application/json")


def site_user(request: HttpRequest) -> tuple[Request, Any]:
    """DRF's request for ``request`` and its caller, as the site's
    ``DEFAULT_AUTHENTICATION_CLASSES`` authenticate it (None where one refuses)."""
    classes = cast(list[type[BaseAuthentication]], api_settings.DEFAULT_AUTHENTICATION_CLASSES)
    drf = Request(request, authenticators=[auth() for auth in classes])
    try:
        return drf, drf.user
    except APIException:
        return drf, None


@csrf_exempt  # as DRF's views are: its SessionAuthentication enforces CSRF itself
def keyed_mcp_floor(request: HttpRequest) -> HttpResponse:
    """F-K: a keyed ``tools/call`` over MCP (one stateless POST, JSON) answered with
    :func:`floor_claimed_operation`'s statements around the echo of its ``value``: the
    caller authenticated by the site's ``DEFAULT_AUTHENTICATION_CLASSES`` (the bench
    user's DRF token: one query), the body read with ``json.loads``, the answer the app's
    MCP answer (text and structured content, the operation in ``_meta``). No guard: no
    schema, no fingerprint, no registry, no replay. PostgreSQL only."""
    _, user = site_user(request)
    if user is None or not user.is_authenticated:
        return HttpResponse(status=401)
    message = json.loads(request.body)
    arguments = message["params"]["arguments"]
    key = str(arguments["operationId"])
    output, pk = floor_claimed_operation(
        tool=message["params"]["name"], scope=principal_scope(user, None) or "", key=key,
        user=user, input=arguments, effect=lambda: {"value": arguments["value"]})
    return _rpc(message.get("id"), {
        "content": [{"type": "text", "text": json.dumps(output)}], "isError": False,
        "structuredContent": output,
        "_meta": {OPERATION_META: {"id": pk, "key": key, "status": "succeeded",
                                   "replayed": False, "recovered": False}}})


def check_input(definition: Tool, arguments: Any) -> None:
    """``arguments`` checked by the tool's compiled input validator, as the guard checks
    them (its fast check first); the guard's ``invalid_input`` when they fail."""
    accepts = definition.accepts
    if accepts is None or not accepts(arguments):
        validate(definition.validator, arguments, known=definition.schema_names,
                 max_issues=gt_settings.MAX_ISSUES)


def keyed_call(user: Any, definition: Tool,
               arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The keyed call's work with none of the guard's frame: ``(output's JSON text, the
    operation's summary)``. Raises ``AssertionError`` when the key is not fresh."""
    check_input(definition, arguments)
    key, scope = str(arguments["operationId"]), principal_scope(user, None) or ""
    events = Events(definition)
    events.emit("started")
    assert replays.get(definition.name, scope, key) is None, key
    text = canonical(arguments)
    fp = digest(text)
    output, output_json, summary = claimed_echo(user, definition.name, scope, key, fp, arguments,
                                                events)
    replays.put(definition.name, scope, key, fingerprint=fp, output=output, operation=summary,
                recovered=False, output_json=output_json, canonical=text)
    events.emit("succeeded", replayed=False, recovered=False)
    return output_json, summary


def claimed_echo(user: Any, tool: str, scope: str, key: str, fp: str,
                 arguments: dict[str, Any], events: Events
                 ) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """:func:`floor_claimed_operation` around the echo of ``arguments["value"]``, its event
    and its output encoded once: ``(output, its JSON text, the operation's summary)``."""
    output, pk = floor_claimed_operation(tool=tool, scope=scope, key=key, user=user,
                                         input=arguments, fp=fp,
                                         effect=lambda: {"value": arguments["value"]})
    events.emit("executed")
    return output, JSON_ENCODER.encode(output), {"id": pk, "key": key, "status": "succeeded",
                                                 "replayed": False, "recovered": False}


def tool_result(output_json: str, summary: dict[str, Any]) -> dict[str, Any]:
    """The ``tools/call`` result the app answers for a fresh keyed call."""
    return {"content": [{"type": "text", "text": json_string(output_json)}], "isError": False,
            "structuredContent": Spliced(output_json), "_meta": {OPERATION_META: summary}}


@csrf_exempt  # as DRF's views are: its SessionAuthentication enforces CSRF itself
def keyed_features_floor(request: HttpRequest) -> HttpResponse:
    """F-K+: a keyed ``tools/call`` over MCP (one stateless POST, JSON), the caller
    authenticated by the site's ``DEFAULT_AUTHENTICATION_CLASSES``, then
    :func:`keyed_call`, answered as the app answers it."""
    drf, user = site_user(request)
    if user is None or not user.is_authenticated:
        return HttpResponse(status=401)
    raw = read_limited(request, request.META, gt_settings.MAX_BODY_BYTES)
    message = parse_json(raw, max_depth=gt_settings.MAX_JSON_DEPTH)
    params = message["params"]
    definition = registry.find(params["name"])
    assert definition is not None, params["name"]
    try:
        output_json, summary = keyed_call(user, definition, params["arguments"])
    except GuardError as error:  # an input the schema refuses, answered as the app does
        return json_response({"jsonrpc": "2.0", "id": message["id"],
                              "result": error_result(definition, error, docs_url(drf))})
    return json_response({"jsonrpc": "2.0", "id": message["id"],
                          "result": tool_result(output_json, summary)})


class _ReadTool:
    """What F-M checks a call of one registered read-only tool with, resolved once: its
    definition (the input validator and its fast check the guard compiled), and its output
    schema's fast check and validator compiled here once (the guard does not validate a
    call's output: F-M does more than the read call there, about a microsecond)."""

    def __init__(self, definition: Tool) -> None:
        assert definition.output_schema is not None, f"{definition.name} has no output schema"
        self.definition = definition
        self.schema = dict(definition.output_schema)
        self.output_accepts = compile_fast_check(self.schema)
        self.output_validator = compile_schema(self.schema, name=definition.name)

    def output_valid(self, output: Any) -> bool:
        if self.output_accepts is not None and self.output_accepts(output):
            return True
        return next(self.output_validator.iter_errors(output), None) is None


def read_mcp_floor_of(name: str) -> Callable[[HttpRequest], HttpResponse]:
    """F-M's view for the registered read-only tool ``name`` whose handler echoes its
    ``value``; the tool is looked up at the view's first call, and only then."""
    resolved: list[_ReadTool] = []

    def tool() -> _ReadTool:
        if not resolved:
            definition = registry.find(name)
            assert definition is not None and definition.read_only, f"no read-only {name!r}"
            resolved.append(_ReadTool(definition))
        return resolved[0]

    @csrf_exempt  # as DRF's views are: its SessionAuthentication enforces CSRF itself
    def read_mcp_floor(request: HttpRequest) -> HttpResponse:
        """F-M: an anonymous or authenticated read-only ``tools/call`` over MCP (one
        stateless POST, JSON): the caller authenticated by the site's
        ``DEFAULT_AUTHENTICATION_CLASSES`` (anonymous allowed), the body read with the
        size limit and parsed once by the strict parser (no duplicate key, no NaN, bounded
        depth), the arguments validated by the tool's input validator, the echo, its
        output validated against the output schema, and the app's answer encoded once.
        No guard: no registry lookup per call, no stage, no event, no budget."""
        drf, user = site_user(request)  # authenticated now, as the app's view does first
        if user is None:
            return HttpResponse(status=401)
        read = tool()
        try:
            if request.content_type != "application/json":
                raise MalformedRequest("Send the JSON-RPC message as application/json.",
                                       status=415)
            raw = read_limited(request, request.META, gt_settings.MAX_BODY_BYTES)
            message = parse_json(raw, max_depth=gt_settings.MAX_JSON_DEPTH)
        except GuardError as error:
            return rpc_response(error, drf)
        rid = id_of(message)
        params = message.get("params") if isinstance(message, dict) else None
        arguments = params.get("arguments") if isinstance(params, dict) else None
        if (not is_id(rid) or message.get("jsonrpc") != "2.0"
                or message.get("method") != "tools/call"):
            return json_response(rpc_error(rid, INVALID_REQUEST, "F-M answers tools/call."),
                                 400)
        if params.get("name") != read.definition.name or not isinstance(arguments, dict):
            return json_response(rpc_error(rid, INVALID_PARAMS,
                                           f"F-M calls {read.definition.name}: arguments"
                                           " must be an object."))
        try:
            check_input(read.definition, arguments)
        except GuardError as error:
            return json_response({"jsonrpc": "2.0", "id": rid, "result": error_result(
                read.definition, error, docs_url(drf))})
        output = {"value": arguments["value"]}
        if not read.output_valid(output):
            return json_response(rpc_error(rid, INTERNAL_ERROR, "The output is invalid."))
        text = JSON_ENCODER.encode(output)
        body = (f'{{"jsonrpc": "2.0", "id": {ENCODER.encode(rid)}, "result": {{"content":'
                f' [{{"type": "text", "text": {ENCODER.encode(text)}}}], "isError": false,'
                f' "structuredContent": {text}}}}}')
        return HttpResponse(body.encode("utf-8"), content_type="application/json")

    return read_mcp_floor


#: F-M of the bench's ``echo`` (``bench.tools``).
read_mcp_floor = read_mcp_floor_of("echo")


#: The floor of a replay (C-floor): answers a key's stored output from this process's memory.
ANSWERS: dict[tuple[Any, str], Any] = {}


def floor_replay(*, user: Any, key: str, effect: Callable[[], Any]) -> Any:
    """The output stored for ``key`` in this process (``effect()``'s, the first time): a
    replay with no guard, no validation, no fingerprint and no statement."""
    found = ANSWERS.get((user.pk, key))
    if found is None:
        found = ANSWERS[(user.pk, key)] = effect()
    return found
