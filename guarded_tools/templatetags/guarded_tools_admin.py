"""Provides the admin panel tag: confirmation and operation numbers at a glance."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


def _seconds(stats: dict[str, Any], name: str) -> dict[str, Any]:
    age = stats.get(name)
    return {**stats, name: age.total_seconds() if age is not None else None}


@register.inclusion_tag("admin/guarded_tools/panel.html", takes_context=True)
def guarded_tools_panel(
    context: Any, confirmations: Any = None, operations: Any = None
) -> dict[str, Any]:
    """Render the panel; with no arguments it computes both sets of numbers."""
    from guarded_tools import confirmations as confirmation_queue
    from guarded_tools import reconciliation

    user = context["request"].user
    if confirmations is None and user.has_perm("guarded_tools.view_confirmation"):
        confirmations = confirmation_queue.stats()
    if operations is None and user.has_perm("guarded_tools.view_operation"):
        operations = reconciliation.dashboard()
    return {
        "confirmations": _seconds(confirmations, "oldest_pending_age") if confirmations else None,
        "operations": _seconds(operations, "oldest_in_flight_age") if operations else None,
    }
