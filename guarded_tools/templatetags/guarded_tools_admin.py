"""Provides the admin panel tag and the console's filters: times, ages, counts in words."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils import dateformat, timezone

from guarded_tools.store.counting import in_words

register = template.Library()

#: The one date format of the console's pages: to the second, with the time zone.
TIME_FORMAT = "Y-m-d H:i:s T"


def when(value: datetime | None) -> str:
    """``value`` in the current time zone, to the second ("—" for none)."""
    if value is None:
        return "—"
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return dateformat.format(value, TIME_FORMAT)


def age(value: timedelta | None) -> str:
    """A duration as people say it: "42 s", "3 min 5 s", "2 h 10 min", "4 d 3 h"."""
    if value is None:
        return "—"
    seconds = max(int(value.total_seconds()), 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    for big, big_unit, small, small_unit in ((days, "d", hours, "h"), (hours, "h", minutes, "min"),
                                             (minutes, "min", seconds, "s")):
        if big:
            return f"{big} {big_unit}" + (f" {small} {small_unit}" if small else "")
    return f"{seconds} s"


def json_value(value: Any) -> str:
    """``value`` as the admin's highlighted JSON, bounded to a few kilobytes."""
    from guarded_tools.console.admin import highlight_json

    return highlight_json(value, limit=4096)


register.filter("gt_time", when)
register.filter("gt_age", age)
register.filter("gt_json", json_value, is_safe=True)
register.filter("gt_counted", in_words)


@register.inclusion_tag("admin/guarded_tools/panel.html", takes_context=True)
def guarded_tools_panel(
    context: Any, confirmations: Any = None, operations: Any = None
) -> dict[str, Any]:
    """Render the panel; with no arguments it computes both sets of numbers."""
    from guarded_tools.pipeline import confirmations as confirmation_queue
    from guarded_tools.pipeline import reconciliation

    user = context["request"].user
    if confirmations is None and user.has_perm("guarded_tools.view_confirmation"):
        confirmations = confirmation_queue.stats()
    if operations is None and user.has_perm("guarded_tools.view_operation"):
        operations = reconciliation.dashboard()
    return {"confirmations": confirmations or None, "operations": operations or None}
