"""Provides MCP tasks (the Tasks extension): an id bound to one call, read from its own rows.

A task id is an opaque random token stored on the confirmation the task waits on (for a
long-running tool, the approved request its worker runs): it says nothing of the call,
its principal or its input. Its state is what the call's confirmation and operation rows
say, so it survives any restart, and a poll costs one indexed read of the id while the
call waits, then the call's rows, then the replay cache. An id names a task only for its
own principal: another principal's id reads exactly as an unknown or forged one. Every
read (``tasks/get``, ``tasks/cancel``) is authorized as the call's replay would be.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import router
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now
from django.utils import timezone

from guarded_tools.core.definition import Tool
from guarded_tools.core.errors import GuardError
from guarded_tools.models import (
    Confirmation,
    ConfirmationStatus,
    Operation,
    OperationState,
)
from guarded_tools.store import fingerprint
from guarded_tools.store.replays import replays

EXTENSION = "io.modelcontextprotocol/tasks"
#: Longer ids are refused before any lookup (an id is 43 characters).
MAX_TASK_ID = 64

WORKING, COMPLETED, FAILED, CANCELLED = "working", "completed", "failed", "cancelled"
#: What a person (or the expiry) decided: the call never ran.
_DECIDED = (ConfirmationStatus.DECLINED, ConfirmationStatus.EXPIRED)
#: Errors that end a task ``failed`` (a JSON-RPC error): decisions the guard owns, and an
#: internal error, an approved run's authorization refusal. Any other error is the tool's
#: own answer: ``completed`` with ``isError``.
FAILING_CODES = frozenset({"confirmation_declined", "confirmation_expired", "outcome_unknown",
                           "verification_failed", "internal_error", "authorization_denied",
                           "not_authenticated"})
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
    #: The opaque id (``Confirmation.task_id``).
    task_id: str = ""
    #: The call's input, which a read of the task is authorized with.
    input: Mapping[str, Any] = field(default_factory=dict, compare=False)
    #: The confirmation row as the id's lookup read it (with ``lapsed``), for this poll only.
    row: Confirmation | None = field(default=None, compare=False, repr=False)


#: Task ids this process gave or resolved, and their calls: what an id names never changes,
#: so a poll reads only the call's rows (and a finished call's, not even those).
_KNOWN: OrderedDict[str, TaskRef] = OrderedDict()
_KNOWN_MAX = 1024
_KNOWN_LOCK = threading.Lock()


def _remember(ref: TaskRef) -> TaskRef:
    with _KNOWN_LOCK:
        _KNOWN[ref.task_id] = dataclasses.replace(ref, row=None)
        _KNOWN.move_to_end(ref.task_id)
        while len(_KNOWN) > _KNOWN_MAX:
            _KNOWN.popitem(last=False)
    return ref


def _known(task_id: str) -> TaskRef | None:
    with _KNOWN_LOCK:
        return _KNOWN.get(task_id)


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
    #: Whether the call waits for a person's decision: polls then come at a person's pace.
    waits_for_person: bool = False


def new_ref(definition: Tool, scope: str, key: str, fingerprint: str,
            confirmation: Confirmation) -> TaskRef:
    """The task waiting on ``confirmation``: the same id for every task of the same request."""
    return _remember(TaskRef(definition.name, scope, key, fingerprint, confirmation.created_at,
                             str(confirmation.pk), _task_id(confirmation),
                             dict(confirmation.input)))


def _task_id(confirmation: Confirmation) -> str:
    """The request's task id, given once (a compare-and-set: concurrent calls agree)."""
    if confirmation.task_id:
        return confirmation.task_id
    rows = Confirmation.objects.using(router.db_for_write(Confirmation))
    rows.filter(pk=confirmation.pk, task_id__isnull=True).update(
        task_id=secrets.token_urlsafe(32))
    confirmation.task_id = rows.filter(pk=confirmation.pk).values_list(
        "task_id", flat=True).get()
    return str(confirmation.task_id)


def resolve(task_id: Any, user: Any) -> tuple[TaskRef, Tool] | None:
    """The call behind ``task_id`` and its tool, when it is a task of ``user``'s, else None."""
    from guarded_tools.core.registry import registry
    from guarded_tools.pipeline.gateway import Gateway

    if not isinstance(task_id, str) or not task_id or len(task_id) > MAX_TASK_ID:
        return None
    ref = _known(task_id) or _look_up(task_id)
    definition = registry.find(ref.tool) if ref is not None else None
    if ref is None or definition is None:
        return None
    scope = Gateway(definition).scope_of(user)
    if scope is None or ref.scope != scope:
        return None  # another principal's task reads as an unknown one
    return ref, definition


def _look_up(task_id: str) -> TaskRef | None:
    # From the primary: a replica behind it could miss the task just created.
    row = _rows().filter(task_id=task_id).first()
    if row is None:
        return None
    # The call's own fingerprint (the row's may be only its intent's, ``intent=``).
    return _remember(TaskRef(row.tool, row.scope, row.key, fingerprint(row.input),
                             row.created_at, str(row.pk), task_id, dict(row.input), row))


def _rows() -> Any:
    """Confirmations from the primary, each with ``lapsed`` on the database's clock."""
    return Confirmation.objects.using(router.db_for_write(Confirmation)).annotate(
        lapsed=ExpressionWrapper(Q(expires_at__lte=Now()), output_field=BooleanField()))


def authorize(ref: TaskRef, definition: Tool, request: Any) -> None:
    """Refuse a read of the task (``tasks/get``, ``tasks/cancel``) its call's replay would be
    refused: the token's scopes, the permissions, ``authorize``, with the call's input."""
    from guarded_tools.pipeline import Invocation
    from guarded_tools.pipeline.gateway import Gateway

    Gateway(definition).authorize_read(
        Invocation(input=ref.input, user=request.user, request=request, transport="mcp"))


def _confirmation(ref: TaskRef) -> Confirmation | None:
    """The confirmation this task waits on (by its primary key), with ``lapsed`` on the DB clock.

    Its own, not the call's latest: after a cancel, the same call asks anew as another task.
    """
    if ref.row is not None:
        return ref.row  # read by this poll's lookup of the id
    if not ref.confirmation_id:
        return None
    # From the primary (as the guard reads it): a replica could miss the decision.
    return _rows().filter(pk=ref.confirmation_id, tool=ref.tool, scope=ref.scope,
                          key=ref.key).first()


def _operation(ref: TaskRef) -> Operation | None:
    return (
        Operation.objects.using(router.db_for_write(Operation))
        .filter(tool=ref.tool, scope=ref.scope, key=ref.key, fingerprint=ref.fingerprint)
        .first()
    )


def _from_operation(ref: TaskRef, operation: Operation, gateway: Any) -> TaskState:
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
                     operation.updated_at, error=gateway.stored_error(operation))


def state(ref: TaskRef, definition: Tool) -> TaskState | None:
    """The task's state now, or None when nothing of its call is stored (any more)."""
    from guarded_tools.confirmations.queue import error_for
    from guarded_tools.pipeline.gateway import Gateway

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
                             " run yet.", changed, waits_for_person=True)
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
                return _from_operation(ref, operation, Gateway(definition))
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
        return _from_operation(ref, operation, Gateway(definition))
    return TaskState(WORKING, "The call is running.", operation.updated_at)


class CancelRefused(Exception):
    """The task cannot be cancelled now; the message says why."""


def cancel(ref: TaskRef, user: Any) -> None:
    """Withdraw the task's confirmation while its call has not started, or say why not."""
    from guarded_tools.confirmations.queue import withdraw

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
    from guarded_tools.confirmations.requests import requested
    from guarded_tools.pipeline.gateway import Gateway
    from guarded_tools.store import db_now_plus

    gateway = Gateway(definition)
    # The stages before the claim (not run(): its lifecycle events belong to the call that
    # executes, on the worker); a call its key already answers goes on as usual.
    call = gateway.prepare(inv)
    if (call.remembered is not None or not definition.idempotent
            or _operation_of(definition.name, inv)):
        return gateway.proceed(call)
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

