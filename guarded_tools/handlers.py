"""Provides the one exception handler that renders every error for agents."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.http import Http404
from django.urls import NoReverseMatch, reverse
from rest_framework import exceptions as drf
from rest_framework.response import Response

from guarded_tools.conf import gt_settings
from guarded_tools.exceptions import (
    AuthorizationError,
    GuardError,
    InternalError,
    MalformedRequest,
    NotAuthenticated,
    RateLimited,
    ToolNotFound,
)

logger = logging.getLogger("guarded_tools")


def to_guard_error(exc: BaseException) -> GuardError:
    """Map any exception to the error an agent may see.

    Errors the guard owns pass through; DRF's own policy errors map to their codes;
    everything else becomes ``internal_error`` and its text goes only to the log.
    """
    if isinstance(exc, GuardError):
        return exc
    if isinstance(exc, (drf.NotAuthenticated, drf.AuthenticationFailed)):
        return NotAuthenticated()
    if isinstance(exc, drf.PermissionDenied):
        detail = str(getattr(exc, "detail", ""))
        if detail.startswith("CSRF Failed"):
            return AuthorizationError(
                "The CSRF check failed: session-authenticated calls need the CSRF token"
                " (X-CSRFToken header); token-authenticated calls do not.",
                code="authorization_denied",
            )
        return AuthorizationError()
    if isinstance(exc, drf.Throttled):
        wait = int(getattr(exc, "wait", None) or 1)
        return RateLimited(headers={"Retry-After": str(max(wait, 1))})
    if isinstance(exc, drf.UnsupportedMediaType):
        return MalformedRequest(
            "Send the input as a JSON object with Content-Type application/json.", status=415
        )
    if isinstance(exc, drf.ParseError):
        return MalformedRequest()
    if isinstance(exc, drf.MethodNotAllowed):
        return MalformedRequest(
            "This endpoint does not accept that HTTP method.", status=405, code="method_not_allowed"
        )
    if isinstance(exc, (Http404, drf.NotFound)):
        return ToolNotFound()
    correlation_id = uuid.uuid4().hex
    logger.error(
        "internal error %s: %s", correlation_id, type(exc).__name__, exc_info=exc
    )
    return InternalError(correlation_id)


def docs_url(request: Any) -> str:
    """Where catalog links point: ``DOCS_URL``, else this site's own errors page."""
    if gt_settings.DOCS_URL:
        return str(gt_settings.DOCS_URL)
    if request is None:
        return ""
    try:
        return str(request.build_absolute_uri(reverse("guarded_tools:errors-page")))
    except NoReverseMatch:
        return ""


def error_payload(error: GuardError, request: Any = None) -> dict[str, Any]:
    return {"error": error.as_dict(docs_url(request))}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    error = to_guard_error(exc)
    response = Response(error_payload(error, context.get("request")), status=error.status_code)
    for name, value in error.headers.items():
        response[name] = value
    if error.status_code == 401:
        response["WWW-Authenticate"] = 'Token realm="api"'
    return response
