"""Provides the admin panel tag and the console's filters: times, ages, counts in words."""

from __future__ import annotations

from typing import Any

from django import template

from guarded_tools.console.formatting import age, highlight_json, when, when_precisely
from guarded_tools.store.counting import in_words

register = template.Library()


def json_value(value: Any) -> str:
    """``value`` as the admin's highlighted JSON, bounded to a few kilobytes."""
    return highlight_json(value, limit=4096)


register.filter("gt_time", when)
register.filter("gt_time_ms", when_precisely)
register.filter("gt_age", age)
register.filter("gt_json", json_value, is_safe=True)
register.filter("gt_counted", in_words)


@register.inclusion_tag("admin/guarded_tools/panel.html", takes_context=True)
def guarded_tools_panel(
    context: Any, confirmations: Any = None, operations: Any = None
) -> dict[str, Any]:
    """Render the panel; with no arguments it computes both sets of numbers.

    ``confirmations`` is the queue as the viewer reads it
    (:func:`guarded_tools.console.queue.waiting_for`): what they can decide, apart from
    what waits for its owner or for other approvers.
    """
    from guarded_tools.console.queue import waiting_for
    from guarded_tools.pipeline import reconciliation

    user = context["request"].user
    if confirmations is None and user.has_perm("guarded_tools.view_confirmation"):
        confirmations = waiting_for(user)
    if operations is None and user.has_perm("guarded_tools.view_operation"):
        operations = reconciliation.dashboard()
    return {"confirmations": confirmations or None, "operations": operations or None,
            "budgets": budget_use(user)}


def budget_use(user: Any) -> dict[str, Any] | None:
    """The budget use page's link, with how many budget windows are in use now: for a
    user who may see it, where a registered tool declares a budget."""
    from django.db.models import Exists, OuterRef
    from django.utils import timezone

    from guarded_tools.models import BudgetCounter, Reservation
    from guarded_tools.pipeline.budget_overrides import current_windows, declared_budgets

    if not (user.has_perm("guarded_tools.view_budgetcounter")
            or user.has_perm("guarded_tools.manage_budgets")) or not declared_budgets():
        return None
    in_use = BudgetCounter.objects.filter(current_windows(timezone.now())).filter(
        Exists(Reservation.objects.filter(counter=OuterRef("pk")))).count()
    return {"in_use": in_use}
