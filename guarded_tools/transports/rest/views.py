"""Provides the REST endpoints: tool list and calls, operations, the error catalog."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from importlib.util import find_spec
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.templatetags.static import static
from django.urls import Resolver404, resolve
from django.utils.decorators import method_decorator
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import View
from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from guarded_tools.conf import gt_settings
from guarded_tools.core import catalog
from guarded_tools.core.errors import (
    ConfirmationNotFound,
    MalformedRequest,
    NotAuthenticated,
    OperationNotFound,
    ToolNotFound,
)
from guarded_tools.core.repair import Audience
from guarded_tools.core.schema.parsers import StrictJSONParser, read_unframed_body
from guarded_tools.models import Confirmation, Operation
from guarded_tools.pipeline import (
    GuardResult,
    Invocation,
    get_pipeline,
    principal_scope,
    trace_carrier,
)
from guarded_tools.pipeline.confirmations import describe
from guarded_tools.tools.registry import Tool, registry
from guarded_tools.transports import hosts
from guarded_tools.transports.asgi import request_signal
from guarded_tools.transports.rest.exception_handler import docs_url, exception_handler, timestamp

_PREFER_WAIT = re.compile(r"(?:^|[;,\s])wait\s*=\s*(\d{1,6})(?:$|[;,\s])")


def visible_tools(user: Any, request: Any = None) -> list[Tool]:
    """The tools this caller may call (permissions, and the scopes of the request's OAuth
    token if it has one; object rules run per call)."""
    authenticated = getattr(user, "is_authenticated", False)
    tools = [
        t
        for t in registry
        if (authenticated or (t.allow_anonymous and t.read_only))
        and (not t.permissions or (authenticated and user.has_perms(t.permissions)))
    ]
    if request is not None and apps.is_installed("oauth2_provider"):
        from guarded_tools.contrib import oauth

        tools = [t for t in tools if oauth.allows(t, request)]
    return tools


def prefer_wait(request: Request) -> float:
    """``Prefer: wait=N`` (RFC 7240), bounded by the site's setting."""
    match = _PREFER_WAIT.search(request.headers.get("Prefer", ""))
    if not match:
        return 0
    return float(min(int(match.group(1)), gt_settings.CONFIRMATION_MAX_WAIT_SECONDS))


def invocation_for(request: Request, input: dict[str, Any], *,
                   header_key: str | None, transport: str = "rest",
                   trace: Mapping[str, str] | None = None) -> Invocation:
    """A call over HTTP (REST or MCP): the request's user, its ``Prefer: wait``, the
    signal the ASGI wrapper aborts when the client goes away, and the caller's trace
    context (``trace``, else the ``traceparent``/``tracestate`` headers)."""
    return Invocation(
        input=input,
        user=request.user,
        header_key=header_key,
        request=request,
        wait=prefer_wait(request),
        signal=request_signal(request),
        transport=transport,
        trace=trace or trace_carrier(request.headers),
    )


def success_payload(result: GuardResult) -> dict[str, Any]:
    """The output as stored: a fresh call answers what its replays will answer.

    See :meth:`GuardResult.answer`.
    """
    data: dict[str, Any] = {"output": result.answer()}
    if result.operation is not None:
        data["operation"] = result.operation
    return data


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
        try:
            selected: tuple[BaseRenderer, str] = super().select_renderer(
                request, renderers, format_suffix
            )
        except (NotAcceptable, Http404):
            return renderers[0], renderers[0].media_type
        return selected


@method_decorator(transaction.non_atomic_requests, name="dispatch")
class GuardedAPIView(APIView):
    """Base view: strict JSON in, JSON out, every error rendered for agents.

    The site's DRF authentication and throttle classes apply unchanged. Views are
    never wrapped in ``ATOMIC_REQUESTS``: a claim must commit before its handler runs.
    """

    parser_classes = [StrictJSONParser]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = OwnFormatNegotiation
    #: Which ``OAUTH_PROTECTS`` entry puts OAuth bearer authentication on this view.
    oauth_surface = "rest"

    def get_authenticators(self) -> list[Any]:
        """The site's authentication, after OAuth bearer tokens where ``OAUTH_PROTECTS``
        names this view's surface (see :mod:`guarded_tools.contrib.oauth`)."""
        authenticators = list(super().get_authenticators())
        if gt_settings.OAUTH_PROTECTS and apps.is_installed("oauth2_provider"):
            from guarded_tools.contrib import oauth

            authenticators = oauth.authenticators(self.oauth_surface, authenticators)
        return authenticators

    def handle_exception(self, exc: Exception) -> Response:
        """A 401 challenges with the first authentication's scheme when it is OAuth's
        (``Bearer resource_metadata=…``), so that a host can start the OAuth flow."""
        response = super().handle_exception(exc)
        if response.status_code == 401 and getattr(self.request, "_request", None) is not None:
            header = self.get_authenticate_header(self.request)
            if header and header.startswith("Bearer"):
                response["WWW-Authenticate"] = header
        return response

    def get_exception_handler(self) -> Any:
        return exception_handler

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
        unframed = read_unframed_body(request._request)
        return request.data if unframed is None else unframed


class ToolListView(GuardedAPIView):
    def get(self, request: Request) -> Response:
        if not request.user.is_authenticated and not any(
            t.allow_anonymous and t.read_only for t in registry
        ):
            raise NotAuthenticated()
        return Response({"tools": [t.describe() for t in visible_tools(request.user, request)]})


class ToolCallView(GuardedAPIView):
    def error_audience(self) -> Audience:
        """A REST caller of the tool this URL names (no tool when no tool has that name)."""
        definition = registry.find(str(self.kwargs.get("name", "")))
        if definition is None:
            return super().error_audience()
        return Audience(transport="rest", keyed=definition.idempotent)

    def post(self, request: Request, name: str) -> Response:
        definition = registry.find(name)
        if definition is None:
            raise ToolNotFound()
        body = self.request_body(request)
        if not isinstance(body, dict):
            raise MalformedRequest("The request body must be a JSON object (the tool's input).")
        if not definition.read_only and not request.user.is_authenticated:
            raise NotAuthenticated()
        result = self.call(request, definition, body)
        response = Response(success_payload(result), status=200)
        if result.replayed:
            response["Idempotent-Replayed"] = "true"
        return response

    def call(self, request: Request, definition: Tool, body: dict[str, Any]) -> GuardResult:
        invocation = invocation_for(
            request, body, header_key=request.headers.get(gt_settings.IDEMPOTENCY_HEADER)
        )
        return get_pipeline(definition).run(invocation)


def own_row(request: Request, model: type[Any], pk: uuid.UUID | str,
            not_found: type[Exception]) -> Any:
    """The caller's own row of ``model`` (an operation, a confirmation) with id ``pk``.

    Anonymous callers are not authenticated; a malformed id, a missing row and another
    principal's row all answer ``not_found`` alike.
    """
    scope = principal_scope(request.user, None)
    if scope is None:
        raise NotAuthenticated()
    if not isinstance(pk, uuid.UUID):
        try:  # the malformed-id route: not an id, so no such row
            pk = uuid.UUID(pk)
        except ValueError:
            raise not_found() from None
    row = model.objects.filter(pk=pk, scope=scope).first()
    if row is None:
        raise not_found()
    return row


def authorize_read(request: Request, tool: str, input: Mapping[str, Any]) -> None:
    """Refuse a read of a call's state (its operation, its confirmation) as its replay would
    be refused: the token's scopes, the tool's permissions and ``authorize``. A retired
    tool's rows stay readable by their principal (nothing is left to authorize them with)."""
    definition = registry.find(tool)
    if definition is not None:
        get_pipeline(definition).authorize_read(
            Invocation(input=dict(input), user=request.user, request=request, transport="rest"))


class OperationDetailView(GuardedAPIView):
    def get(self, request: Request, pk: uuid.UUID | str) -> Response:
        operation = own_row(request, Operation, pk, OperationNotFound)
        authorize_read(request, operation.tool, operation.input)
        data = {**operation.summary(), "tool": operation.tool,
                "created_at": timestamp(operation.created_at),
                "completed_at": timestamp(operation.completed_at)}
        if operation.state == "succeeded":
            data["output"] = operation.output
        elif operation.error:
            tool = registry.find(operation.tool)
            if tool is not None:
                error = get_pipeline(tool).stored_error(operation)
                data["error"] = error.as_dict(docs_url(request), Audience(transport="rest"))
        # The call's latest confirmation: a pending one is what the operation waits for
        # (only a tool that asks for one, or a retired tool, can have it: agents poll here).
        definition = registry.find(operation.tool)
        confirmation = None
        if definition is None or definition.confirm_mode is not None:
            confirmation = Confirmation.objects.filter(
                tool=operation.tool, scope=operation.scope, key=operation.key
            ).order_by("-created_at").first()
        if confirmation is not None:
            data["confirmation"] = describe(confirmation)
        return Response(data)


class ConfirmationDetailView(GuardedAPIView):
    """``GET confirmations/<id>/``: the state of a confirmation the caller's call asked for.

    The ``Location`` of a ``confirmation_required`` answer; principal-scoped like operations.
    """

    def get(self, request: Request, pk: uuid.UUID | str) -> Response:
        confirmation = own_row(request, Confirmation, pk, ConfirmationNotFound)
        authorize_read(request, confirmation.tool, confirmation.input)
        operation_id = confirmation.operation_id
        if operation_id is None and confirmation.key:
            # An effect-only call claims its key before it asks: that operation waits too.
            operation_id = Operation.objects.filter(
                tool=confirmation.tool, scope=confirmation.scope, key=confirmation.key
            ).values_list("pk", flat=True).first()
        return Response({
            **describe(confirmation),
            "tool": confirmation.tool,
            "key": confirmation.key,
            "created_at": timestamp(confirmation.created_at),
            "decided_at": timestamp(confirmation.decided_at),
            "operation": str(operation_id) if operation_id else None,
        })


class ErrorCatalogView(GuardedAPIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []

    def get(self, request: Request) -> Response:
        return Response(catalog.export_json(docs_url(request)))


class LlmsTxtView(GuardedAPIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []

    def get(self, request: Request) -> HttpResponse:
        text = catalog.export_llms_txt(docs_url(request), gt_settings.SERVER_NAME)
        return HttpResponse(text, content_type="text/plain; charset=utf-8")


class OpenAPIView(GuardedAPIView):
    """The OpenAPI 3.1 document of the tools this caller may call (needs drf-spectacular)."""

    throttle_classes: list[Any] = []

    def get(self, request: Request) -> Response:
        from guarded_tools.transports.rest.openapi import build_document

        return Response(build_document(request, visible_tools(request.user)))


SIDECAR_APP = "drf_spectacular_sidecar"
#: drf-spectacular's page fills these from ``SWAGGER_UI_DIST`` / ``SWAGGER_UI_FAVICON_HREF``.
SWAGGER_UI_FILES = {
    "swagger_ui_css": "swagger-ui.css",
    "swagger_ui_bundle": "swagger-ui-bundle.js",
    "swagger_ui_standalone": "swagger-ui-standalone-preset.js",
    "favicon_href": "favicon-32x32.png",
}


def swagger_ui_assets() -> dict[str, str] | None:
    """Where the docs page loads Swagger UI from: drf-spectacular-sidecar's packaged build.

    A ``SWAGGER_UI_DIST`` the site chose itself (not drf-spectacular's default, a CDN at
    ``@latest``) is left alone ({}); None when neither is there to serve, or when
    drf-spectacular (whose page this is) is not an installed app.
    """
    if not apps.is_installed("drf_spectacular"):
        return None
    from drf_spectacular.settings import SPECTACULAR_DEFAULTS, spectacular_settings

    dist = spectacular_settings.SWAGGER_UI_DIST
    if dist not in ("SIDECAR", SPECTACULAR_DEFAULTS["SWAGGER_UI_DIST"]):
        return {}
    if not apps.is_installed(SIDECAR_APP):
        return None
    assets = {key: static(f"{SIDECAR_APP}/swagger-ui-dist/{file}")
              for key, file in SWAGGER_UI_FILES.items()}
    favicon = spectacular_settings.SWAGGER_UI_FAVICON_HREF
    if favicon not in ("SIDECAR", SPECTACULAR_DEFAULTS["SWAGGER_UI_FAVICON_HREF"]):
        del assets["favicon_href"]
    return assets


class SwaggerView(View):
    """``GET docs/``: Swagger UI for people, reading ``openapi.json``, from packaged assets.

    drf-spectacular's own page (its authentication and ``SERVE_PERMISSIONS`` apply),
    with Swagger UI from drf-spectacular-sidecar, never from a CDN. Without either, a
    page that says what to install.
    """

    def get(self, request: HttpRequest) -> HttpResponse:
        assets = swagger_ui_assets()
        if assets is None:
            return render(request, "guarded_tools/docs_unavailable.html", {
                "title": gt_settings.SERVER_NAME,
                "openapi": hosts.app_path(request, "openapi"),
                "spectacular": find_spec("drf_spectacular") is not None,
            }, status=501)
        from drf_spectacular.views import SpectacularSwaggerView

        class Page(SpectacularSwaggerView):
            def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
                response: Response = super().get(request, *args, **kwargs)
                response.data.update(assets)
                return response

        view = Page.as_view(url=hosts.app_path(request, "openapi"), title=gt_settings.SERVER_NAME)
        return view(request)


class ErrorsPageView(View):
    """The error catalog for people and for agents that follow a ``link``: one anchor per code."""

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, "guarded_tools/errors.html", {
            "catalogs": catalog.catalogs.all(),
            "title": gt_settings.SERVER_NAME,
            # Absolute paths: the page is served as errors/ and as errors.
            "errors_json": hosts.app_path(request, "errors-json"),
            "llms_txt": hosts.app_path(request, "llms-txt"),
        })


class NotFoundView(GuardedAPIView):
    """Every other path under the agent prefix: the agents' JSON not-found error, any method.

    Never Django's HTML 404 (or its technical page with ``DEBUG``), and never a redirect
    for an agent address. Only when the app is mounted at the site's root does a GET of
    one of the site's own pages without its slash keep ``APPEND_SLASH``'s redirect.
    """

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        raise ToolNotFound(
            "Nothing is served at this address. The agent endpoints are tools/,"
            " tools/<name>/, operations/<id>/, mcp/, errors.json and llms.txt."
        )

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        site_page = _site_page_with_slash(request)
        if site_page is not None:
            return HttpResponsePermanentRedirect(site_page)
        return super().dispatch(request, *args, **kwargs)


def _site_page_with_slash(request: HttpRequest) -> str | None:
    """Where ``APPEND_SLASH`` would have sent this GET, when that is not an agent path
    and stays on this site: ``//evil.example`` is answered, never sent to that host."""
    if (not settings.APPEND_SLASH or request.method not in ("GET", "HEAD")
            or request.path_info.endswith("/")):
        return None
    try:
        match = resolve(f"{request.path_info}/", getattr(request, "urlconf", None))
    except Resolver404:
        return None
    if getattr(match.func, "view_class", None) is NotFoundView:
        return None
    location = request.get_full_path(force_append_slash=True)
    # A path that reads as scheme-relative (``//host/``) would leave the site.
    return location if url_has_allowed_host_and_scheme(location, allowed_hosts=None) else None
