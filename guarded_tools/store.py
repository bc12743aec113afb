"""Provides the model-backed idempotency store and the journal's operation handle.

Every decision here is a database constraint or a compare-and-set on the owner
token and fence, and every time comparison uses the database clock, so that any
number of web processes and workers stay correct together.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Value
from django.db.models.functions import Now

from guarded_tools.exceptions import IdempotencyKeyReused, LeaseLost
from guarded_tools.models import JournalEntry, Operation, OperationState

logger = logging.getLogger("guarded_tools.store")

ClaimKind = Literal["fresh", "in_flight", "completed", "abandoned"]
COMPLETED = (OperationState.SUCCEEDED, OperationState.FAILED, OperationState.OUTCOME_UNKNOWN)


def fingerprint(value: Any) -> str:
    """SHA-256 of canonical JSON: the same input always has the same fingerprint."""
    canonical = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, cls=DjangoJSONEncoder
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def db_now_plus(seconds: float) -> ExpressionWrapper:
    """``now() + seconds`` evaluated by the database, never by this process."""
    return ExpressionWrapper(
        Now() + Value(timedelta(seconds=seconds)), output_field=DateTimeField()
    )


class _Placeholders(DjangoJSONEncoder):
    def default(self, o: Any) -> Any:
        try:
            return super().default(o)
        except TypeError:
            return {"__unserializable__": type(o).__name__}


def storable_json(value: Any) -> Any:
    """Outputs are stored as JSON; anything that is not becomes a typed placeholder."""
    try:
        json.dumps(value, cls=DjangoJSONEncoder)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, cls=_Placeholders))


def new_token() -> str:
    return uuid.uuid4().hex


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
        """Atomically claim ``(tool, scope, key)``, committed before any handler runs."""
        for _attempt in range(5):
            token = new_token()
            try:
                with transaction.atomic(durable=True):
                    operation = Operation.objects.create(
                        tool=tool,
                        scope=scope,
                        key=key,
                        fingerprint=fp,
                        input=input,
                        user=user if getattr(user, "pk", None) else None,
                        owner=token,
                        lease_expires_at=db_now_plus(lease_seconds),
                    )
                return Claim("fresh", operation, owner=token, fence=operation.fence)
            except IntegrityError:
                pass
            existing = self._load(tool, scope, key)
            if existing is None:
                continue  # purged between our insert and read: try again
            operation, db_now = existing
            if operation.state == OperationState.RELEASED:
                claim = self._reclaim(operation, fp, input, user, lease_seconds)
                if claim is not None:
                    return claim
                continue
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
        raise RuntimeError("Could not claim the operation after several attempts.")

    def _load(self, tool: str, scope: str, key: str) -> tuple[Operation, datetime] | None:
        row = (
            Operation.objects.filter(tool=tool, scope=scope, key=key)
            .annotate(db_now=Now())
            .first()
        )
        if row is None:
            return None
        return row, row.db_now  # type: ignore[attr-defined]

    def _reclaim(
        self, operation: Operation, fp: str, input: Any, user: Any, lease_seconds: int
    ) -> Claim | None:
        """A released key is fresh again: take it by compare-and-set on the fence."""
        token = new_token()
        with transaction.atomic(durable=True):
            updated = Operation.objects.filter(
                pk=operation.pk, state=OperationState.RELEASED, fence=operation.fence
            ).update(
                state=OperationState.IN_FLIGHT,
                owner=token,
                fence=F("fence") + 1,
                fingerprint=fp,
                input=input,
                user=user if getattr(user, "pk", None) else None,
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
        operation.refresh_from_db()
        return Claim("fresh", operation, owner=token, fence=operation.fence)

    def takeover(self, operation: Operation, lease_seconds: int) -> Claim | None:
        """Take an abandoned claim (fence + 1, new owner); None if someone else did."""
        token = new_token()
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
        if not updated:
            return None
        operation.refresh_from_db()
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
        return not JournalEntry.objects.filter(
            operation_id=operation.pk, kind=JournalEntry.Kind.ENTRY, removed=False
        ).exists()

    def refresh(self, operation: Operation) -> Operation:
        return Operation.objects.get(pk=operation.pk)


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
    def fence(self) -> int:
        return self._claim.fence

    def _live(self) -> Any:
        return JournalEntry.objects.filter(
            operation_id=self._claim.operation.pk, kind=JournalEntry.Kind.ENTRY, removed=False
        )

    def read(self) -> Any:
        """The latest live journal entry's data, or None."""
        entry = self._live().order_by("-id").values_list("data", flat=True).first()
        return entry

    def entries(self) -> list[Any]:
        return list(self._live().order_by("id").values_list("data", flat=True))

    def write(self, data: Any) -> None:
        """Record ``data`` (e.g. the upstream request id) before or after the effect."""
        with transaction.atomic():
            if not self._store._owned(self._claim).update(updated_at=Now()):
                # Recorded by the pipeline after the surrounding transactions roll back.
                raise LeaseLost(self.id, evidence={"journal_write": data})
            JournalEntry.objects.create(
                operation_id=self._claim.operation.pk, data=data, fence=self._claim.fence
            )

    def remove(self) -> None:
        """Mark every live entry removed (the journal is empty again)."""
        with transaction.atomic():
            if not self._store._owned(self._claim).update(updated_at=Now()):
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
