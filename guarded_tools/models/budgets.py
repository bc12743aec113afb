"""Provides the budgets' rows: a counter per principal, budget and window, and what
each call reserved of it."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


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
