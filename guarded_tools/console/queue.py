"""Provides the confirmation queue as one person reads it: what they can decide, what waits
for its owner, and each request's amount and approvals in a word.

The panel (the admin's index and the queue) counts the waiting requests this person can
decide (:func:`guarded_tools.confirmations.queue.can_decide`, the very check the
buttons make), apart from those only their owner decides (on the consent page) and those
waiting for other approvers (the viewer asked for them, approved them already, or is not
among the approvers the rule names). The oldest waiting requests are read first, at most
``EXAMINED`` of them, so the panel costs the same at any size of the queue; past them the
counts say "at least".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.utils import timezone
from django.utils.formats import number_format
from django.utils.translation import gettext as _

from guarded_tools.confirmations import queue as confirmations
from guarded_tools.core.policy import Policy
from guarded_tools.core.registry import registry
from guarded_tools.models import Confirmation, ConfirmationStatus

#: The most waiting requests the panel reads (the oldest first) to count them per viewer.
EXAMINED = 1000


@dataclass(frozen=True)
class Count:
    """A number of waiting requests: ``n`` itself, or at least ``n`` when not all were read."""

    n: int
    exact: bool = True

    def __bool__(self) -> bool:
        return self.n > 0

    def __str__(self) -> str:
        shown = number_format(self.n, force_grouping=True)
        return shown if self.exact else _("at least %(n)s") % {"n": shown}


@dataclass(frozen=True)
class Waiting:
    """The confirmation queue as ``viewer`` reads it on the panel."""

    #: The waiting requests the viewer can decide now.
    yours: Count
    #: The oldest of those (the panel links to its page), or None.
    oldest: Confirmation | None
    #: The waiting requests only the user each acts for decides, on the consent page.
    owners: Count
    #: The waiting requests other people must decide (staff approvals).
    others: Count
    #: Requests decided since midnight, in the site's time zone.
    decided_today: int

    @property
    def oldest_age(self) -> timedelta | None:
        return timezone.now() - self.oldest.created_at if self.oldest is not None else None


def waiting_for(viewer: Any) -> Waiting:
    """What waits in the queue, as ``viewer`` can act on it."""
    # The oldest first, from the partial index of waiting requests; the input (which can
    # be large, and which no decision rule reads) stays in the table.
    rows = list(Confirmation.objects.pending().select_related("requested_by")
                .defer("input", "task_error").order_by("created_at")[:EXAMINED + 1])
    exact = len(rows) <= EXAMINED
    yours: list[Confirmation] = []
    owners = others = 0
    for row in rows[:EXAMINED]:
        if confirmations.owner_decides(row):
            owners += 1
        elif confirmations.can_decide(viewer, row) is None:
            yours.append(row)
        else:
            others += 1
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    return Waiting(
        yours=Count(len(yours), exact), oldest=yours[0] if yours else None,
        owners=Count(owners, exact), others=Count(others, exact),
        decided_today=Confirmation.objects.filter(decided_at__gte=today).count(),
    )


def sum_field(tool_name: str) -> str | None:
    """The input field the tool's policy sums in a budget (its amount), or None."""
    definition = registry.find(tool_name)
    policy = definition.confirm if definition is not None else None
    if not isinstance(policy, Policy):
        return None
    return next((budget.sum_field for budget in policy.budgets if budget.sum_field), None)


def amount(confirmation: Confirmation) -> str | None:
    """The amount ``confirmation`` asks for (the policy's summed field), grouped
    ("1,200.00"); None for a tool whose policy sums no field."""
    field = sum_field(confirmation.tool)
    data = confirmation.input if isinstance(confirmation.input, dict) else {}
    if field is None or data.get(field) is None:
        return None
    value = data[field]
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return str(value)[:40]
    if not number.is_finite():
        return str(value)[:40]
    places = max(-int(number.as_tuple().exponent), 0)
    return number_format(number, decimal_pos=places, force_grouping=True)


def approvals_given(confirmation: Confirmation) -> tuple[int, int] | None:
    """(given, needed) staff approvals of ``confirmation``; None where its owner decides.

    A request approved by one person keeps no list of approvals (only one was needed):
    it counts as given.
    """
    if confirmations.owner_decides(confirmation):
        return None
    needed = max(confirmation.approvals_required, 1)
    given = len(confirmation.approvals)
    if confirmation.status in (ConfirmationStatus.APPROVED, ConfirmationStatus.CONSUMED):
        given = max(given, needed)
    return given, needed


__all__ = ["EXAMINED", "Count", "Waiting", "amount", "approvals_given", "sum_field",
           "waiting_for"]
