"""Provides the model-backed idempotency store and the journal's operation handle.

Every decision here is a database constraint or a compare-and-set on the owner
token and fence, and every time comparison uses the database clock, so that any
number of web processes and workers stay correct together.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

from asgiref.sync import sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connections, router, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Value
from django.db.models.functions import Now
from django.db.models.sql import Query

from guarded_tools.core.errors import IdempotencyKeyReused, LeaseLost
from guarded_tools.core.jsonvalues import JSON_ENCODER as JSON_ENCODER  # re-exported
from guarded_tools.core.jsonvalues import storable_json as storable_json
from guarded_tools.models import JournalEntry, Operation, OperationState

ClaimKind = Literal["fresh", "in_flight", "completed", "abandoned"]
LockState = Literal["locked", "busy", "exists"]
#: First key of the advisory locks taken on PostgreSQL (``pg_try_advisory_xact_lock(int, int)``):
#: "gt" and 1, so that the locks are recognisable in ``pg_locks`` (``classid``).
LOCK_CLASS = 0x6774_0001
COMPLETED = (OperationState.SUCCEEDED, OperationState.FAILED, OperationState.OUTCOME_UNKNOWN)
#: Measuring only (``bench/run.py --ablation``, set by the bench app): "multi" sends the
#: atomic path's statements one by one, as with psycopg 2 or server-side binding.
_ABLATE: set[str] = set()


#: Encoders are stateless between calls: one of each serves every call (and thread).
_CANONICAL = DjangoJSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def user_row(user: Any) -> Any:
    """``user`` when it is a row of the user model (a session's lazy one included), else None.

    Anonymous callers and user objects that are no row (a stateless token's user, which
    has a ``pk`` but no table) are stored without one; their scope keeps their keys apart.
    """
    from django.contrib.auth import get_user_model

    if getattr(user, "pk", None) is None:
        return None
    return user if isinstance(user, get_user_model()) else None


def fingerprint(value: Any) -> str:
    """SHA-256 of canonical JSON: the same input always has the same fingerprint."""
    return hashlib.sha256(_CANONICAL.encode(value).encode("utf-8")).hexdigest()


def db_now_plus(seconds: float) -> ExpressionWrapper:
    """``now() + seconds`` evaluated by the database, never by this process."""
    return ExpressionWrapper(
        Now() + Value(timedelta(seconds=seconds)), output_field=DateTimeField()
    )


def new_token() -> str:
    return uuid.uuid4().hex


def _fresh(
    *, tool: str, scope: str, key: str, fp: str, input: Any, user: Any
) -> dict[str, Any]:
    """A fresh claim's values by attname; the columns left out are NULL or the clock's.

    Its id (a version 4 UUID) and its owner token come from one read of the system's
    randomness, as two ``uuid4()`` calls would from two.
    """
    random = os.urandom(32)
    return {
        "id": uuid.UUID(bytes=random[:16], version=4),
        "tool": tool,
        "scope": scope,
        "key": key,
        "user_id": user.pk if user is not None else None,
        "fingerprint": fp,
        "input": input,
        "state": OperationState.IN_FLIGHT.value,
        "owner": random[16:].hex(),
        "fence": 1,
        "recovered": False,
        "reconciled": False,
        "attempts": 1,
    }


def _key_hash(tool: str, scope: str, key: str) -> int:
    """A signed 32-bit hash of the key: the second key of its advisory lock."""
    digest = hashlib.blake2b(f"{tool}\0{scope}\0{key}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


class Locked(NamedTuple):
    """What ``OperationStore.lock_key`` found: the lock's state, the key's row, ``also``'s rows."""

    state: LockState
    found: tuple[Operation, datetime] | None
    also: list[Any]


@dataclass
class Claim:
    """What the store answered for a key: fresh, in flight, completed or abandoned."""

    kind: ClaimKind
    operation: Operation
    owner: str = ""
    fence: int = 0
    retry_after: int = 1


class OperationStore:
    """Claims, completes, releases, abandons and takes over operations."""

    def claim(
        self,
        *,
        tool: str,
        scope: str,
        key: str,
        fp: str,
        input: Any,
        user: Any,
        lease_seconds: int,
    ) -> Claim:
        """Atomically claim ``(tool, scope, key)``, committed before any handler runs.

        One statement, one round trip, for a fresh claim: ``INSERT … ON CONFLICT
        (tool, scope, key) DO NOTHING RETURNING …`` in autocommit, committed when
        this returns. When the key exists, one ``SELECT`` (with the database's
        clock) says in which state: a replay or an in-flight duplicate costs two.
        """
        user = user_row(user)
        for _attempt in range(5):
            found = self._claim_or_load(
                tool=tool, scope=scope, key=key, fp=fp, input=input, user=user,
                lease_seconds=lease_seconds,
            )
            if found is None:
                continue  # purged between our insert and read: try again
            operation, db_now = found
            if db_now is None:
                return Claim("fresh", operation, owner=operation.owner, fence=operation.fence)
            if operation.state == OperationState.RELEASED:
                claim = self._reclaim(operation, fp, input, user, lease_seconds)
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

    def _claim_or_load(
        self,
        *,
        tool: str,
        scope: str,
        key: str,
        fp: str,
        input: Any,
        user: Any,
        lease_seconds: int,
    ) -> tuple[Operation, datetime | None] | None:
        """Insert the claim unless the key exists; then read the existing row.

        Returns ``(operation, None)`` for a fresh claim, ``(operation, db_now)`` for
        an existing one, None when the key vanished in between (the caller tries again).
        The INSERT runs in autocommit, so the claim is durable when this returns.
        Like ``transaction.atomic(durable=True)``, it refuses to run inside a
        caller's transaction (where the claim would only commit with the caller's
        commit, after the handler): the pipeline turns that into
        ``ImproperlyConfigured``. PostgreSQL and SQLite ≥ 3.35 take the one-statement
        path; other backends a durable ``INSERT`` whose unique violation is caught.
        Timestamps and the lease come from the database's clock.
        """
        using = router.db_for_write(Operation)
        connection = connections[using]
        refuse_enclosing_transaction(connection)
        statements = _Statements.of(connection)
        values = _fresh(tool=tool, scope=scope, key=key, fp=fp, input=input, user=user)
        if statements is None:
            operation = Operation(**values, lease_expires_at=db_now_plus(lease_seconds))
            if user is not None:
                operation.user = user
            if self._insert_portable(operation, using):
                return operation, None
            return self._load(tool, scope, key)
        sql, params = statements.claim(values, lease_seconds, connection)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:  # the key exists: read it (None if it vanished meanwhile)
            return self._load(tool, scope, key)
        values.update(zip(statements.claim_returning,
                          statements.convert_times(row, connection), strict=True))
        return statements.operation(values, user, using), None

    def _insert_portable(self, operation: Operation, using: str) -> bool:
        try:
            with transaction.atomic(using=using, durable=True):
                operation.save(force_insert=True, using=using)
        except IntegrityError:
            return False
        return True

    def _load(self, tool: str, scope: str, key: str) -> tuple[Operation, datetime] | None:
        """The row for this key (its input deferred) and the database's clock, in one read.

        From the database operations are written to, as every read a decision rests on:
        a replica behind it could show a completed key in flight, or none at all.
        """
        using = router.db_for_write(Operation)
        connection = connections[using]
        statements = _Statements.of(connection)
        if statements is None:
            found = (
                Operation.objects.using(using).filter(tool=tool, scope=scope, key=key)
                .annotate(db_now=Now()).first()
            )
            return None if found is None else (found, found.db_now)  # type: ignore[attr-defined]
        with connection.cursor() as cursor:
            cursor.execute(statements.select, [*statements.now_params, tool, scope, key])
            row = cursor.fetchone()
        return None if row is None else statements.loaded(row, using, connection)

    def _reclaim(
        self, operation: Operation, fp: str, input: Any, user: Any, lease_seconds: int
    ) -> Claim | None:
        """A released key is fresh again: take it by compare-and-set on the fence."""
        token = new_token()
        with transaction.atomic(using=router.db_for_write(Operation), durable=True):
            updated = Operation.objects.filter(
                pk=operation.pk, state=OperationState.RELEASED, fence=operation.fence
            ).update(
                state=OperationState.IN_FLIGHT,
                owner=token,
                fence=F("fence") + 1,
                fingerprint=fp,
                input=input,
                user=user_row(user),
                output=None,
                error=None,
                recovered=False,
                attempts=F("attempts") + 1,
                lease_expires_at=db_now_plus(lease_seconds),
                completed_at=None,
                updated_at=Now(),
            )
        if not updated:
            return None
        operation.refresh_from_db(using=router.db_for_write(Operation))
        return Claim("fresh", operation, owner=token, fence=operation.fence)

    # -- atomic tools: key, effect and operation in one transaction --------------------
    def can_lock(self) -> bool:
        """True where an atomic tool's call can run as one transaction (see ``lock_key``)."""
        statements = _Statements.of(connections[router.db_for_write(Operation)])
        return statements is not None and statements.locking

    def lock_key(
        self, *, tool: str, scope: str, key: str, also: tuple[str, list[Any]] | None = None
    ) -> Locked:
        """Lock the key for the caller's open transaction, or say why not.

        ``"locked"``: nobody holds the key and it was never claimed; it stays locked
        until the transaction ends. ``"busy"``: another transaction holds it and the
        key has no row yet. ``"exists"``: the key has a row (returned, with the
        database clock), whoever holds the lock: a row decides by itself.
        PostgreSQL: a try of a transaction-scoped advisory lock on a hash of the key,
        then a read of the key in a second statement, whose snapshot is taken after
        the try (both in one round trip where the driver allows it, ``send``): a call
        that committed the key's row and released the lock before the try is seen by
        the read. SQLite: the transaction is IMMEDIATE and already holds the
        database's write lock, so only the read.
        ``also`` is a read sent first in the same round trip (the call's permission
        query); its rows come back in ``Locked.also``.
        """
        using = router.db_for_write(Operation)
        connection = connections[using]
        statements = _Statements.of(connection)
        if statements is None or not statements.locking or not connection.in_atomic_block:
            raise RuntimeError("lock_key runs inside the transaction it locks the key for.")
        lock: tuple[str, list[Any]] | None = None
        if statements.lock_sql:
            lock = (statements.lock_sql, [LOCK_CLASS, _key_hash(tool, scope, key)])
        read: tuple[str, list[Any]] = (statements.select,
                                       [*statements.now_params, tool, scope, key])
        parts = [part for part in (also, lock, read) if part is not None]
        with connection.cursor() as cursor:
            results = statements.send(cursor, parts, rows=True)
        also_rows = results[0] if also is not None else []
        # SQLite: the IMMEDIATE transaction already holds the write lock.
        held = bool(results[-2][0][0]) if lock is not None else True
        if results[-1]:
            return Locked("exists", statements.loaded(results[-1][0], using, connection),
                          also_rows)
        return Locked("locked" if held else "busy", None, also_rows)

    def pending(
        self, *, tool: str, scope: str, key: str, fp: str, input: Any, user: Any
    ) -> Claim:
        """The claim on a locked key: the operation as it will be inserted, not yet a row."""
        statements = _Statements.of(connections[router.db_for_write(Operation)])
        assert statements is not None  # a key is locked only where there are statements
        user = user_row(user)
        operation = statements.operation(
            _fresh(tool=tool, scope=scope, key=key, fp=fp, input=input, user=user),
            user,
        )
        return Claim("fresh", operation, owner=operation.owner, fence=operation.fence)

    def insert_completed(self, claim: Claim, output: Any, entries: list[Any]) -> None:
        """Insert a locked key's operation, already succeeded, with its journal; commit.

        The last statements of the transaction ``lock_key`` locked the key for. On
        PostgreSQL with psycopg 3's client-side binding (Django's default) the
        INSERTs and, in the outermost transaction, the COMMIT go in one round trip;
        Django's own commit at the end of the block then finds nothing left to
        commit (psycopg sends no COMMIT outside a transaction). Elsewhere they are
        separate statements and Django commits.
        """
        connection = connections[router.db_for_write(Operation)]
        statements = _Statements.of(connection)
        assert statements is not None and statements.locking
        parts = [statements.completed(claim.operation, output, connection)]
        if entries:
            parts.append(statements.journal_rows(claim, entries, connection))
        # Only the outermost transaction may commit here: inside a test case's block
        # (or any savepoint) Django ends the block itself.
        if statements.multi and _outermost(connection):
            parts.append(("COMMIT", []))
        with connection.cursor() as cursor:
            statements.send(cursor, parts)
        claim.operation.state = OperationState.SUCCEEDED
        claim.operation.owner = ""

    def takeover(self, operation: Operation, lease_seconds: int) -> Claim | None:
        """Take an abandoned claim (fence + 1, new owner); None if someone else did."""
        token = new_token()
        connection = connections[router.db_for_write(Operation)]
        statements = _Statements.of(connection)
        if statements is None:
            updated = (
                Operation.objects.abandoned()
                .filter(pk=operation.pk, fence=operation.fence)
                .update(
                    state=OperationState.IN_FLIGHT,
                    owner=token,
                    fence=F("fence") + 1,
                    lease_expires_at=db_now_plus(lease_seconds),
                    updated_at=Now(),
                )
            )
        else:
            sql, params = statements.takeover(operation, token, lease_seconds, connection)
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                updated = cursor.rowcount
        if not updated:
            return None
        # The compare-and-set said exactly what the row now holds: no read back. The
        # lease (database clock) loads from the database if anyone asks for it.
        operation.state = OperationState.IN_FLIGHT
        operation.owner = token
        operation.fence += 1
        for name in ("lease_expires_at", "updated_at"):
            operation.__dict__.pop(name, None)
        return Claim("fresh", operation, owner=token, fence=operation.fence)

    # -- compare-and-set transitions ---------------------------------------------------
    def _owned(self, claim: Claim) -> Any:
        return Operation.objects.filter(
            pk=claim.operation.pk,
            owner=claim.owner,
            fence=claim.fence,
            state=OperationState.IN_FLIGHT,
        )

    def complete(self, claim: Claim, output: Any, *, recovered: bool = False) -> bool:
        connection = connections[router.db_for_write(Operation)]
        statements = _Statements.of(connection)
        if statements is None:
            return bool(
                self._owned(claim).update(
                    state=OperationState.SUCCEEDED,
                    output=output,
                    error=None,
                    recovered=recovered,
                    owner="",
                    lease_expires_at=None,
                    completed_at=Now(),
                    updated_at=Now(),
                )
            )
        sql, params = statements.complete(claim, output, recovered, connection)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount == 1

    def write_journal(self, claim: Claim, data: Any) -> bool:
        """Add a journal entry if the claim is still ours (compare-and-set); False if not.

        The check locks the operation's row until the entry commits, so a takeover
        waits for it or makes it fail. On PostgreSQL the check and the entry are one
        statement (``WITH owned AS (UPDATE … RETURNING) INSERT … SELECT``); elsewhere
        two, in a transaction.
        """
        connection = connections[router.db_for_write(Operation)]
        statements = _Statements.of(connection)
        if statements is not None and statements.journal_sql:
            sql, params = statements.journal(claim, data, connection)
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchone() is not None
        with transaction.atomic(using=router.db_for_write(JournalEntry)):
            if not self.touch(claim):
                return False
            JournalEntry.objects.create(
                operation_id=claim.operation.pk, data=data, fence=claim.fence
            )
        return True

    def touch(self, claim: Claim) -> bool:
        """Compare-and-set that this claim is still ours, locking its row until commit."""
        connection = connections[router.db_for_write(Operation)]
        statements = _Statements.of(connection)
        if statements is None:
            return bool(self._owned(claim).update(updated_at=Now()))
        sql, params = statements.touch(claim, connection)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount == 1

    def release(self, claim: Claim) -> bool:
        return bool(
            self._owned(claim).update(
                state=OperationState.RELEASED,
                owner="",
                lease_expires_at=None,
                updated_at=Now(),
            )
        )

    def abandon(self, claim: Claim) -> bool:
        return bool(
            self._owned(claim).update(
                state=OperationState.ABANDONED,
                owner="",
                lease_expires_at=None,
                updated_at=Now(),
            )
        )

    def mark_unknown(self, claim: Claim, error: dict[str, Any], output: Any = None) -> bool:
        return bool(
            self._owned(claim).update(
                state=OperationState.OUTCOME_UNKNOWN,
                error=error,
                output=output,
                owner="",
                lease_expires_at=None,
                updated_at=Now(),
            )
        )

    def extend(self, claim: Claim, seconds: int) -> bool:
        return bool(
            self._owned(claim).update(lease_expires_at=db_now_plus(seconds), updated_at=Now())
        )

    def record_late_result(self, claim: Claim, data: Any) -> None:
        """Keep what a process that lost its lease produced, for reconciliation."""
        JournalEntry.objects.create(
            operation_id=claim.operation.pk,
            kind=JournalEntry.Kind.LATE_RESULT,
            data=data,
            fence=claim.fence,
        )

    def journal_empty(self, operation: Operation) -> bool:
        # Releasing a key on a replica's word could run an effect twice: the primary.
        using = router.db_for_write(JournalEntry)
        connection = connections[using]
        statements = _Statements.of(connection)
        if statements is None:
            return not JournalEntry.objects.using(using).live(operation.pk).exists()
        sql, params = statements.journal_live(operation, connection)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone() is None

    def refresh(self, operation: Operation) -> Operation:
        return Operation.objects.using(router.db_for_write(Operation)).get(pk=operation.pk)


Converter = tuple[int, list[Any], Any]


class _Statements:
    """The statements every call runs, written once per database connection.

    The claim, the read of an existing key and the completion run on every call:
    their SQL is assembled here once, from the model's columns and the clock
    expressions Django compiles for this backend, and then executed with
    parameters only, so that no queryset is built and compiled per call.
    Values go through each field's ``get_db_prep_save`` and come back through
    the same converters the ORM applies. The SQL text holds only the model's own
    quoted table and column names and Django's clock expressions: every value is
    a parameter (hence the ``noqa: S608`` below).
    """

    ATTRIBUTE = "_guarded_tools_statements"

    @classmethod
    def of(cls, connection: Any) -> _Statements | None:
        """The statements for ``connection``, or None where it lacks ON CONFLICT/RETURNING."""
        statements = connection.__dict__.get(cls.ATTRIBUTE)
        if statements is None:
            features = connection.features
            if not (
                connection.vendor in ("postgresql", "sqlite")
                and features.can_return_columns_from_insert
                and features.supports_update_conflicts_with_target
            ):
                return None
            statements = connection.__dict__[cls.ATTRIBUTE] = cls(connection)
        return statements  # type: ignore[no-any-return]

    def __init__(self, connection: Any) -> None:
        opts = Operation._meta
        qn = connection.ops.quote_name
        table = qn(opts.db_table)
        self.fields = list(opts.concrete_fields)
        self.column = {f.name: qn(f.column) for f in self.fields}
        c = self.column
        now_sql, self.now_params, now_expression = _compile(connection, Now())
        self.now_sql = now_sql
        self._leases: dict[int, tuple[str, list[Any]]] = {}
        self._claims: dict[str, str] = {}  # the claim's SQL by its lease's SQL
        self.names = [f.attname for f in self.fields]
        # Typed values go through their field, as the ORM sends them: the key, the JSON
        # fields, and the user's key (a UUID one is no type SQLite's driver binds).
        self._prepared: dict[str, Any] = {
            field.attname: field for field in self.fields
            if field.name in ("id", "input", "output", "user")
        }
        # The claim: values from the call, NULLs, the lease and the database's clock.
        claim_values, self._claim_plan = self._plan(
            now_sql, clock={"created_at", "updated_at"}, lease={"lease_expires_at"},
            nulls={"output", "error", "completed_at"},
        )
        insert = (
            f"INSERT INTO {table} ({', '.join(c[f.name] for f in self.fields)})"  # noqa: S608
            f" VALUES ({claim_values})"
            f" ON CONFLICT ({c['tool']}, {c['scope']}, {c['key']}) DO NOTHING"
        )
        selected = [f for f in self.fields if f.name != "input"]  # inputs can be large
        columns = ", ".join(c[f.name] for f in selected)
        by_key = f"{c['tool']} = %s AND {c['scope']} = %s AND {c['key']} = %s"
        # One round trip for a fresh claim. (Reading an existing row in the same
        # statement, with a CTE, saves a replay its second statement on PostgreSQL but
        # costs every fresh claim more than that in planning: fresh claims come first.)
        self.claim_returning = ["lease_expires_at", "created_at", "updated_at"]
        self._claim_sql = (
            f"{insert} RETURNING {', '.join(c[name] for name in self.claim_returning)}"
        )
        lease = opts.get_field("lease_expires_at")
        self.time_converters = _converters(connection, lease.get_col(opts.db_table))
        self.select_names = [f.attname for f in selected]
        self.select = f"SELECT {columns}, {now_sql} FROM {table} WHERE {by_key}"  # noqa: S608
        self.select_converters: list[Converter] = [
            (i, convs, col)
            for i, col in enumerate(
                [*(f.get_col(opts.db_table) for f in selected), now_expression]
            )
            if (convs := _converters(connection, col))
        ]
        owned = (
            f"{c['id']} = %s AND {c['owner']} = %s AND {c['fence']} = %s AND {c['state']} = %s"
        )
        self.complete_sql = (
            f"UPDATE {table} SET {c['state']} = %s, {c['output']} = %s, {c['error']} = NULL,"  # noqa: S608
            f" {c['recovered']} = %s, {c['owner']} = %s, {c['lease_expires_at']} = NULL,"
            f" {c['completed_at']} = {now_sql}, {c['updated_at']} = {now_sql} WHERE {owned}"
        )
        self.touch_sql = f"UPDATE {table} SET {c['updated_at']} = {now_sql} WHERE {owned}"  # noqa: S608
        self._pk = opts.pk
        # Takeover of an abandoned claim: Operation.objects.abandoned() as one statement.
        self.takeover_sql = (
            f"UPDATE {table} SET {c['state']} = %s, {c['owner']} = %s,"  # noqa: S608
            f" {c['fence']} = {c['fence']} + 1, {c['lease_expires_at']} = {{lease}},"
            f" {c['updated_at']} = {now_sql} WHERE {c['id']} = %s AND {c['fence']} = %s AND"
            f" ({c['state']} = %s OR ({c['state']} = %s AND {c['lease_expires_at']} < {now_sql}))"
        )
        jopts = JournalEntry._meta
        j = {f.name: qn(f.column) for f in jopts.concrete_fields}
        self.journal_live_sql = (
            f"SELECT 1 FROM {qn(jopts.db_table)} WHERE {j['operation']} = %s"  # noqa: S608
            f" AND {j['kind']} = %s AND {j['removed']} = %s LIMIT 1"
        )
        # A journal entry, on PostgreSQL: the compare-and-set and the INSERT together.
        self.journal_sql = ""
        self._data = jopts.get_field("data")
        if connection.vendor == "postgresql":
            self.journal_sql = (
                f"WITH owned AS (UPDATE {table} SET {c['updated_at']} = {now_sql}"  # noqa: S608
                f" WHERE {owned} RETURNING {c['id']})"
                f" INSERT INTO {qn(jopts.db_table)} ({j['operation']}, {j['kind']}, {j['data']},"
                f" {j['fence']}, {j['removed']}, {j['created_at']})"
                f" SELECT {c['id']}, %s, %s, %s, %s, {now_sql} FROM owned RETURNING {j['id']}"
            )

        # Atomic tools' one-transaction path (``OperationStore.lock_key``).
        options = connection.settings_dict.get("OPTIONS") or {}
        self.lock_sql = ""
        self.multi = False  # several statements (and COMMIT) in one execute
        if connection.vendor == "postgresql":
            from django.db.backends.postgresql.psycopg_any import is_psycopg3

            # Tried whether or not the key has a row: a NOT EXISTS here cost every fresh
            # call more to plan than it saved the rare replay that misses this process's
            # cache (a replay that finds the lock taken still reads its row).
            self.lock_sql = "SELECT pg_try_advisory_xact_lock(%s, %s)"
            # psycopg 3 with client-side binding (Django's default) sends statements
            # joined by semicolons as one query; server-side binding and psycopg 2's
            # Django backend take one statement per execute.
            self.multi = (is_psycopg3 and options.get("server_side_binding") is not True
                          and "multi" not in _ABLATE)
            # The read after the lock sees a call that committed before the try only
            # where each statement takes its own snapshot: READ COMMITTED. Above it the
            # transaction's snapshot is its first statement's, taken before the try, so
            # a duplicate could find the lock free and the key's row not yet visible.
            self.locking = reads_committed(options)
        else:  # SQLite: only where every transaction takes the write lock when it begins
            mode = str(options.get("transaction_mode") or "").upper()
            self.locking = mode in ("IMMEDIATE", "EXCLUSIVE")
        completed_values, self._completed_plan = self._plan(
            now_sql, clock={"created_at", "updated_at", "completed_at"},
            nulls={"lease_expires_at", "error"},
        )
        self.completed_sql = (
            f"INSERT INTO {table} ({', '.join(c[f.name] for f in self.fields)})"  # noqa: S608
            f" VALUES ({completed_values})"
        )
        self._journal_insert = (
            f"INSERT INTO {qn(jopts.db_table)} ({j['operation']}, {j['kind']}, {j['data']},"  # noqa: S608
            f" {j['fence']}, {j['removed']}, {j['created_at']}) VALUES "
        )
        self._journal_row = f"(%s, %s, %s, %s, %s, {now_sql})"

    def _plan(
        self, now_sql: str, *, clock: set[str], nulls: set[str], lease: set[str] | None = None
    ) -> tuple[str, list[str]]:
        """The VALUES of an INSERT of every column, and the plan of its parameters.

        Each column is the database's clock, the lease (a ``{lease}`` placeholder),
        NULL, or a parameter named by the field's attname.
        """
        sql: list[str] = []
        plan: list[str] = []
        for f in self.fields:
            if f.name in clock:
                sql.append(now_sql)
                plan.append("now")
            elif lease and f.name in lease:
                sql.append("{lease}")
                plan.append("lease")
            elif f.name in nulls:
                sql.append("NULL")
            else:
                sql.append("%s")
                plan.append(f.attname)
        return ", ".join(sql), plan

    def _params(
        self, plan: list[str], values: dict[str, Any], connection: Any,
        lease_params: list[Any] | None = None,
    ) -> list[Any]:
        """The parameters of a plan; the keys and the JSON fields as the ORM would save them."""
        params: list[Any] = []
        for name in plan:
            if name == "now":
                params.extend(self.now_params)
            elif name == "lease":
                params.extend(lease_params or [])
            elif name in self._prepared:
                params.append(self._prepared[name].get_db_prep_save(values[name], connection))
            else:
                params.append(values[name])
        return params

    def send(
        self, cursor: Any, parts: list[tuple[str, list[Any]]], *, rows: bool = False
    ) -> list[list[Any]]:
        """Execute ``parts`` in order: in one round trip where the driver allows several
        statements in one execute (``multi``), else one by one; with ``rows``, each
        part's rows (every part then returns some)."""
        results: list[list[Any]] = []
        if not self.multi:
            for sql, params in parts:
                cursor.execute(sql, params)
                if rows:
                    results.append(cursor.fetchall())
            return results
        cursor.execute("; ".join(sql for sql, _ in parts),
                       [param for _, params in parts for param in params])
        if rows:  # (asking the cursor for its description would build its columns)
            for i in range(len(parts)):
                if i:
                    cursor.nextset()
                results.append(cursor.fetchall())
        else:
            while cursor.nextset():
                pass
        return results

    def operation(self, values: dict[str, Any], user: Any, using: str | None = None
                  ) -> Operation:
        """The operation of ``values`` (by attname; NULL where absent), built by position,
        Django's fast path: a row of ``using`` (``from_db``), or without it one not yet
        inserted. The caller's user is attached, not a lazy query later."""
        row = [values.get(name) for name in self.names]
        operation = (Operation(*row) if using is None  # type: ignore[misc]
                     else Operation.from_db(using, self.names, row))
        if user is not None:
            operation.user = user
        return operation

    def loaded(self, row: Any, using: str, connection: Any) -> tuple[Operation, datetime]:
        """The operation (its input deferred) and the database's clock from a ``select`` row."""
        values = self.convert_select(row, connection)
        db_now = values.pop()
        return Operation.from_db(using, self.select_names, values), db_now

    def lease(self, connection: Any, seconds: int) -> tuple[str, list[Any]]:
        found = self._leases.get(seconds)
        if found is None:
            sql, params, _ = _compile(connection, db_now_plus(seconds))
            found = self._leases[seconds] = (sql, params)
        return found

    def claim(
        self, values: dict[str, Any], lease_seconds: int, connection: Any
    ) -> tuple[str, list[Any]]:
        """The claim's SQL and parameters; the lease is ``now() + lease_seconds`` (DB clock)."""
        lease_sql, lease_params = self.lease(connection, lease_seconds)
        params = self._params(self._claim_plan, values, connection, lease_params)
        sql = self._claims.get(lease_sql)
        if sql is None:
            sql = self._claims[lease_sql] = self._claim_sql.replace("{lease}", lease_sql)
        return sql, params

    def convert_times(self, row: Any, connection: Any) -> list[Any]:
        out = []
        for value in row:
            for converter, expression in self.time_converters:
                value = converter(value, expression, connection)
            out.append(value)
        return out

    def convert_select(self, row: Any, connection: Any) -> list[Any]:
        values = list(row)
        for i, convs, expression in self.select_converters:
            value = values[i]
            for converter, _expression in convs:
                value = converter(value, expression, connection)
            values[i] = value
        return values

    def _owned_params(self, claim: Claim, connection: Any) -> list[Any]:
        return [
            self._pk.get_db_prep_value(claim.operation.pk, connection),
            claim.owner,
            claim.fence,
            OperationState.IN_FLIGHT.value,
        ]

    def complete(
        self, claim: Claim, output: Any, recovered: bool, connection: Any
    ) -> tuple[str, list[Any]]:
        return self.complete_sql, [
            OperationState.SUCCEEDED.value,
            self._prepared["output"].get_db_prep_save(output, connection),
            bool(recovered),
            "",
            *self.now_params,
            *self.now_params,
            *self._owned_params(claim, connection),
        ]

    def takeover(
        self, operation: Operation, token: str, lease_seconds: int, connection: Any
    ) -> tuple[str, list[Any]]:
        lease_sql, lease_params = self.lease(connection, lease_seconds)
        return self.takeover_sql.replace("{lease}", lease_sql), [
            OperationState.IN_FLIGHT.value,
            token,
            *lease_params,
            *self.now_params,
            self._pk.get_db_prep_value(operation.pk, connection),
            operation.fence,
            OperationState.ABANDONED.value,
            OperationState.IN_FLIGHT.value,
            *self.now_params,
        ]

    def completed(
        self, operation: Operation, output: Any, connection: Any
    ) -> tuple[str, list[Any]]:
        """The INSERT of an operation that is already succeeded (atomic tools)."""
        values = {name: getattr(operation, name) for name in self._completed_plan
                  if name != "now"}
        values.update(state=OperationState.SUCCEEDED.value, owner="", output=output)
        params = self._params(self._completed_plan, values, connection)
        return self.completed_sql, params

    def journal_rows(
        self, claim: Claim, entries: list[Any], connection: Any
    ) -> tuple[str, list[Any]]:
        """One INSERT of every entry an atomic tool's handler wrote (in order)."""
        pk = self._pk.get_db_prep_value(claim.operation.pk, connection)
        params: list[Any] = []
        rows = []
        for data, removed in entries:
            rows.append(self._journal_row)
            params += [pk, JournalEntry.Kind.ENTRY.value,
                       self._data.get_db_prep_save(data, connection), claim.fence, removed,
                       *self.now_params]
        return self._journal_insert + ", ".join(rows), params

    def journal_live(self, operation: Operation, connection: Any) -> tuple[str, list[Any]]:
        return self.journal_live_sql, [
            self._pk.get_db_prep_value(operation.pk, connection),
            JournalEntry.Kind.ENTRY.value,
            False,
        ]

    def journal(self, claim: Claim, data: Any, connection: Any) -> tuple[str, list[Any]]:
        return self.journal_sql, [
            *self.now_params,
            *self._owned_params(claim, connection),
            JournalEntry.Kind.ENTRY.value,
            self._data.get_db_prep_save(data, connection),
            claim.fence,
            False,
            *self.now_params,
        ]

    def touch(self, claim: Claim, connection: Any) -> tuple[str, list[Any]]:
        return self.touch_sql, [*self.now_params, *self._owned_params(claim, connection)]


def reads_committed(options: dict[str, Any]) -> bool:
    """Whether a PostgreSQL database's ``OPTIONS`` leave its transactions at READ COMMITTED.

    (READ UNCOMMITTED is READ COMMITTED in PostgreSQL.) Only there can an atomic
    tool's call lock its key and run in one transaction; elsewhere it claims first.
    """
    from django.db.backends.postgresql.psycopg_any import IsolationLevel

    level = options.get("isolation_level")
    if level is None:
        return True
    try:
        level = IsolationLevel(level)
    except ValueError:
        return False  # Django refuses it when it connects
    return level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED)


def _compile(connection: Any, expression: Any) -> tuple[str, list[Any], Any]:
    """Django's SQL for a clock expression on this backend, compiled once."""
    query = Query(Operation)
    compiler = query.get_compiler(connection=connection)
    resolved = expression.resolve_expression(query, allow_joins=False)
    sql, params = compiler.compile(resolved)
    return sql, list(params), resolved


def _converters(connection: Any, expression: Any) -> list[tuple[Any, Any]]:
    """What the ORM applies to a value of ``expression`` read from this backend."""
    convs = connection.ops.get_db_converters(expression) + expression.get_db_converters(
        connection
    )
    return [(converter, expression) for converter in convs]


def _outermost(connection: Any) -> bool:
    """Whether the block open on ``connection`` is its outermost ``atomic()``: the one
    whose transaction the store may commit with its last statements."""
    return len(connection.atomic_blocks) == 1 and not connection.savepoint_ids


def refuse_enclosing_transaction(connection: Any) -> None:
    """Refuse to claim inside a caller's transaction, as a durable atomic block would.

    Blocks a test case opened (Django's ``TestCase``, pytest-django's ``django_db``)
    are allowed, exactly as ``transaction.atomic(durable=True)`` allows them.
    """
    if connection.in_atomic_block and not all(
        getattr(block, "_from_testcase", False) for block in connection.atomic_blocks
    ):
        raise RuntimeError("A durable atomic block cannot be nested within another atomic block.")


class OperationHandle:
    """The handler's view of its operation: ``key``, ``read``, ``write``, ``remove``.

    Writes are compare-and-set on the owner token and fence: after a takeover they
    raise :class:`LeaseLost` so a stale owner stops before its effect. Journal I/O
    is finalization work: the caller's cancellation signal never interrupts it.
    """

    def __init__(self, store: OperationStore, claim: Claim, lease_seconds: int) -> None:
        self._store = store
        self._claim = claim
        self._lease_seconds = lease_seconds

    @property
    def key(self) -> str:
        return self._claim.operation.key

    @property
    def id(self) -> str:
        return str(self._claim.operation.pk)

    @property
    def scope(self) -> str:
        """Whose operation this is: the principal scope its key is unique in."""
        return self._claim.operation.scope

    @property
    def fence(self) -> int:
        return self._claim.fence

    def _live(self) -> Any:
        # What the handler reads back decides what it does next: from the primary.
        return JournalEntry.objects.using(router.db_for_write(JournalEntry)).live(
            self._claim.operation.pk
        )

    def read(self) -> Any:
        """The latest live journal entry's data, or None."""
        entry = self._live().order_by("-id").values_list("data", flat=True).first()
        return entry

    def entries(self) -> list[Any]:
        return list(self._live().order_by("id").values_list("data", flat=True))

    def write(self, data: Any) -> None:
        """Record ``data`` (e.g. the upstream request id) before or after the effect."""
        if not self._store.write_journal(self._claim, data):
            # Recorded by the pipeline after the surrounding transactions roll back.
            raise LeaseLost(self.id, evidence={"journal_write": data})

    def remove(self) -> None:
        """Mark every live entry removed (the journal is empty again)."""
        with transaction.atomic(using=router.db_for_write(JournalEntry)):
            if not self._store.touch(self._claim):
                raise LeaseLost(self.id)
            self._live().update(removed=True)

    # Async variants for ``async def`` handlers (the ORM work runs in a thread).
    async def aread(self) -> Any:
        return await sync_to_async(self.read)()

    async def awrite(self, data: Any) -> None:
        await sync_to_async(self.write)(data)

    async def aremove(self) -> None:
        await sync_to_async(self.remove)()

    def heartbeat(self, seconds: int | None = None) -> None:
        """Extend the lease of a long-running handler; raises if it was lost."""
        if not self._store.extend(self._claim, seconds or self._lease_seconds):
            raise LeaseLost(self.id)


class PendingOperationHandle(OperationHandle):
    """The handle of an atomic tool's call on a locked key: the journal kept in memory.

    Nothing of the call is visible before its transaction commits, so the entries
    are written with the operation, in the same statement round trip, at the end.
    No other process can take the key over meanwhile: there is no lease to lose.
    """

    def __init__(self, store: OperationStore, claim: Claim, lease_seconds: int) -> None:
        super().__init__(store, claim, lease_seconds)
        self.pending: list[list[Any]] = []  # [data, removed], in writing order

    def read(self) -> Any:
        live = self.entries()
        return live[-1] if live else None

    def entries(self) -> list[Any]:
        return [json.loads(json.dumps(data, cls=DjangoJSONEncoder))
                for data, removed in self.pending if not removed]

    def write(self, data: Any) -> None:
        json.dumps(data, cls=DjangoJSONEncoder)  # refuse what the database would refuse, now
        self.pending.append([data, False])

    def remove(self) -> None:
        for entry in self.pending:
            entry[1] = True

    def heartbeat(self, seconds: int | None = None) -> None:
        """Nothing to extend: the key stays locked until the transaction ends."""
