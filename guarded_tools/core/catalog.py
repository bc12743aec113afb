"""Provides the error catalog: why, fix and link per code, exported for agents."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from guarded_tools.conf import DEFAULTS, gt_settings
from guarded_tools.core.repair import ANY_AUDIENCE, RETRY_POLICIES, Audience, coerce_repair

if TYPE_CHECKING:
    from guarded_tools.core.repair import Repair, RepairPlan

#: An error code: 1-64 lowercase letters, digits or '_', starting with a letter.
CODE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def is_code(value: object) -> bool:
    return isinstance(value, str) and CODE.match(value) is not None


#: The statuses an application's error may declare, and so a ``ToolError`` may carry:
#: any 4xx (the call was refused, or failed without an effect), or 502, 503 or 504 (a
#: dependency of the site failed, is unavailable or timed out, before any effect).
ERROR_STATUSES: frozenset[int] = frozenset(range(400, 500)) | frozenset((502, 503, 504))


def status_problem(status: object) -> str:
    """Why ``status`` cannot be an application error's status (it is not in ERROR_STATUSES)."""
    allowed = "use a 4xx, or 502, 503 or 504 when a dependency failed before any effect"
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        return f"status must be an HTTP status code, not {status!r}"
    if status < 400:
        return f"status {status} is not an error status; {allowed}"
    if status == 500:
        return (
            "status 500 is the guard's own internal_error and outcome_unknown, which tell an"
            f" agent the outcome is not known; {allowed}"
        )
    return f"status {status} does not describe a failure an application raises; {allowed}"


def header_name(meta_key: str) -> str:
    """An HTTP header's name from its ``request.META`` key (``HTTP_X_CSRFTOKEN``)."""
    if meta_key == "HTTP_X_CSRFTOKEN":
        return "X-CSRFToken"  # Django's default, spelled as its documentation spells it
    name = meta_key[5:] if meta_key.startswith("HTTP_") else meta_key
    return "-".join(part.capitalize() for part in name.split("_"))


def site_names(audience: Audience = ANY_AUDIENCE) -> dict[str, str]:
    """What catalog text may name in braces: this site's configured names and key limit,
    and the words of the transport the text is read on.

    An agent must be told the names this site reads (``IDEMPOTENCY_HEADER``,
    ``CSRF_HEADER_NAME``, ``CSRF_COOKIE_NAME``) and its ``MAX_KEY_LENGTH``, not the
    defaults; and how to list tools and where a key goes on its own transport
    (``{tool_list}``, ``{key_place}``: an MCP agent cannot send a header per call);
    ``{keep_key}`` and ``{no_new_key}`` are closing sentences only where the call has a
    key (the second where the sentence already says to keep it).
    """
    try:
        names = {
            "idempotency_header": str(gt_settings.IDEMPOTENCY_HEADER),
            "max_key_length": str(gt_settings.MAX_KEY_LENGTH),
            "csrf_header": header_name(str(settings.CSRF_HEADER_NAME)),
            "csrf_cookie": str(settings.CSRF_COOKIE_NAME),
        }
    except ImproperlyConfigured:  # settings not configured (plain Python use)
        names = {
            "idempotency_header": str(DEFAULTS["IDEMPOTENCY_HEADER"]),
            "max_key_length": str(DEFAULTS["MAX_KEY_LENGTH"]),
            "csrf_header": "X-CSRFToken",
            "csrf_cookie": "csrftoken",
        }
    names["tool_list"] = audience.tool_list
    keyed = audience.has_key
    names["keep_key"] = " Keep the same idempotency key; do not create a new one." if keyed else ""
    names["no_new_key"] = " Do not create a new key." if keyed else ""
    if audience.transport == "mcp":
        names["key_place"] = "the tool's key field (tools/list names it)"
    else:
        names["key_place"] = (
            f"the tool's key field or the {names['idempotency_header']} header"
            f" ({audience.tool_list} names which)"
        )
    return names


def site_text(text: Any, names: Mapping[str, str] | None = None) -> Any:
    """``text`` with ``{idempotency_header}``, ``{csrf_header}`` and ``{csrf_cookie}`` filled in.

    Only these exact names are replaced (no ``str.format``): any other brace is text.
    """
    if not isinstance(text, str) or "{" not in text:
        return text
    for name, value in (names if names is not None else site_names()).items():
        text = text.replace("{" + name + "}", value)
    return text


#: The texts of an entry that ``keyless`` may replace.
TEXTS = ("message", "why", "fix")


@dataclass(frozen=True, kw_only=True)
class CatalogEntry:
    """What an agent needs to act on one error code, written once.

    ``keyless``: the texts (``message``, ``why``, ``fix``) that replace the entry's own
    where the call has no idempotency key (a tool without one, or no tool at all), so
    that nobody is told to keep or replace a key they do not have.
    """

    code: str
    status: int
    message: str
    why: str
    fix: str
    link: str = ""
    retry: str = "never"
    repair: Any = None
    keyless: Mapping[str, str] | None = None

    def for_site(self, audience: Audience = ANY_AUDIENCE) -> CatalogEntry:
        """This entry as ``audience`` reads it, with this site's names filled in
        (:func:`site_text`) and its ``keyless`` texts where the call has no key.

        The entry itself when that changes nothing.
        """
        own = (self.message, self.why, self.fix)
        texts: tuple[str, ...] = own
        if not audience.has_key and self.keyless:
            keyless = self.keyless
            texts = tuple(keyless.get(name, text) for name, text in zip(TEXTS, own, strict=True))
        if any(isinstance(text, str) and "{" in text for text in texts):
            names = site_names(audience)
            texts = tuple(site_text(text, names) for text in texts)
        if texts == own:
            return self
        message, why, fix = texts
        return replace(self, message=message, why=why, fix=fix)

    def as_dict(self, docs_url: str = "") -> dict[str, Any]:
        entry = self.for_site()
        data: dict[str, Any] = {
            "code": entry.code,
            "status": entry.status,
            "retry": entry.retry,
            "message": entry.message,
            "why": entry.why,
            "fix": entry.fix,
        }
        link = resolve_link(entry.link, docs_url)
        if link:
            data["link"] = link
        return data


def resolve_link(link: str, docs_url: str) -> str:
    """Catalog links are anchors (``#errors-slot_stale``) or absolute URLs."""
    if link.startswith("#") and docs_url:
        return docs_url.split("#")[0] + link
    return link


class ErrorCatalog:
    """A named set of entries that an application defines once and raises from.

    >>> SHOP = ErrorCatalog("shop", {"order_already_shipped": {...}})
    >>> raise SHOP.error("order_already_shipped", details={"order": 7})

    An entry's text may name ``{idempotency_header}``, ``{csrf_header}`` or
    ``{csrf_cookie}``: ``entries`` keeps the definitions as written; indexing, iterating
    and exports give them as agents read them, with this site's names filled in.
    """

    #: The statuses its entries may declare: those a ``ToolError`` can carry, since
    #: :meth:`error` raises every entry as one.
    statuses: frozenset[int] = ERROR_STATUSES

    #: The exception class :meth:`error` builds, by dotted path: the errors module sits
    #: above the catalog (its own errors are catalog entries), so the catalog names it
    #: as Django settings name classes, never importing it.
    error_class: str = "guarded_tools.core.errors.ToolError"

    def __init__(self, namespace: str, entries: Mapping[str, Mapping[str, Any]] | None = None):
        self.namespace = namespace
        self.entries: dict[str, CatalogEntry] = {}
        for code, spec in (entries or {}).items():
            self.add(code, **spec)
        catalogs.add(self)

    def add(self, code: str, **spec: Any) -> CatalogEntry:
        """Define ``code``; refused when it is malformed or already defined anywhere.

        An agent sees only the code, so one code means one thing across every
        catalog (redefining a whole catalog under its own namespace replaces it).
        """
        if not is_code(code):
            raise ValueError(
                f"Error code {code!r} is not 1-64 lowercase letters, digits or '_'."
            )
        if code in self.entries:
            raise ValueError(f"Error code {code!r} is already defined in {self.namespace!r}.")
        owner = catalogs.owner(code)
        if owner is not None and owner.namespace != self.namespace:
            raise ValueError(f"Error code {code!r} is already defined in {owner.namespace!r}.")
        entry = CatalogEntry(code=code, **{"status": 409, **spec})
        if entry.keyless is not None and not set(entry.keyless) <= set(TEXTS):
            raise ValueError(f"Error {code!r}: keyless replaces only {', '.join(TEXTS)}.")
        if entry.retry not in RETRY_POLICIES:
            raise ValueError(f"Error {code!r}: retry must be one of {RETRY_POLICIES}.")
        status = entry.status
        if isinstance(status, bool) or not isinstance(status, int) \
                or status not in self.statuses:
            # Refused here, where it is written: raising it would fail in the handler.
            raise ValueError(f"Error {code!r}: {status_problem(status)}.")
        if entry.repair is not None:
            # Refuse a bad repair where it is written, not when the error is raised.
            entry = replace(entry, repair=coerce_repair(entry.repair))
        self.entries[code] = entry
        return entry

    def __getitem__(self, code: str) -> CatalogEntry:
        return self.entries[code].for_site()

    def __iter__(self) -> Iterator[CatalogEntry]:
        return (entry.for_site() for entry in list(self.entries.values()))

    def error(
        self,
        code: str,
        message: str | None = None,
        *,
        retry: str | None = None,
        repair: Repair | RepairPlan | Mapping[str, Any] | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> Any:
        """Build the ``ToolError`` (``error_class``) for ``code`` with its why/fix/link."""
        entry = self[code]
        return import_string(self.error_class)(
            code,
            message or entry.message,
            retry=retry or entry.retry,  # type: ignore[arg-type]
            repair=repair if repair is not None else entry.repair,
            details=details,
            status=entry.status,
            why=entry.why,
            fix=entry.fix,
            link=entry.link,
        )


class CatalogSet:
    """Every catalog defined in this process, in definition order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._catalogs: dict[str, ErrorCatalog] = {}

    def add(self, catalog: ErrorCatalog) -> None:
        with self._lock:
            self._catalogs[catalog.namespace] = catalog

    def remove(self, namespace: str) -> None:
        """Forget a catalog (tests, or a plugin being unloaded)."""
        with self._lock:
            self._catalogs.pop(namespace, None)

    def owner(self, code: str) -> ErrorCatalog | None:
        """The catalog that defines ``code``, if any."""
        for catalog in list(self._catalogs.values()):
            if code in catalog.entries:
                return catalog
        return None

    def lookup(self, code: str) -> CatalogEntry | None:
        for catalog in reversed(list(self._catalogs.values())):
            if code in catalog.entries:
                return catalog[code]
        return None

    def all(self) -> list[ErrorCatalog]:
        return list(self._catalogs.values())


catalogs = CatalogSet()


def export_json(docs_url: str = "") -> dict[str, Any]:
    """Every catalog's entries as JSON (``GET errors.json``), links resolved on ``docs_url``."""
    return {
        "catalogs": [
            {
                "namespace": c.namespace,
                "errors": [e.as_dict(docs_url) for e in c],
            }
            for c in catalogs.all()
        ]
    }


def _line(text: str) -> str:
    """Catalog text on one Markdown line (definitions may span source lines)."""
    return " ".join(str(text).split())


def export_llms_txt(docs_url: str = "", title: str = "guarded_tools") -> str:
    """Every catalog's entries as an llms.txt page (``GET llms.txt``) for agents to read."""
    lines = [
        f"# {title}: errors",
        "",
        "> Every failed tool call returns"
        " {\"error\": {code, message, retry, repair, why, fix, link}}."
        " Read `retry` before calling again: never = stop, as_is = the same call may succeed,"
        " after_repair = follow `repair` (or `fix`) first, and keep the same idempotency key"
        " unless the message says to use a new one.",
        "",
    ]
    for catalog in catalogs.all():
        lines.append(f"## {catalog.namespace}")
        lines.append("")
        for entry in catalog:
            link = resolve_link(entry.link, docs_url)
            lines.append(f"### {entry.code} (HTTP {entry.status}, retry: {entry.retry})")
            lines.append(f"- why: {_line(entry.why)}")
            lines.append(f"- fix: {_line(entry.fix)}")
            if link:
                lines.append(f"- link: {link}")
            lines.append("")
    return "\n".join(lines)
