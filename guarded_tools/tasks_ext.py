"""Provides MCP tasks (the Tasks extension): an id bound to one call, read from its own rows.

A task id is a signed handle on ``(tool, principal scope, key, fingerprint)``: the call,
not a row of its own. Its state is what the call's confirmation and operation rows say,
so it survives any restart and needs no table, and a poll costs one indexed read while
the call waits, two the first time after it ended, then the replay cache. The signature
makes ids unguessable, and the scope in it binds a task to its principal: another
principal's id reads exactly as an unknown one.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.core import signing
from django.db import router
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now
from django.utils import timezone

from guarded_tools.exceptions import GuardError
from guarded_tools.models import (
    Confirmation,
    ConfirmationStatus,
    Operation,
    OperationState,
)
from guarded_tools.registry import Tool
from guarded_tools.replays import replays

EXTENSION = "io.modelcontextprotocol/tasks"
SALT = "guarded_tools.mcp-task"
#: Longer ids are refused before any signature check (a task id is about 200 characters).
MAX_TASK_ID = 2048

WORKING, COMPLETED, FAILED, CANCELLED = "working", "completed", "failed", "cancelled"
#: What a person (or the expiry) decided: the call never ran.
_DECIDED = (ConfirmationStatus.DECLINED, ConfirmationStatus.EXPIRED)
#: Errors that end a task ``failed`` (a JSON-RPC error): decisions the guard owns, and an
#: internal error. Any other error is the tool's own answer: ``completed`` with ``isError``.
FAILING_CODES = frozenset({"confirmation_declined", "confirmation_expired", "outcome_unknown",
                           "verification_failed", "internal_error"})
_TERMINAL_OPERATION = (OperationState.SUCCEEDED, OperationState.FAILED,
                       OperationState.OUTCOME_UNKNOWN)


@dataclass(frozen=True)
class TaskRef:
    """The call a task id names, the confirmation it waits on, and when it was created."""

    tool: str
    scope: str
    key: str
    fingerprint: str
    created_at: dt.datetime
    confirmation_id: str = ""

    @property
    def task_id(self) -> str:
        payload = [self.tool, self.scope, self.key, self.fingerprint,
                   self.created_at.isoformat(), self.confirmation_id]
        # A plain Signer, not dumps()'s timestamped one: the same call is the same id.
        return signing.Signer(salt=SALT).sign_object(payload, compress=True)


@dataclass
class TaskState:
    """What ``tasks/get`` reports: a status, and the result or error once there is one.

    ``result`` is the stored output of a call that succeeded; ``error`` the structured
    error of one that did not (``completed`` with ``isError`` for an application error,
    ``failed`` for a decision the guard owns: declined, expired, outcome unknown).
    """

    status: str
    message: str
    updated_at: dt.datetime
    output: Any = None
    operation: dict[str, Any] | None = None
    recovered: bool = False
    error: GuardError | dict[str, Any] | None = field(default=None)


def new_ref(definition: Tool, scope: str, key: str, fingerprint: str,
            confirmation: Confirmation | None = None) -> TaskRef:
    created = confirmation.created_at if confirmation is not None else timezone.now()
    return TaskRef(definition.name, scope, key, fingerprint, created,
                   str(confirmation.pk) if confirmation is not None else "")


def resolve(task_id: Any, user: Any) -> tuple[TaskRef, Tool] | None:
    """The call behind ``task_id`` and its tool, when it is a task of ``user``'s, else None."""
    from guarded_tools.pipeline import Invocation, get_pipeline
    from guarded_tools.registry import registry

    if not isinstance(task_id, str) or not task_id or len(task_id) > MAX_TASK_ID:
        return None
    try:
        tool, owner, key, fp, created, confirmation_id = signing.Signer(salt=SALT).unsign_object(
            task_id)
        created_at = dt.datetime.fromisoformat(created)
    except (signing.BadSignature, ValueError, TypeError):
        return None
    definition = registry.find(str(tool))
    if definition is None:
        return None
    scope = get_pipeline(definition).scope_of(Invocation(input={}, user=user))
    if scope is None or owner != scope:
        return None  # another principal's task reads as an unknown one
    ref = TaskRef(str(tool), str(owner), str(key), str(fp), created_at, str(confirmation_id))
    return ref, definition


def _confirmation(ref: TaskRef) -> Confirmation | None:
    """The confirmation this task waits on (by its primary key), with ``lapsed`` on the DB clock.

    Its own, not the call's latest: after a cancel, the same call asks anew as another task.
    """
    if not ref.confirmation_id:
        return None
    # From the primary (as the guard reads it): a replica could miss the decision.
    return (
        Confirmation.objects.using(router.db_for_write(Confirmation))
        .filter(pk=ref.confirmation_id, tool=ref.tool, scope=ref.scope, key=ref.key,
                fingerprint=ref.fingerprint)
        .annotate(lapsed=ExpressionWrapper(Q(expires_at__lte=Now()), output_field=BooleanField()))
        .first()
    )


def _operation(ref: TaskRef) -> Operation | None:
    return (
        Operation.objects.using(router.db_for_write(Operation))
        .filter(tool=ref.tool, scope=ref.scope, key=ref.key, fingerprint=ref.fingerprint)
        .first()
    )


def _from_operation(ref: TaskRef, operation: Operation, pipeline: Any) -> TaskState:
    if operation.state == OperationState.SUCCEEDED:
        summary = operation.summary()
        # The call ran elsewhere (a Celery worker): this process answers the next polls,
        # and the agent's replay, from its replay cache (a succeeded row never changes).
        replays.put(ref.tool, ref.scope, ref.key, fingerprint=ref.fingerprint,
                    output=operation.output, operation=summary, recovered=operation.recovered,
                    reconciled=operation.reconciled)
        return TaskState(COMPLETED, "The call ran; this is its result.", operation.updated_at,
                         output=operation.output, operation=summary,
                         recovered=operation.recovered)
    return TaskState(FAILED, "The call ended without a result it can prove.",
                     operation.updated_at, error=pipeline.stored_error(operation))


def state(ref: TaskRef, definition: Tool) -> TaskState | None:
    """The task's state now, or None when nothing of its call is stored (any more)."""
    from guarded_tools.confirmations import error_for
    from guarded_tools.pipeline import get_pipeline

    remembered = replays.get(ref.tool, ref.scope, ref.key)
    if remembered is not None and remembered.fingerprint == ref.fingerprint:
        return TaskState(COMPLETED, "The call ran; this is its result.", timezone.now(),
                         output=remembered.output, operation=dict(remembered.operation),
                         recovered=remembered.recovered)
    confirmation = _confirmation(ref)
    if confirmation is not None:
        status = confirmation.status
        lapsed = bool(getattr(confirmation, "lapsed", False))
        changed = confirmation.decided_at or confirmation.created_at
        if status == ConfirmationStatus.PENDING and not lapsed:
            return TaskState(WORKING, "Waiting for a person to approve the call; nothing has"
                             " run yet.", changed)
        if status == ConfirmationStatus.WITHDRAWN:
            return TaskState(CANCELLED, "Cancelled before the call ran; nothing ran.", changed)
        if status in _DECIDED or (lapsed and status in (ConfirmationStatus.PENDING,
                                                        ConfirmationStatus.APPROVED)):
            if lapsed and status not in _DECIDED:
                confirmation.status = ConfirmationStatus.EXPIRED
            return TaskState(FAILED, "The call was not approved; nothing ran.", changed,
                             error=error_for(confirmation))
        if confirmation.task_error is not None:
            operation = _operation(ref)
            if operation is not None and operation.state in _TERMINAL_OPERATION:
                return _from_operation(ref, operation, get_pipeline(definition))
            error = dict(confirmation.task_error)
            if error.get("code") in FAILING_CODES:
                return TaskState(FAILED, "The call failed.", changed, error=error)
            return TaskState(COMPLETED, "The call was refused or failed; nothing ran.",
                             changed, error=error)
        if status == ConfirmationStatus.APPROVED:
            return TaskState(WORKING, "Approved; the call is about to run.", changed)
    operation = _operation(ref)
    if operation is None:
        return None if confirmation is None else TaskState(
            WORKING, "Approved; the call is starting.", confirmation.created_at)
    if operation.state in _TERMINAL_OPERATION:
        return _from_operation(ref, operation, get_pipeline(definition))
    return TaskState(WORKING, "The call is running.", operation.updated_at)


class CancelRefused(Exception):
    """The task cannot be cancelled now; the message says why."""


def cancel(ref: TaskRef, user: Any) -> None:
    """Withdraw the task's confirmation while its call has not started, or say why not."""
    from guarded_tools.confirmations import withdraw

    confirmation = _confirmation(ref)
    if confirmation is not None:
        if withdraw(confirmation, user, "The agent cancelled its MCP task."):
            return
        confirmation.refresh_from_db(using=router.db_for_write(Confirmation))
        if confirmation.status in (*_DECIDED, ConfirmationStatus.WITHDRAWN):
            raise CancelRefused(f"The task has already ended (its confirmation is"
                                f" {confirmation.status}); there is nothing to cancel.")
    operation = _operation(ref)
    if operation is not None and operation.state in _TERMINAL_OPERATION:
        raise CancelRefused("The task has already ended; read its outcome with tasks/get.")
    raise CancelRefused("The call has started, and a call that has started is never"
                        " interrupted (its effect may be under way): poll tasks/get for its"
                        " result.")


# -- long-running tools: a call handed to Celery as it arrives ------------------------------
class _Ready(Exception):
    """Every stage before the claim passed: the call may be handed over."""


def start(definition: Tool, inv: Any) -> TaskRef | Any:
    """Hand a long-running tool's call to Celery as a task, or answer it as usual.

    Validation, authorization and the key are checked here first (so a refused call is
    refused now, not in the task); a key that already has an operation answers as it
    always does (a replay, in flight, recovery), as a result. Otherwise the request is
    stored as an approved confirmation that a task waits on, and Celery runs it: the
    row is the task's durable state, ``tasks/cancel`` withdraws it until the worker
    takes it (a compare-and-set either way), and the claim is taken only when it runs.
    """
    from django.db import transaction

    from guarded_tools.conf import gt_settings
    from guarded_tools.confirmations import requested
    from guarded_tools.pipeline import _Observer, get_pipeline
    from guarded_tools.store import db_now_plus

    base = type(get_pipeline(definition))

    class Checked(base):  # type: ignore[valid-type,misc]
        def claimed(self, inv: Any, obs: Any, permissions: Any = None) -> Any:
            if permissions is not None:
                self.check_authorization(inv, obs)  # the deferred query, run now
            if _operation_of(definition.name, inv):
                return super().claimed(inv, obs, None)
            raise _Ready()

    try:
        # The stages themselves (not run(): its lifecycle events belong to the call that
        # executes, on the worker), up to the claim.
        return Checked(definition).guarded(inv, _Observer(definition, inv))
    except _Ready:
        pass
    using = router.db_for_write(Confirmation)
    asked = requested(definition, inv)  # the hook's reads, before the transaction
    with transaction.atomic(using=using):
        confirmation = Confirmation.objects.using(using).create(
            tool=definition.name, scope=inv.scope, key=inv.key or "",
            fingerprint=inv.fingerprint, input=dict(inv.input),
            status=ConfirmationStatus.APPROVED, task=True, **asked,
            reason="Runs as an MCP task (a long-running tool); nobody needs to approve it.",
            expires_at=db_now_plus(gt_settings.CONFIRMATION_APPROVAL_TTL_SECONDS),
        )
        from guarded_tools.tasks import enqueue_execute_approved

        pk = str(confirmation.pk)
        transaction.on_commit(lambda: enqueue_execute_approved(pk), using=using)
    confirmation.refresh_from_db(using=using)
    return new_ref(definition, inv.scope, inv.key or "", inv.fingerprint, confirmation)


def _operation_of(tool: str, inv: Any) -> bool:
    return Operation.objects.using(router.db_for_write(Operation)).filter(
        tool=tool, scope=inv.scope, key=inv.key or "").exclude(
        state=OperationState.RELEASED).exists()

