"""Provides the record of what happened: the audit trail of decisions, and each
operation's append-only events."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from guarded_tools.core.times import local_time
from guarded_tools.models.confirmations import Confirmation
from guarded_tools.models.operations import Operation


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
        BUDGET_OVERRIDE_SET = "budget_override_set", _("set budget override")
        BUDGET_OVERRIDE_REMOVED = "budget_override_removed", _("removed budget override")
        ALLOWANCE_GRANT = "allowance_grant", _("granted allowance")
        ALLOWANCE_USE = "allowance_use", _("ran under allowance")
        ALLOWANCE_RETURN = "allowance_return", _("gave back allowance use")
        ALLOWANCE_SUSPEND = "allowance_suspend", _("suspended allowance")
        ALLOWANCE_REVOKE = "allowance_revoke", _("revoked allowance")
        EXPORT = "export", _("exported records")

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
        permissions = [("export_records", _("Can export the audit trail, operations and"
                                            " confirmations"))]
        indexes = [
            # The dashboard's "recovered in the last day": the recoveries alone, by time.
            models.Index(fields=["created_at"], condition=Q(action="recover"),
                         name="gt_audit_recoveries"),
        ]

    def __str__(self) -> str:
        who = f" by {self.actor}" if self.actor_id is not None else ""
        when = f", {local_time(self.created_at)}" if self.created_at else ""
        return f"{self.get_action_display()}{who}{when}"


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
        ALLOWANCE_USED = "allowance_used", _("Ran under an allowance")
        ALLOWANCE_RETURNED = "allowance_returned", _("Allowance given back")

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
