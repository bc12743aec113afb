"""Provides how a tool's request reads to people: a one-line summary and titled fields.

:func:`present_request` is the one entry point every screen that shows a request to a
person uses (the admin's queue and detail page, notifications, the audit trail, a
site's own consent page). It needs no admin: a tool's ``present(input=, user=)`` hook
resolves references to objects (names, owners, balances, admin links), its
``summary`` says the request in one sentence, and without either the schema's field
titles and plain values are used. A hook that fails never breaks the page: the
plain presentation is shown instead, and the failure is logged.

A confirmation keeps its summary as it read when it was asked (``Confirmation.summary``):
lists, emails and the audit trail show that, and never call a hook per row. A request
stored without one reads as :func:`requested_summary` renders it with ``hooks=False``:
no ``present`` and no callable ``summary`` (either may query), only the schema.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.utils.http import url_has_allowed_host_and_scheme

from guarded_tools.core.definition import Tool
from guarded_tools.core.registry import registry

logger = logging.getLogger("guarded_tools.presentation")

#: The longest summary shown (in characters); longer ones end with "…".
SUMMARY_MAX_CHARS = 200
#: The longest value text of one presented field.
FIELD_MAX_CHARS = 500
#: The most fields presented (the raw input, bounded, shows the rest).
FIELDS_SHOWN = 50


@dataclass(frozen=True)
class Field:
    """One input field as a person reads it: its title, its value in words, a link."""

    name: str
    title: str
    text: str
    url: str = ""
    #: Whether the tool's ``present`` hook gave this text (an object resolved) rather
    #: than the raw value: a page that shows the raw input too shows only these here.
    resolved: bool = False
    #: The currency or unit the hook gave for the value ("EUR", "kg"), already in ``text``.
    unit: str = ""


@dataclass(frozen=True)
class Presentation:
    """A request as people read it: one sentence, then its fields in the schema's order."""

    summary: str
    fields: tuple[Field, ...]


def _bounded(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def safe_link(url: Any) -> str:
    """``url`` if a page may link to it: http(s) or relative, as the admin links; else "".

    A ``present`` hook's link reaches an approver's page, where ``javascript:`` (or
    ``data:``, ``vbscript:`` …) would run in their session.
    """
    text = str(url or "").strip()
    try:
        netloc = urlsplit(text).netloc
    except ValueError:
        return ""
    # Its own host allowed: any http(s) site may be linked, no other scheme.
    return text if url_has_allowed_host_and_scheme(text, allowed_hosts={netloc}) else ""


def plain(value: Any) -> str:
    """A value in words: a string without JSON's quotes, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _tool(subject: Any) -> Tool | None:
    if isinstance(subject, Tool):
        return subject
    name = subject if isinstance(subject, str) else getattr(subject, "tool", None)
    return registry.find(name) if isinstance(name, str) else None


def _hook(definition: Tool, input: Mapping[str, Any], user: Any) -> Mapping[str, Any]:
    if definition.present is None:
        return {}
    try:
        presented = definition.present(input=input, user=user)
    except Exception:  # the page still shows the plain request
        logger.exception("present() of tool %s failed", definition.name)
        return {}
    return presented if isinstance(presented, Mapping) else {}


def _summary(definition: Tool | None, input: Mapping[str, Any], user: Any,
             presented: Mapping[str, Any], fields: tuple[Field, ...], hooks: bool) -> str:
    if presented.get("summary"):
        return str(presented["summary"])
    spec = definition.summary if definition is not None else None
    try:
        if callable(spec) and hooks:
            return str(spec(input=input, user=user))
        if isinstance(spec, str):
            return spec.format_map({k: plain(v) for k, v in input.items()})
    except Exception:
        logger.exception("summary of tool %s failed", getattr(definition, "name", "?"))
    title = definition.annotations["title"] if definition is not None else "Request"
    key_field = definition.key_field if definition is not None else None
    parts = ", ".join(f"{f.title} {_bounded(f.text, 40)}"
                      for f in [f for f in fields if f.name != key_field][:4])
    return f"{title}: {parts}" if parts else str(title)


def _given(shown: Any, value: Any) -> tuple[str, str, str]:
    """What a ``present`` hook gave for one field: text, link and unit.

    A text; a ``(text, url)`` pair; or a mapping with any of ``"text"``, ``"url"`` and
    ``"unit"`` (the value's currency or unit: ``{"unit": "EUR"}`` alone keeps the value
    and reads "12.50 EUR").
    """
    if isinstance(shown, tuple) and len(shown) == 2:
        return str(shown[0]), str(shown[1] or ""), ""
    if isinstance(shown, Mapping):
        unit = _bounded(str(shown.get("unit") or ""), 20)
        return (str(shown["text"]) if "text" in shown else plain(value),
                str(shown.get("url") or ""), unit)
    return (str(shown) if shown is not None else plain(value)), "", ""


def present_request(subject: Any, input: Any, user: Any = None, *,
                    hooks: bool = True) -> Presentation:
    """``input`` of ``subject`` (a tool, its name, or a confirmation or operation row)
    as ``user`` (the person looking, or None) should read it.

    ``hooks=False`` leaves out the tool's ``present`` and a callable ``summary``: the
    schema's titles and the plain values alone, which cost no query.
    """
    definition = _tool(subject)
    data: Mapping[str, Any] = input if isinstance(input, Mapping) else {"(input)": input}
    presented = _hook(definition, data, user) if definition is not None and hooks else {}
    given = presented.get("fields")
    given = given if isinstance(given, Mapping) else {}
    schema = dict(definition.input_schema) if definition is not None else {}
    props = schema.get("properties") or {}
    props = props if isinstance(props, Mapping) else {}
    order = {name: i for i, name in enumerate(props)}
    fields = []
    for name in sorted(data, key=lambda n: order.get(n, len(order)))[:FIELDS_SHOWN]:
        spec = props.get(name)
        spec = spec if isinstance(spec, Mapping) else {}
        shown = given.get(name)
        text, url, unit = _given(shown, data[name])
        fields.append(Field(name=name, title=str(spec.get("title") or name),
                            text=_bounded(f"{text} {unit}" if unit else str(text),
                                          FIELD_MAX_CHARS),
                            url=safe_link(url), resolved=shown is not None, unit=unit))
    frozen = tuple(fields)
    summary = _summary(definition, data, user, presented, frozen, hooks)
    return Presentation(summary=_bounded(summary, SUMMARY_MAX_CHARS), fields=frozen)


def summarize(subject: Any, input: Any, user: Any = None, *, hooks: bool = True) -> str:
    """The one-line summary alone."""
    return present_request(subject, input, user, hooks=hooks).summary


def requested_summary(confirmation: Any) -> str:
    """What ``confirmation`` asked for, in one sentence, as it read when it was asked.

    Its stored summary; for a request stored without one, its plain rendering (the
    tool's title and field values), which runs no hook and no query: lists, emails and
    the audit trail call this once per row.
    """
    return confirmation.summary or summarize(confirmation, confirmation.input, hooks=False)


__all__ = ["Field", "Presentation", "present_request", "requested_summary", "safe_link",
           "summarize"]
