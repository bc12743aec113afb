"""Provides the REST endpoints: tool list and calls, operations, the error catalog."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from importlib.util import find_spec
from typing import Any

from django.apps import apps
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.templatetags.static import static
from django.urls import Resolver404, resolve
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import View
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from guarded_tools.conf import gt_settings
from guarded_tools.confirmations.requests import describe
from guarded_tools.core import catalog, hosts
from guarded_tools.core.definition import Tool
from guarded_tools.core.errors import (
    ConfirmationNotFound,
    MalformedRequest,
    NotAuthenticated,
    OperationNotFound,
    ToolNotFound,
)
from guarded_tools.core.jsonvalues import Spliced
from guarded_tools.core.registry import registry
from guarded_tools.core.repair import Audience
from guarded_tools.core.times import timestamp
from guarded_tools.models import Confirmation, Operation
from guarded_tools.pipeline import GuardResult, Invocation, budget_status, principal_scope
from guarded_tools.pipeline.gateway import Gateway
from guarded_tools.transports.rest.base import (  # the views' base, shared with MCP
    Answer,
    GuardedAPIView,
    described,
    header,
    invocation_for,
    visible_tools,
)
from guarded_tools.transports.rest.exception_handler import docs_url


def success_payload(result: GuardResult) -> dict[str, Any]:
    """The output as stored: a fresh call answers what its replays will answer.

    See :meth:`GuardResult.answer`. Where the guard has the answer's text, the output is
    that text (a ``Spliced``, which ``AnswerRenderer`` writes as it is and ``Answer``'s
    ``data`` reads as the value): it is neither decoded nor encoded again.
    """
    text = result.answer_json()
    data: dict[str, Any] = {"output": Spliced(text) if text is not None else result.answer()}
    if result.operation is not None:
        data["operation"] = result.operation
    return data


class ToolListView(GuardedAPIView):
    def get(self, request: Request) -> Response:
        if not request.user.is_authenticated and not any(
            t.allow_anonymous and t.read_only for t in registry
        ):
            raise NotAuthenticated()
        return Response({"tools": [described(t, request)
                                   for t in visible_tools(request.user, request)]})


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
        response = Answer(success_payload(result), status=200)
        if result.replayed:
            response["Idempotent-Replayed"] = "true"
        return response

    def finalize_response(self, request: Request, response: Response, *args: Any,
                          **kwargs: Any) -> Response:
        """Every answer of a tool with budgets says what the caller has left and when it
        frees: the counts in ``RateLimit-Policy``/``RateLimit``, all in ``meta.budgets``."""
        definition = registry.find(str(self.kwargs.get("name", "")))
        data = (response.payload if isinstance(response, Answer) else
                response.data if isinstance(response, Response) else None)
        if definition is not None and isinstance(data, dict) and getattr(
                request, "user", None) is not None:
            fields, budgets = budget_status.for_answer(definition, request.user)
            for name, value in fields.items():
                response[name] = value
            if budgets:
                response.data = {**data, "meta": {"budgets": budgets}}
        return super().finalize_response(request, response, *args, **kwargs)

    def call(self, request: Request, definition: Tool, body: dict[str, Any]) -> GuardResult:
        invocation = invocation_for(
            request, body, header_key=header(request, gt_settings.IDEMPOTENCY_HEADER)
        )
        return Gateway(definition).run(invocation)


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


def authorize_read(request: Request, tool: str | Gateway | None,
                   input: Mapping[str, Any]) -> None:
    """Refuse a read of a call's state (its operation, its confirmation) as its replay would
    be refused: the token's scopes, the tool's permissions and ``authorize``. A retired
    tool's rows stay readable by their principal (nothing is left to authorize them with).

    ``tool``: the tool's name, or the request's ``Gateway`` (None for a retired tool)."""
    if isinstance(tool, str):
        definition = registry.find(tool)
        tool = Gateway(definition) if definition is not None else None
    if tool is not None:
        tool.authorize_read(
            Invocation(input=dict(input), user=request.user, request=request, transport="rest"))


class OperationDetailView(GuardedAPIView):
    def get(self, request: Request, pk: uuid.UUID | str) -> Response:
        operation = own_row(request, Operation, pk, OperationNotFound)
        # The tool, looked up once, and one pipeline for every step of this read.
        definition = registry.find(operation.tool)
        gateway = Gateway(definition) if definition is not None else None
        authorize_read(request, gateway, operation.input)
        data = {**operation.summary(), "tool": operation.tool,
                "created_at": timestamp(operation.created_at),
                "completed_at": timestamp(operation.completed_at)}
        if operation.state == "succeeded":
            data["output"] = operation.output
        elif operation.error and gateway is not None:
            error = gateway.stored_error(operation)
            data["error"] = error.as_dict(docs_url(request), Audience(transport="rest"))
        # The call's latest confirmation: a pending one is what the operation waits for
        # (only a tool that asks for one, or a retired tool, can have it: agents poll here).
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
