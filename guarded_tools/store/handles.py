"""Provides the journal's operation handles: what a handler sees of its operation."""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.db import router, transaction

from guarded_tools.core.errors import LeaseLost
from guarded_tools.models import JournalEntry
from guarded_tools.store.backends.base import Claim, OperationStore
from guarded_tools.store.history import Kind


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
            removed = self._live().update(removed=True)
            if removed:
                self._store.history(self._claim, Kind.JOURNAL_REMOVED, entries=removed,
                                    by="the tool (its handler or recover hook)")

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
