"""Provides the error catalog: why, fix and link per code, exported for agents."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from guarded_tools.repair import RETRY_POLICIES, coerce_repair

if TYPE_CHECKING:
    from guarded_tools.exceptions import ToolError
    from guarded_tools.repair import Repair, RepairPlan

#: An error code: 1-64 lowercase letters, digits or '_', starting with a letter.
CODE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def is_code(value: object) -> bool:
    return isinstance(value, str) and CODE.match(value) is not None


@dataclass(frozen=True, kw_only=True)
class CatalogEntry:
    """What an agent needs to act on one error code, written once."""

    code: str
    status: int
    message: str
    why: str
    fix: str
    link: str = ""
    retry: str = "never"
    repair: Any = None

    def as_dict(self, docs_url: str = "") -> dict[str, Any]:
        data: dict[str, Any] = {
            "code": self.code,
            "status": self.status,
            "retry": self.retry,
            "message": self.message,
            "why": self.why,
            "fix": self.fix,
        }
        link = resolve_link(self.link, docs_url)
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
    """

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
        if entry.retry not in RETRY_POLICIES:
            raise ValueError(f"Error {code!r}: retry must be one of {RETRY_POLICIES}.")
        if not isinstance(entry.status, int) or not 100 <= entry.status <= 599:
            raise ValueError(f"Error {code!r}: status must be an HTTP status code.")
        if entry.repair is not None:
            # Refuse a bad repair where it is written, not when the error is raised.
            object.__setattr__(entry, "repair", coerce_repair(entry.repair))
        self.entries[code] = entry
        return entry

    def __getitem__(self, code: str) -> CatalogEntry:
        return self.entries[code]

    def __iter__(self) -> Iterator[CatalogEntry]:
        return iter(self.entries.values())

    def error(
        self,
        code: str,
        message: str | None = None,
        *,
        retry: str | None = None,
        repair: Repair | RepairPlan | Mapping[str, Any] | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> ToolError:
        """Build the ``ToolError`` for ``code`` with its why/fix/link attached."""
        from guarded_tools.exceptions import ToolError

        entry = self.entries[code]
        return ToolError(
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
                return catalog.entries[code]
        return None

    def all(self) -> list[ErrorCatalog]:
        return list(self._catalogs.values())


catalogs = CatalogSet()


def export_json(docs_url: str = "") -> dict[str, Any]:
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
    lines = [
        f"# {title}: errors",
        "",
        "> Every failed tool call returns"
        " {\"error\": {code, message, retry, repair, why, fix, link}}."
        " Read `retry` before calling again: never = stop, as_is = the same call may succeed,"
        " after_repair = follow `repair` first and keep the same idempotency key.",
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
