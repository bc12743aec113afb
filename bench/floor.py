"""Provides ``floor_call``: what a guarded atomic fresh call sends the database, and nothing else.

The bench's configuration F (``/floor/``) runs it around A's effect: the difference
between B and F is the guard's own Python, the difference between F and A what the
statements the guard must send cost. The statements are the store's own, written by the
store in use (PostgreSQL's or SQLite's), so the database does for F what it does for B;
``tests/test_sql_counts.py`` checks that F sends the statements B sends, round trip for
round trip.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from guarded_tools.conf import gt_settings
from guarded_tools.models import OperationEvent
from guarded_tools.store.backends.postgresql import LOCK
from guarded_tools.store.values import LOCK_CLASS, key_hash

#: The history's fields whose values the floor prepares as the store does.
EVENT_AT = OperationEvent._meta.get_field("at")
EVENT_DETAILS = OperationEvent._meta.get_field("details")


def floor_call(*, tool: str, scope: str, key: str, user: Any, input: Any,
               effect: Callable[[], Any]) -> Any:
    """``effect()`` and the operation of ``key`` (succeeded, with its history of two rows:
    claimed, succeeded) in one transaction, after the key's lock and read: an atomic tool's
    fresh call without the guard. Raises ``AssertionError`` when the key already exists."""
    store = gt_settings.STORE_CLASS()  # the SQL store of the database in use
    statements, connection = store.statements, store.connection
    with transaction.atomic(using=connection.alias):
        lock = [(LOCK, [LOCK_CLASS, key_hash(tool, scope, key)])] \
            if connection.vendor == "postgresql" else []  # SQLite: IMMEDIATE holds the lock
        found = store.send([*lock, (statements.select, [tool, scope, key])], rows=True)[-1]
        assert not found, f"the floor's key {key!r} exists"
        output = effect()
        pk, now = uuid.uuid4(), EVENT_AT.get_db_prep_save(timezone.now(), connection)
        values = {"id": pk, "tool": tool, "scope": scope, "key": key, "user_id": user.pk,
                  "fingerprint": "", "input": input, "state": "succeeded", "owner": "",
                  "output": output, "fence": 1, "recovered": False, "reconciled": False,
                  "attempts": 1}
        actor = f"agent {user.get_username()}"
        details = EVENT_DETAILS.get_db_prep_save({}, connection)
        ref = statements.pk.get_db_prep_value(pk, connection)  # the events' operation
        store.send([
            (statements.completed, statements.params(values, connection, claim=False)),
            (statements.event_rows + ", ".join([statements.event_row] * 2),
             [ref, now, "claimed", actor, 1, details, ref, now, "succeeded", actor, 1,
              details]),
        ])
    return output
