"""Provides ``Statements``: the SQL of the transitions every call runs, written once per dialect.

Assembled from the models' documented ``_meta`` (``concrete_fields``, ``db_table``, each
field's ``column``), quoted as the database quotes names, and the ``Dialect``'s clock:
the database's own (``STATEMENT_TIMESTAMP()`` on PostgreSQL, what Django's ``Now()`` is
there; ``STRFTIME(…, 'NOW')`` on SQLite, likewise). Every value is a parameter, prepared
by its field's documented ``get_db_prep_save`` (hence ``noqa: S608``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from django.utils import timezone

from guarded_tools.models import JournalEntry, Operation, OperationEvent

Part = tuple[str, list[Any]]
#: The columns Django's ``auto_now``/``auto_now_add`` fill (``Field.pre_save``).
STAMPS = ("created_at", "updated_at")
#: An INSERT's parameter: the lease's, a stamp of this process's clock, or a field's value.
LEASE, STAMP, VALUE = range(3)


class Dialect(NamedTuple):
    """How one database says the time."""

    #: The database's clock, as SQL.
    now: str
    #: The clock plus a lease, as SQL with one parameter: ``lease_param(seconds)``.
    lease: str
    lease_param: Callable[[int], Any]
    #: Whether ``created_at``/``updated_at`` come from this process's clock, as the ORM's
    #: ``auto_now`` fills them (SQLite, where the clock is the same machine's and Django's
    #: is finer than the database's); else from the database's clock.
    stamps_here: bool = False


class Statements:
    """The SQL of the transitions, assembled once from the models' columns."""

    def __init__(self, qn: Callable[[Any], str], dialect: Dialect) -> None:
        self.dialect = dialect
        now = dialect.now
        opts, jopts = Operation._meta, JournalEntry._meta
        self.fields = list(opts.concrete_fields)
        self.names = [f.attname for f in self.fields]
        self.pk = opts.pk
        c = {f.name: qn(f.column) for f in self.fields}
        j = {f.name: qn(f.column) for f in jopts.concrete_fields}
        table, journal = qn(opts.db_table), qn(jopts.db_table)
        columns = ", ".join(c[f.name] for f in self.fields)
        self.selected = [f for f in self.fields if f.name != "input"]  # inputs can be large
        self.returning = ["lease_expires_at", *([] if dialect.stamps_here else STAMPS)]
        self.returned = [opts.get_field(name) for name in self.returning]
        self.claim = (
            f"INSERT INTO {table} ({columns}) VALUES ({self.values(claim=True)})"  # noqa: S608
            f" ON CONFLICT ({c['tool']}, {c['scope']}, {c['key']}) DO NOTHING"
            f" RETURNING {', '.join(c[name] for name in self.returning)}"
        )
        self.completed = f"INSERT INTO {table} ({columns}) VALUES ({self.values(claim=False)})"  # noqa: S608
        self.select = (
            f"SELECT {', '.join(c[f.name] for f in self.selected)}, {now} FROM {table}"  # noqa: S608
            f" WHERE {c['tool']} = %s AND {c['scope']} = %s AND {c['key']} = %s"
        )
        owned = f"{c['id']} = %s AND {c['owner']} = %s AND {c['fence']} = %s AND {c['state']} = %s"
        self.complete = (
            f"UPDATE {table} SET {c['state']} = %s, {c['output']} = %s, {c['error']} = NULL,"  # noqa: S608
            f" {c['recovered']} = %s, {c['owner']} = %s, {c['lease_expires_at']} = NULL,"
            f" {c['completed_at']} = {now}, {c['updated_at']} = {now} WHERE {owned}"
        )
        self.touch = f"UPDATE {table} SET {c['updated_at']} = {now} WHERE {owned}"  # noqa: S608
        self.takeover = (  # Operation.objects.abandoned()'s compare-and-set, one statement
            f"UPDATE {table} SET {c['state']} = %s, {c['owner']} = %s,"  # noqa: S608
            f" {c['fence']} = {c['fence']} + 1, {c['lease_expires_at']} = {dialect.lease},"
            f" {c['updated_at']} = {now} WHERE {c['id']} = %s AND {c['fence']} = %s AND"
            f" ({c['state']} = %s OR ({c['state']} = %s AND {c['lease_expires_at']} < {now}))"
        )
        entry = (f"INSERT INTO {journal} ({j['operation']}, {j['kind']}, {j['data']},"
                 f" {j['fence']}, {j['removed']}, {j['created_at']})")
        self.journal = (
            f"WITH owned AS (UPDATE {table} SET {c['updated_at']} = {now}"  # noqa: S608
            f" WHERE {owned} RETURNING {c['id']})"
            f" {entry} SELECT {c['id']}, %s, %s, %s, %s, {now} FROM owned RETURNING {j['id']}"
        )
        self.journal_rows = f"{entry} VALUES "
        self.journal_row = f"(%s, %s, %s, %s, %s, {'%s' if dialect.stamps_here else now})"
        self.journal_created = jopts.get_field("created_at")
        self.journal_data = jopts.get_field("data")
        self.journal_live = (
            f"SELECT 1 FROM {journal} WHERE {j['operation']} = %s"  # noqa: S608
            f" AND {j['kind']} = %s AND {j['removed']} = %s LIMIT 1"
        )
        self.event_fields = [f for f in OperationEvent._meta.concrete_fields if not f.primary_key]
        events = ", ".join(qn(f.column) for f in self.event_fields)
        self.event_rows = f"INSERT INTO {qn(OperationEvent._meta.db_table)} ({events}) VALUES "  # noqa: S608
        self.event_row = f"({', '.join(['%s'] * len(self.event_fields))})"
        self.event_operation = qn(OperationEvent._meta.get_field("operation").column)
        #: A recorded transition's events: the operation's id from the row, the rest given.
        self.event_given = [f for f in self.event_fields if f.name != "operation"]
        self.event_insert_from = (
            f"INSERT INTO {qn(OperationEvent._meta.db_table)} ({self.event_operation},"
            f" {', '.join(qn(f.column) for f in self.event_given)})"
        )
        self.event_others = ", ".join(["%s"] * len(self.event_given))
        self.id = c["id"]
        self.recordings: dict[tuple[str, int], str] = {}
        self.output = opts.get_field("output")
        self.plans = {claim: self.plan(claim=claim) for claim in (True, False)}

    def events(self, rows: list[Any], connection: Any) -> Part:
        """One INSERT of ``rows`` (unsaved events, in order: their ids keep it), each value
        prepared by its field."""
        params = self.event_params(rows, connection, self.event_fields)
        return self.event_rows + ", ".join([self.event_row] * len(rows)), params

    @staticmethod
    def event_params(rows: list[Any], connection: Any, fields: list[Any]) -> list[Any]:
        """``rows``' values of ``fields`` (unsaved events, ``history.Event``), in order,
        as an INSERT of them takes them: each prepared by its field."""
        return [f.get_db_prep_save(getattr(row, f.attname), connection)
                for row in rows for f in fields]

    def recording(self, transition: str, rows: list[Any], connection: Any) -> Part:
        """``transition`` (an UPDATE of one operation) and ``rows``, its unsaved events,
        as one statement that writes the events only where the UPDATE changed the row,
        and returns how many rows it changed: PostgreSQL's data-modifying ``WITH``. Each
        event's INSERT reads the operation's id from the one before it, so they run, and
        take their ids, in order. Its parameters are the events'; the transition's go
        before them."""
        key = (transition, len(rows))
        if key not in self.recordings:  # written once per transition and number of events
            self.recordings[key] = self.recording_sql(transition, len(rows))
        return self.recordings[key], self.event_params(rows, connection, self.event_given)

    def recording_sql(self, transition: str, count: int) -> str:
        """``recording``'s statement for ``count`` events."""
        sql, source, column = f"WITH done AS ({transition} RETURNING {self.id})", "done", self.id
        for i in range(count):
            sql += (f", e{i} AS ({self.event_insert_from} SELECT {source}.{column},"  # noqa: S608
                    f" {self.event_others} FROM {source} RETURNING {self.event_operation})")
            source, column = f"e{i}", self.event_operation
        return sql + " SELECT COUNT(*) FROM done"  # noqa: S608

    def layout(self, *, claim: bool) -> tuple[set[str], set[str]]:
        """The columns an INSERT takes from the database's clock, and those it leaves NULL."""
        stamps = set() if self.dialect.stamps_here else set(STAMPS)
        if claim:
            return stamps, {"output", "error", "completed_at"}
        return stamps | {"completed_at"}, {"lease_expires_at", "error"}

    def values(self, *, claim: bool) -> str:
        """An INSERT's VALUES: the clock, the lease, NULL, or a parameter per field."""
        clock, nulls = self.layout(claim=claim)
        sql = []
        for f in self.fields:
            if f.name in clock:
                sql.append(self.dialect.now)
            elif claim and f.name == "lease_expires_at":
                sql.append(self.dialect.lease)
            else:
                sql.append("NULL" if f.name in nulls else "%s")
        return ", ".join(sql)

    def plan(self, *, claim: bool) -> list[tuple[int, Any]]:
        """An INSERT's parameters in the order of ``values()``: what each one is."""
        clock, nulls = self.layout(claim=claim)
        plan: list[tuple[int, Any]] = []
        for f in self.fields:
            if claim and f.name == "lease_expires_at":
                plan.append((LEASE, f))
            elif f.name in STAMPS and f.name not in clock:
                plan.append((STAMP, f))
            elif f.name not in clock and f.name not in nulls:
                plan.append((VALUE, f))
        return plan

    def params(self, values: dict[str, Any], connection: Any, *, claim: bool,
               lease_seconds: int = 0) -> list[Any]:
        """An INSERT's parameters in the order of ``values()``, prepared by their fields;
        the stamps this process gives (``stamps_here``) are what ``auto_now`` gives, and
        are set in ``values``."""
        params: list[Any] = []
        for what, f in self.plans[claim]:
            if what == VALUE:
                params.append(f.get_db_prep_save(values[f.attname], connection))
            elif what == LEASE:
                params.append(self.dialect.lease_param(lease_seconds))
            else:
                values[f.attname] = timezone.now()
                params.append(f.get_db_prep_save(values[f.attname], connection))
        return params

    def journal_params(self, pk: Any, fence: int, entries: list[Any], connection: Any
                       ) -> Part:
        """One INSERT of every entry an atomic tool's handler wrote (in order)."""
        params: list[Any] = []
        for value, removed in entries:
            params += [pk, JournalEntry.Kind.ENTRY.value,
                       self.journal_data.get_db_prep_save(value, connection), fence, removed]
            if self.dialect.stamps_here:  # what auto_now_add's pre_save gives
                params.append(self.journal_created.get_db_prep_save(timezone.now(), connection))
        return self.journal_rows + ", ".join([self.journal_row] * len(entries)), params
