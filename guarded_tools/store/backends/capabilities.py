"""Provides ``StoreFeatures`` and ``StoreOperations``: what a database does for the store.

As Django keeps one database's differences in ``connection.features`` and
``connection.ops``, the store keeps its own here, one pair of classes per vendor in that
vendor's backend module (``postgresql``, ``sqlite``); the code above them asks these
objects, never which database it is on. A vendor without a backend gets these defaults:
no key lock (atomic tools claim first) and no row estimate (counts are exact).
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

#: A statement and its parameters.
Statement = tuple[str, list[Any]]


class StoreFeatures:
    """What the store can rely on a database for (``features(connection)``)."""

    #: Whether the planner estimates how many rows a query returns (the console's counts
    #: past ``CONSOLE_COUNT_EXACTLY_UP_TO`` say "about …" there, "more than …" elsewhere).
    estimates_rows = False
    #: Whether the driver returns each column as the ORM reads it (fields'
    #: ``from_db_value`` aside): a row read with ``connection.cursor()`` needs no backend
    #: converter before ``Model.from_db`` (SQLite returns dates as text: it does).
    rows_need_no_converters = False

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    @property
    def options(self) -> dict[str, Any]:
        return self.connection.settings_dict.get("OPTIONS") or {}

    @property
    def can_lock_keys(self) -> bool:
        """Whether an atomic tool's call can lock its key and run as one transaction."""
        return False

    @property
    def begins_with_write_lock(self) -> bool:
        """Whether the database's ``OPTIONS`` have each transaction take its write lock as
        it begins, where the database has such a setting, so that concurrent claims wait
        for each other instead of failing ("database is locked"). True where it has none."""
        return True

    @property
    def isolation_above_read_committed(self) -> bool:
        """Whether the database's ``OPTIONS`` run its transactions above READ COMMITTED,
        where an atomic tool's call cannot lock its key (it claims first, as other tools
        do). False where the database has no such setting."""
        return False


class StoreOperations:
    """How the store does what differs between databases (``ops(connection)``)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def key_lock(self, lock_class: int, key_hash: int) -> Statement | None:
        """The statement that tries the key's lock for the open transaction (its one row,
        one column: whether it was taken); None where the transaction holds it already."""
        return None

    def estimate_rows(self, queryset: QuerySet[Any]) -> int | None:
        """The planner's estimate of the rows ``queryset`` returns; None without one."""
        return None
