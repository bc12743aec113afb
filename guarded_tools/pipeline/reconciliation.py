"""Provides reconciliation: a person decides what happened to an operation.

Only operations whose outcome is unknown can be reconciled. Each decision names the
attempt it was made on (the operation's fence when the person looked at it) and is a
compare-and-set on state and fence: a decision prepared on an earlier attempt is refused
once the operation moved on. It needs ``reconcile_operation`` and writes an audit row;
replays afterwards return what the person decided, and ``verify`` never re-judges it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import router, transaction
from django.db.models import Count, Min
from django.db.models.functions import Now
from django.utils import timezone

from guarded_tools.conf import gt_settings
from guarded_tools.core.catalog import is_code
from guarded_tools.core.definition import build_pipeline
from guarded_tools.core.errors import MalformedRequest
from guarded_tools.core.registry import registry
from guarded_tools.core.schema.validation import compile_schema, parse_json
from guarded_tools.models import (
    AuditEntry,
    JournalEntry,
    Operation,
    OperationEvent,
    OperationState,
    ReleaseReason,
    record_in_admin_history,
)
from guarded_tools.store import JSON_ENCODER, storable_json
from guarded_tools.store.counting import RowCount, count_up_to
from guarded_tools.store.history import Kind, record

__all__ = ["ReconcileRefused", "mark_failed", "mark_not_executed", "mark_succeeded"]

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
    operation: Operation, user: Any, action: str, note: str, fence: int, **changes: Any
) -> Operation:
    _check(user)
    if not note.strip():
        raise ReconcileRefused("A note is required: say how you established the outcome.")
    using = router.db_for_write(Operation)
    with transaction.atomic(using=using):
        # What the decision replaces (the stored output and error), kept in its audit row.
        before = Operation.objects.using(using).unknown().filter(
            pk=operation.pk, fence=fence).values("output", "error").first()
        updated = Operation.objects.using(using).unknown().filter(
            pk=operation.pk, fence=fence
        ).update(owner="", lease_expires_at=None, updated_at=Now(), **changes)
        if not updated:
            raise ReconcileRefused(_moved_on(operation, fence))
        if changes.get("state") == OperationState.RELEASED:
            # The person's decision replaces the journal's evidence: the next attempt
            # starts with an empty journal, which is what lets it be released again if it
            # fails before its effect. The entries stay, marked removed, for the record.
            removed = JournalEntry.objects.live(operation.pk).update(removed=True)
            if removed:
                record(operation, Kind.JOURNAL_REMOVED, user, fence=fence, entries=removed,
                       by=f"a person's decision ({AuditEntry.Action(action).label})")
        record(operation, Kind.DECISION, user, fence=fence,
               decision=str(AuditEntry.Action(action).label), note=note, state=changes["state"],
               reason=changes.get("release_reason"))
        AuditEntry.objects.create(
            actor=user,
            action=action,
            operation_id=operation.pk,
            note=note,
            status=changes["state"],
            data={"fence": fence, "before": before,
                  **{k: v for k, v in changes.items() if k in ("output", "error")}},
        )
        record_in_admin_history(
            user, operation, f"{AuditEntry.Action(action).label.capitalize()}"
            f" (attempt {fence}): {note}")
    operation.refresh_from_db(using=using)
    return operation


def _moved_on(operation: Operation, fence: int) -> str:
    """Why a decision made on attempt ``fence`` no longer applies, in the operator's words."""
    current = Operation.objects.using(router.db_for_write(Operation)).filter(
        pk=operation.pk
    ).values("state", "fence").first()
    if current is None:
        return "This operation no longer exists."
    state = OperationState(current["state"]).label
    if current["fence"] != fence:
        return (
            f"This operation moved on since the decision was prepared (on fence {fence};"
            f" it is now on fence {current['fence']}, {state}): nothing was changed."
            " Reopen it from the list, look at the new attempt's evidence and decide again."
        )
    return (
        f"This operation is not waiting for reconciliation: it is {state}"
        " (someone else may have decided it). Nothing was changed."
    )


def parse_output(text: str) -> Any:
    """``text`` parsed by the strict parser agents get, within their limits.

    No NaN or Infinity, no duplicate keys, no NUL, nesting and size bounded
    (``MAX_JSON_DEPTH``, ``MAX_BODY_BYTES``); ``ReconcileRefused`` says what is wrong.
    """
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) > gt_settings.MAX_BODY_BYTES:
        raise ReconcileRefused(f"The output is over {gt_settings.MAX_BODY_BYTES} bytes.")
    try:
        return parse_json(raw, max_depth=gt_settings.MAX_JSON_DEPTH)
    except MalformedRequest as exc:
        problem = exc.raw_message.replace("The request body", "The output")
    try:  # where plain JSON parsing stops, when it does: the person fixes it there
        json.loads(text)
    except json.JSONDecodeError as exc:
        problem += f" ({exc.msg}: line {exc.lineno}, column {exc.colno})"
    except (ValueError, RecursionError):
        pass
    else:
        if problem.endswith("not valid JSON."):
            problem += " NaN, Infinity and numbers beyond a double's range are not JSON."
    raise ReconcileRefused(problem)


#: A typed value to start from, per JSON Schema type.
_START = {"string": "", "integer": 0, "number": 0, "boolean": False, "array": [],
          "null": None}


def output_skeleton(schema: Any, depth: int = 0) -> Any:
    """A value of ``schema``'s shape to start a "Mark succeeded" output from: its
    required properties, each typed (the first of an ``enum``, a ``const``, a nested
    object's own required fields), so the person types values, not the shape."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        return {name: output_skeleton(props.get(name), depth + 1)
                for name in schema.get("required") or () if isinstance(name, str)}
    return _START.get(kind) if isinstance(kind, str) else None


def _has_blank(value: Any) -> bool:
    """Whether ``value`` holds a blank a form fills in: "", 0, an empty list or null."""
    if isinstance(value, dict):
        return any(_has_blank(v) for v in value.values())
    if isinstance(value, bool):
        return False
    return value in ("", 0, None) or value == []


def is_placeholder(schema: Any, output: Any) -> bool:
    """Whether ``output`` is the blank shape of ``schema`` (``output_skeleton``: its
    required fields as "" and 0), not a value anything produced. A shape with no blank
    in it (a boolean, an enum's first value, a constant) may be a real result: never
    refused as a placeholder."""
    skeleton = output_skeleton(dict(schema)) if isinstance(schema, Mapping) else None
    if skeleton is None or not _has_blank(skeleton):
        return False
    try:
        return json.dumps(output, sort_keys=True) == json.dumps(skeleton, sort_keys=True)
    except (TypeError, ValueError):
        return False


#: Why a placeholder is refused, in the person's words.
PLACEHOLDER = ("This is the output's blank shape (\"\" and 0 in its required fields), not what"
               " the operation produced: replays would hand it to the agent as the result."
               " Enter the values the evidence shows.")


def output_refusal(operation: Operation, output: Any) -> str | None:
    """Why ``output`` cannot be what replays of ``operation`` return (None when it can):
    not strict JSON, the untouched placeholder, or not valid against the output schema."""
    problem = json_problem(output)
    if problem:
        return problem
    definition = registry.find(operation.tool)
    schema = definition.output_schema if definition is not None else None
    if is_placeholder(schema, output):
        return PLACEHOLDER
    problems = output_problems(operation, output)
    if problems:
        return "The output does not match the tool's output schema: " + "; ".join(problems)
    return None


def output_to_start_from(operation: Operation) -> Any:
    """The output the evidence holds, for a "Mark succeeded" form to start from: the
    stored one (what ``verify`` refused), else the latest late result's (an owner that
    lost its lease had produced it); None when there is none (the form starts empty)."""
    if operation.output is not None:
        return operation.output
    late = JournalEntry.objects.filter(
        operation_id=operation.pk, kind=JournalEntry.Kind.LATE_RESULT
    ).order_by("-id").values_list("data", flat=True).first()
    return late.get("output") if isinstance(late, dict) else None


def json_problem(output: Any) -> str | None:
    """Why ``output`` is not strict JSON an agent could be sent (see ``parse_output``)."""
    try:
        parse_output(JSON_ENCODER.encode(output))
    except (TypeError, ValueError, RecursionError):
        return ("The output is not JSON: use only objects, arrays, strings, finite numbers,"
                " true, false and null.")
    except ReconcileRefused as exc:
        return str(exc)
    return None


def mark_succeeded(
    operation: Operation, user: Any, output: Any, note: str, *, fence: int
) -> Operation:
    """The effect happened: store ``output`` for every replay. It must be strict JSON,
    valid against the tool's output schema and not its blank placeholder
    (``output_refusal``): a person records what they found, never a made-up result.

    ``fence`` is the attempt the person decided on (``operation.fence`` as they saw it).
    """
    _check(user)
    refusal = output_refusal(operation, output)
    if refusal:
        raise ReconcileRefused(refusal)
    return _decide(
        operation, user, AuditEntry.Action.MARK_SUCCEEDED, note, fence,
        state=OperationState.SUCCEEDED, output=storable_json(output), error=None,
        completed_at=Now(), reconciled=True,  # final: replays never re-judge it
    )


def mark_not_executed(operation: Operation, user: Any, note: str, *, fence: int) -> Operation:
    """The effect never happened: release the key so the next call runs it, and give back
    what the attempt's claim reserved (its budgets) in the same transaction, as every
    release does: the retry reserves again, and the effect counts once."""
    with transaction.atomic(using=router.db_for_write(Operation)):
        released = _decide(operation, user, AuditEntry.Action.MARK_NOT_EXECUTED, note, fence,
                           state=OperationState.RELEASED,
                           release_reason=ReleaseReason.NOT_EXECUTED)
        definition = registry.find(released.tool)
        if definition is not None:
            build_pipeline(definition).released_by_a_person(released, fence)
    return released


def mark_failed(
    operation: Operation, user: Any, note: str, *, fence: int, code: str = "operation_failed",
    message: str = "The operation failed and was reconciled by a person.",
) -> Operation:
    """Terminal failure: every replay returns this error (retry never)."""
    if not is_code(code):
        raise ReconcileRefused(
            "The error code is 1-64 lowercase letters, digits or '_', starting with a letter."
        )
    return _decide(
        operation, user, AuditEntry.Action.MARK_FAILED, note, fence,
        state=OperationState.FAILED,
        error={"code": code, "message": message[:500], "status": 409},
        completed_at=Now(),
    )


@dataclass(frozen=True)
class Event:
    """One thing that happened to an operation, for its timeline (an ``OperationEvent``)."""

    at: datetime
    kind: str
    title: str
    detail: str = ""
    fence: int | None = None
    actor: str = ""
    data: Any = None
    failure: dict[str, Any] | None = None  # what failed: message, correlation id, trace link
    evidence: tuple[str, str] | None = None  # where a journal entry's reference lives


#: The most events one timeline shows (the oldest first).
TIMELINE_ROWS = 200


def timeline(operation: Operation) -> list[Event]:
    """``operation``'s history as recorded (``OperationEvent``), in recording order.

    One query; each row kept forever: claims, attempts' journal writes and removals,
    releases, abandonments, takeovers and recoveries, outcomes, approvals, decisions.
    """
    definition = registry.find(operation.tool)
    rows = OperationEvent.objects.filter(operation_id=operation.pk).order_by("id")
    return [_event(row, operation, definition) for row in rows[:TIMELINE_ROWS]]


def _event(row: OperationEvent, operation: Operation, definition: Any) -> Event:
    details = row.details if isinstance(row.details, dict) else {}
    title, detail, data = row.get_kind_display(), "", None
    failure = evidence = None
    if row.kind in (Kind.JOURNAL, Kind.LATE_RESULT):
        data = details.get("data")
        evidence = journal_evidence(data, operation, definition)
    elif row.kind == Kind.JOURNAL_REMOVED:
        title = f"Journal entries removed ({details.get('entries', '?')})"
        detail = f"by {details.get('by', '?')}"
    elif row.kind == Kind.RELEASED and details.get("reason"):
        title = f"Released: {release_reason_label(details['reason'])}"
    elif row.kind == Kind.RECOVERED:
        title = f"Recovery by the {details.get('by', 'sweep')}: {details.get('outcome', '?')}"
    elif row.kind == Kind.DECISION:
        title = str(details.get("decision", title)).capitalize()
        detail = str(details.get("note", ""))
    elif row.kind in (Kind.CONFIRMATION_APPROVED, Kind.CONFIRMATION_DECLINED):
        # Who decided is the row's WHO; one approval of several says where the request stands.
        detail = "; ".join(str(details[k]) for k in ("approvals", "reason") if details.get(k))
    elif row.kind in (Kind.ALLOWANCE_USED, Kind.ALLOWANCE_RETURNED):
        # "ran under allowance #12, granted by approver and approver2"
        detail = str(details.get("said", ""))
    elif row.kind == Kind.OUTCOME_UNKNOWN:
        detail = ", ".join(f"{k}: {details[k]}" for k in ("failure", "recover", "reason")
                           if details.get(k))
        failure = _failure(details)
    if details.get("backfilled"):  # written by migration 0016 from the rows kept before
        detail = f"{detail} ({BACKFILLED})" if detail else BACKFILLED
    return Event(at=row.at, kind=row.kind, title=title, detail=detail, fence=row.fence,
                 actor=row.actor, data=data, failure=failure, evidence=evidence)


def release_reason_label(reason: str) -> str:
    """A release reason in words (an unknown value as it is stored)."""
    try:
        return str(ReleaseReason(reason).label)
    except ValueError:
        return reason


#: How the timeline marks an event written after the fact from the operation's own rows.
BACKFILLED = "recorded on upgrade, from the operation's rows"


def _failure(details: dict[str, Any]) -> dict[str, Any] | None:
    """What failed, as the event keeps it, with the site's link to its trace."""
    if not details.get("correlation_id"):
        return None
    trace_id = details.get("trace_id") or ""
    template = str(gt_settings.CONSOLE_TRACE_URL or "")
    url = template.format(trace_id=trace_id, correlation_id=details["correlation_id"]) \
        if template and (trace_id or "{trace_id}" not in template) else ""
    return {"message": details.get("message") or "", "correlation_id": details["correlation_id"],
            "trace_id": trace_id, "url": url}


def journal_evidence(data: Any, operation: Operation, definition: Any) -> tuple[str, str] | None:
    """The tool's ``evidence`` hook's ``(label, url)`` for a journal entry's ``reference``."""
    hook = getattr(definition, "evidence", None)
    reference = data.get("reference") if isinstance(data, dict) else None
    if hook is None or reference is None:
        return None
    try:
        found = hook(reference=reference, operation=operation)
    except Exception:  # the page shows the entry without it
        return ("the tool could not say where this reference lives", "")
    if isinstance(found, (tuple, list)) and found:
        return (str(found[0]), str(found[1]) if len(found) > 1 and found[1] else "")
    return (str(found), "") if found else None


def effect_may_have_happened(operation: Operation) -> list[Any]:
    """The live journal entries of ``operation``: any means its effect may have happened."""
    return list(JournalEntry.objects.live(operation.pk).order_by("id").values_list(
        "data", flat=True)[:10])


#: What each state's tile counts, in words (each the count of the list it links to).
DASHBOARD_LABELS: dict[str, str] = {
    OperationState.IN_FLIGHT: "in flight (running now, lease live)",
    OperationState.ABANDONED: "abandoned (lease expired, waiting for recovery)",
    OperationState.SUCCEEDED: "succeeded",
    OperationState.FAILED: "failed (decided by a person)",
    OperationState.RELEASED: "released (not run: proven, or waiting for approval)",
}


#: The states a person acts on: counted exactly, however many (few, and indexed by
#: state). The others are counted up to ``CONSOLE_COUNT_EXACTLY_UP_TO`` and estimated
#: past it: at a million rows, counting every succeeded call is most of the page's time.
COUNTED_EXACTLY = (OperationState.IN_FLIGHT, OperationState.ABANDONED,
                   OperationState.OUTCOME_UNKNOWN)


def dashboard() -> dict[str, Any]:
    """Counts by state, oldest running age, unknown outcomes, recoveries in a day.

    An operation in flight past its lease is abandoned (nobody runs it any more): it is
    counted with the abandoned ones, as the list filtered by ``lease=expired`` shows it.
    """
    exact = dict(Operation.objects.filter(state__in=COUNTED_EXACTLY).order_by()
                 .values_list("state").annotate(n=Count("*")))  # from the index alone
    expired = Operation.objects.in_flight().filter(lease_expires_at__lt=Now()).count()
    exact[OperationState.IN_FLIGHT] = exact.get(OperationState.IN_FLIGHT, 0) - expired
    exact[OperationState.ABANDONED] = exact.get(OperationState.ABANDONED, 0) + expired
    counts: dict[str, RowCount] = {state: RowCount(exact.get(state, 0))
                                   for state in COUNTED_EXACTLY}
    for state in OperationState.values:
        if state not in counts:
            counts[state] = count_up_to(Operation.objects.filter(state=state))
    now = timezone.now()
    oldest = Operation.objects.running().aggregate(oldest=Min("created_at"))["oldest"]
    return {
        "by_state": [
            (value, DASHBOARD_LABELS.get(value, str(label)), counts[value])
            for value, label in OperationState.choices
            if value != OperationState.OUTCOME_UNKNOWN  # shown on its own, as an alert
        ],
        "oldest_in_flight_age": (now - oldest) if oldest else None,
        "unknown": counts[OperationState.OUTCOME_UNKNOWN].n,
        # What the audit trail shows: every recovery (by the sweep, a caller's retry or
        # a person's "Recover now"), whatever it decided.
        "recovered_last_day": AuditEntry.objects.filter(
            action=AuditEntry.Action.RECOVER, created_at__gte=now - timedelta(days=1)
        ).count(),
        "recovered_since": now - timedelta(days=1),
    }
