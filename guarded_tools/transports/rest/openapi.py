"""Provides the OpenAPI 3.1 document: drf-spectacular for the frame, one path per tool.

Each tool's request body is its input schema and its 200 response wraps its output
schema; every error the guard can answer is documented with the shared error body.
Needs the optional ``drf-spectacular`` dependency (``pip install guarded-tools[openapi]``).
"""

from __future__ import annotations

import copy
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, include, path, reverse
from drf_spectacular.extensions import OpenApiViewExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request

from guarded_tools.conf import gt_settings
from guarded_tools.core import hosts
from guarded_tools.core.definition import Tool

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type", "code", "message", "retry"],
            "properties": {
                "type": {"type": "string"},
                "code": {"type": "string", "description": "Stable machine-readable code."},
                "message": {"type": "string", "description": "Stands alone: code, retry policy,"
                            " next action."},
                "retry": {"type": "string", "enum": ["never", "as_is", "after_repair"]},
                "repair": {"type": "object"},
                "issues": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"path": {"type": "array"}, "keyword": {"type": "string"},
                                   "message": {"type": "string"}}}},
                "why": {"type": "string"},
                "fix": {"type": "string"},
                "link": {"type": "string"},
                "operation": {"type": "object"},
                "confirmation": {"type": "object"},
                "correlation_id": {"type": "string"},
            },
        }
    },
}
ERROR_REF = {"$ref": "#/components/schemas/GuardedToolsError"}
OPERATION = {
    "type": "object",
    "required": ["id", "key", "status", "replayed", "recovered"],
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "key": {"type": "string"},
        "status": {"type": "string"},
        "replayed": {"type": "boolean"},
        "recovered": {"type": "boolean"},
    },
}
STATUS_TEXT = {
    "202": "A person must approve the call first (confirmation_required).",
    "400": "Malformed body, or the idempotency key is missing or invalid.",
    "401": "Not authenticated.",
    "403": "Not allowed (permission or object rule), or the CSRF token is missing (csrf_failed).",
    "404": "No such tool or operation for this caller.",
    "405": "Method not allowed.",
    "409": "In flight, declined, expired, or the tool's own business error.",
    "413": "Request body too large.",
    "415": "Body is not JSON.",
    "422": "Input does not match the schema, or the key was used with another input.",
    "429": "Throttled.",
    "500": "Outcome unknown, or an internal error (with a correlation id).",
    "502": "The result could not be verified, or the tool's dependency failed before any"
    " effect (its own error).",
    "503": "The tool's dependency is unavailable; nothing ran (its own error).",
    "504": "The tool's dependency timed out before any effect (its own error).",
}


def _errors(*codes: str) -> dict[str, Any]:
    return {
        code: {"description": STATUS_TEXT[code],
               "content": {"application/json": {"schema": ERROR_REF}}}
        for code in codes
    }


class _DocumentedView(OpenApiViewExtension):
    """Annotate a guarded_tools view with raw schemas, without touching the view.

    The annotated view carries drf-spectacular's ``AutoSchema`` itself: the document does
    not depend on the site's ``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]``, which a site that
    never used drf-spectacular leaves at DRF's own (which drf-spectacular refuses).
    """

    responses: dict[Any, Any] = {}
    request_schema: Any = None
    summary = ""

    def view_replacement(self) -> Any:
        @extend_schema(request=self.request_schema, responses=self.responses,
                       summary=self.summary, tags=["guarded_tools"])
        class Documented(self.target_class):  # type: ignore[name-defined,misc]
            schema = AutoSchema()

        return Documented


class ToolListDoc(_DocumentedView):
    target_class = "guarded_tools.transports.rest.views.ToolListView"
    summary = "The tools this caller may call."
    responses = {200: {"type": "object", "properties": {"tools": {"type": "array",
                                                                  "items": {"type": "object"}}}}}


class ToolCallDoc(_DocumentedView):
    target_class = "guarded_tools.transports.rest.views.ToolCallView"
    summary = "Call a tool (replaced by one path per tool)."
    request_schema = {"type": "object"}
    responses = {200: {"type": "object"}}


class OperationDoc(_DocumentedView):
    target_class = "guarded_tools.transports.rest.views.OperationDetailView"
    summary = "Status of one of the caller's own operations."
    responses = {200: OPERATION, 401: ERROR, 404: ERROR}


class CatalogDoc(_DocumentedView):
    target_class = "guarded_tools.transports.rest.views.ErrorCatalogView"
    summary = "The error catalog: why, fix and link for every code."
    responses = {200: {"type": "object"}}


class LlmsDoc(_DocumentedView):
    target_class = "guarded_tools.transports.rest.views.LlmsTxtView"
    summary = "The error catalog as llms.txt."
    responses = {200: {"type": "string"}}


def tool_operation(definition: Tool) -> dict[str, Any]:
    output = copy.deepcopy(dict(definition.output_schema)) if definition.output_schema else {}
    success = {
        "type": "object",
        "required": ["output"],
        "properties": {"output": output, "operation": OPERATION},
    }
    responses: dict[str, Any] = {
        "200": {"description": "The tool's output (a replay carries Idempotent-Replayed).",
                "content": {"application/json": {"schema": success}}},
        **_errors("400", "401", "403", "404", "405", "409", "413", "415", "422", "429",
                  "500", "502", "503", "504"),
    }
    if definition.confirm_mode:
        responses.update(_errors("202"))
    operation: dict[str, Any] = {
        "operationId": f"call_{definition.name}",
        "summary": definition.annotations["title"],
        "description": definition.description,
        "tags": ["tools"],
        "requestBody": {"required": True, "content": {
            "application/json": {"schema": copy.deepcopy(dict(definition.input_schema))}}},
        "responses": responses,
    }
    policy = definition.describe().get("policy")
    if policy:
        operation["description"] = f"{definition.description}\n\nApproval policy: {policy}"
    if definition.idempotent and not definition.key_field:
        operation["parameters"] = [{
            "name": gt_settings.IDEMPOTENCY_HEADER, "in": "header", "required": True,
            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
            "description": "One key per intended operation; reuse it for every retry.",
        }]
    return operation


DESCRIPTION = "Agent-callable tools; every call is guarded. Errors carry a repair plan."


def login_link(request: Request) -> str:
    """The site's ``LOGIN_URL``, back to ``docs/`` afterwards; "" when it does not resolve."""
    try:
        login = resolve_url(settings.LOGIN_URL)
        docs = hosts.app_path(request, "docs")
    except NoReverseMatch:
        return ""
    return f"{login}?{urlencode({'next': docs})}"


def caller_note(request: Request, count: int) -> str:
    """Whose tools the document lists, and how to see another caller's (Markdown: Swagger
    UI shows it at the top of ``docs/``). An anonymous caller is told why it sees no
    tool, and how to authenticate."""
    user = request.user
    if user is None or not user.is_authenticated:
        login = login_link(request)
        how = f"[log in]({login})" if login else "log in"
        return (
            "**No tools are listed: you are not signed in.** This list depends on who calls:"
            " it shows only the tools the caller may call. To see yours, " + how + " to this"
            " site and reload this page; an agent sends its own credentials (its"
            " `Authorization` header, as on a tool call) with `GET openapi.json` or"
            " `GET tools/`."
        )
    name = str(user.get_username()).replace("`", "")
    tools = f"{count} tool" if count == 1 else f"{count} tools"
    if count == 0:
        tools = "no tools"
    return (
        f"**Signed in as `{name}`: this list shows the {tools} `{name}` may call.** It depends"
        " on who calls: another account, or an agent with its own credentials, sees its own."
    )


def build_document(request: Request, tools: list[Tool]) -> dict[str, Any]:
    """The site's guarded_tools endpoints, one path per tool the caller may call."""
    from guarded_tools.transports.rest.urls import rest_urlpatterns

    prefix = reverse("guarded_tools:tool-list")[1: -len("tools/")]
    patterns = [path(prefix, include(rest_urlpatterns))]
    generator = SchemaGenerator(
        patterns=patterns, title=gt_settings.SERVER_NAME, version="1",
        description=DESCRIPTION,
    )
    document: dict[str, Any] = generator.get_schema(request=request, public=True)
    paths = document.setdefault("paths", {})
    generic = paths.pop(f"/{prefix}tools/{{name}}/", {}).get("post", {})
    for definition in tools:
        operation = tool_operation(definition)
        if "security" in generic:
            operation["security"] = generic["security"]
        paths[f"/{prefix}tools/{definition.name}/"] = {"post": operation}
    llms = paths.get(f"/{prefix}llms.txt", {}).get("get", {})
    if llms:
        llms["responses"]["200"]["content"] = {"text/plain": {"schema": {"type": "string"}}}
    document.setdefault("components", {}).setdefault("schemas", {})["GuardedToolsError"] = ERROR
    document["openapi"] = "3.1.0"
    info = document.setdefault("info", {})  # the site's SPECTACULAR_SETTINGS description first
    info["description"] = "\n\n".join(
        text for text in (info.get("description"), caller_note(request, len(tools))) if text)
    return document
