"""Recovery tests' pieces: a recorder of recover calls, abandoned claims, a handler never run."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from guarded_tools.models import JournalEntry, Operation
from guarded_tools.store import fingerprint
from tests.conftest import key


class Recorder:
    def __init__(self, decision: Any) -> None:
        self.decision = decision
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kw: Any) -> Any:
        self.calls.append(kw)
        if isinstance(self.decision, BaseException):
            raise self.decision
        return self.decision


def abandoned(definition: Any, *, journal: Any = None, state: str = "in_flight",
              expired: bool = True) -> Operation:
    k = key()
    operation = Operation.objects.create(
        tool=definition.name, scope="principal:svc", key=k,
        fingerprint=fingerprint({"operationId": k}), input={"operationId": k},
        owner="dead" if state == "in_flight" else "", state=state,
        lease_expires_at=timezone.now() + timedelta(seconds=-5 if expired else 300),
    )
    if journal is not None:
        JournalEntry.objects.create(operation=operation, data=journal, fence=1)
    return operation


def never(input: Any, ctx: Any) -> Any:
    raise AssertionError("a takeover must never run the handler")
