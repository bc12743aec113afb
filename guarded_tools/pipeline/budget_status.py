"""Provides what a caller has left of each budget of a tool, and when it frees.

Every answer of a tool with budgets carries it (the transports add it): over REST the
counts as the ``RateLimit-Policy`` and ``RateLimit`` fields of
draft-ietf-httpapi-ratelimit-headers-10 (structured fields: one list member per budget with
a count, ``"name";q=<calls>;w=<window seconds>`` and ``"name";r=<calls left>;t=<seconds
until it frees>``) and everything, sums of money included (the draft's quota units do not
express them), in the body's ``meta.budgets``; over MCP in the result's ``_meta``.

It is read from the rows the budget use page of the admin reads (the counter of the
current window, its reservations, the principal's overrides), after the call: the answer
says what the next call finds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import router
from django.db.models import Count, Q, Sum
from django.utils import timezone

from guarded_tools.core.call import principal_scope
from guarded_tools.core.policy import Budget, Policy
from guarded_tools.core.times import timestamp
from guarded_tools.models import BudgetCounter
from guarded_tools.pipeline import budget_overrides

logger = logging.getLogger("guarded_tools")

#: The draft whose fields the REST answers carry (named in the docs).
DRAFT = "draft-ietf-httpapi-ratelimit-headers-10"


@dataclass(frozen=True)
class Standing:
    """One budget as it applies to one principal now: used, left, and when it frees."""

    budget: Budget
    window_start: datetime
    frees_at: datetime
    calls: int
    used: Decimal

    @property
    def calls_left(self) -> int | None:
        count = self.budget.count
        return None if count is None else max(count - self.calls, 0)

    @property
    def sum_left(self) -> Decimal | None:
        if not self.budget.sum_field or self.budget.limit is None:
            return None
        return max(Decimal(str(self.budget.limit)) - self.used, Decimal(0))

    @property
    def window_seconds(self) -> int:
        return int((self.frees_at - self.window_start).total_seconds())

    def reset_seconds(self, now: datetime) -> int:
        """Whole seconds until the window frees (at least 0)."""
        seconds = (self.frees_at - now).total_seconds()
        return max(int(seconds) + (1 if seconds % 1 else 0), 0)

    def as_dict(self, now: datetime) -> dict[str, Any]:
        budget = self.budget
        data: dict[str, Any] = {
            "name": budget.name, "window": budget.per,
            "window_start": timestamp(self.window_start), "frees_at": timestamp(self.frees_at),
            "resets_in": self.reset_seconds(now),
        }
        if budget.count is not None:
            data["calls"] = {"limit": budget.count, "used": self.calls,
                             "remaining": self.calls_left}
        if budget.sum_field:
            limit = None if budget.limit is None else Decimal(str(budget.limit))
            data["sum"] = {"field": budget.sum_field,
                           "limit": None if limit is None else f"{limit:.2f}",
                           "used": f"{self.used:.2f}",
                           "remaining": None if self.sum_left is None else f"{self.sum_left:.2f}"}
        return data


def budgets_of(definition: Any) -> Sequence[Budget]:
    policy = getattr(definition, "confirm", None)
    return policy.budgets if isinstance(policy, Policy) else ()


def standing(definition: Any, user: Any, scope: str | None,
             now: datetime | None = None) -> list[Standing]:
    """Each budget of ``definition`` as it applies to ``user`` (``scope``): one query for the
    overrides and one for the counters; nothing for a tool without budgets or a caller with no
    principal."""
    budgets = budgets_of(definition)
    if not budgets or not scope:
        return []
    using = router.db_for_write(BudgetCounter)  # what the call just wrote, not a replica's
    now = now or timezone.now()
    overrides = budget_overrides.overrides_for(user, (b.name for b in budgets), using)
    applied = [budget_overrides.apply(declared, overrides)[0] for declared in budgets]
    starts = [budget.window_start(now) for budget in applied]
    current = Q(pk__in=[])
    for budget, start in zip(applied, starts, strict=True):
        current |= Q(budget=budget.name, window_start=start)
    used: dict[tuple[str, datetime], tuple[int, Decimal | None]] = {
        (row["budget"], row["window_start"]): (row["n"], row["total"])
        for row in BudgetCounter.objects.using(using).filter(current, scope=scope).values(
            "budget", "window_start").annotate(
            n=Count("reservations"), total=Sum("reservations__amount")).order_by()}
    found = []
    for budget, start in zip(applied, starts, strict=True):
        calls, total = used.get((budget.name, start), (0, None))
        found.append(Standing(budget=budget, window_start=start,
                              frees_at=budget.window_end(start), calls=calls or 0,
                              used=total or Decimal(0)))
    return found


def sf_string(value: str) -> str:
    """``value`` as a structured field String (RFC 9651): quoted, ``\\`` and ``"``
    escaped, anything outside printable ASCII replaced."""
    text = "".join(ch if " " <= ch <= "~" else "?" for ch in value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ratelimit_fields(standings: Sequence[Standing], now: datetime | None = None
                     ) -> dict[str, str]:
    """The ``RateLimit-Policy`` and ``RateLimit`` fields of the budgets with a count; none
    when no budget counts calls."""
    now = now or timezone.now()
    counted = [s for s in standings if s.budget.count is not None]
    if not counted:
        return {}
    return {
        "RateLimit-Policy": ", ".join(
            f"{sf_string(s.budget.name)};q={s.budget.count};w={s.window_seconds}"
            for s in counted),
        "RateLimit": ", ".join(
            f"{sf_string(s.budget.name)};r={s.calls_left};t={s.reset_seconds(now)}"
            for s in counted),
    }


def described(standings: Sequence[Standing], now: datetime | None = None
              ) -> list[dict[str, Any]]:
    """The budgets as the body's ``meta.budgets`` and MCP's ``_meta`` carry them."""
    now = now or timezone.now()
    return [s.as_dict(now) for s in standings]


def for_answer(definition: Any, user: Any) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The fields and the described budgets an answer to ``user`` of ``definition`` carries
    (empty for a tool without budgets or a caller with no principal). A failure to read
    them is logged and leaves the answer as it is."""
    if definition is None or not budgets_of(definition):
        return {}, []
    try:
        now = timezone.now()
        found = standing(definition, user, principal_scope(user, None), now)
        return ratelimit_fields(found, now), described(found, now)
    except Exception:
        logger.warning("could not read the budgets of %s for its answer", definition.name,
                       exc_info=True)
        return {}, []


__all__ = ["DRAFT", "Standing", "described", "for_answer", "ratelimit_fields", "sf_string",
           "standing"]
