"""Provides what any exception becomes for an agent: the guard's own errors pass, DRF's
policy errors map to their codes, anything else is ``internal_error`` (its text only in
the log). The REST exception handler, the MCP server and the Celery tasks all use it, so
it lives below the transports (``guarded_tools.transports.rest.exception_handler``
re-exports it)."""

from __future__ import annotations

import logging
import uuid

from django.conf import settings
from django.http import Http404
from rest_framework import exceptions as drf

from guarded_tools.core.catalog import site_names
from guarded_tools.core.errors import (
    AuthorizationError,
    CsrfFailed,
    GuardError,
    InternalError,
    MalformedRequest,
    MethodNotAllowed,
    NotAuthenticated,
    RateLimited,
    ToolNotFound,
)
from guarded_tools.core.repair import Repair, RepairPlan

__all__ = ["csrf_failed", "to_guard_error"]

logger = logging.getLogger("guarded_tools")


def to_guard_error(exc: BaseException) -> GuardError:
    """Map any exception to the error an agent may see.

    Errors the guard owns pass through; DRF's own policy errors map to their codes;
    everything else becomes ``internal_error`` and its text goes only to the log.
    """
    if isinstance(exc, GuardError):
        return exc
    if isinstance(exc, (drf.NotAuthenticated, drf.AuthenticationFailed)):
        # As the view left it: 401 with its challenge, or 403 where it has none.
        challenge = getattr(exc, "auth_header", None)
        return NotAuthenticated(status=exc.status_code,
                                headers={"WWW-Authenticate": challenge} if challenge else None)
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
