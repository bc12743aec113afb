"""Provides the operation journal, the confirmation queue and the audit trail."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class OperationState(models.TextChoices):
    IN_FLIGHT = "in_flight", _("in flight")
    """A live owner holds the claim and its lease; the handler may be running."""
    ABANDONED = "abandoned", _("abandoned")
    """The handler failed after its effect boundary; recovery decides what happened."""
    SUCCEEDED = "succeeded", _("succeeded")
    """Completed; replays return the stored output."""
    FAILED = "failed", _("failed")
    """Terminal failure (set by a person); replays return the stored error."""
    OUTCOME_UNKNOWN = "outcome_unknown", _("outcome unknown")
    """Recovery could not prove success or non-execution; a person must reconcile."""
    RELEASED = "released", _("released")
    """Proven not executed; the key is fresh again and the next call claims it."""


def unknown_first() -> Case:
    """0 for an operation whose outcome is unknown, 1 for any other: the admin's order."""
    return Case(When(state=OperationState.OUTCOME_UNKNOWN, then=Value(0)), default=Value(1),
                output_field=models.IntegerField())


class CoveringIndex(models.Index):
    """An index that carries ``covering`` columns (``INCLUDE``) where the database has
    covering indexes (PostgreSQL), and is the same index without them elsewhere.

    Django's ``Index(include=...)`` does the same on SQLite but warns (``models.W040``)
    at every ``check --database`` and ``migrate`` of every SQLite site: a reusable app's
    index must not. The model state keeps ``covering``, so ``makemigrations`` sees the
    one index on every database; only the SQL that creates it differs.
    """

    def __init__(self, *expressions: Any, covering: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*expressions, **kwargs)
        self.covering = tuple(covering)

    def deconstruct(self) -> Any:
        path, args, kwargs = super().deconstruct()
        kwargs["covering"] = self.covering
        return path, args, kwargs

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        if not self.covering or not schema_editor.connection.features.supports_covering_indexes:
            return super().create_sql(model, schema_editor, using=using, **kwargs)
        _, args, options = self.deconstruct()
        options["include"] = options.pop("covering")
        return models.Index(*args, **options).create_sql(model, schema_editor, using=using,
                                                         **kwargs)


class OperationQuerySet(models.QuerySet["Operation"]):
    def abandoned(self) -> OperationQuerySet:
        """Claims with no live owner: abandoned, or in flight past their lease (DB clock)."""
        return self.filter(
            Q(state=OperationState.ABANDONED)
            | Q(state=OperationState.IN_FLIGHT, lease_expires_at__lt=Now())
        )

    def unknown(self) -> OperationQuerySet:
        return self.filter(state=OperationState.OUTCOME_UNKNOWN)

    def in_flight(self) -> OperationQuerySet:
        return self.filter(state=OperationState.IN_FLIGHT)

    def running(self) -> OperationQuerySet:
        """In flight with a live lease (DB clock): an owner may still be running it."""
        return self.filter(state=OperationState.IN_FLIGHT, lease_expires_at__gte=Now())

    def completed_before(self, cutoff: Any) -> OperationQuerySet:
        return self.filter(
            state__in=[OperationState.SUCCEEDED, OperationState.RELEASED, OperationState.FAILED],
            updated_at__lt=cutoff,
        )


class Operation(models.Model):
    """One intended operation: a (tool, principal scope, idempotency key) claim."""

    id = models.UUIDField(_("id"), primary_key=True, default=uuid.uuid4, editable=False)
    tool = models.CharField(_("tool"), max_length=200, help_text=_("Registered tool name."))
    scope = models.CharField(
        _("principal scope"),
        max_length=200,
        help_text=_("Whose key this is: keys never cross principals."),
    )
    key = models.CharField(_("idempotency key"), max_length=255)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("principal"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        # Every call inserts an operation. A database constraint would make each commit
        # lock the caller's user row (FOR KEY SHARE): concurrent calls of one principal
        # would contend on it, and a transaction holding that row would stall them.
        # Django still sets this to NULL when the user is deleted (on_delete).
        db_constraint=False,
        help_text=_("The user who called the tool, when there was one."),
    )
    fingerprint = models.CharField(
        _("request fingerprint"),
        max_length=64,
        help_text=_("SHA-256 of the canonical JSON input."),
    )
    input = models.JSONField(_("input"), encoder=DjangoJSONEncoder, default=dict)
    state = models.CharField(
        _("state"), max_length=20, choices=OperationState.choices, default=OperationState.IN_FLIGHT
    )
    owner = models.CharField(
        _("owner token"),
        max_length=64,
        blank=True,
        help_text=_("Token of the process holding the claim; empty when nobody does."),
    )
    fence = models.PositiveIntegerField(
        _("fence"), default=1, help_text=_("Raised on every takeover; stale owners update 0 rows.")
    )
    lease_expires_at = models.DateTimeField(
        _("lease expires at"), null=True, blank=True, help_text=_("Database clock.")
    )
    output = models.JSONField(_("output"), encoder=DjangoJSONEncoder, null=True, blank=True)
    error = models.JSONField(
        _("error"),
        encoder=DjangoJSONEncoder,
        null=True,
        blank=True,
        help_text=_("The structured error replays return (failed or unknown outcome)."),
    )
    recovered = models.BooleanField(
        _("recovered"), default=False, help_text=_("Completed by recovery, not by its handler.")
    )
    # A database default too: a process still running the previous release names every
    # column it inserts, so during a rolling deploy its claims would otherwise fail.
    reconciled = models.BooleanField(
        _("reconciled"), default=False, db_default=False,
        help_text=_("A person marked it succeeded: final, its replays are never re-judged."),
    )
    attempts = models.PositiveIntegerField(
        _("attempts"), default=1, help_text=_("Fresh claims of this key (after releases).")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    completed_at = models.DateTimeField(_("completed at"), null=True, blank=True)

    objects = OperationQuerySet.as_manager()

    class Meta:
        verbose_name = _("operation")
        verbose_name_plural = _("operations")
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tool", "scope", "key"], name="guarded_tools_operation_claim"
            )
        ]
        indexes = [
            # Only claims that can be abandoned: the sweep's index stays as small as the
            # work it finds, and a call that completes never writes to it.
            models.Index(
                fields=["lease_expires_at"],
                name="gt_operation_open_lease",
                condition=Q(state__in=[OperationState.IN_FLIGHT, OperationState.ABANDONED]),
            ),
            # By state: the purge's old completed rows, the dashboard's exact counts of
            # the states a person acts on and its oldest in-flight claim (created_at is
            # carried along on PostgreSQL, so neither reads the table there).
            CoveringIndex(fields=["state", "updated_at"], covering=["created_at"],
                          name="gt_operation_state_updated"),
            # The admin dashboard's "recovered in the last day": only recovered rows, so
            # the calls that complete by themselves never write to it.
            models.Index(fields=["completed_at"], name="gt_operation_recovered",
                         condition=Q(recovered=True)),
            # The admin's list: unknown outcomes first, then the newest (and the primary
            # key the changelist adds to make its order total). The expression is the
            # one ``unknown_first()`` orders by, so a page reads 100 index entries
            # instead of sorting the table.
            models.Index(unknown_first(), F("created_at").desc(), F("id").desc(),
                         name="gt_operation_unknown_first"),
        ]
        permissions = [("reconcile_operation", _("Can reconcile operations"))]

    def __str__(self) -> str:
        return f"{self.tool} [{self.key[:40]}]"

    def summary(self, *, replayed: bool = False) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "key": self.key,
            "status": self.state,
            "replayed": replayed,
            "recovered": self.recovered,
        }


class JournalEntryQuerySet(models.QuerySet["JournalEntry"]):
    def live(self, operation_id: Any) -> JournalEntryQuerySet:
        """The operation's entries that count: the handler's own, not removed.

        An empty result is what proves the handler stopped before its effect.
        """
        return self.filter(
            operation_id=operation_id, kind=JournalEntry.Kind.ENTRY, removed=False
        )


class JournalEntry(models.Model):
    """What a handler wrote through its operation handle around its effect."""

    class Kind(models.TextChoices):
        ENTRY = "entry", _("entry")
        """Written by the handler through ``ctx.operation.write``."""
        LATE_RESULT = "late_result", _("late result")
        """Result of an owner that lost its lease: evidence for reconciliation."""

    operation = models.ForeignKey(
        Operation,
        verbose_name=_("operation"),
        on_delete=models.CASCADE,
        related_name="journal",
        db_index=False,  # gt_journal_live starts with it
    )
    kind = models.CharField(_("kind"), max_length=20, choices=Kind.choices, default=Kind.ENTRY)
    data = models.JSONField(_("data"), encoder=DjangoJSONEncoder, null=True)
    fence = models.PositiveIntegerField(_("fence"), help_text=_("Fence of the writer."))
    removed = models.BooleanField(
        _("removed"),
        default=False,
        help_text=_(
            "Removed by the handler, or by a person who marked the operation not executed;"
            " kept for history."
        ),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    objects = JournalEntryQuerySet.as_manager()

    class Meta:
        verbose_name = _("journal entry")
        verbose_name_plural = _("journal entries")
        ordering = ["operation", "id"]
        indexes = [models.Index(fields=["operation", "kind", "removed"], name="gt_journal_live")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} #{self.pk}"


class ConfirmationStatus(models.TextChoices):
    PENDING = "pending", _("pending")
    """Waiting for a person."""
    APPROVED = "approved", _("approved")
    """Approved; the next identical call (or the approval task) runs it once, until
    ``expires_at`` (``CONFIRMATION_APPROVAL_TTL_SECONDS`` after the approval)."""
    DECLINED = "declined", _("declined")
    """Declined by a person; the call will not run."""
    EXPIRED = "expired", _("expired")
    """Nobody decided before the time to live ran out, or nobody used the approval."""
    CONSUMED = "consumed", _("consumed")
    """The approved execution has started; the approval cannot be used again."""
    WITHDRAWN = "withdrawn", _("withdrawn")
    """The agent cancelled its MCP task before the call ran; nothing ran."""


#: The states ``expires_at`` ends: a request nobody decided, an approval nobody used.
LAPSING = (ConfirmationStatus.PENDING, ConfirmationStatus.APPROVED)


class ConfirmationQuerySet(models.QuerySet["Confirmation"]):
    def pending(self) -> ConfirmationQuerySet:
        return self.filter(status=ConfirmationStatus.PENDING, expires_at__gt=Now())

    def overdue(self) -> ConfirmationQuerySet:
        """Pending or approved-but-unused, past ``expires_at``: to be marked expired."""
        return self.filter(status__in=LAPSING, expires_at__lte=Now())

    def consume(self, pk: Any) -> bool:
        """Use the approval ``pk`` once: a compare-and-set on the database's clock that
        only one caller wins, and only while the approval lasts."""
        return bool(self.filter(pk=pk, status=ConfirmationStatus.APPROVED,
                                expires_at__gt=Now()).update(status=ConfirmationStatus.CONSUMED))


def _default_expiry() -> Any:
    from django.utils import timezone

    from guarded_tools.conf import gt_settings

    return timezone.now() + timedelta(seconds=gt_settings.CONFIRMATION_TTL_SECONDS)


class Confirmation(models.Model):
    """A call waiting for, or holding, a person's approval."""

    id = models.UUIDField(_("id"), primary_key=True, default=uuid.uuid4, editable=False)
    tool = models.CharField(_("tool"), max_length=200)
    scope = models.CharField(_("principal scope"), max_length=200)
    key = models.CharField(_("idempotency key"), max_length=255, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("requested by"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    requested_by_label = models.CharField(
        _("requester"), max_length=200, blank=True, default="", db_default="",
        help_text=_("Who asked, named when they asked: the call's principal, the user's"
                    " name, or the scope of a caller with no user row."),
    )
    fingerprint = models.CharField(_("input fingerprint"), max_length=64)
    input = models.JSONField(
        _("input"), encoder=DjangoJSONEncoder, help_text=_("The input the approver sees.")
    )
    summary = models.CharField(
        _("summary"), max_length=200, blank=True, default="", db_default="",
        help_text=_("The request in one sentence as it read when it was asked (lists,"
                    " emails, the audit trail); blank on requests older than it."),
    )
    status = models.CharField(
        _("status"),
        max_length=20,
        choices=ConfirmationStatus.choices,
        default=ConfirmationStatus.PENDING,
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("decided by"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    reason = models.TextField(_("reason"), blank=True)
    reported_at = models.DateTimeField(
        _("reported at"),
        null=True,
        blank=True,
        help_text=_(
            "When the agent was told of the decline or expiry. A tool without keys asks"
            " anew on the next identical call after that."
        ),
    )
    operation = models.ForeignKey(
        Operation,
        verbose_name=_("operation"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="confirmations",
    )
    task = models.BooleanField(
        _("awaited by a task"),
        default=False,
        help_text=_(
            "An MCP client holds a task for this call (the Tasks extension): it polls"
            " instead of retrying, so an approval runs the call at once."
        ),
    )
    task_error = models.JSONField(
        _("task error"),
        encoder=DjangoJSONEncoder,
        null=True,
        blank=True,
        help_text=_(
            "What the approved run answered when it refused or failed without storing an"
            " outcome on its operation (the agent-facing error), for the task's poll."
        ),
    )
    credential = models.CharField(
        _("requested with"), max_length=200, blank=True, default="", db_default="",
        help_text=_("The credential the call was requested with (an OAuth grant or token id,"
                    " a digest of a DRF token; blank for a session): the approved run"
                    " refuses the call once it is revoked or deleted."),
    )
    task_id = models.CharField(
        _("task id"), max_length=64, unique=True, null=True, blank=True, editable=False,
        help_text=_("The opaque id of the MCP task that waits on this request (random; the"
                    " task is read from this row)."),
    )
    policy_rule = models.CharField(
        _("policy rule"), max_length=300, blank=True, default="", db_default="",
        help_text=_("The rule of the tool's approval policy that asked for this request"
                    " (blank for a tool with a confirmation mode)."),
    )
    policy_version = models.CharField(
        _("policy version"), max_length=40, blank=True, default="", db_default="",
        help_text=_("The version of the policy whose rule decided."),
    )
    approvals_required = models.PositiveSmallIntegerField(
        _("approvals required"), default=1, db_default=1,
        help_text=_("How many distinct people must approve (never the requester); a policy"
                    " that grew stricter since the request raises it."),
    )
    approvers_group = models.CharField(
        _("approvers' group"), max_length=150, blank=True, default="", db_default="",
        help_text=_("The Django group each approver must belong to (the policy's rule)."),
    )
    approvers_permission = models.CharField(
        _("approvers' permission"), max_length=200, blank=True, default="", db_default="",
        help_text=_("The permission each approver must hold besides the approve permission."),
    )
    approvals = models.JSONField(
        _("approvals given"), encoder=DjangoJSONEncoder, default=list, blank=True,
        help_text=_("The approvals given so far while more are needed: who, and when."),
    )
    created_at = models.DateTimeField(_("requested at"), auto_now_add=True)
    expires_at = models.DateTimeField(_("expires at"), default=_default_expiry)

    objects = ConfirmationQuerySet.as_manager()

    class Meta:
        verbose_name = _("confirmation")
        verbose_name_plural = _("confirmations")
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "expires_at"], name="gt_confirmation_status"),
            models.Index(fields=["tool", "scope", "key"], name="gt_confirmation_call"),
            # The admin: the newest first (then the pk, as the admin adds it); the
            # panel's oldest waiting request (without this one the planner walks the
            # one above past every decided row) and its "decided today".
            models.Index(fields=["-created_at", "-id"], name="gt_confirmation_created"),
            models.Index(fields=["created_at", "expires_at"], name="gt_confirmation_waiting",
                         condition=Q(status="pending")),
            models.Index(fields=["decided_at"], name="gt_confirmation_decided",
                         condition=Q(decided_at__isnull=False)),
        ]
        constraints = [
            # One open request per call: repeats while pending return the same row.
            models.UniqueConstraint(
                fields=["tool", "scope", "key", "fingerprint"],
                condition=Q(status="pending"),
                name="guarded_tools_confirmation_one_pending",
            )
        ]
        permissions = [("approve_confirmation", _("Can approve or decline confirmations"))]

    def __str__(self) -> str:
        who = self.requester
        when = f", {self.created_at:%Y-%m-%d %H:%M}" if self.created_at else ""
        return f"{self.tool} by {who}{when} ({self.get_status_display()})"

    @property
    def requester(self) -> Any:
        """Who asked: the user, or the label of a caller that has no user row."""
        if self.requested_by_id is not None:
            return self.requested_by
        return self.requested_by_label or _("anonymous")


class AuditEntry(models.Model):
    """A state change a person or a recovery made: who (none for a sweep), when, what, why."""

    class Action(models.TextChoices):
        APPROVE = "approve", _("approved confirmation")
        DECLINE = "decline", _("declined confirmation")
        WITHDRAW = "withdraw", _("withdrew confirmation")
        MARK_SUCCEEDED = "mark_succeeded", _("marked operation succeeded")
        MARK_NOT_EXECUTED = "mark_not_executed", _("marked operation not executed")
        MARK_FAILED = "mark_failed", _("marked operation failed")
        RECOVER = "recover", _("recovered operation")

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("actor"),
        null=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    action = models.CharField(_("action"), max_length=32, choices=Action.choices)
    operation = models.ForeignKey(
        Operation,
        verbose_name=_("operation"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit",
    )
    confirmation = models.ForeignKey(
        Confirmation,
        verbose_name=_("confirmation"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit",
    )
    note = models.TextField(_("note"), blank=True)
    status = models.CharField(
        _("status then"), max_length=32, blank=True,
        help_text=_("The operation's state or the confirmation's status this entry left it"
                    " in, as it was then."),
    )
    data = models.JSONField(_("data"), encoder=DjangoJSONEncoder, null=True, blank=True)
    created_at = models.DateTimeField(_("at"), auto_now_add=True)

    class Meta:
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit trail")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_action_display()} by {self.actor}"


def record_in_admin_history(user: Any, obj: models.Model, message: str) -> None:
    """``message`` in Django's admin history of ``obj`` (its *History* page and *Recent
    actions*), as a change by ``user``; nothing without ``django.contrib.admin`` or a user.
    """
    from django.apps import apps

    if user is None or getattr(user, "pk", None) is None:
        return
    if not apps.is_installed("django.contrib.admin"):
        return
    from django.contrib.admin.models import CHANGE, LogEntry

    LogEntry.objects.log_actions(user.pk, [obj], CHANGE, change_message=message[:2000],
                                 single_object=True)


class OperationEvent(models.Model):
    """One thing that happened to an operation, for its timeline: append-only.

    Rows are only ever inserted (``guarded_tools.store.history.record``), never updated
    or deleted (they go with their operation, by retention). The primary key is the
    recording order: the timeline is ordered by it, whatever the clock says.
    """

    class Kind(models.TextChoices):
        CLAIMED = "claimed", _("Claimed")
        RECLAIMED = "reclaimed", _("Claimed again (a retry)")
        JOURNAL = "journal", _("Journal: entry")
        LATE_RESULT = "late_result", _("Journal: late result")
        JOURNAL_REMOVED = "journal_removed", _("Journal entries removed")
        SUCCEEDED = "succeeded", _("Succeeded")
        RELEASED = "released", _("Released (not run)")
        ABANDONED = "abandoned", _("Abandoned (lease given up)")
        OUTCOME_UNKNOWN = "outcome_unknown", _("Outcome unknown")
        TAKEN_OVER = "taken_over", _("Taken over for recovery")
        RECOVERED = "recovered", _("Recovery")
        CONFIRMATION_APPROVED = "confirmation_approved", _("Approval granted")
        CONFIRMATION_DECLINED = "confirmation_declined", _("Approval declined")
        DECISION = "decision", _("Decision by a person")

    id = models.BigAutoField(primary_key=True)
    operation = models.ForeignKey(
        Operation, verbose_name=_("operation"), on_delete=models.CASCADE,
        related_name="events", db_index=False,  # gt_event_operation starts with it
    )
    at = models.DateTimeField(_("at"), default=timezone.now)
    kind = models.CharField(_("kind"), max_length=32, choices=Kind.choices)
    actor = models.CharField(_("who"), max_length=200, blank=True, default="")
    fence = models.PositiveIntegerField(_("attempt"), null=True, blank=True)
    details = models.JSONField(_("details"), encoder=DjangoJSONEncoder, default=dict)

    class Meta:
        verbose_name = _("operation event")
        verbose_name_plural = _("operation events")
        ordering = ["operation", "id"]
        indexes = [models.Index(fields=["operation", "id"], name="gt_event_operation")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} #{self.pk}"


class BudgetCounter(models.Model):
    """One principal's use of one budget in one window: the row a reservation locks."""

    budget = models.CharField(_("budget"), max_length=200)
    scope = models.CharField(_("principal scope"), max_length=200)
    window_start = models.DateTimeField(_("window start"))

    class Meta:
        verbose_name = _("budget counter")
        verbose_name_plural = _("budget counters")
        constraints = [models.UniqueConstraint(fields=["budget", "scope", "window_start"],
                                               name="gt_budget_counter_unique")]

    def __str__(self) -> str:
        return f"{self.budget} · {self.scope} · {self.window_start:%Y-%m-%d %H:%M}"


class Reservation(models.Model):
    """What one call reserved of a budget: given back when its claim is released."""

    counter = models.ForeignKey(BudgetCounter, verbose_name=_("counter"),
                                on_delete=models.CASCADE, related_name="reservations")
    operation_id = models.UUIDField(_("operation"), null=True, blank=True, db_index=True)
    amount = models.DecimalField(_("amount"), max_digits=20, decimal_places=4, default=0)
    created_at = models.DateTimeField(_("reserved at"), auto_now_add=True)

    class Meta:
        verbose_name = _("budget reservation")
        verbose_name_plural = _("budget reservations")

    def __str__(self) -> str:
        return f"{self.amount} of {self.counter_id} for {self.operation_id}"
