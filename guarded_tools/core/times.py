"""Provides the forms times take: the one the agent surface shows (REST, MCP, the queue),
and the one people read (the console's pages, titles and breadcrumbs).

Below the pipeline, which stamps its answers with it, the models, whose names people read
in titles and *Recent actions*, and the transports and the console, which render them:
all import them from here.
"""

from __future__ import annotations

import datetime as dt

from django.utils import dateformat, timezone

#: The one form of a time a person reads: to the second, with the time zone.
LOCAL_TIME_FORMAT = "Y-m-d H:i:s T"


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
    zone = timezone.get_default_timezone()
    if timezone.is_naive(value):
        value = timezone.make_aware(value, zone)
    local = value.astimezone(zone)
    return f"{dateformat.format(local, SITE_TIME_FORMAT)} ({zone})"


def local_time(value: dt.datetime) -> str:
    """``value`` as people read it: in the current time zone, to the second, with the
    zone's name (``2026-12-05 07:45:12 UTC``); a naive value is shown as it is."""
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return dateformat.format(value, LOCAL_TIME_FORMAT)
