"""Provides what the REST and MCP transports share: the base view, who may see which
tools, and the call an HTTP request makes.

The MCP transport builds on this module (and so on REST's conventions); nothing here
imports MCP, the URL patterns or the OpenAPI document.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import Any

from django.db import transaction
from django.http import Http404
from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from guarded_tools.conf import gt_settings, installed
from guarded_tools.core.definition import Tool
from guarded_tools.core.errors import NotAuthenticated
from guarded_tools.core.jsonvalues import Spliced, js_safe
from guarded_tools.core.registry import registry
from guarded_tools.core.repair import Audience
from guarded_tools.pipeline import Invocation, trace_carrier
from guarded_tools.transports.asgi import meta_key, request_signal
from guarded_tools.transports.rest.body import ParsedOnce, read_body

_PREFER_WAIT = re.compile(r"(?:^|[;,\s])wait\s*=\s*(\d{1,6})(?:$|[;,\s])")


def open_to_anonymous(definition: Tool) -> bool:
    """Whether an anonymous caller may call ``definition`` (what :func:`visible_tools`
    decides for an anonymous user, without the request's OAuth token)."""
    return definition.allow_anonymous and definition.read_only and not definition.permissions


def visible_tools(user: Any, request: Any = None) -> list[Tool]:
    """The tools this caller may call (permissions, and the scopes of the request's OAuth
    token if it has one; object rules run per call)."""
    authenticated = getattr(user, "is_authenticated", False)
    tools = [
        t
        for t in registry
        if (open_to_anonymous(t) if not authenticated else
            (not t.permissions or user.has_perms(t.permissions)))
    ]
    if request is not None and installed("oauth2_provider"):
        from guarded_tools.contrib import oauth

        tools = [t for t in tools if oauth.allows(t, request)]
    return tools


def described(definition: Tool, request: Any = None) -> dict[str, Any]:
    """The tool as its listing shows it to this caller: with what the caller's allowances
    let run without approval (``allowances``, and in the description)."""
    from guarded_tools.confirmations.allowances import words_for_agent
    from guarded_tools.pipeline.stages.allowance import application_of

    info = definition.describe()
    if request is not None:
        said = words_for_agent(definition, getattr(request, "user", None),
                               application_of(SimpleNamespace(request=request)))
        if said:
            info["allowances"] = said
            info["description"] = f"{info['description']}\n\n{' '.join(said)}".strip()
    return info


def prefer_wait(request: Request) -> float:
    """``Prefer: wait=N`` (RFC 7240), bounded by the site's setting."""
    match = _PREFER_WAIT.search(request.META.get("HTTP_PREFER", ""))  # request.headers["Prefer"]
    if not match:
        return 0
    return float(min(int(match.group(1)), gt_settings.CONFIRMATION_MAX_WAIT_SECONDS))


def header(request: Any, name: str) -> str | None:
    """The request's header ``name``, what ``request.headers.get(name)`` answers, read from
    ``META`` by its key (:func:`~guarded_tools.transports.asgi.meta_key`):
    ``request.headers`` is built from every header of the request the first time it is
    read."""
    value: str | None = request.META.get(meta_key(name))
    return value


def trace_headers(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The trace context's headers (``traceparent``, ``tracestate``) in a request's
    ``META``: read by name, as ``request.headers`` would, without building every header.
    None without a ``traceparent``: a ``tracestate`` counts only beside one."""
    if "HTTP_TRACEPARENT" not in meta:
        return {}
    return {"traceparent": meta.get("HTTP_TRACEPARENT"),
            "tracestate": meta.get("HTTP_TRACESTATE")}


def invocation_for(request: Request, input: dict[str, Any], *,
                   header_key: str | None, transport: str = "rest",
                   trace: Mapping[str, str] | None = None,
                   wait: float | None = None) -> Invocation:
    """A call over HTTP (REST or MCP): the request's user, its ``Prefer: wait`` (or
    ``wait``, what is left of it), the signal the ASGI wrapper aborts when the client goes
    away, and the caller's trace context (``trace``, else the ``traceparent``/``tracestate``
    headers)."""
    return Invocation(
        input=input,
        user=request.user,
        header_key=header_key,
        request=request,
        wait=prefer_wait(request) if wait is None else wait,
        signal=request_signal(request),
        transport=transport,
        trace=trace or trace_carrier(trace_headers(request.META)),
    )


#: What agents send most (or nothing): the first renderer, JSON, answers them with no
#: parameters to carry over (DRF's negotiation would pick the same, at more cost).
PLAIN_ACCEPT = frozenset({"*/*", "application/json"})


class OwnFormatNegotiation(DefaultContentNegotiation):
    """Answer in the endpoint's own format when ``Accept`` (or ``?format=``) asks for another.

    Agents and text fetchers send ``Accept: text/html`` or ``text/plain`` out of habit;
    refusing them (DRF's 406, or a 404 for an unknown format) hides the resource
    they came for.
    """

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[BaseRenderer, str]:
        renderers = list(renderers)
        if (renderers and renderers[0].media_type == "application/json" and not format_suffix
                and request.META.get("HTTP_ACCEPT", "*/*") in PLAIN_ACCEPT
                and (not request.META.get("QUERY_STRING")  # else DRF's ?format= may choose
                     or self.settings.URL_FORMAT_OVERRIDE not in request.query_params)):
            # What DRF's negotiation picks for these, without parsing the header.
            return renderers[0], renderers[0].media_type
        try:
            selected: tuple[BaseRenderer, str] = super().select_renderer(
                request, renderers, format_suffix
            )
        except (NotAcceptable, Http404):
            return renderers[0], renderers[0].media_type
        return selected


#: Each encoder class's compact, strict encoder, as ``AnswerRenderer`` uses it.
_COMPACT: dict[type, Any] = {}


class AnswerRenderer(JSONRenderer):
    """DRF's ``JSONRenderer``, writing an answer's output as the text the guard made of it.

    The guard encodes an output once, as this renderer would write its decoded value
    with DRF's defaults (``COMPACT_JSON``, ``UNICODE_JSON``, ``STRICT_JSON``): a body
    whose first key is ``output`` and holds that text (a :class:`Spliced`) gets it as it
    is, the rest of the body rendered by DRF. Where the site's settings or the request
    (``indent``) make DRF write otherwise, the output is decoded and rendered by DRF.
    """

    def get_indent(self, accepted_media_type: str, renderer_context: Mapping[str, Any]) -> Any:
        """DRF's, without parsing a media type that has no parameters to read."""
        if accepted_media_type == self.media_type:
            return renderer_context.get("indent", None)
        return super().get_indent(accepted_media_type, renderer_context)

    def splices(self, accepted_media_type: str | None,
                renderer_context: Mapping[str, Any] | None) -> bool:
        """Whether DRF would write a decoded output as the guard's text."""
        return bool(self.compact and not self.ensure_ascii and self.strict
                    and self.get_indent(accepted_media_type or "", renderer_context or {})
                    is None)

    def compact_text(self, data: Any) -> bytes:
        """What DRF's ``render`` writes for ``data`` where :meth:`splices` holds: compact,
        characters as they are, strict, U+2028 and U+2029 escaped; with one encoder per
        encoder class, kept, rather than one made by ``json.dumps`` for each answer."""
        encoder = _COMPACT.get(self.encoder_class)
        if encoder is None:
            encoder = _COMPACT[self.encoder_class] = self.encoder_class(
                ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return js_safe(encoder.encode(data)).encode()

    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: Mapping[str, Any] | None = None) -> bytes:
        output = data.get("output") if isinstance(data, dict) else None
        if not isinstance(output, Spliced):
            return super().render(data, accepted_media_type, renderer_context)
        if next(iter(data)) != "output" or not self.splices(accepted_media_type,
                                                              renderer_context):
            return super().render({**data, "output": output.value()}, accepted_media_type,
                                  renderer_context)
        rest = self.compact_text({k: v for k, v in data.items() if k != "output"})
        head = b'{"output":' + output.text.encode()
        return head + b"}" if rest == b"{}" else head + b"," + rest[1:]


class Answer(Response):
    """A call's answer; its output a :class:`Spliced` (the guard's text) or a value.

    ``AnswerRenderer`` renders the text as it is. Anyone else reading ``data`` (a test
    client, the site's middleware, another renderer) reads plain JSON values: the output
    is decoded the first time it is read so.
    """

    _raw = False
    _payload: Any

    @property
    def payload(self) -> Any:
        """``data`` as the view gave it: the output still its text (for the view itself)."""
        return self._payload

    @property  # type: ignore[override]
    def data(self) -> Any:
        payload = self._payload
        if self._raw or not isinstance(payload, dict):
            return payload
        output = payload.get("output")
        if isinstance(output, Spliced):
            self._payload = payload = {**payload, "output": output.value()}
        return payload

    @data.setter
    def data(self, value: Any) -> None:
        self._payload = value

    @property
    def rendered_content(self) -> Any:
        """DRF's, with ``AnswerRenderer`` given the output's text rather than its value."""
        self._raw = isinstance(getattr(self, "accepted_renderer", None), AnswerRenderer)
        try:
            return super().rendered_content
        finally:
            self._raw = False


def _weaken(context: Any, names: Iterable[str]) -> None:
    """Make ``context``'s entries ``names`` weak proxies (those that are not already)."""
    if not isinstance(context, dict):
        return
    for name in names:
        value = context.get(name)
        if value is not None and not isinstance(value, weakref.ProxyTypes):
            context[name] = weakref.proxy(value)


#: Where a view class keeps its ``Allow`` header (its handler methods, a property of
#: the class), in its own ``__dict__``.
_ALLOW = "_guarded_tools_allow"


class GuardedAPIView(APIView):
    """Base view: strict JSON in, JSON out, every error rendered for agents.

    The site's DRF authentication and throttle classes apply unchanged. Views are
    never wrapped in ``ATOMIC_REQUESTS``: a claim must commit before its handler runs.
    """

    #: The strict parser, one instance per request (DRF makes them so) that keeps its
    #: parse: the body :meth:`request_body` reads is the one ``request.data`` answers.
    parser_classes = [ParsedOnce]
    renderer_classes = [AnswerRenderer]
    content_negotiation_class = OwnFormatNegotiation
    #: Which ``OAUTH_PROTECTS`` entry puts OAuth bearer authentication on this view.
    oauth_surface = "rest"

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        """The view function, opted out of ``ATOMIC_REQUESTS``: decorated once here, as DRF
        makes it ``csrf_exempt``, rather than ``dispatch`` decorated again on every call."""
        return transaction.non_atomic_requests(super().as_view(**initkwargs))

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """DRF's ``dispatch``, then :meth:`unlink` its request, response and view."""
        return self.unlink(super().dispatch(request, *args, **kwargs))

    def unlink(self, response: Any) -> Any:
        """``response``, with the view, its DRF request and the response no longer in
        reference cycles, so that they are freed when the server lets the response go
        rather than at the next garbage collection (a collection's cost grows with what
        is left for it).

        DRF links them in cycles: the request's ``parser_context`` names the request and
        the view (which names the request), and a rendered response's
        ``renderer_context`` names the response and the view (which names the response).
        Those entries become weak proxies: they answer as before while the object lives.
        A response not rendered yet is left as it is (its renderers read the context).
        """
        _weaken(self.request.parser_context, ("request", "view"))
        if getattr(response, "is_rendered", False):
            _weaken(getattr(response, "renderer_context", None), ("response", "view"))
        return response

    @property
    def default_response_headers(self) -> dict[str, str]:
        """DRF's: ``Allow`` (worked out once per view class, from the class's handler
        methods), and ``Vary: Accept`` where the view has several renderers."""
        cls = type(self)
        allow = cls.__dict__.get(_ALLOW)  # the class's own, not a base class's
        if allow is None:
            allow = ", ".join(self.allowed_methods)
            setattr(cls, _ALLOW, allow)
        headers = {"Allow": allow}
        if len(self.renderer_classes) > 1:
            headers["Vary"] = "Accept"
        return headers

    def get_authenticators(self) -> list[Any]:
        """The site's authentication, after OAuth bearer tokens where ``OAUTH_PROTECTS``
        names this view's surface (see :mod:`guarded_tools.contrib.oauth`)."""
        authenticators = list(super().get_authenticators())
        if gt_settings.OAUTH_PROTECTS and installed("oauth2_provider"):
            from guarded_tools.contrib import oauth

            authenticators = oauth.authenticators(self.oauth_surface, authenticators)
        return authenticators

    def handle_exception(self, exc: Exception) -> Response:
        """As DRF does for its own ``NotAuthenticated``, the guard's ``not_authenticated``
        challenges with the first authentication class's scheme (``Token``, or OAuth's
        ``Bearer … resource_metadata=…`` where ``OAUTH_PROTECTS`` names this view), and is
        a 403 where that class has no challenge (session authentication)."""
        if isinstance(exc, NotAuthenticated) and "WWW-Authenticate" not in exc.headers:
            challenge = self.get_authenticate_header(self.request)
            if challenge:
                exc.headers["WWW-Authenticate"] = challenge
            else:
                exc.status_code = 403
        return super().handle_exception(exc)

    def get_exception_handler(self) -> Any:
        """``EXCEPTION_HANDLER``, as DRF's views read theirs."""
        return gt_settings.EXCEPTION_HANDLER

    def error_audience(self) -> Audience:
        """Who reads this view's errors: a REST caller, about no tool (the tool list, an
        operation's status, the catalog)."""
        return Audience(transport="rest", tool=False)

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        """Render here, where a failure still becomes the agent's JSON error.

        Django renders a response after DRF's exception handling, so data the renderer
        cannot encode would otherwise become Django's HTML 500 page.
        """
        response = super().finalize_response(request, response, *args, **kwargs)
        if isinstance(response, Response) and not response.is_rendered:
            try:
                response.render()
            except Exception as exc:
                error = self.handle_exception(exc)
                return super().finalize_response(request, error, *args, **kwargs)
        return response

    def request_body(self, request: Request) -> Any:
        """The strictly parsed JSON body, chunked bodies without Content-Length included."""
        return read_body(request)
