"""Backfills the history of operations recorded before it existed (0012).

An operation made before 0012 has no ``OperationEvent`` row, so its timeline would be
empty after the upgrade. This writes, for each such operation, what its own rows still
say, in the order it happened: its claim, each journal entry, each audit row that names
it (decisions, recoveries, approvals) and the state it ended in. Each event is marked
``{"backfilled": true}`` (the console says so), and none is written for an operation
that has events already, so running it again, or after new calls, adds nothing.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

BATCH = 500

#: The audit actions and the events they become (kind, the decision's words).
AUDIT_EVENTS = {
    "approve": ("confirmation_approved", None),
    "decline": ("confirmation_declined", None),
    "withdraw": ("decision", "withdrew confirmation"),
    "mark_succeeded": ("decision", "marked operation succeeded"),
    "mark_not_executed": ("decision", "marked operation not executed"),
    "mark_failed": ("decision", "marked operation failed"),
    "recover": ("recovered", None),
}
#: The state an operation ended in, and the event that says so (none while in flight).
FINAL_EVENTS = {
    "succeeded": "succeeded",
    "released": "released",
    "abandoned": "abandoned",
    "outcome_unknown": "outcome_unknown",
}


def username(user: Any) -> str:
    return str(getattr(user, "username", "") or user.pk)[:200] if user is not None else ""


def audit_event(entry: Any) -> tuple[str, str, dict[str, Any]] | None:
    kind, decision = AUDIT_EVENTS.get(entry.action, (None, None))
    if kind is None:
        return None
    details: dict[str, Any] = {"backfilled": True}
    if decision:
        details.update(decision=decision, note=entry.note[:1000] or None)
    elif kind == "recovered":
        details.update(by="operator" if entry.actor_id else "sweep", outcome=entry.status or "?")
    elif entry.note:
        details["reason"] = entry.note[:1000]
    actor = username(entry.actor) if entry.actor_id else ("sweep" if kind == "recovered" else "")
    return kind, actor, {k: v for k, v in details.items() if v is not None}


def events_of(operation: Any, journal: list[Any], audit: list[Any]) -> list[tuple[Any, ...]]:
    """(at, place, kind, actor, fence, details) for one operation, unsorted: the claim
    first (place 0), the journal and the audit rows by their times (1), the end last (2)."""
    agent = f"agent {username(operation.user)}"[:200] if operation.user_id else ""
    found = [(operation.created_at, 0, "claimed", agent, 1, {"backfilled": True})]
    for entry in journal:
        kind = "late_result" if entry.kind == "late_result" else "journal"
        details = {"backfilled": True, "data": entry.data, "removed": entry.removed or None}
        found.append((entry.created_at, 1, kind, agent, entry.fence,
                      {k: v for k, v in details.items() if v is not None}))
    for entry in audit:
        made = audit_event(entry)
        if made is not None:
            found.append((entry.created_at, 1, made[0], made[1], operation.fence, made[2]))
    final = FINAL_EVENTS.get(operation.state)
    if final:
        at = operation.completed_at or operation.updated_at
        found.append((at, 2, final, agent if final == "succeeded" else "", operation.fence,
                      {"backfilled": True}))
    return found


def backfill(apps: Any, schema_editor: Any) -> None:
    Operation = apps.get_model("guarded_tools", "Operation")
    OperationEvent = apps.get_model("guarded_tools", "OperationEvent")
    JournalEntry = apps.get_model("guarded_tools", "JournalEntry")
    AuditEntry = apps.get_model("guarded_tools", "AuditEntry")
    using = schema_editor.connection.alias
    pending = (Operation.objects.using(using).filter(events__isnull=True)
               .select_related("user").order_by("created_at", "pk"))
    ids = list(pending.values_list("pk", flat=True))
    for start in range(0, len(ids), BATCH):
        chunk = ids[start:start + BATCH]
        operations = pending.filter(pk__in=chunk)
        journal: dict[Any, list[Any]] = {}
        for entry in JournalEntry.objects.using(using).filter(
                operation_id__in=chunk).order_by("id"):
            journal.setdefault(entry.operation_id, []).append(entry)
        audit: dict[Any, list[Any]] = {}
        for entry in AuditEntry.objects.using(using).filter(
                operation_id__in=chunk).select_related("actor").order_by("created_at", "id"):
            audit.setdefault(entry.operation_id, []).append(entry)
        rows = []
        for operation in operations:
            found = events_of(operation, journal.get(operation.pk, []),
                              audit.get(operation.pk, []))
            for at, _, kind, actor, fence, details in sorted(found, key=lambda e: (e[1], e[0])):
                rows.append(OperationEvent(operation_id=operation.pk, at=at, kind=kind,
                                           actor=actor, fence=fence, details=details))
        OperationEvent.objects.using(using).bulk_create(rows, batch_size=BATCH)


class Migration(migrations.Migration):

    dependencies = [
        ("guarded_tools", "0015_audit_recoveries_index"),
    ]

    operations = [
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]
