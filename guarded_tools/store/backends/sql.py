"""Provides ``SQLOperationStore``: the transitions every call runs as statements written once.

The ORM builds and compiles a query each time one runs; what every call of a tool runs
(the claim, the read of a key, the completion, an atomic call's INSERTs) is the same SQL
each time with other values. A backend (``postgresql``, ``sqlite``) gives its
``Statements`` (its dialect's clock) and says how its driver's values read as the
ORM's; the statements go through ``connection.cursor()``, values through each field's
documented ``get_db_prep_save`` and back through ``from_db_value``, rows become
operations through ``Model.from_db``. Nothing here ends a transaction:
``transaction.atomic()`` commits. Everything else is the ORM store's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connections, router

from guarded_tools.models import JournalEntry, Operation, OperationState
from guarded_tools.store.backends.base import Claim, Found, OperationStore
from guarded_tools.store.backends.statements import Part, Statements
from guarded_tools.store.history import Kind
from guarded_tools.store.values import fresh_values, new_token


class SQLOperationStore(OperationStore):
    """The ORM's store with the transitions every call runs as hand-written statements."""

    stateless = True  # nothing of a call on the instance: one serves a tool's every call

    statements: Statements

    @property
    def connection(self) -> Any:
        return connections[router.db_for_write(Operation)]

    def _on(self, connection: Any) -> Any:
        """``connection`` when the caller has looked it up already, else :attr:`connection`
        (each look-up asks the router and reads a thread-local)."""
        return self.connection if connection is None else connection

    def send(self, parts: list[Part], *, rows: bool = False,
             connection: Any = None) -> list[list[Any]]:
        """Execute ``parts`` in order; with ``rows``, each part's rows (every part then
        returns some). A backend whose driver takes several statements in one execute
        sends them in one round trip. ``connection``: the store's (:attr:`connection`),
        when the caller has it already."""
        with self._on(connection).cursor() as cursor:
            return [_run(cursor, sql, params, rows) for sql, params in parts]

    def read(self, fields: list[Any], row: Any) -> list[Any]:
        """``row``'s values of ``fields`` as the ORM reads them (``from_db_value``)."""
        connection = self.connection
        return [f.from_db_value(value, None, connection)
                if value is not None and hasattr(f, "from_db_value") else value
                for f, value in zip(fields, row, strict=False)]

    def clock(self, value: Any) -> datetime:
        """The database's clock, as read from it."""
        return value  # type: ignore[no-any-return]

    def found(self, row: Any) -> Found:
        """The operation (its input deferred) and the database's clock from a ``select`` row."""
        selected = self.statements.selected
        names = [f.attname for f in selected]
        operation = Operation.from_db(self.connection.alias, names, self.read(selected, row))
        return operation, self.clock(row[-1])

    def pk(self, operation: Operation, connection: Any = None) -> Any:
        """``operation``'s id as a statement's parameter."""
        return self.statements.pk.get_db_prep_value(operation.pk, self._on(connection))

    # -- the claim ---------------------------------------------------------------------
    def insert_or_load(
        self, *, tool: str, scope: str, key: str, fp: str, input: Any, user: Any,
        lease_seconds: int,
    ) -> tuple[Operation, datetime | None] | None:
        """One statement for a fresh claim (``INSERT … ON CONFLICT DO NOTHING RETURNING``),
        in autocommit (in a test case's block, in it); when the key exists, one ``SELECT``
        says in which state (None when it vanished meanwhile). Where the database cannot
        return columns from an INSERT (SQLite before 3.35), the ORM store's claim."""
        connection = self.connection
        if not connection.features.can_return_columns_from_insert:
            return super().insert_or_load(tool=tool, scope=scope, key=key, fp=fp, input=input,
                                          user=user, lease_seconds=lease_seconds)
        statements = self.statements
        values = dict.fromkeys(statements.names)
        values.update(fresh_values(tool=tool, scope=scope, key=key, fp=fp, input=input,
                                   user=user))
        params = statements.params(values, connection, claim=True,
                                   lease_seconds=lease_seconds)
        row = self.send([(statements.claim, params)], rows=True, connection=connection)[0]
        if not row:
            return self.load(tool, scope, key)
        values.update(zip(statements.returning, self.read(statements.returned, row[0]),
                          strict=True))
        operation = Operation.from_db(connection.alias, statements.names,
                                      [values[name] for name in statements.names])
        if user is not None:
            operation.user = user  # attached: no lazy query later
        return operation, None

    def load(self, tool: str, scope: str, key: str) -> Found | None:
        rows = self.send([(self.statements.select, [tool, scope, key])], rows=True)[0]
        return self.found(rows[0]) if rows else None

    def takeover(self, operation: Operation, lease_seconds: int) -> Claim | None:
        token = new_token()
        with self.connection.cursor() as cursor:
            cursor.execute(self.statements.takeover, [
                OperationState.IN_FLIGHT.value, token,
                self.statements.dialect.lease_param(lease_seconds),
                self.pk(operation), operation.fence, OperationState.ABANDONED.value,
                OperationState.IN_FLIGHT.value,
            ])
            updated = cursor.rowcount
        return self.taken_over(operation, token) if updated else None

    # -- atomic tools: key, effect and operation in one transaction --------------------
    def insert_completed(self, claim: Claim, output: Any, entries: list[Any]) -> None:
        """The operation's INSERT, its journal's and its events' (one round trip where the
        backend sends them together); ``transaction.atomic()`` commits them."""
        statements, operation, connection = self.statements, claim.operation, self.connection
        values = {name: getattr(operation, name, None) for name in statements.names}
        values.update(state=OperationState.SUCCEEDED.value, owner="", output=output)
        parts = [(statements.completed, statements.params(values, connection, claim=False))]
        if entries:
            parts.append(statements.journal_params(self.pk(operation, connection), claim.fence,
                                                   entries, connection))
        parts.append(statements.events(self.events_of_completed(claim, entries), connection))
        self.send(parts, connection=connection)
        operation.state, operation.owner = OperationState.SUCCEEDED, ""

    # -- compare-and-set transitions ---------------------------------------------------
    def owned_params(self, claim: Claim, connection: Any = None) -> list[Any]:
        return [self.pk(claim.operation, connection), claim.owner, claim.fence,
                OperationState.IN_FLIGHT.value]

    def complete_params(self, claim: Claim, output: Any, recovered: bool,
                        connection: Any = None) -> list[Any]:
        """The parameters of ``statements.complete``."""
        connection = self._on(connection)
        return [OperationState.SUCCEEDED.value,
                self.statements.output.get_db_prep_save(output, connection),
                bool(recovered), "", *self.owned_params(claim, connection)]

    def complete(self, claim: Claim, output: Any, *, recovered: bool = False) -> bool:
        done = self.update(self.statements.complete,
                           self.complete_params(claim, output, recovered))
        return self.recorded(done, claim, Kind.SUCCEEDED, recovered=recovered or None)

    def touch(self, claim: Claim) -> bool:
        return self.update(self.statements.touch, self.owned_params(claim))

    def update(self, sql: str, params: list[Any]) -> bool:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount == 1

    def journal_empty(self, operation: Operation) -> bool:
        # Releasing a key on a replica's word could run an effect twice: the primary.
        params = [self.pk(operation), JournalEntry.Kind.ENTRY.value, False]
        with connections[router.db_for_write(JournalEntry)].cursor() as cursor:
            cursor.execute(self.statements.journal_live, params)
            return cursor.fetchone() is None


def _run(cursor: Any, sql: str, params: list[Any], rows: bool) -> list[Any]:
    cursor.execute(sql, params)
    return list(cursor.fetchall()) if rows else []
