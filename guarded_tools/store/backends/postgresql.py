"""Provides ``PostgreSQLOperationStore``: the transitions every call runs, in fewer round trips.

What PostgreSQL does faster than the ORM's statements: the claim as one
``INSERT … ON CONFLICT DO NOTHING RETURNING`` (no unique violation to catch), a
journal entry and its compare-and-set as one statement (``WITH owned AS (UPDATE …)
INSERT``), and, with psycopg 3's client-side binding (Django's default), the
statements of an atomic tool's call sent together in one ``execute`` (psycopg 3 sends
a query of several statements as one, and returns one result set per statement).

The SQL (``Statements``) is written once, from the model's quoted table and column
names and PostgreSQL's clock (``STATEMENT_TIMESTAMP()``, what Django's ``Now()`` is
there); values go through each field's documented ``get_db_prep_save`` and come back
through its ``from_db_value`` (``SQLOperationStore``). Nothing here ends a
transaction: ``transaction.atomic()`` commits.
"""

from __future__ import annotations

import functools
import json
from datetime import timedelta
from typing import Any

from django.db.models import QuerySet

from guarded_tools.models import JournalEntry
from guarded_tools.store.backends.base import Claim, Locked
from guarded_tools.store.backends.capabilities import Statement, StoreFeatures, StoreOperations
from guarded_tools.store.backends.sql import SQLOperationStore
from guarded_tools.store.backends.statements import Dialect, Part, Statements
from guarded_tools.store.history import Kind
from guarded_tools.store.values import LOCK_CLASS, key_hash

NOW = "STATEMENT_TIMESTAMP()"
POSTGRESQL = Dialect(now=NOW, lease=f"({NOW} + %s)",
                     lease_param=lambda seconds: timedelta(seconds=seconds))
LOCK = "SELECT pg_try_advisory_xact_lock(%s, %s)"


def reads_committed(options: dict[str, Any]) -> bool:
    """Whether a PostgreSQL database's ``OPTIONS`` leave its transactions at READ COMMITTED.

    (READ UNCOMMITTED is READ COMMITTED in PostgreSQL.) Only there can an atomic
    tool's call lock its key and run in one transaction; elsewhere it claims first.
    """
    # Here, not at the top: a site without psycopg imports this module too (the store's
    # public names include this function).
    from django.db.backends.postgresql.psycopg_any import IsolationLevel

    level = options.get("isolation_level")
    if level is None:
        return True
    try:
        level = IsolationLevel(level)
    except ValueError:
        return False  # Django refuses it when it connects
    return level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED)


@functools.cache
def _psycopg3() -> bool:
    """Whether Django's PostgreSQL backend runs on psycopg 3 (read once: a call asks on
    every statement it sends)."""
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def _multi(connection: Any) -> bool:
    """Whether ``connection`` takes several statements per execute: psycopg 3 with
    client-side binding only."""
    options = connection.settings_dict.get("OPTIONS") or {}
    return _psycopg3() and options.get("server_side_binding") is not True


class Features(StoreFeatures):
    """PostgreSQL: an advisory lock per key at READ COMMITTED, and the planner's estimates."""

    estimates_rows = True
    rows_need_no_converters = True

    @property
    def can_lock_keys(self) -> bool:
        """At READ COMMITTED only: the read after the key's advisory lock then sees what
        committed before it (``reads_committed``)."""
        return reads_committed(self.options)

    @property
    def isolation_above_read_committed(self) -> bool:
        return not reads_committed(self.options)


class Operations(StoreOperations):
    def key_lock(self, lock_class: int, key_hash: int) -> Statement | None:
        """A try of a transaction-scoped advisory lock on the key's hash."""
        return LOCK, [lock_class, key_hash]

    def estimate_rows(self, queryset: QuerySet[Any]) -> int | None:
        """One ``EXPLAIN`` (which plans the query and runs nothing)."""
        plan = queryset.order_by().values("pk").explain(format="json")
        if not plan:  # a query Django knows matches nothing (``pk__in=[]``) is never sent
            return 0
        return int(json.loads(plan)[0]["Plan"]["Plan Rows"])


class PostgreSQLOperationStore(SQLOperationStore):
    """The ORM's store with the transitions every call runs as PostgreSQL statements."""

    stateless = True  # nothing of a call on the instance: one serves a tool's every call

    statements = Statements(lambda name: f'"{name}"', POSTGRESQL)  # as PostgreSQL's quote_name

    def send(self, parts: list[Part], *, rows: bool = False,
             connection: Any = None) -> list[list[Any]]:
        """Execute ``parts`` in order, in one round trip where the driver takes several
        statements per execute (psycopg 3, client-side binding); with ``rows``, each
        part's rows (every part then returns some)."""
        connection = self._on(connection)
        if not _multi(connection):
            return super().send(parts, rows=rows, connection=connection)
        with connection.cursor() as cursor:
            cursor.execute("; ".join(sql for sql, _ in parts),
                           [param for _, params in parts for param in params])
            results: list[list[Any]] = [cursor.fetchall() if rows else []]
            while cursor.nextset():
                results.append(cursor.fetchall() if rows else [])
            return results

    # -- atomic tools: key, effect and operation in one transaction --------------------
    def lock_key(
        self, *, tool: str, scope: str, key: str, also: Part | None = None
    ) -> Locked:
        """The ORM store's ``lock_key``: ``also``, the lock's try and the key's read sent
        together (one round trip where ``send`` sends several); the read's snapshot is still taken
        after the try, each statement taking its own at READ COMMITTED."""
        connection = self.connection
        if not (self.can_lock() and connection.in_atomic_block):
            raise RuntimeError("lock_key runs inside the transaction it locks the key for.")
        lock = Operations(connection).key_lock(LOCK_CLASS, key_hash(tool, scope, key))
        read = (self.statements.select, [tool, scope, key])
        parts = [part for part in (also, lock, read) if part is not None]
        results = self.send(parts, rows=True, connection=connection)
        also_rows = results[0] if also is not None else []
        if results[-1]:
            return Locked("exists", self.found(results[-1][0]), also_rows)
        return Locked("locked" if results[-2][0][0] else "busy", None, also_rows)

    # -- compare-and-set transitions ---------------------------------------------------
    def complete(self, claim: Claim, output: Any, *, recovered: bool = False) -> bool:
        """The completion and its history (the claim's events not written yet, then
        "succeeded") in one statement, one round trip: the events are written only where
        the compare-and-set changed the row, as the ORM store's ``recorded`` does."""
        connection = self.connection
        events = self.events_with(claim, Kind.SUCCEEDED, recovered=recovered or None)
        sql, params = self.statements.recording(self.statements.complete, events, connection)
        params = [*self.complete_params(claim, output, recovered, connection), *params]
        done = bool(self.send([(sql, params)], rows=True, connection=connection)[0][0][0])
        if not done:
            claim.unrecorded = events[:-1]  # not written: still the claim's
        return done

    def write_journal(self, claim: Claim, data: Any) -> bool:
        """The compare-and-set and the entry in one statement, locking the row as the
        ORM store's two do."""
        field, connection = JournalEntry._meta.get_field("data"), self.connection
        rows = self.send([(self.statements.journal, [
            *self.owned_params(claim, connection), JournalEntry.Kind.ENTRY.value,
            field.get_db_prep_save(data, connection), claim.fence, False,
        ])], rows=True, connection=connection)[0]
        return self.recorded(bool(rows), claim, Kind.JOURNAL, data=data)
