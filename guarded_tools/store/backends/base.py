"""Provides ``OperationStore``: every transition of an operation, once, on Django's ORM.

Every decision here is a database constraint or a compare-and-set on the owner
token and fence, and every time comparison uses the database clock, so that any
number of web processes and workers stay correct together. Backends that do some
transitions faster subclass it (``guarded_tools.store.backends``).
"""

from __future__ import annotations

import functools
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

from django.db import IntegrityError, connections, router, transaction
from django.db.models import DEFERRED, F
from django.db.models.functions import Now

from guarded_tools.core.errors import IdempotencyKeyReused
from guarded_tools.models import JournalEntry, Operation, OperationState
from guarded_tools.store.backends import features, ops
from guarded_tools.store.history import Kind, actor_label, event, record_all
from guarded_tools.store.values import (
    COMPLETED,
    LOCK_CLASS,
    db_now_plus,
    fresh_values,
    key_hash,
    new_token,
    refuse_enclosing_transaction,
    user_row,
)

ClaimKind = Literal["fresh", "in_flight", "completed", "abandoned"]
LockState = Literal["locked", "busy", "exists"]
Found = tuple[Operation, datetime]


class Locked(NamedTuple):
    """What ``OperationStore.lock_key`` found: the lock's state, the key's row, ``also``'s rows."""

    state: LockState
    found: Found | None
    also: list[Any]


@dataclass
class Claim:
    """What the store answered for a key: fresh, in flight, completed or abandoned."""

    kind: ClaimKind
    operation: Operation
    owner: str = ""
    fence: int = 0
    retry_after: int = 1
    #: Who holds the claim, as the timeline names it (``agent <user>``, ``sweep``, a person).
    actor: str = ""
    #: Events of this claim not written yet: the claim's own, sent with the next one.
    unrecorded: list[Any] = field(default_factory=list)


def _database() -> str:
    """Every read a decision rests on, and every write, go to the database operations are
    written to: a replica behind it could show a completed key in flight, or none at all."""
    return router.db_for_write(Operation)


class OperationStore:
    """Claims, completes, releases, abandons and takes over operations (the ORM)."""

    stateless = True  # nothing of a call on the instance: one serves a tool's every call

    # -- the claim ---------------------------------------------------------------------
    def claim(
        self, *, tool: str, scope: str, key: str, fp: str, input: Any, user: Any,
        lease_seconds: int,
    ) -> Claim:
        """Atomically claim ``(tool, scope, key)``, committed before any handler runs.

        Refuses to run inside a caller's transaction (:class:`NestedTransaction`), where
        the claim would only commit with the caller's commit, after the handler.
        """
        refuse_enclosing_transaction(connections[_database()])
        user = user_row(user)
        for _attempt in range(5):
            found = self.insert_or_load(
                tool=tool, scope=scope, key=key, fp=fp, input=input, user=user,
                lease_seconds=lease_seconds,
            )
            if found is None:
                continue  # purged between our insert and read: try again
            operation, db_now = found
            if db_now is None:
                return self.claimed(Claim("fresh", operation, owner=operation.owner,
                                          fence=operation.fence), user, Kind.CLAIMED)
            if operation.state == OperationState.RELEASED:
                claim = self.reclaim(operation, fp, input, user, lease_seconds)
                if claim is not None:
                    return claim
                continue
            return self.classify(operation, db_now, fp)
        raise RuntimeError("Could not claim the operation after several attempts.")

    def classify(self, operation: Operation, db_now: datetime, fp: str) -> Claim:
        """What an existing, not released key means for a caller: replay, wait or recover."""
        if operation.fingerprint != fp:
            raise IdempotencyKeyReused()
        if operation.state in COMPLETED:
            return Claim("completed", operation)
        if operation.state == OperationState.ABANDONED or (
            operation.lease_expires_at is not None and operation.lease_expires_at <= db_now
        ):
            return Claim("abandoned", operation, fence=operation.fence)
        remaining = (operation.lease_expires_at - db_now).total_seconds()  # type: ignore[operator]
        return Claim("in_flight", operation, retry_after=max(1, min(int(remaining) + 1, 60)))

    def insert_or_load(
        self, *, tool: str, scope: str, key: str, fp: str, input: Any, user: Any,
        lease_seconds: int,
    ) -> tuple[Operation, datetime | None] | None:
        """Insert the claim unless the key exists; then read the existing row.

        ``(operation, None)`` for a fresh claim, ``(operation, db_now)`` for an existing
        one, None when the key vanished in between (the caller tries again). The INSERT
        runs in autocommit (in a test case's block, in a savepoint), so the claim is
        durable when this returns; a unique violation means the key exists.
        """
        using = _database()
        operation = Operation(
            **fresh_values(tool=tool, scope=scope, key=key, fp=fp, input=input, user=user),
            lease_expires_at=db_now_plus(lease_seconds),
        )
        if user is not None:
            operation.user = user
        try:
            with _savepoint_in_a_block(using):
                operation.save(force_insert=True, using=using)
        except IntegrityError:
            return self.load(tool, scope, key)
        return as_saved(operation, using), None

    def load(self, tool: str, scope: str, key: str) -> Found | None:
        """The row for this key (its input deferred) and the database's clock, in one read."""
        found = (
            Operation.objects.using(_database()).filter(tool=tool, scope=scope, key=key)
            .defer("input").annotate(db_now=Now()).first()
        )
        return None if found is None else (found, found.db_now)  # type: ignore[attr-defined]

    def reclaim(
        self, operation: Operation, fp: str, input: Any, user: Any, lease_seconds: int
    ) -> Claim | None:
        """A released key is fresh again: take it by compare-and-set on the fence."""
        token = new_token()
        updated = Operation.objects.using(_database()).filter(
            pk=operation.pk, state=OperationState.RELEASED, fence=operation.fence
        ).update(
            state=OperationState.IN_FLIGHT, owner=token, fence=F("fence") + 1,
            fingerprint=fp, input=input, user=user_row(user), output=None, error=None,
            recovered=False, attempts=F("attempts") + 1, release_reason="",
            lease_expires_at=db_now_plus(lease_seconds), completed_at=None, updated_at=Now(),
        )
        if not updated:
            return None
        operation.refresh_from_db(using=_database())
        return self.claimed(Claim("fresh", operation, owner=token, fence=operation.fence),
                            user, Kind.RECLAIMED)

    @staticmethod
    def claimed(claim: Claim, user: Any, kind: str) -> Claim:
        """``claim`` with its own event, written with its next one (no statement of its own)."""
        claim.actor = actor_label(user, agent=True)
        claim.unrecorded.append(event(claim.operation, kind, claim.actor, fence=claim.fence))
        return claim

    def history(self, claim: Claim, kind: str, **details: Any) -> None:
        """Record ``kind`` for ``claim``, after the claim's events not written yet."""
        record_all(self.events_with(claim, kind, **details))

    @staticmethod
    def events_with(claim: Claim, kind: str, **details: Any) -> list[Any]:
        """The claim's events not written yet (taken from it), then ``kind``'s, unsaved."""
        pending, claim.unrecorded = claim.unrecorded, []
        return [*pending, event(claim.operation, kind, claim.actor, fence=claim.fence,
                                **details)]

    def takeover(self, operation: Operation, lease_seconds: int) -> Claim | None:
        """Take an abandoned claim (fence + 1, new owner); None if someone else did."""
        token = new_token()
        updated = (
            Operation.objects.using(_database()).abandoned()
            .filter(pk=operation.pk, fence=operation.fence)
            .update(state=OperationState.IN_FLIGHT, owner=token, fence=F("fence") + 1,
                    lease_expires_at=db_now_plus(lease_seconds), updated_at=Now())
        )
        return self.taken_over(operation, token) if updated else None

    def taken_over(self, operation: Operation, token: str) -> Claim:
        """The compare-and-set said exactly what the row now holds: no read back. The
        lease and the time of the change (the database's clock) load from the database
        if anyone asks for them."""
        operation = as_loaded(operation, _database(),
                              state=OperationState.IN_FLIGHT.value, owner=token,
                              fence=operation.fence + 1,
                              lease_expires_at=DEFERRED, updated_at=DEFERRED)
        return Claim("fresh", operation, owner=token, fence=operation.fence)

    # -- atomic tools: key, effect and operation in one transaction --------------------
    def can_lock(self) -> bool:
        """True where an atomic tool's call can run as one transaction (see ``lock_key``)."""
        return bool(features(connections[_database()]).can_lock_keys)

    def lock_key(
        self, *, tool: str, scope: str, key: str, also: tuple[str, list[Any]] | None = None
    ) -> Locked:
        """Lock the key for the caller's open transaction, or say why not.

        ``"locked"``: nobody holds the key and it was never claimed; it stays locked
        until the transaction ends. ``"busy"``: another transaction holds it and the
        key has no row yet. ``"exists"``: the key has a row (returned, with the
        database clock), whoever holds the lock: a row decides by itself.
        PostgreSQL: a try of a transaction-scoped advisory lock on a hash of the key,
        then a read of the key, whose snapshot is taken after the try: a call that
        committed the key's row and released the lock before the try is seen by the
        read. SQLite: the transaction is IMMEDIATE and already holds the database's
        write lock, so only the read. ``also`` is a read run first (the call's
        permission query); its rows come back in ``Locked.also``.
        """
        connection = connections[_database()]
        if not (self.can_lock() and connection.in_atomic_block):
            raise RuntimeError("lock_key runs inside the transaction it locks the key for.")
        with connection.cursor() as cursor:
            also_rows = _rows(cursor, *also) if also is not None else []
            lock = ops(connection).key_lock(LOCK_CLASS, key_hash(tool, scope, key))
            # None: the transaction holds the lock already (SQLite's IMMEDIATE one)
            held = lock is None or bool(_rows(cursor, *lock)[0][0])
        found = self.load(tool, scope, key)
        if found is not None:
            return Locked("exists", found, also_rows)
        return Locked("locked" if held else "busy", None, also_rows)

    def pending(
        self, *, tool: str, scope: str, key: str, fp: str, input: Any, user: Any
    ) -> Claim:
        """The claim on a locked key: the operation as it will be inserted, not yet a row."""
        user = user_row(user)
        values = fresh_values(tool=tool, scope=scope, key=key, fp=fp, input=input, user=user)
        # By position, as Model.from_db builds a row (cheaper than keywords); a column the
        # values leave out is None, as its field's default (none) would make it.
        row: Any = [values.get(name) for name in _attnames()]
        operation = Operation(*row)
        if user is not None:
            operation.user = user
        return self.claimed(Claim("fresh", operation, owner=operation.owner,
                                  fence=operation.fence), user, Kind.CLAIMED)

    def insert_completed(self, claim: Claim, output: Any, entries: list[Any]) -> None:
        """Insert a locked key's operation, already succeeded, with its journal.

        The last statements of the transaction ``lock_key`` locked the key for:
        ``transaction.atomic()`` commits them.
        """
        using = _database()
        operation = claim.operation
        operation.state, operation.owner, operation.output = OperationState.SUCCEEDED, "", output
        operation.completed_at = Now()
        operation.save(force_insert=True, using=using)
        claim.operation = operation = as_saved(operation, using)
        if entries:
            JournalEntry.objects.using(using).bulk_create(
                JournalEntry(operation_id=operation.pk, data=data, fence=claim.fence,
                             removed=removed)
                for data, removed in entries
            )
        self.history_of_completed(claim, entries)

    def history_of_completed(self, claim: Claim, entries: list[Any]) -> None:
        """An atomic call's events, in one INSERT: claimed, each journal write, succeeded."""
        record_all(self.events_of_completed(claim, entries))

    def events_of_completed(self, claim: Claim, entries: list[Any]) -> list[Any]:
        """An atomic call's events, unsaved and in order (the claim's, taken from it)."""
        pending, claim.unrecorded = claim.unrecorded, []
        writes = [event(claim.operation, Kind.JOURNAL, claim.actor, fence=claim.fence,
                        data=data, removed=removed or None) for data, removed in entries]
        return [*pending, *writes,
                event(claim.operation, Kind.SUCCEEDED, claim.actor, fence=claim.fence)]

    # -- compare-and-set transitions ---------------------------------------------------
    def owned(self, claim: Claim) -> Any:
        """The claim's row while it is still this claim's: in flight, same owner and fence."""
        return Operation.objects.using(_database()).filter(
            pk=claim.operation.pk, owner=claim.owner, fence=claim.fence,
            state=OperationState.IN_FLIGHT,
        )

    def complete(self, claim: Claim, output: Any, *, recovered: bool = False) -> bool:
        done = bool(self.owned(claim).update(
            state=OperationState.SUCCEEDED, output=output, error=None, recovered=recovered,
            owner="", lease_expires_at=None, completed_at=Now(), updated_at=Now(),
        ))
        return self.recorded(done, claim, Kind.SUCCEEDED, recovered=recovered or None)

    def recorded(self, done: bool, claim: Claim, kind: str, **details: Any) -> bool:
        """``done``, with ``kind`` recorded when the transition happened."""
        if done:
            self.history(claim, kind, **details)
        return done

    def write_journal(self, claim: Claim, data: Any) -> bool:
        """Add a journal entry if the claim is still ours (compare-and-set); False if not.

        The check locks the operation's row until the entry commits, so a takeover
        waits for it or makes it fail.
        """
        with transaction.atomic(using=router.db_for_write(JournalEntry)):
            if not self.touch(claim):
                return False
            JournalEntry.objects.using(router.db_for_write(JournalEntry)).create(
                operation_id=claim.operation.pk, data=data, fence=claim.fence
            )
            self.history(claim, Kind.JOURNAL, data=data)
        return True

    def touch(self, claim: Claim) -> bool:
        """Compare-and-set that this claim is still ours, locking its row until commit."""
        return bool(self.owned(claim).update(updated_at=Now()))

    def release(self, claim: Claim, reason: str = "") -> bool:
        """Release the claim without its effect; ``reason`` (a ``ReleaseReason``) says why,
        on the row (in the same UPDATE) and on its event."""
        return self.recorded(bool(self.owned(claim).update(
            state=OperationState.RELEASED, release_reason=reason, owner="",
            lease_expires_at=None, updated_at=Now(),
        )), claim, Kind.RELEASED, reason=reason or None)

    def abandon(self, claim: Claim) -> bool:
        return self.recorded(bool(self.owned(claim).update(
            state=OperationState.ABANDONED, owner="", lease_expires_at=None, updated_at=Now(),
        )), claim, Kind.ABANDONED)

    def mark_unknown(self, claim: Claim, error: dict[str, Any], output: Any = None, *,
                     failure: dict[str, Any] | None = None) -> bool:
        """Outcome unknown; ``failure`` (what failed: message, correlation and trace ids)
        goes to the event only, never to what agents are answered."""
        return self.recorded(bool(self.owned(claim).update(
            state=OperationState.OUTCOME_UNKNOWN, error=error, output=output, owner="",
            lease_expires_at=None, updated_at=Now(),
        )), claim, Kind.OUTCOME_UNKNOWN, **{**error, **(failure or {})})

    def extend(self, claim: Claim, seconds: int) -> bool:
        return bool(
            self.owned(claim).update(lease_expires_at=db_now_plus(seconds), updated_at=Now())
        )

    def record_late_result(self, claim: Claim, data: Any) -> None:
        """Keep what a process that lost its lease produced, for reconciliation."""
        JournalEntry.objects.using(router.db_for_write(JournalEntry)).create(
            operation_id=claim.operation.pk, kind=JournalEntry.Kind.LATE_RESULT,
            data=data, fence=claim.fence,
        )
        self.history(claim, Kind.LATE_RESULT, data=data)

    def journal_empty(self, operation: Operation) -> bool:
        # Releasing a key on a replica's word could run an effect twice: the primary.
        using = router.db_for_write(JournalEntry)
        return not JournalEntry.objects.using(using).live(operation.pk).exists()

    def refresh(self, operation: Operation) -> Operation:
        return Operation.objects.using(_database()).get(pk=operation.pk)


@functools.cache
def _attnames() -> tuple[str, ...]:
    """The operation's concrete fields' attnames, in their order (``Model.__init__``'s)."""
    return tuple(f.attname for f in Operation._meta.concrete_fields)


def as_loaded(operation: Operation, using: str, **changes: Any) -> Operation:
    """``operation`` as a read of its row would give it now, without the read.

    ``changes`` are what a statement just wrote (by attname); a change to ``DEFERRED``
    is a value only the database knows (its clock): like the fields ``operation`` had
    deferred, it is left out of the instance built by ``Model.from_db`` (the documented
    way a row becomes an instance), so Django loads it when it is first read, and never
    otherwise. The user attached to ``operation`` (by the caller, or ``select_related``)
    stays attached: reading it sends no query.
    """
    deferred = operation.get_deferred_fields()
    names, values = [], []
    for name in _attnames():
        value = changes.get(name, DEFERRED if name in deferred else None)
        if name not in changes and name not in deferred:
            value = getattr(operation, name)
        if value is not DEFERRED:
            names.append(name)
            values.append(value)
    loaded = Operation.from_db(using, names, values)
    user = Operation._meta.get_field("user")
    if loaded.user_id is not None and user.is_cached(operation):  # type: ignore[attr-defined]
        loaded.user = operation.user
    return loaded


def as_saved(operation: Operation, using: str) -> Operation:
    """``operation`` just inserted by ``save()``, as a read of its row would give it.

    A field given an expression (the database's clock) holds the value the INSERT
    returned where Django reads it back (Django 6 on databases with ``RETURNING``) or is
    deferred by Django itself; where it still holds the expression (Django 5.2) it is
    deferred here (:func:`as_loaded`), loaded from the database if anyone asks for it.
    """
    deferred = operation.get_deferred_fields()
    stale = {name: DEFERRED for name in _attnames()
             if name not in deferred and hasattr(getattr(operation, name), "resolve_expression")}
    return as_loaded(operation, using, **stale) if stale else operation


def _savepoint_in_a_block(using: str) -> Any:
    """In a test case's block, a savepoint (a unique violation must not break the block);
    outside any block nothing: the INSERT is its own transaction (autocommit)."""
    return transaction.atomic(using=using) if connections[using].in_atomic_block else nullcontext()


def _rows(cursor: Any, sql: str, params: list[Any]) -> list[Any]:
    cursor.execute(sql, params)
    return list(cursor.fetchall())
