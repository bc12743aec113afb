"""Provides the console's JSON on pages: highlighted, bounded, downloadable."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from guarded_tools.console.formatting import (
    JSON_SHOWN_CHARS,
    cut_note,
    highlight_json,
    highlighted,
    pretty_json,
)
from guarded_tools.core.registry import registry

__all__ = ["JSON_SHOWN_CHARS", "highlight_json", "input_rows", "json_download", "pretty_json"]

#: What a row of the input table costs against that budget besides its value.
_ROW_CHARS = 160


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
        html, shown = highlighted(text, budget)
        budget -= len(html)
        cut = "" if shown == len(text) else cut_note(len(text) - shown, "")
        rows.append((title, name, format_html('<pre class="gt-json">{}{}</pre>',
                                              mark_safe(html), cut)))  # noqa: S308
    return rows, len(fields) - len(rows)


def json_download(value: Any, filename: str) -> HttpResponse:
    """``value`` as a JSON file the browser saves instead of showing."""
    response = HttpResponse(pretty_json(value), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
