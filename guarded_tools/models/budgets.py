"""Provides the budgets' rows: a counter per principal, budget and window, what each call
reserved of it, and the overrides staff set per user or group."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from guarded_tools.core.times import local_time


class BudgetCounter(models.Model):
    """One principal's use of one budget in one window: the row a reservation locks."""

    budget = models.CharField(_("budget"), max_length=200)
    scope = models.CharField(_("principal scope"), max_length=200)
    window_start = models.DateTimeField(_("window start"))

    class Meta:
        verbose_name = _("budget use")
        verbose_name_plural = _("budget use")
        constraints = [models.UniqueConstraint(fields=["budget", "scope", "window_start"],
                                               name="gt_budget_counter_unique")]

    def __str__(self) -> str:
        return f"{self.budget} · {self.scope} · {local_time(self.window_start)}"


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


class BudgetOverride(models.Model):
    """Another count and/or limit of one budget for one user or for one group's members.

    A user's own override beats their groups'; among several groups the most generous
    applies, count and limit each (the budget stage, ``effective_budget``). Set, changed
    and removed in the admin by staff with ``manage_budgets``, each change audited.
    """

    budget = models.CharField(
        _("budget"), max_length=200,
        help_text=_("The name of a budget a registered tool declares (Budget(name=...))."))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("user"), null=True, blank=True,
        on_delete=models.CASCADE, related_name="+",
        help_text=_("The user it applies to. Give a user or a group, not both."))
    group = models.ForeignKey(
        "auth.Group", verbose_name=_("group"), null=True, blank=True,
        on_delete=models.CASCADE, related_name="+",
        help_text=_("Every member of this group, unless the member has an override of their"
                    " own; a member of several groups gets the most generous."))
    count = models.PositiveIntegerField(
        _("calls per window"), null=True, blank=True,
        help_text=_("Replaces the budget's count of calls per window; empty keeps it."))
    limit = models.DecimalField(
        _("sum per window"), max_digits=20, decimal_places=4, null=True, blank=True,
        help_text=_("Replaces the budget's limit on the sum of its field per window (for a"
                    " budget with a sum); empty keeps it."))
    note = models.TextField(_("why"), blank=True,
                            help_text=_("Recorded with the override and in the audit trail."))
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("created by"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+", editable=False)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("changed by"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+", editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("changed at"), auto_now=True)

    class Meta:
        verbose_name = _("budget override")
        verbose_name_plural = _("budget overrides")
        ordering = ["budget", "pk"]
        permissions = [("manage_budgets", _("Can set, change and remove budget overrides"))]
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False, group__isnull=True)
                | Q(user__isnull=True, group__isnull=False),
                name="gt_budget_override_user_or_group",
                violation_error_message=_("Give a user or a group, not both and not neither."),
            ),
            models.CheckConstraint(
                condition=Q(count__isnull=False) | Q(limit__isnull=False),
                name="gt_budget_override_sets_something",
                violation_error_message=_("Give a count, a limit or both."),
            ),
            models.CheckConstraint(
                condition=Q(count__isnull=True) | Q(count__gt=0),
                name="gt_budget_override_count_positive",
                violation_error_message=_("The count must be positive."),
            ),
            models.CheckConstraint(
                condition=Q(limit__isnull=True) | Q(limit__gt=0),
                name="gt_budget_override_limit_positive",
                violation_error_message=_("The limit must be positive."),
            ),
            models.UniqueConstraint(
                fields=["budget", "user"], condition=Q(user__isnull=False),
                name="gt_budget_override_user_unique",
                violation_error_message=_("This user already has an override of this budget."),
            ),
            models.UniqueConstraint(
                fields=["budget", "group"], condition=Q(group__isnull=False),
                name="gt_budget_override_group_unique",
                violation_error_message=_("This group already has an override of this budget."),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget} for {self.principal}"

    @property
    def principal(self) -> str:
        """Whom it applies to, in words: "user alice" or "group finance"."""
        if self.user_id is not None:
            return f"user {self.user}"
        return f"group {self.group}"


class BudgetAlert(models.Model):
    """A threshold of a budget a principal reached in one window: at most one row each
    (the unique constraint), so the people who manage budgets are told once."""

    class Measure(models.TextChoices):
        CALLS = "calls", _("calls")
        SUM = "sum", _("sum")

    counter = models.ForeignKey(BudgetCounter, verbose_name=_("counter"),
                                on_delete=models.CASCADE, related_name="alerts")
    threshold = models.PositiveSmallIntegerField(
        _("threshold (%)"), help_text=_("The percentage of the budget's count or sum reached."))
    measure = models.CharField(_("measure"), max_length=8, choices=Measure.choices,
                               help_text=_("What reached it first: the calls or the sum."))
    used = models.DecimalField(_("used"), max_digits=20, decimal_places=4,
                               help_text=_("The calls or the sum used when it was reached."))
    limit = models.DecimalField(_("limit"), max_digits=20, decimal_places=4,
                                help_text=_("The budget's count or limit as it applied then."))
    created_at = models.DateTimeField(_("reached at"), auto_now_add=True)

    class Meta:
        verbose_name = _("budget alert")
        verbose_name_plural = _("budget alerts")
        ordering = ["counter", "threshold"]
        constraints = [models.UniqueConstraint(fields=["counter", "threshold"],
                                               name="gt_budget_alert_once")]

    def __str__(self) -> str:
        return f"{self.threshold} % of {self.counter}"
