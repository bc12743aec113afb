"""Provides the allowances' counters: use one atomically, never past its bounds; give it back.

The same lock as a budget's: one counter row per allowance and window, created if
missing and then locked (``select_for_update``; on SQLite the write transaction
serialises), the uses under it summed, this call's ``AllowanceUse`` inserted, in one
transaction. Two calls using one allowance at once are serialised by the counter's lock,
so its count and sum are never exceeded. A call that takes budget counters too takes
them first (the budget stage comes before the allowance stage in every stage list, and
in one transaction on the one-transaction path), so every call locks the two kinds of
counter in the same order.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import router, transaction
from django.db.models import Count, Sum

from guarded_tools.models import Allowance, AllowanceCounter, AllowanceStatus, AllowanceUse
from guarded_tools.store.values import locked_counter

__all__ = ["give_back", "remaining", "use"]


def used(counter_filter: dict[str, Any], using: str) -> tuple[int, Decimal]:
    """How many calls and how much they counted, among the uses ``counter_filter`` names."""
    found = AllowanceUse.objects.using(using).filter(**counter_filter).aggregate(
        n=Count("pk"), total=Sum("amount"))
    return found["n"], found["total"] or Decimal(0)


def use(allowance: Allowance, now: datetime, amount: Decimal,
        operation_id: Any) -> str | None:
    """Use ``allowance`` for one call counting ``amount``, in one transaction under its
    counter's lock: None when the call fits (its use is recorded), else which limit it
    passes, in words. An allowance revoked or suspended meanwhile is not used."""
    using = router.db_for_write(AllowanceUse)
    with transaction.atomic(using=using):
        start = allowance.budget.window_start(now)
        counter = locked_counter(AllowanceCounter, using, allowance_id=allowance.pk,
                                 window_start=start)
        # Under the lock: a revocation committed before it is seen.
        if not Allowance.objects.using(using).filter(
                pk=allowance.pk, status=AllowanceStatus.ACTIVE).exists():
            return "it was revoked or suspended"
        n, total = used({"counter": counter}, using)
        per = allowance.budget.per
        if allowance.count is not None and n + 1 > allowance.count:
            calls = "call it allows per {} is" if allowance.count == 1 else (
                "calls it allows per {} are")
            return f"the {allowance.count} {calls.format(per)} used"
        if allowance.limit is not None and total + amount > allowance.limit:
            return (f"it would pass the allowance's {allowance.limit:.2f} per {per}"
                    f" ({max(allowance.limit - total, Decimal(0)):.2f} left)")
        AllowanceUse.objects.using(using).create(counter=counter, amount=amount,
                                                 operation_id=operation_id)
    return None


def give_back(operation_id: Any) -> list[int]:
    """Give back what the claim of ``operation_id`` used (its release): the ids of the
    allowances it used, each once (a second release finds nothing)."""
    using = router.db_for_write(AllowanceUse)
    uses = AllowanceUse.objects.using(using).filter(operation_id=operation_id)
    ids = sorted(set(uses.values_list("counter__allowance_id", flat=True)))
    if ids:
        uses.delete()
    return ids


def remaining(allowance: Allowance, now: datetime) -> tuple[int | None, Decimal | None]:
    """What is left of ``allowance`` in the window ``now`` falls in: calls, sum (None:
    not bounded that way). An allowance read with ``Allowance.objects.with_use(now)``
    carries its use already (no query); another is counted in one."""
    start = allowance.budget.window_start(now)
    if getattr(allowance, "use_window", None) == start:
        n, total = allowance.used_calls, allowance.used_sum  # type: ignore[attr-defined]
    else:
        using = router.db_for_read(AllowanceUse)
        n, total = used({"counter__allowance_id": allowance.pk,
                         "counter__window_start": start}, using)
    calls = None if allowance.count is None else max(allowance.count - n, 0)
    left = None if allowance.limit is None else max(allowance.limit - total, Decimal(0))
    return calls, left
