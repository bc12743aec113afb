"""Provides reconciliation: a person decides what happened to an operation.

Only operations whose outcome is unknown can be reconciled. Each decision is a
compare-and-set on the state, needs ``reconcile_operation``, and writes an audit
row; replays afterwards return what the person decided.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import router, transaction
from django.db.models import Count, Min
from django.db.models.functions import Now
from django.utils import timezone

from guarded_tools.catalog import is_code
from guarded_tools.models import AuditEntry, JournalEntry, Operation, OperationState
from guarded_tools.registry import registry
from guarded_tools.store import storable_json
from guarded_tools.validation import compile_schema

RECONCILE_PERMISSION = "guarded_tools.reconcile_operation"


class ReconcileRefused(Exception):
    """The person may not make this decision, or the operation is not waiting for one."""


def _check(user: Any) -> None:
    if not getattr(user, "is_authenticated", False) or not user.has_perm(RECONCILE_PERMISSION):
        raise ReconcileRefused("You do not have permission to reconcile operations.")


def output_problems(operation: Operation, output: Any) -> list[str]:
    """Why ``output`` does not match the tool's output schema (empty when it does)."""
    definition = registry.find(operation.tool)
    if definition is None or definition.output_schema is None:
        return []
    validator = compile_schema(dict(definition.output_schema), name=definition.name)
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
        for e in validator.iter_errors(output)
    ][:10]


def _decide(
    operation: Operation, user: Any, action: str, note: str, **changes: Any
) -> Operation:
    _check(user)
    if not note.strip():
        raise ReconcileRefused("A note is required: say how you established the outcome.")
    with transaction.atomic(using=router.db_for_write(Operation)):
        updated = Operation.objects.unknown().filter(pk=operation.pk).update(
            owner="", lease_expires_at=None, updated_at=Now(), **changes
        )
        if not updated:
            raise ReconcileRefused("This operation is not waiting for reconciliation.")
        if changes.get("state") == OperationState.RELEASED:
            # The person's decision replaces the journal's evidence: the next attempt
            # starts with an empty journal, which is what lets it be released again if it
            # fails before its effect. The entries stay, marked removed, for the record.
            JournalEntry.objects.live(operation.pk).update(removed=True)
        AuditEntry.objects.create(
            actor=user,
            action=action,
            operation_id=operation.pk,
            note=note,
            data={k: v for k, v in changes.items() if k in ("output", "error")},
        )
    operation.refresh_from_db(using=router.db_for_write(Operation))
    return operation


def mark_succeeded(operation: Operation, user: Any, output: Any, note: str) -> Operation:
    """The effect happened: store ``output`` (validated) for every replay."""
    problems = output_problems(operation, output)
    if problems:
        raise ReconcileRefused("The output does not match the tool's output schema: "
                               + "; ".join(problems))
    return _decide(
        operation, user, AuditEntry.Action.MARK_SUCCEEDED, note,
        state=OperationState.SUCCEEDED, output=storable_json(output), error=None,
        completed_at=Now(),
    )


def mark_not_executed(operation: Operation, user: Any, note: str) -> Operation:
    """The effect never happened: release the key so the next call runs it."""
    return _decide(operation, user, AuditEntry.Action.MARK_NOT_EXECUTED, note,
                   state=OperationState.RELEASED)


def mark_failed(
    operation: Operation, user: Any, note: str, *, code: str = "operation_failed",
    message: str = "The operation failed and was reconciled by a person.",
) -> Operation:
    """Terminal failure: every replay returns this error (retry never)."""
    if not is_code(code):
        raise ReconcileRefused(
            "The error code is 1-64 lowercase letters, digits or '_', starting with a letter."
        )
    return _decide(
        operation, user, AuditEntry.Action.MARK_FAILED, note,
        state=OperationState.FAILED,
        error={"code": code, "message": message[:500], "status": 409},
        completed_at=Now(),
    )


def dashboard() -> dict[str, Any]:
    """Counts by state, oldest in-flight age, unknown outcomes, recoveries in a day."""
    counts = dict(
        Operation.objects.order_by().values_list("state").annotate(n=Count("pk"))
    )
    now = timezone.now()
    oldest = Operation.objects.in_flight().aggregate(oldest=Min("created_at"))["oldest"]
    return {
        "by_state": [
            (label, counts.get(value, 0))
            for value, label in OperationState.choices
            if value != OperationState.OUTCOME_UNKNOWN  # shown on its own, as an alert
        ],
        "oldest_in_flight_age": (now - oldest) if oldest else None,
        "unknown": counts.get(OperationState.OUTCOME_UNKNOWN, 0),
        "recovered_last_day": Operation.objects.filter(
            recovered=True, completed_at__gte=now - timedelta(days=1)
        ).count(),
    }
