"""Provides the one exception handler that renders every error for agents (and re-exports
the one timestamp form the agent surface uses, defined in :mod:`guarded_tools.core.times`)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.conf import settings
from django.http import Http404, HttpResponseBase
from django.urls import NoReverseMatch, reverse
from rest_framework import exceptions as drf
from rest_framework.response import Response

from guarded_tools.conf import gt_settings
from guarded_tools.core import hosts
from guarded_tools.core.catalog import site_names
from guarded_tools.core.errors import (
    AuthorizationError,
    ConfirmationRequired,
    CsrfFailed,
    GuardError,
    InternalError,
    MalformedRequest,
    MethodNotAllowed,
    NotAuthenticated,
    RateLimited,
    ToolNotFound,
)
from guarded_tools.core.repair import Audience, Repair, RepairPlan
from guarded_tools.core.times import timestamp as timestamp  # the REST views import it here

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
            return csrf_failed(detail)
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
        return MethodNotAllowed()
    if isinstance(exc, (Http404, drf.NotFound)):
        return ToolNotFound()
    correlation_id = uuid.uuid4().hex
    logger.error(
        "internal error %s: %s", correlation_id, type(exc).__name__, exc_info=exc
    )
    return InternalError(correlation_id)


def csrf_failed(detail: str) -> CsrfFailed:
    """A session-authenticated call refused by Django's CSRF check, with the cure as a plan.

    ``detail`` is Django's reason. It may quote the caller's Origin or Referer, so it only
    decides which advice applies and never enters the message. A foreign Origin or
    Referer is the site's policy, which the agent cannot change; anything else (no
    token, a wrong token, no CSRF cookie, a missing, malformed or insecure Referer over
    HTTPS) is cured by reading the token and repeating the call with it (and a Referer
    naming this site): nothing ran, so the same key works.
    """
    reason = detail.removeprefix("CSRF Failed:").strip()
    names = site_names()
    header = names["csrf_header"]
    if reason.endswith("does not match any trusted origins."):
        return CsrfFailed(
            "The CSRF check failed: this site accepts session-authenticated calls only from"
            " its own pages, and this call came from another origin.",
            retry="never",
            repair=Repair(
                action="ask_user",
                instruction="Tell the user this site refuses session-authenticated calls from"
                " this origin; they can call it from the site's own pages or with a token.",
            ),
        )
    if settings.CSRF_USE_SESSIONS or settings.CSRF_COOKIE_HTTPONLY:
        source = "the csrfmiddlewaretoken field of a form on one of this site's pages"
    else:
        source = (
            f"the {names['csrf_cookie']} cookie's value (load one of this site's pages first"
            " if that cookie is not set)"
        )
    send = f"the token in the {header} header"
    if reason.startswith("Referer checking failed"):  # none, malformed, or not https
        send += " and a Referer header naming this site's own https address"
    return CsrfFailed(
        f"The CSRF check failed: calls authenticated by a session cookie need this site's"
        f" CSRF token in the {header} header; token-authenticated calls do not.",
        repair=RepairPlan(
            steps=(
                Repair(
                    action="refresh_state", instruction=f"Read this site's CSRF token: {source}."
                ),
                Repair(
                    action="retry_same_operation",
                    instruction=f"Repeat this exact call with {send}, with unchanged input."
                    "{no_new_key}",
                ),
            )
        ),
    )


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


def log_once(error: GuardError, response: HttpResponseBase) -> None:
    """Log the guard's own 5xx answers once, at their level, and keep Django from
    logging them again as an "Internal Server Error".

    ``outcome_unknown`` and ``verification_failed`` are states the design answers (a
    replay answers them again): one WARNING with the operation id. ``internal_error``
    was logged at ERROR, with its traceback and correlation id, when it was made
    (:func:`to_guard_error`). Django's ``log_response`` skips a response marked
    ``_has_been_logged``. An application's own 5xx (a ``ToolError``) is Django's to log.
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
    response._has_been_logged = True  # type: ignore[attr-defined]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    error = to_guard_error(exc)
    request, view = context.get("request"), context.get("view")
    describe = getattr(view, "error_audience", None)
    audience = describe() if describe is not None else None
    response = Response(error_payload(error, request, audience), status=error.status_code)
    for name, value in error.headers.items():
        response[name] = value
    if isinstance(error, ConfirmationRequired) and request is not None:
        confirmation = error.extra.get("confirmation") or {}
        location = status_url(request, "confirmation-detail", str(confirmation.get("id")))
        if location and confirmation.get("id"):
            response["Location"] = location
    if error.status_code == 401:
        response["WWW-Authenticate"] = 'Token realm="api"'
    log_once(error, response)
    return response
