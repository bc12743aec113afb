"""Provides the console's JSON on pages: highlighted, bounded, downloadable."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from guarded_tools.tools.registry import registry

_TOKEN = re.compile(
    r'(?P<key>"(?:\\.|[^"\\])*"(?=\s*:))|(?P<str>"(?:\\.|[^"\\])*")'
    r"|(?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<lit>\btrue\b|\bfalse\b|\bnull\b)"
)


#: How much highlighted JSON one value renders on a page, in characters of HTML (and all
#: of a confirmation's input fields together). What is cut is downloadable as JSON.
JSON_SHOWN_CHARS = 64 * 1024
#: What a row of the input table costs against that budget besides its value.
_ROW_CHARS = 160


def _pieces(text: str) -> Iterator[tuple[str, str]]:
    """``text`` as (class, raw text) pieces: a token's class, or "" between tokens."""
    last = 0
    for match in _TOKEN.finditer(text):
        yield "", text[last: match.start()]
        yield match.lastgroup or "str", match.group(0)
        last = match.end()
    yield "", text[last:]


def _highlighted(text: str, budget: int) -> tuple[str, int]:
    """``text`` as escaped, classed HTML of at most ``budget`` characters, and how much
    of ``text`` that shows (a token that does not fit is shown in part)."""
    parts: list[str] = []
    size = shown = 0
    for kind, raw in _pieces(text):
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
    html, shown = _highlighted(text, max(limit, 0))
    cut = "" if shown == len(text) else _cut_note(len(text) - shown, download_url)
    return format_html('<pre class="gt-json">{}{}</pre>', mark_safe(html), cut)  # noqa: S308


def _cut_note(hidden: int, download_url: str) -> SafeString:
    note = format_html('\n<span class="gt-cut">… {} more characters not shown.</span>', hidden)
    if download_url:
        note = format_html('{} <a href="{}" download>{}</a>', note, download_url,
                           _("Download all of it as JSON"))
    return note


def input_rows(tool_name: str, data: Any, *, limit: int = JSON_SHOWN_CHARS,
               part: str = "input") -> tuple[list[tuple[str, str, SafeString]], int]:
    """(title, field, highlighted value) per top-level input field, schema titles first,
    within ``limit`` characters of HTML in all; and how many fields are not shown.

    Fields come in the schema's order, then the others as stored (PostgreSQL's jsonb
    keeps its own order), so what is cut is the same on every database.
    """
    definition = registry.find(tool_name)
    schema = (definition.output_schema if part == "output" else definition.input_schema) \
        if definition else None
    props = (schema or {}).get("properties", {}) or {}
    fields = list(data.items()) if isinstance(data, dict) else [("(input)", data)]
    declared = {name: i for i, name in enumerate(props)}
    fields.sort(key=lambda item: declared.get(item[0], len(declared)))
    rows = []
    budget = limit
    for name, value in fields:
        spec = props.get(name, {}) if isinstance(props.get(name), dict) else {}
        title = str(spec.get("title") or name)
        budget -= _ROW_CHARS + len(escape(title)) + len(escape(name))
        if budget <= 0:
            break
        text = pretty_json(value)
        html, shown = _highlighted(text, budget)
        budget -= len(html)
        cut = "" if shown == len(text) else _cut_note(len(text) - shown, "")
        rows.append((title, name, format_html('<pre class="gt-json">{}{}</pre>',
                                              mark_safe(html), cut)))  # noqa: S308
    return rows, len(fields) - len(rows)


def json_download(value: Any, filename: str) -> HttpResponse:
    """``value`` as a JSON file the browser saves instead of showing."""
    response = HttpResponse(pretty_json(value), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
