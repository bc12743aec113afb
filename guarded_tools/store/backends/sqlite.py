"""Provides ``SQLiteOperationStore``: the transitions every call runs, without the ORM's query
building.

On SQLite the database works inside the app's process, and building and compiling the
ORM's query was most of a call's store time (bench/NOTEBOOK.md): the read of a key, the
claim, an atomic call's INSERTs and the completion are written once here
(``Statements``, with SQLite's clock, ``STRFTIME(…, 'NOW')``, what Django's ``Now()``
is there) and sent through ``connection.cursor()``. ``created_at`` and ``updated_at``
are this process's clock, as the ORM's ``auto_now`` gives them on SQLite. Values read
back are what the ORM makes of them: aware datetimes in the connection's time zone,
UUIDs, booleans, decoded JSON (the fields' documented ``to_python`` and
``from_db_value``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from guarded_tools.store.backends.base import Locked
from guarded_tools.store.backends.capabilities import StoreFeatures, StoreOperations
from guarded_tools.store.backends.sql import SQLOperationStore
from guarded_tools.store.backends.statements import Dialect, Statements

FORMAT = "'%%Y-%%m-%%d %%H:%%M:%%f'"  # (%% is a literal % in a statement with parameters)
SQLITE = Dialect(now=f"STRFTIME({FORMAT}, 'NOW')", lease=f"STRFTIME({FORMAT}, 'NOW', %s)",
                 lease_param=lambda seconds: f"{int(seconds):+d} seconds", stamps_here=True)


class Features(StoreFeatures):
    """SQLite: the key's lock is the database's write lock, where a transaction takes it
    as it begins."""

    @property
    def transaction_mode(self) -> str:
        """The ``OPTIONS``' ``transaction_mode``, upper case ("" when unset)."""
        return str(self.options.get("transaction_mode") or "").upper()

    @property
    def can_lock_keys(self) -> bool:
        """Where every transaction takes the write lock when it begins (``transaction_mode``
        IMMEDIATE or EXCLUSIVE): the key's read then sees every committed claim."""
        return self.transaction_mode in ("IMMEDIATE", "EXCLUSIVE")

    @property
    def begins_with_write_lock(self) -> bool:
        """``transaction_mode`` IMMEDIATE, the mode the system check asks for."""
        return self.transaction_mode == "IMMEDIATE"


class Operations(StoreOperations):
    """SQLite: the open transaction holds the write lock already; no estimates."""


class SQLiteOperationStore(SQLOperationStore):
    """The ORM's store with the transitions every call runs as SQLite statements."""

    stateless = True  # nothing of a call on the instance: one serves a tool's every call

    statements = Statements(lambda name: f'"{name}"', SQLITE)  # as SQLite's quote_name

    def read(self, fields: list[Any], row: Any) -> list[Any]:
        connection = self.connection
        return [value if value is None or (convert := _reader(f)) is None
                else convert(value, connection)
                for f, value in zip(fields, row, strict=False)]

    def clock(self, value: Any) -> datetime:
        return _datetime(value, self.connection)

    def lock_key(
        self, *, tool: str, scope: str, key: str, also: tuple[str, list[Any]] | None = None
    ) -> Locked:
        """The transaction is IMMEDIATE and holds the database's write lock already: the
        key's read (after ``also``) says all (the ORM store's ``lock_key``)."""
        connection = self.connection
        if not (self.can_lock() and connection.in_atomic_block):
            raise RuntimeError("lock_key runs inside the transaction it locks the key for.")
        read = (self.statements.select, [tool, scope, key])
        results = self.send([also, read] if also is not None else [read], rows=True,
                            connection=connection)
        also_rows = results[0] if also is not None else []
        if results[-1]:
            return Locked("exists", self.found(results[-1][0]), also_rows)
        return Locked("locked", None, also_rows)


def _datetime(value: Any, connection: Any) -> datetime:
    """A datetime as the ORM reads it on SQLite: parsed, aware when ``USE_TZ``."""
    if not isinstance(value, datetime):
        value = parse_datetime(value)
    if settings.USE_TZ and timezone.is_naive(value):
        value = timezone.make_aware(value, connection.timezone)
    return value  # type: ignore[no-any-return]


@functools.cache
def _reader(field: Any) -> Callable[[Any, Any], Any] | None:
    """How a value of ``field`` from SQLite's driver becomes the ORM's (None: as it is);
    a foreign key's as its target's."""
    if field.many_to_one:
        return _reader(field.target_field)
    if hasattr(field, "from_db_value"):
        return lambda value, connection: field.from_db_value(value, None, connection)
    kind = field.get_internal_type()
    if kind == "DateTimeField":
        return _datetime
    if kind in ("UUIDField", "BooleanField"):
        return lambda value, connection: field.to_python(value)
    return None
