"""A site's ``EXCEPTION_HANDLER`` that reads the request's body, as DRF hands it to handlers
(the ``handler_reads`` fixture puts it in the settings)."""

from __future__ import annotations

from typing import Any

from guarded_tools.transports.rest.exception_handler import exception_handler

#: What the handler saw of ``request.data``, one entry per error it rendered.
SEEN: list[Any] = []


def reading(exc: Exception, context: dict[str, Any]) -> Any:
    SEEN.append(context["request"].data)
    return exception_handler(exc, context)
