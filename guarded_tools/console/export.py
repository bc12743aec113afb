"""Provides the exports of the records: the audit trail, operations and confirmations as CSV
or JSON Lines, streamed in constant memory, each export itself audited.

Rows are read in keyset pages (``EXPORT_PAGE_SIZE`` rows a query, each page starting after
the last key of the one before): no ``OFFSET`` that rereads what was sent, and no
server-side cursor, which PgBouncer in transaction mode does not keep between queries.
Each page is one short query of its own, so memory holds one page whatever the number of
rows. The audit trail is exported newest first (its list's order); operations and
confirmations in the order of their ids (their lists' orders have no index a keyset can
walk at a million rows): each row carries its times.

Under WSGI the response iterates pages synchronously; under ASGI asynchronously (Django
would otherwise read a synchronous iterator to its end before sending anything).
"""

from __future__ import annotations

import csv
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Model, QuerySet
from django.utils import timezone

from guarded_tools.conf import gt_settings
from guarded_tools.core.times import timestamp
from guarded_tools.models import AuditEntry, Confirmation, Operation

#: The permission an export needs besides the view permission of what it exports.
EXPORT_PERMISSION = "guarded_tools.export_records"
FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/jsonl; charset=utf-8"}


@dataclass(frozen=True)
class Kind:
    """What one export reads: the model, its columns (name, field path) and its keyset."""

    name: str
    model: type[Model]
    columns: Sequence[tuple[str, str]]
    #: Exported newest key first (the audit trail) or in ascending key order.
    descending: bool = False


def _user(path: str) -> str:
    return f"{path}__{get_user_model().USERNAME_FIELD}"


def kinds() -> dict[str, Kind]:
    """The exports, by the name the command and the URLs use."""
    return {
        "audit": Kind("audit", AuditEntry, [
            ("id", "id"), ("at", "created_at"), ("actor", _user("actor")),
            ("action", "action"), ("status", "status"), ("operation", "operation_id"),
            ("confirmation", "confirmation_id"), ("note", "note"), ("data", "data"),
        ], descending=True),
        "operations": Kind("operations", Operation, [
            ("id", "id"), ("tool", "tool"), ("scope", "scope"), ("key", "key"),
            ("user", _user("user")), ("state", "state"), ("release_reason", "release_reason"),
            ("recovered", "recovered"), ("reconciled", "reconciled"),
            ("attempts", "attempts"), ("created_at", "created_at"),
            ("updated_at", "updated_at"), ("completed_at", "completed_at"),
            ("input", "input"), ("output", "output"), ("error", "error"),
        ]),
        "confirmations": Kind("confirmations", Confirmation, [
            ("id", "id"), ("tool", "tool"), ("scope", "scope"), ("key", "key"),
            ("requested_by", "requested_by_label"), ("summary", "summary"),
            ("status", "status"), ("policy_rule", "policy_rule"),
            ("approvals_required", "approvals_required"), ("approvals", "approvals"),
            ("decided_by", _user("decided_by")), ("decided_at", "decided_at"),
            ("reason", "reason"), ("created_at", "created_at"), ("expires_at", "expires_at"),
            ("operation", "operation_id"), ("input", "input"),
        ]),
    }


def kind_of(model: type[Model]) -> Kind:
    return next(k for k in kinds().values() if k.model is model)


def pages(kind: Kind, queryset: QuerySet[Any], size: int | None = None
          ) -> Iterator[list[tuple[Any, ...]]]:
    """``queryset``'s rows as tuples of ``kind``'s columns, a keyset page at a time."""
    size = size or int(gt_settings.EXPORT_PAGE_SIZE)
    paths = [path for _name, path in kind.columns]
    ordered = queryset.order_by("-pk" if kind.descending else "pk")
    after = "pk__lt" if kind.descending else "pk__gt"
    last: Any = None
    while True:
        page = ordered if last is None else ordered.filter(**{after: last})
        rows = list(page.values_list(*paths)[:size])
        if not rows:
            return
        yield rows
        if len(rows) < size:
            return
        last = rows[-1][0]  # the first column is the primary key


def _plain(value: Any) -> Any:
    """A value as JSON Lines carry it: times in the agent surface's form, the rest as is."""
    if hasattr(value, "tzinfo") and hasattr(value, "hour"):
        return timestamp(value)
    return value


#: What a spreadsheet would run as a formula when a cell starts with it.
FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> str:
    """A CSV cell: JSON for structures, a quote before what would start a formula."""
    if value is None:
        return ""
    if isinstance(value, dict | list):
        text = json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False, sort_keys=True)
    else:
        text = str(_plain(value))
    return "'" + text if text.startswith(FORMULA) else text


class _Line:
    """A file-like object whose ``write`` hands back what it is given (for csv.writer)."""

    def write(self, value: str) -> str:
        return value


def encoder(kind: Kind, fmt: str) -> tuple[bytes, Callable[[tuple[Any, ...]], str]]:
    """The export's first bytes (a CSV header row) and how each row is written."""
    names = [name for name, _path in kind.columns]
    if fmt == "csv":
        writer = csv.writer(_Line())
        return ("\ufeff" + writer.writerow(names)).encode(), (
            lambda row: writer.writerow([_cell(v) for v in row]))
    return b"", lambda row: json.dumps(dict(zip(names, map(_plain, row), strict=True)),
                                      cls=DjangoJSONEncoder, ensure_ascii=False) + "\n"


@dataclass
class Export:
    """One export under way: its rows as bytes, and its audit entry, completed at its end."""

    kind: Kind
    queryset: QuerySet[Any]
    fmt: str
    entry: AuditEntry | None = None
    rows: int = 0

    def chunks(self) -> Iterator[bytes]:
        """One chunk of bytes per keyset page (the header first, for CSV)."""
        head, line = encoder(self.kind, self.fmt)
        if head:
            yield head
        rows = self.queryset
        if self.entry is not None and self.kind.model is AuditEntry:
            rows = rows.exclude(pk=self.entry.pk)  # the trail as it was asked for
        for page in pages(self.kind, rows):
            self.rows += len(page)
            yield "".join(line(row) for row in page).encode()
        self.finish()

    async def achunks(self) -> AsyncIterator[bytes]:
        """The same chunks for an ASGI response: each page read in the sync thread."""
        chunks = self.chunks()

        def following() -> bytes | None:
            return next(chunks, None)

        while True:
            chunk = await sync_to_async(following, thread_sensitive=True)()
            if chunk is None:
                return
            yield chunk

    def finish(self) -> None:
        """The audit entry says how many rows were sent, once they all were."""
        if self.entry is not None:
            data = dict(self.entry.data or {})
            data.update(rows=self.rows, completed_at=timestamp(timezone.now()))
            AuditEntry.objects.filter(pk=self.entry.pk).update(data=data)


#: How the audit trail names each export and where it was made.
WORDS = {"audit": "the audit trail", "operations": "operations",
         "confirmations": "confirmations"}
VIA = {"admin": "from the admin", "command": "with manage.py guarded_tools_export"}


def said(data: dict[str, Any]) -> str:
    """An export's audit entry in words: "15 rows · action__exact = decline"."""
    rows = data.get("rows")
    counted = f"{rows:,} rows" if isinstance(rows, int) else "not finished"
    filters = ", ".join(f"{name} = {value}" for name, value in parse_qsl(
        str(data.get("filters") or ""), keep_blank_values=True))
    return f"{counted} · {filters or 'no filter'}"


def audited(actor: Any, kind: Kind, fmt: str, filters: str, how: str) -> AuditEntry:
    """The audit entry of an export, written before its first row."""
    return AuditEntry.objects.create(
        actor=actor if getattr(actor, "pk", None) is not None else None,
        action=AuditEntry.Action.EXPORT,
        note=f"Exported {WORDS.get(kind.name, kind.name)} as"
             f" {'CSV' if fmt == 'csv' else 'JSON Lines'} {VIA.get(how, how)}.",
        data={"export": kind.name, "format": fmt, "filters": filters, "via": how},
    )


def filename(kind: Kind, fmt: str) -> str:
    return f"{kind.name}-{timezone.now():%Y%m%dT%H%M%SZ}.{fmt}"


__all__ = ["EXPORT_PERMISSION", "FORMATS", "Export", "Kind", "audited", "encoder", "filename",
           "kind_of", "kinds", "pages", "said"]
