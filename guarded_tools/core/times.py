"""Provides the one form every time the agent surface shows takes (REST, MCP, the queue).

Below the pipeline, which stamps its answers with it, and the transports, which render
them: both import it from here.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone


def timestamp(value: dt.datetime | None) -> str | None:
    """The one form every time the agent surface shows takes: UTC, milliseconds, ``Z``.

    ``2026-12-01T08:49:40.123Z`` (JavaScript's ``toISOString``); a naive value is read
    in the current time zone.
    """
    if value is None:
        return None
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    text = value.astimezone(dt.UTC).isoformat(timespec="milliseconds")
    return text.removesuffix("+00:00") + "Z"


#: How a message to an agent says a time of the site's calendar (as the admin shows times).
SITE_TIME_FORMAT = "Y-m-d H:i:s T"


def site_time(value: dt.datetime) -> str:
    """``value`` in the site's time zone (``TIME_ZONE``) to the second, with the zone's
    abbreviation and name: "2026-12-05 00:00:00 CET (Europe/Paris)". For the words of a
    message; a field that carries a time takes ``timestamp``'s form."""
    from django.utils import dateformat

    zone = timezone.get_default_timezone()
    if timezone.is_naive(value):
        value = timezone.make_aware(value, zone)
    local = value.astimezone(zone)
    return f"{dateformat.format(local, SITE_TIME_FORMAT)} ({zone})"
