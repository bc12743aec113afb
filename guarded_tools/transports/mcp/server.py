"""Provides the MCP endpoint: the guarded tools over Streamable HTTP, JSON-RPC in and out.

Here are the view and the dispatch table; each method lives in its own module
(:mod:`~guarded_tools.transports.mcp.discovery`, ``tool_methods``, ``task_methods``), on
:mod:`~guarded_tools.transports.mcp.protocol` (codes, framing) and ``headers``. Each name
is imported from the module that defines it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from rest_framework.request import Request

from guarded_tools.core import hosts
from guarded_tools.core.agent_errors import to_guard_error
from guarded_tools.core.errors import AuthorizationError, GuardError, NotAuthenticated
from guarded_tools.core.registry import registry
from guarded_tools.transports.mcp.discovery import (
    discover,
    initialize,
    ping,
    server_info,
)
from guarded_tools.transports.mcp.headers import (
    check_envelope,
    has_envelope,
)
from guarded_tools.transports.mcp.protocol import (
    BATCH_VERSION,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_BATCH,
    METHOD_NOT_FOUND,
    MODERN_VERSIONS,
    NO_TOOL,
    PARSE_ERROR,
    REQUEST_REFUSED,
    SERVER_INFO_META,
    SUPPORTED_VERSIONS,
    UNSUPPORTED_VERSION,
    Exchange,
    RpcError,
    id_of,
    is_id,
    json_response,
    respond,
    rpc_error,
)
from guarded_tools.transports.mcp.task_methods import (
    cancel_task,
    get_task,
    update_task,
)
from guarded_tools.transports.mcp.tool_methods import call_tool, list_tools
from guarded_tools.transports.rest.base import GuardedAPIView, open_to_anonymous, prefer_wait
from guarded_tools.transports.rest.body import ParsedOnce, read_body
from guarded_tools.transports.rest.exception_handler import docs_url, log_once

__all__ = ["McpView", "check_origin", "serve", "transport_error"]

#: The ``Accept`` headers MCP clients send (the specification asks for both types): DRF's
#: negotiation answers each with the first renderer, JSON, and its plain media type.
MCP_ACCEPT = frozenset({
    "*/*", "application/json", "application/json, text/event-stream",
    "text/event-stream, application/json", "application/json,text/event-stream",
    "text/event-stream,application/json",
})

# -- one message ----------------------------------------------------------------------------
def _reply(ex: Exchange, message: Any) -> dict[str, Any] | None:
    """The JSON-RPC reply to one message, or None when nothing is owed."""
    if not isinstance(message, dict):
        return rpc_error(None, INVALID_REQUEST, "Each message must be a JSON-RPC object.")
    if "method" not in message:
        if not ex.modern and "id" in message and ("result" in message or "error" in message):
            return None  # a response to a server request we never sent: accepted, ignored
        return rpc_error(id_of(message), INVALID_REQUEST, "A JSON-RPC request needs a method.")
    if message.get("jsonrpc") != "2.0" or not isinstance(message["method"], str):
        return rpc_error(id_of(message), INVALID_REQUEST, 'Send {"jsonrpc": "2.0", "method": ...}.')
    if "id" not in message:
        return None  # a notification: accepted, nothing to answer
    rid = message["id"]
    if not is_id(rid):
        return rpc_error(None, INVALID_REQUEST, "The id must be a string or an integer.")
    try:
        result = _dispatch(ex, message["method"], message.get("params"))
    except RpcError as exc:
        return rpc_error(rid, exc.code, exc.message, exc.data)
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def _dispatch(ex: Exchange, method: str, params: Any) -> dict[str, Any]:
    if params is not None and not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object.")
    params = params or {}
    if ex.modern:
        check_envelope(ex, method, params)
    handler = (_MODERN_METHODS if ex.modern else _HANDSHAKE_METHODS).get(method)
    if handler is None:
        raise RpcError(METHOD_NOT_FOUND, "Method not found.")
    return _finish(ex, handler(ex, params))


def _finish(ex: Exchange, result: dict[str, Any]) -> dict[str, Any]:
    """2026-07-28 results carry ``resultType`` and the server's identity in ``_meta``."""
    if ex.modern:
        result.setdefault("resultType", "complete")
        result["_meta"] = {**result.get("_meta", {}), SERVER_INFO_META: server_info()}
    return result


def _batch(ex: Exchange, messages: list[Any]) -> HttpResponse:
    if ex.modern or ex.version != BATCH_VERSION:
        return json_response(rpc_error(
            None, INVALID_REQUEST, "JSON-RPC batches are not accepted in"
            f" protocol version {ex.version}: send one message per POST."), 400)
    if not messages or len(messages) > MAX_BATCH:
        return json_response(rpc_error(None, INVALID_REQUEST,
                                       f"A batch holds 1 to {MAX_BATCH} messages."), 400)
    replies = [r for r in (_batch_reply(ex, m) for m in messages) if r is not None]
    return json_response(replies) if replies else HttpResponse(status=202)


def _batch_reply(ex: Exchange, message: Any) -> dict[str, Any] | None:
    if isinstance(message, dict) and message.get("method") == "initialize":
        return rpc_error(id_of(message), INVALID_REQUEST, "initialize must not be part of a batch.")
    return _reply(ex, message)



Method = Callable[[Exchange, dict[str, Any]], dict[str, Any]]
_HANDSHAKE_METHODS: dict[str, Method] = {
    "initialize": initialize,
    "ping": ping,
    "tools/list": list_tools,
    "tools/call": call_tool,
}
# ping and initialize are gone from 2026-07-28; server/discover replaces initialize.
_MODERN_METHODS: dict[str, Method] = {
    "server/discover": discover,
    "tools/list": list_tools,
    "tools/call": call_tool,
    # The Tasks extension (io.modelcontextprotocol/tasks), for clients that declare it.
    "tasks/get": get_task,
    "tasks/update": update_task,
    "tasks/cancel": cancel_task,
}


# -- HTTP --------------------------------------------------------------------------------------
def check_origin(request: HttpRequest | Request) -> None:
    """DNS-rebinding protection: a browser Origin must be one the site trusts.

    Never the request's own Host: with ``ALLOWED_HOSTS = ["*"]`` a rebound page's Origin
    is its Host. See :func:`guarded_tools.core.hosts.origin_allowed`.
    """
    origin = request.META.get("HTTP_ORIGIN")  # what request.headers["Origin"] reads
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


def rpc_response(error: GuardError, request: Any = None) -> HttpResponse:
    """``error`` as this endpoint answers it over HTTP: a JSON-RPC error, the HTTP status."""
    data = error.as_dict(docs_url(request), NO_TOOL)
    return json_response(rpc_error(None, _rpc_code(error), data["message"], data),
                         error.status_code)


def transport_error(exc: Exception, context: dict[str, Any]) -> HttpResponse:
    """An exception handler that always answers as this endpoint does (a JSON-RPC error
    with the HTTP status and the error's headers), whatever the view."""
    error = to_guard_error(exc)
    response = rpc_response(error, context.get("request"))
    for name, value in error.headers.items():
        response[name] = value
    log_once(error, response, context.get("request"))
    return response


def _require_caller(request: Request, body: Any = None) -> None:
    """Anonymous callers get in only when some tool is open to them (as over REST): the
    tool ``body`` calls, if it is one, else any tool of the registry."""
    if not request.user.is_authenticated and not _calls_an_open_tool(body) and not any(
            open_to_anonymous(t) for t in registry):
        raise NotAuthenticated()


def _calls_an_open_tool(body: Any) -> bool:
    """``body`` is one ``tools/call`` of a tool open to anonymous callers (so some tool is,
    without sorting the registry to find one)."""
    params = body.get("params") if isinstance(body, dict) else None
    name = params.get("name") if isinstance(params, dict) else None
    definition = registry.find(name) if isinstance(name, str) else None
    return definition is not None and open_to_anonymous(definition)


def _admitted_body(request: Request) -> Any:
    """The body of a caller :func:`_require_caller` admits; its refusal comes before a
    parse error, as when it is decided before the body is read."""
    try:
        message = read_body(request)
    except Exception:
        _require_caller(request)
        raise
    _require_caller(request, message)
    return message


def serve(request: Request, body: Any) -> HttpResponse:
    """Route one POST by its protocol version: unsupported, 2026-07-28, or handshake era.

    Handshake era: ``initialize`` negotiates 2025-11-25, 2025-06-18 or 2025-03-26, and
    later requests name their version in ``MCP-Protocol-Version`` (absent means
    2025-03-26, the only version whose batches are accepted). 2026-07-28: every request
    carries its version and capabilities in ``params._meta``, mirrored in headers that
    must match the body; ``server/discover`` replaces ``initialize``. Nothing is kept
    between POSTs.
    """
    header = request.META.get("HTTP_MCP_PROTOCOL_VERSION")  # request.headers' MCP-Protocol-Version
    if header is not None and header not in SUPPORTED_VERSIONS:
        data = {"supported": list(SUPPORTED_VERSIONS), "requested": header}
        return json_response(rpc_error(id_of(body), UNSUPPORTED_VERSION,
                                       "Unsupported protocol version.", data), 400)
    modern = header in MODERN_VERSIONS or (header is None and has_envelope(body))
    version = header or (MODERN_VERSIONS[0] if modern else BATCH_VERSION)
    ex = Exchange(request=request, version=version, modern=modern,
                  wait_until=time.monotonic() + prefer_wait(request), clock=time.monotonic)
    if isinstance(body, list):
        return _batch(ex, body)
    return respond(ex, _reply(ex, body))


class McpView(GuardedAPIView):
    """``POST mcp/``: MCP Streamable HTTP, JSON responses, stateless.

    The site's DRF authentication, CSRF (session auth), permission and throttle
    classes apply to every POST; their refusals are JSON-RPC errors with the HTTP
    status, made by ``EXCEPTION_HANDLER`` (the default asks ``error_response``). A 401
    carries the first authentication class's challenge (OAuth's ``Bearer …
    resource_metadata=…`` where ``OAUTH_PROTECTS`` names ``"mcp"``); where that class
    has none (session authentication) the refusal is a 403, as DRF answers. GET and
    DELETE answer 405.

    A POST runs DRF's policies (``check_permissions``, ``check_throttles``,
    ``handle_exception``, ``finalize_response``) but not its whole view cycle: see
    :meth:`dispatch`.
    """

    oauth_surface = "mcp"

    def error_response(self, error: GuardError, request: Any = None) -> HttpResponse:
        """How this endpoint renders an error over HTTP (for ``EXCEPTION_HANDLER``)."""
        return rpc_response(error, request)

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # JSON is the only answer; clients must accept it, so never refuse with 406.
        renderers = self.get_renderers()
        if (renderers and renderers[0].media_type == "application/json"
                and request.META.get("HTTP_ACCEPT", "*/*") in MCP_ACCEPT
                and not request.META.get("QUERY_STRING") and not self.format_kwarg):
            # What DRF's negotiation picks for what MCP clients send, without parsing it.
            return renderers[0], renderers[0].media_type
        return super().perform_content_negotiation(request, force=True)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        check_origin(request)
        super().initial(request, *args, **kwargs)

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """A POST through DRF's policies, not its whole cycle; anything else through DRF's
        ``dispatch`` (405 with ``Allow``, ``OPTIONS``).

        In ``initial``'s order: the Origin, the site's versioning if any, authentication
        (``request.user``), ``check_permissions``, ``check_throttles``; then
        :meth:`post`. A refusal or failure goes through ``handle_exception`` (the site's
        ``EXCEPTION_HANDLER``) and ``finalize_response``, content negotiated then, as DRF
        would. A JSON-RPC answer is made here whole (``serve``), so it needs neither
        negotiation nor rendering. The body is parsed once (:class:`ParsedOnce`).
        """
        if request.method != "POST":
            return super().dispatch(request, *args, **kwargs)
        self.args, self.kwargs = args, kwargs
        drf = Request(request, parsers=[ParsedOnce()], authenticators=self.get_authenticators(),
                      negotiator=self.get_content_negotiator(),
                      parser_context=self.get_parser_context(request))
        self.request = drf
        self.headers = self.default_response_headers
        self.format_kwarg = None
        response: Any  # an HttpResponse, or what the site's EXCEPTION_HANDLER answers
        try:
            self.format_kwarg = self.get_format_suffix(**kwargs)
            check_origin(request)  # the HttpRequest: its META without DRF's proxying
            drf.version, drf.versioning_scheme = self.determine_version(drf, *args, **kwargs)
            self.perform_authentication(drf)
            self.check_permissions(drf)
            self.check_throttles(drf)
            response = self.post(drf)
        except Exception as exc:
            drf.accepted_renderer, drf.accepted_media_type = self.perform_content_negotiation(
                drf)
            response = self.handle_exception(exc)
        self.response = self.finalize_response(drf, response, *args, **kwargs)
        return self.unlink(self.response)

    def post(self, request: Request) -> HttpResponse:
        """A POST that passed the site's policies: its JSON-RPC answer."""
        return serve(request, _admitted_body(request))
