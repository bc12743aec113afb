"""Provides ``PostgreSQLOperationStore``: the transitions every call runs, in fewer round trips.

What PostgreSQL does faster than the ORM's statements: the claim as one
``INSERT … ON CONFLICT DO NOTHING RETURNING`` (no unique violation to catch), a
journal entry and its compare-and-set as one statement (``WITH owned AS (UPDATE …)
INSERT``), and, with psycopg 3's client-side binding (Django's default), the
statements of an atomic tool's call sent together in one ``execute`` (psycopg 3 sends
a query of several statements as one, and returns one result set per statement).

The SQL is written once, from the model's quoted table and column names and
PostgreSQL's clock (``STATEMENT_TIMESTAMP()``, what Django's ``Now()`` is there);
values go through each field's documented ``get_db_prep_save`` and come back
through its ``from_db_value``. Every value is a parameter (hence ``noqa: S608``).
Nothing here ends a transaction: ``transaction.atomic()`` commits.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connections, router

from guarded_tools.models import JournalEntry, Operation, OperationEvent, OperationState
from guarded_tools.store.base import Claim, Found, Locked, OperationStore
from guarded_tools.store.history import Kind
from guarded_tools.store.values import LOCK_CLASS, key_hash, new_token

NOW = "STATEMENT_TIMESTAMP()"
LEASE = f"({NOW} + %s)"
Part = tuple[str, list[Any]]


class Statements:
    """The SQL of the transitions, assembled once from the models' columns."""

    def __init__(self, qn: Any) -> None:
        opts, jopts = Operation._meta, JournalEntry._meta
        self.fields = list(opts.concrete_fields)
        self.names = [f.attname for f in self.fields]
        c = {f.name: qn(f.column) for f in self.fields}
        j = {f.name: qn(f.column) for f in jopts.concrete_fields}
        table, journal = qn(opts.db_table), qn(jopts.db_table)
        columns = ", ".join(c[f.name] for f in self.fields)
        self.selected = [f for f in self.fields if f.name != "input"]  # inputs can be large
        self.returning = ["lease_expires_at", "created_at", "updated_at"]
        self.claim = (
            f"INSERT INTO {table} ({columns}) VALUES ({self.values(claim=True)})"  # noqa: S608
            f" ON CONFLICT ({c['tool']}, {c['scope']}, {c['key']}) DO NOTHING"
            f" RETURNING {', '.join(c[name] for name in self.returning)}"
        )
        self.completed = f"INSERT INTO {table} ({columns}) VALUES ({self.values(claim=False)})"  # noqa: S608
        self.select = (
            f"SELECT {', '.join(c[f.name] for f in self.selected)}, {NOW} FROM {table}"  # noqa: S608
            f" WHERE {c['tool']} = %s AND {c['scope']} = %s AND {c['key']} = %s"
        )
        owned = f"{c['id']} = %s AND {c['owner']} = %s AND {c['fence']} = %s AND {c['state']} = %s"
        self.complete = (
            f"UPDATE {table} SET {c['state']} = %s, {c['output']} = %s, {c['error']} = NULL,"  # noqa: S608
            f" {c['recovered']} = %s, {c['owner']} = %s, {c['lease_expires_at']} = NULL,"
            f" {c['completed_at']} = {NOW}, {c['updated_at']} = {NOW} WHERE {owned}"
        )
        self.touch = f"UPDATE {table} SET {c['updated_at']} = {NOW} WHERE {owned}"  # noqa: S608
        self.takeover = (  # Operation.objects.abandoned()'s compare-and-set, one statement
            f"UPDATE {table} SET {c['state']} = %s, {c['owner']} = %s,"  # noqa: S608
            f" {c['fence']} = {c['fence']} + 1, {c['lease_expires_at']} = {LEASE},"
            f" {c['updated_at']} = {NOW} WHERE {c['id']} = %s AND {c['fence']} = %s AND"
            f" ({c['state']} = %s OR ({c['state']} = %s AND {c['lease_expires_at']} < {NOW}))"
        )
        entry = (f"INSERT INTO {journal} ({j['operation']}, {j['kind']}, {j['data']},"
                 f" {j['fence']}, {j['removed']}, {j['created_at']})")
        self.journal = (
            f"WITH owned AS (UPDATE {table} SET {c['updated_at']} = {NOW}"  # noqa: S608
            f" WHERE {owned} RETURNING {c['id']})"
            f" {entry} SELECT {c['id']}, %s, %s, %s, %s, {NOW} FROM owned RETURNING {j['id']}"
        )
        self.journal_rows = f"{entry} VALUES "
        self.journal_row = f"(%s, %s, %s, %s, %s, {NOW})"
        self.journal_live = (
            f"SELECT 1 FROM {journal} WHERE {j['operation']} = %s"  # noqa: S608
            f" AND {j['kind']} = %s AND {j['removed']} = %s LIMIT 1"
        )
        self.lock = "SELECT pg_try_advisory_xact_lock(%s, %s)"
        self.event_fields = [f for f in OperationEvent._meta.concrete_fields if not f.primary_key]
        events = ", ".join(qn(f.column) for f in self.event_fields)
        self.event_rows = f"INSERT INTO {qn(OperationEvent._meta.db_table)} ({events}) VALUES "  # noqa: S608
        self.event_row = f"({', '.join(['%s'] * len(self.event_fields))})"

    def events(self, rows: list[Any], connection: Any) -> Part:
        """One INSERT of ``rows`` (unsaved events, in order: their ids keep it), each value
        prepared by its field."""
        params = [f.get_db_prep_save(f.pre_save(row, add=True), connection)
                  for row in rows for f in self.event_fields]
        return self.event_rows + ", ".join([self.event_row] * len(rows)), params

    def values(self, *, claim: bool) -> str:
        """An INSERT's VALUES: the clock, the lease, NULL, or a parameter per field."""
        clock, nulls = _layout(claim)
        sql = []
        for f in self.fields:
            if f.name in clock:
                sql.append(NOW)
            elif claim and f.name == "lease_expires_at":
                sql.append(LEASE)
            else:
                sql.append("NULL" if f.name in nulls else "%s")
        return ", ".join(sql)

    def params(self, values: dict[str, Any], connection: Any, *, claim: bool,
               lease_seconds: int = 0) -> list[Any]:
        """An INSERT's parameters in the order of ``values()``, prepared by their fields."""
        clock, nulls = _layout(claim)
        params: list[Any] = []
        for f in self.fields:
            if claim and f.name == "lease_expires_at":
                params.append(timedelta(seconds=lease_seconds))
            elif f.name not in clock and f.name not in nulls:
                params.append(f.get_db_prep_save(values[f.attname], connection))
        return params


def _layout(claim: bool) -> tuple[set[str], set[str]]:
    """The columns an INSERT takes from the clock, and those it leaves NULL."""
    if claim:
        return {"created_at", "updated_at"}, {"output", "error", "completed_at"}
    return {"created_at", "updated_at", "completed_at"}, {"lease_expires_at", "error"}


class PostgreSQLOperationStore(OperationStore):
    """The ORM's store with the transitions every call runs as PostgreSQL statements."""

    statements = Statements(lambda name: f'"{name}"')  # as PostgreSQL's quote_name

    @property
    def connection(self) -> Any:
        return connections[router.db_for_write(Operation)]

    @property
    def multi(self) -> bool:
        """Several statements per execute: psycopg 3 with client-side binding only."""
        from django.db.backends.postgresql.psycopg_any import is_psycopg3

        options = self.connection.settings_dict.get("OPTIONS") or {}
        return is_psycopg3 and options.get("server_side_binding") is not True

    def send(self, parts: list[Part], *, rows: bool = False) -> list[list[Any]]:
        """Execute ``parts`` in order, in one round trip where ``multi``; with ``rows``,
        each part's rows (every part then returns some)."""
        with self.connection.cursor() as cursor:
            if not self.multi:
                return [_run(cursor, sql, params, rows) for sql, params in parts]
            cursor.execute("; ".join(sql for sql, _ in parts),
                           [param for _, params in parts for param in params])
            results: list[list[Any]] = [cursor.fetchall() if rows else []]
            while cursor.nextset():
                results.append(cursor.fetchall() if rows else [])
            return results

    def found(self, row: Any) -> Found:
        """The operation (its input deferred) and the database's clock from a ``select`` row."""
        values = [f.from_db_value(value, None, self.connection)
                  if value is not None and hasattr(f, "from_db_value") else value
                  for f, value in zip(self.statements.selected, row, strict=False)]
        names = [f.attname for f in self.statements.selected]
        return Operation.from_db(self.connection.alias, names, values), row[-1]

    # -- the claim ---------------------------------------------------------------------
    def insert_or_load(
        self, *, tool: str, scope: str, key: str, fp: str, input: Any, user: Any,
        lease_seconds: int,
    ) -> tuple[Operation, datetime | None] | None:
        """One statement, one round trip, for a fresh claim, in autocommit (in a test
        case's block, in it); when the key exists, one ``SELECT`` says in which state."""
        claim = self.pending(tool=tool, scope=scope, key=key, fp=fp, input=input, user=user)
        values = {name: getattr(claim.operation, name, None) for name in self.statements.names}
        params = self.statements.params(values, self.connection, claim=True,
                                        lease_seconds=lease_seconds)
        row = self.send([(self.statements.claim, params)], rows=True)[0]
        if not row:  # the key exists: read it (None if it vanished meanwhile)
            return self.load(tool, scope, key)
        values.update(zip(self.statements.returning, row[0], strict=True))
        operation = Operation.from_db(self.connection.alias, self.statements.names,
                                      [values[name] for name in self.statements.names])
        if claim.operation.user_id is not None:
            operation.user = claim.operation.user  # attached: no lazy query later
        return operation, None

    def load(self, tool: str, scope: str, key: str) -> Found | None:
        rows = self.send([(self.statements.select, [tool, scope, key])], rows=True)[0]
        return self.found(rows[0]) if rows else None

    def takeover(self, operation: Operation, lease_seconds: int) -> Claim | None:
        token = new_token()
        with self.connection.cursor() as cursor:
            cursor.execute(self.statements.takeover, [
                OperationState.IN_FLIGHT.value, token, timedelta(seconds=lease_seconds),
                operation.pk, operation.fence, OperationState.ABANDONED.value,
                OperationState.IN_FLIGHT.value,
            ])
            updated = cursor.rowcount
        return self.taken_over(operation, token) if updated else None

    # -- atomic tools: key, effect and operation in one transaction --------------------
    def lock_key(
        self, *, tool: str, scope: str, key: str, also: Part | None = None
    ) -> Locked:
        """The ORM store's ``lock_key``: ``also``, the lock's try and the key's read sent
        together (one round trip where ``multi``); the read's snapshot is still taken
        after the try, each statement taking its own at READ COMMITTED."""
        if not (self.can_lock() and self.connection.in_atomic_block):
            raise RuntimeError("lock_key runs inside the transaction it locks the key for.")
        lock = (self.statements.lock, [LOCK_CLASS, key_hash(tool, scope, key)])
        read = (self.statements.select, [tool, scope, key])
        parts = [part for part in (also, lock, read) if part is not None]
        results = self.send(parts, rows=True)
        also_rows = results[0] if also is not None else []
        if results[-1]:
            return Locked("exists", self.found(results[-1][0]), also_rows)
        return Locked("locked" if results[-2][0][0] else "busy", None, also_rows)

    def insert_completed(self, claim: Claim, output: Any, entries: list[Any]) -> None:
        """The operation's INSERT, its journal's and its events', together (one round
        trip where ``multi``); ``transaction.atomic()`` commits them."""
        operation = claim.operation
        values = {name: getattr(operation, name, None) for name in self.statements.names}
        values.update(state=OperationState.SUCCEEDED.value, owner="", output=output)
        parts = [(self.statements.completed,
                  self.statements.params(values, self.connection, claim=False))]
        if entries:
            parts.append(self.journal_rows(claim, entries))
        parts.append(self.statements.events(self.events_of_completed(claim, entries),
                                            self.connection))
        self.send(parts)
        operation.state, operation.owner = OperationState.SUCCEEDED, ""

    def journal_rows(self, claim: Claim, entries: list[Any]) -> Part:
        """One INSERT of every entry an atomic tool's handler wrote (in order)."""
        data = JournalEntry._meta.get_field("data")
        params: list[Any] = []
        for value, removed in entries:
            params += [claim.operation.pk, JournalEntry.Kind.ENTRY.value,
                       data.get_db_prep_save(value, self.connection), claim.fence, removed]
        rows = ", ".join([self.statements.journal_row] * len(entries))
        return self.statements.journal_rows + rows, params

    # -- compare-and-set transitions ---------------------------------------------------
    def owned_params(self, claim: Claim) -> list[Any]:
        return [claim.operation.pk, claim.owner, claim.fence, OperationState.IN_FLIGHT.value]

    def complete(self, claim: Claim, output: Any, *, recovered: bool = False) -> bool:
        output_field = Operation._meta.get_field("output")
        done = self.update(self.statements.complete, [
            OperationState.SUCCEEDED.value, output_field.get_db_prep_save(output, self.connection),
            bool(recovered), "", *self.owned_params(claim),
        ])
        return self.recorded(done, claim, Kind.SUCCEEDED, recovered=recovered or None)

    def touch(self, claim: Claim) -> bool:
        return self.update(self.statements.touch, self.owned_params(claim))

    def update(self, sql: str, params: list[Any]) -> bool:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount == 1

    def write_journal(self, claim: Claim, data: Any) -> bool:
        """The compare-and-set and the entry in one statement, locking the row as the
        ORM store's two do."""
        field = JournalEntry._meta.get_field("data")
        rows = self.send([(self.statements.journal, [
            *self.owned_params(claim), JournalEntry.Kind.ENTRY.value,
            field.get_db_prep_save(data, self.connection), claim.fence, False,
        ])], rows=True)[0]
        return self.recorded(bool(rows), claim, Kind.JOURNAL, data=data)

    def journal_empty(self, operation: Operation) -> bool:
        params: list[Any] = [operation.pk, JournalEntry.Kind.ENTRY.value, False]
        with connections[router.db_for_write(JournalEntry)].cursor() as cursor:
            cursor.execute(self.statements.journal_live, params)
            return cursor.fetchone() is None


def _run(cursor: Any, sql: str, params: list[Any], rows: bool) -> list[Any]:
    cursor.execute(sql, params)
    return list(cursor.fetchall()) if rows else []
