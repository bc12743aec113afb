"""Provides the confirmation queue: a call waiting for, or holding, a person's approval."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from guarded_tools.core.times import local_time
from guarded_tools.models.operations import Operation


class ConfirmationStatus(models.TextChoices):
    """Where a request for approval stands."""

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
    """Queries over requests for approval (``Confirmation.objects``)."""

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


def default_expiry() -> Any:

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
    reminded_at = models.DateTimeField(
        _("approvers reminded at"), null=True, blank=True,
        help_text=_("When the approvers were reminded that the request expires soon (once)."))
    created_at = models.DateTimeField(_("requested at"), auto_now_add=True)
    expires_at = models.DateTimeField(_("expires at"), default=default_expiry)

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
        # Titles, breadcrumbs and *Recent actions* (Django keeps this text when it logs a
        # decision): the time to the second, with its zone, as every page shows times.
        when = f", {local_time(self.created_at)}" if self.created_at else ""
        return f"{self.tool} by {self.requester}{when} ({self.get_status_display()})"

    @property
    def requester(self) -> Any:
        """Who asked: the user, or the label of a caller that has no user row."""
        if self.requested_by_id is not None:
            return self.requested_by
        return self.requested_by_label or _("anonymous")
