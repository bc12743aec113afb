"""Provides recovery of abandoned operations: the sweep, and inline recovery on retry.

A takeover is a compare-and-set (fence + 1, new owner). It never runs the handler:
only the tool's ``recover`` hook, which reads authoritative state. The operation
then completes, is released (only when an empty journal proves no effect), or is
marked ``outcome_unknown`` for a person to reconcile.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from django.core.cache import cache
from django.db import connections, router, transaction
from django.db.models.functions import Now
from django.utils import timezone

from guarded_tools.conf import gt_settings
from guarded_tools.core.call import Invocation
from guarded_tools.core.definition import Tool, build_pipeline
from guarded_tools.core.errors import GuardError
from guarded_tools.core.registry import registry
from guarded_tools.models import (
    AuditEntry,
    Confirmation,
    ConfirmationStatus,
    Operation,
    record_in_admin_history,
)
from guarded_tools.store import Claim, OperationHandle, OperationStore
from guarded_tools.store.history import Kind, actor_label, record
from guarded_tools.store.replays import replays

logger = logging.getLogger("guarded_tools.recovery")

Outcome = Literal["completed", "released", "unknown", "skipped"]


@dataclass
class SweepReport:
    """What one sweep did, by outcome."""

    taken: int = 0
    completed: int = 0
    released: int = 0
    unknown: int = 0
    skipped: int = 0
    confirmations_expired: int = 0
    purged: int = 0
    errors: list[str] = field(default_factory=list)
    """One line per operation whose recovery raised: its id and the exception's type."""

    def add(self, outcome: Outcome) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)

    def as_dict(self) -> dict[str, int]:
        return {
            "taken": self.taken,
            "completed": self.completed,
            "released": self.released,
            "unknown": self.unknown,
            "skipped": self.skipped,
            "confirmations_expired": self.confirmations_expired,
            "purged": self.purged,
            "errors": len(self.errors),
        }


def close_old_connections() -> None:
    """Drop broken or expired connections, as Django does between requests.

    Connections inside a transaction are left alone (an eager task in a test, or a
    caller's atomic block): closing them would break the caller.
    """
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


def _lease(definition: Tool | None) -> int:
    return definition.lease if definition is not None else int(gt_settings.LEASE_SECONDS)


def recover_claimed(
    operation: Operation, claim: Claim, store: OperationStore, definition: Tool | None = None,
    *, by: str = "sweep", actor: Any = None,
) -> Outcome:
    """Decide an operation this process has just taken over. Never runs the handler.

    What was decided is an audit row (``recover``): ``by`` says who ran the recovery
    (``"sweep"``, ``"caller"``, a caller's retry meeting the claim, or ``"operator"``,
    a person's "Recover now", whose ``actor`` the row names).
    """
    claim.actor = actor_label(actor) if actor is not None else RECOVERERS.get(by, by)
    store.history(claim, Kind.TAKEN_OVER, by=by)
    outcome = _recover_claimed(operation, claim, store, definition)
    _audit_recovery(claim, outcome, by, actor)
    record(claim.operation, Kind.RECOVERED, claim.actor, fence=claim.fence, by=by,
           outcome=outcome)
    return outcome


#: Who recovered, as the timeline's WHO column names it.
RECOVERERS = {"sweep": "sweep", "caller": "agent (a retry)", "operator": "operator"}


def recover_now(operation: Operation, user: Any, *, store: OperationStore | None = None
                ) -> Outcome:
    """A person's "Recover now": the sweep's recovery of this one abandoned operation.

    The same takeover (compare-and-set) and the same ``recover_claimed``, never the
    handler; ``"skipped"`` when the operation is not abandoned (any more). The audit row
    and the admin's history name the person.
    """
    store = store or gt_settings.STORE_CLASS()
    definition = registry.find(operation.tool)
    claim = store.takeover(operation, _lease(definition))
    if claim is None:
        return "skipped"
    outcome = recover_claimed(claim.operation, claim, store, definition, by="operator",
                              actor=user)
    record_in_admin_history(user, claim.operation,
                            f"Recover now (attempt {claim.operation.fence}): {outcome}")
    return outcome


def _audit_recovery(claim: Claim, outcome: Outcome, by: str, actor: Any = None) -> None:
    try:
        state = Operation.objects.using(router.db_for_write(Operation)).filter(
            pk=claim.operation.pk).values_list("state", flat=True).first()
        AuditEntry.objects.create(
            actor=actor, action=AuditEntry.Action.RECOVER, operation_id=claim.operation.pk,
            status=state or "", note=f"Recovery by the {by}: {outcome}.",
            data={"by": by, "outcome": outcome, "fence": claim.operation.fence},
        )
    except Exception:  # the record of a decision never undoes the decision
        logger.exception("could not record the recovery of operation %s", claim.operation.pk)


def _recover_claimed(
    operation: Operation, claim: Claim, store: OperationStore, definition: Tool | None = None
) -> Outcome:
    definition = definition or registry.find(operation.tool)
    if definition is None:
        # Nobody here can read authoritative state for an unknown tool.
        store.mark_unknown(claim, {"code": "outcome_unknown", "reason": "tool not registered"})
        return "unknown"
    pipeline = build_pipeline(definition)
    inv = Invocation(input=operation.input, user=operation.user, scope=operation.scope)
    if definition.recover is None:
        if pipeline.proves_no_effect(claim):
            # The pipeline's release: what the claim reserved (its budgets) comes back too.
            pipeline.release_taken_over(inv, claim)
            return "released"
        store.mark_unknown(claim, {"code": "outcome_unknown"})
        return "unknown"
    context_ready = False
    try:
        inv.context = pipeline.resolve_context(inv)
        context_ready = True
        handle = OperationHandle(store, claim, _lease(definition))
        result = pipeline.resume(inv, claim, handle)
    except GuardError as exc:
        if not context_ready and exc.retry == "as_is":
            # The context's own word that this passes (a dependency down, a rate limit):
            # nothing was decided, and the next sweep, or the caller's retry, tries again.
            store.abandon(claim)
            return "skipped"
        # What run_recover decided is already stored; what it could not decide (the
        # context refused, verify failed inside an atomic tool's transaction) goes to a
        # person instead of staying in flight to be taken over again at every lease.
        store.mark_unknown(claim, {"code": "outcome_unknown"})
        return "unknown"
    except Exception:
        logger.exception("recovery of operation %s failed", operation.pk)
        store.mark_unknown(claim, {"code": "outcome_unknown"})
        return "unknown"
    return "released" if result is None else "completed"


def recover_operation(
    operation: Operation,
    *,
    store: OperationStore | None = None,
    definition: Tool | None = None,
) -> Outcome:
    """Take one abandoned operation over and recover it (inline, on a caller's retry)."""
    store = store or gt_settings.STORE_CLASS()
    definition = definition or registry.find(operation.tool)
    claim = store.takeover(operation, _lease(definition))
    if claim is None:
        return "skipped"
    return recover_claimed(claim.operation, claim, store, definition, by="caller")


def take_batch(store: OperationStore, limit: int) -> list[Claim]:
    """Take over up to ``limit`` abandoned operations in one short transaction.

    On PostgreSQL the candidates are locked with ``SKIP LOCKED`` so that several
    sweepers share the work instead of waiting on each other; the takeover itself
    is still a compare-and-set, so SQLite (which serializes writers) is safe too.
    """
    claims: list[Claim] = []
    using = router.db_for_write(Operation)
    with transaction.atomic(using=using):
        # The user comes with its operation (recover runs as that user): no query each.
        candidates = (
            Operation.objects.using(using).abandoned().select_related("user")
            .order_by("lease_expires_at")
        )
        if connections[using].features.has_select_for_update_skip_locked:
            # Only the operations are locked, never their users (``of``).
            candidates = candidates.select_for_update(skip_locked=True, of=("self",))
        for operation in candidates[:limit]:
            claim = store.takeover(operation, _lease(registry.find(operation.tool)))
            if claim is not None:
                claims.append(claim)
    return claims


def expire_confirmations() -> int:
    return Confirmation.objects.overdue().update(status=ConfirmationStatus.EXPIRED)


def purge_completed(days: int | None = None) -> int:
    days = gt_settings.RETENTION_DAYS if days is None else days
    if not days:
        return 0
    cutoff = Now() - timedelta(days=days)
    operations = Operation.objects.using(router.db_for_write(Operation))
    ids = list(operations.completed_before(cutoff).values_list("pk", flat=True)[:1000])
    if not ids:
        return 0
    deleted, _ = operations.filter(pk__in=ids).delete()
    replays.clear()  # this process forgets them now; others when their entries expire
    return len(ids) if deleted else 0


#: Where each sweep writes when it ran (Django's default cache), for the operation page's
#: "next sweep at": ``{"at": datetime, "every": seconds or None}``.
LAST_SWEEP_KEY = "guarded_tools:sweep:last"


def last_sweep() -> dict[str, Any] | None:
    """When the last sweep this cache saw started, and its loop's interval (if it said).

    ``None`` when no sweep wrote here: none ran yet, or this process's cache is its own
    (the local-memory default) and the sweeps run in another process.
    """
    try:
        value = cache.get(LAST_SWEEP_KEY)
    except Exception:  # a cache outage costs the page a sentence, nothing else
        logger.warning("could not read the last sweep's time from the cache", exc_info=True)
        return None
    return value if isinstance(value, dict) and isinstance(value.get("at"), datetime) else None


def _remember_sweep(every: float | None) -> None:
    try:
        cache.set(LAST_SWEEP_KEY, {"at": timezone.now(), "every": every}, timeout=None)
    except Exception:  # never let the cache stop a sweep
        logger.warning("could not write the sweep's time to the cache", exc_info=True)


def sweep(*, batch_size: int | None = None, store: OperationStore | None = None,
          every: float | None = None) -> SweepReport:
    """Recover one bounded batch of abandoned operations; expire and purge old rows.

    ``every``: the seconds until the caller sweeps again (``guarded_tools_sweep --loop``),
    written with the sweep's time for the operation page; a beat schedule is read there.
    """
    store = store or gt_settings.STORE_CLASS()
    report = SweepReport()
    _remember_sweep(every)
    for claim in take_batch(store, batch_size or gt_settings.SWEEP_BATCH_SIZE):
        report.taken += 1
        try:
            report.add(recover_claimed(claim.operation, claim, store))
        except Exception as exc:  # the next sweep will see it again once its lease expires
            logger.exception("sweep: operation %s", claim.operation.pk)
            report.errors.append(f"{claim.operation.pk}: {type(exc).__name__}")
    report.confirmations_expired = expire_confirmations()
    report.purged = purge_completed()
    return report


__all__ = ["SweepReport", "sweep"]
