"""Provides the app's exception handler (``EXCEPTION_HANDLER``): every error for agents."""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpResponseBase
from django.urls import NoReverseMatch, reverse
from rest_framework.response import Response

from guarded_tools.conf import gt_settings
from guarded_tools.core import hosts
from guarded_tools.core.agent_errors import to_guard_error
from guarded_tools.core.errors import (
    ConfirmationRequired,
    GuardError,
    InternalError,
)
from guarded_tools.core.repair import Audience

logger = logging.getLogger("guarded_tools")


def docs_url(request: Any) -> str:
    """Where catalog links point: ``DOCS_URL``, else this site's own errors page (relative
    when the request's Host is not one the site configured: see ``hosts``)."""
    if gt_settings.DOCS_URL:
        return str(gt_settings.DOCS_URL)
    if request is None:
        return ""
    try:
        return hosts.absolute_url(request, reverse("guarded_tools:errors-page"))
    except NoReverseMatch:
        return ""


def error_payload(
    error: GuardError, request: Any = None, audience: Audience | None = None
) -> dict[str, Any]:
    return {"error": error.as_dict(docs_url(request), audience or Audience(transport="rest"))}


def status_url(request: Any, name: str, pk: str) -> str | None:
    """The absolute URL of route ``name`` for ``pk``, in the namespace this request came in."""
    try:
        path = hosts.app_path(request, name, pk=pk)
    except NoReverseMatch:
        return None
    return hosts.absolute_url(request, path)


#: Set in the request's META once the guard has logged its answer (see :class:`LoggedOnce`).
LOGGED = "guarded_tools.logged"


class LoggedOnce(logging.Filter):
    """Drops ``django.request``'s record of an answer the guard has logged already
    (installed on that logger by the app's ``ready()``): the request's ``META`` says so."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        return not getattr(request, "META", {}).get(LOGGED)


def log_once(error: GuardError, response: HttpResponseBase, request: Any = None) -> None:
    """Log the guard's own 5xx answers once, at their level, and keep Django from
    logging them again as an "Internal Server Error".

    ``outcome_unknown`` and ``verification_failed`` are states the design answers (a
    replay answers them again): one WARNING with the operation id. ``internal_error``
    was logged at ERROR, with its traceback and correlation id, when it was made
    (:func:`to_guard_error`). The request is then marked, and :class:`LoggedOnce` keeps
    Django's ``django.request`` logger from logging it again. An application's own 5xx
    (a ``ToolError``) is Django's to log.
    """
    if error.status_code < 500:
        return
    if error.code in ("outcome_unknown", "verification_failed"):
        operation = error.extra.get("operation")
        operation_id = operation.get("id") if isinstance(operation, dict) else None
        logger.warning("%s (HTTP %s) for operation %s", error.code, error.status_code,
                       operation_id or "-")
    elif not isinstance(error, InternalError):
        return
    meta = getattr(request, "META", None)  # a DRF Request passes its HttpRequest's through
    if isinstance(meta, dict):
        meta[LOGGED] = True


def exception_handler(exc: Exception, context: dict[str, Any]) -> HttpResponseBase:
    """The default ``EXCEPTION_HANDLER``: the guard's error for ``exc``, rendered by the
    view (``error_response``: the MCP endpoint's JSON-RPC error) or as the REST error body,
    with the error's headers; a 401's ``WWW-Authenticate`` is the challenge the view took
    from its first authentication class (``GuardedAPIView.handle_exception``)."""
    error = to_guard_error(exc)
    request, view = context.get("request"), context.get("view")
    render = getattr(view, "error_response", None)
    response = render(error, request) if render is not None else rest_response(
        error, request, view)
    for name, value in error.headers.items():
        response[name] = value
    log_once(error, response, request)
    return response


def rest_response(error: GuardError, request: Any = None, view: Any = None) -> Response:
    """``error`` as a REST view answers it: ``{"error": …}``, with the confirmation's
    ``Location`` when it waits for a person."""
    describe = getattr(view, "error_audience", None)
    audience = describe() if describe is not None else None
    response = Response(error_payload(error, request, audience), status=error.status_code)
    if isinstance(error, ConfirmationRequired) and request is not None:
        confirmation = error.extra.get("confirmation") or {}
        location = status_url(request, "confirmation-detail", str(confirmation.get("id")))
        if location and confirmation.get("id"):
            response["Location"] = location
    return response
