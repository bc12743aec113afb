"""Provides the console's formatting: times, ages and highlighted JSON.

One module for what the admin's pages and the console's template filters show alike, so
both read it from here (and neither imports the other).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import dateformat, timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from guarded_tools.core.times import local_time

#: A timeline's times: to the millisecond, with the zone.
PRECISE_TIME_FORMAT = r"Y-m-d H:i:s.\M\M\M T"  # MMM: the milliseconds


def when(value: datetime | str | None) -> str:
    """``value`` in the current time zone, to the second ("—" for none).

    A string is an ISO time as JSON keeps it (a request's approvals): read, then shown
    the same way; one that is no time is shown as it is.
    """
    if value is None:
        return "—"
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            return value
        value = parsed
    return local_time(value)


def when_precisely(value: datetime | None) -> str:
    """``value`` as ``when`` does, to the millisecond ("2026-12-01 18:30:05.123 UTC")."""
    if value is None:
        return "—"
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    millis = f"{value.microsecond // 1000:03d}"
    return dateformat.format(value, PRECISE_TIME_FORMAT).replace("MMM", millis, 1)


def age(value: timedelta | None) -> str:
    """A duration as people say it: "42 s", "3 min 5 s", "2 h 10 min", "4 d 3 h"."""
    if value is None:
        return "—"
    seconds = max(int(value.total_seconds()), 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    for big, big_unit, small, small_unit in ((days, "d", hours, "h"), (hours, "h", minutes, "min"),
                                             (minutes, "min", seconds, "s")):
        if big:
            return f"{big} {big_unit}" + (f" {small} {small_unit}" if small else "")
    return f"{seconds} s"



_TOKEN = re.compile(
    r'(?P<key>"(?:\\.|[^"\\])*"(?=\s*:))|(?P<str>"(?:\\.|[^"\\])*")'
    r"|(?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<lit>\btrue\b|\bfalse\b|\bnull\b)"
)


#: How much highlighted JSON one value renders on a page, in characters of HTML (and all
#: of a confirmation's input fields together). What is cut is downloadable as JSON.
JSON_SHOWN_CHARS = 64 * 1024


def pieces(text: str) -> Iterator[tuple[str, str]]:
    """``text`` as (class, raw text) pieces: a token's class, or "" between tokens."""
    last = 0
    for match in _TOKEN.finditer(text):
        yield "", text[last: match.start()]
        yield match.lastgroup or "str", match.group(0)
        last = match.end()
    yield "", text[last:]


def highlighted(text: str, budget: int) -> tuple[str, int]:
    """``text`` as escaped, classed HTML of at most ``budget`` characters, and how much
    of ``text`` that shows (a token that does not fit is shown in part)."""
    parts: list[str] = []
    size = shown = 0
    for kind, raw in pieces(text):
        if not raw:
            continue
        opening, closing = (f'<span class="gt-{kind}">', "</span>") if kind else ("", "")
        room = budget - size - len(opening) - len(closing)
        escaped = escape(raw)
        if len(escaped) > room:
            # The longest start of the token whose escaped text fits (escaping only grows).
            n = max(room, 0)
            while n and len(escape(raw[:n])) > room:
                n = n * room // len(escape(raw[:n])) if n > 1 else 0
            if n:
                parts.append(f"{opening}{escape(raw[:n])}{closing}")
                shown += n
            break
        parts.append(f"{opening}{escaped}{closing}")
        size += len(opening) + len(escaped) + len(closing)
        shown += len(raw)
    return "".join(parts), shown


def pretty_json(value: Any) -> str:
    """The JSON text a page shows and a download holds: indented, keys sorted."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, cls=DjangoJSONEncoder,
                      default=str)


def highlight_json(value: Any, *, limit: int = JSON_SHOWN_CHARS,
                   download_url: str = "") -> SafeString:
    """Pretty JSON with escaped, classed spans for keys, strings, numbers, literals.

    At most ``limit`` characters of HTML: a longer value is cut, says how much is not
    shown, and links to ``download_url`` (the whole value as JSON) when there is one.
    """
    text = pretty_json(value)
    html, shown = highlighted(text, max(limit, 0))
    cut = "" if shown == len(text) else cut_note(len(text) - shown, download_url)
    return format_html('<pre class="gt-json">{}{}</pre>', mark_safe(html), cut)  # noqa: S308


def cut_note(hidden: int, download_url: str) -> SafeString:
    note = format_html('\n<span class="gt-cut">… {} more characters not shown.</span>', hidden)
    if download_url:
        note = format_html('{} <a href="{}" download>{}</a>', note, download_url,
                           _("Download all of it as JSON"))
    return note
