"""Provides the budget stage: per-principal counts and sums per window, never exceeded.

After a fresh claim and before any person is asked (so no approval is doomed), one
transaction locks the principal's counter row for the window (``select_for_update``; on
SQLite the write transaction serialises), sums what is reserved and inserts this call's
``Reservation``. The claim has committed in its own short transaction by then: the
reservation takes its own right after it, before the handler, so no effect ever runs
unreserved, and two calls reserving at once are serialised by the counter's lock. A
claim released without its effect (refused, declined, asked of a person, proven not
run by the call, by recovery or by a person's "Mark not executed") gives its reservation
back (``on_release``), once, in the release's transaction; a replay never reaches this
stage.

Staff's overrides for the call's user (``BudgetOverride``, see
:mod:`guarded_tools.pipeline.budget_overrides`) replace a budget's count and/or limit:
read in one query before the lock, and only for a tool with budgets.

A budget's sum counts only finite amounts of at least 0: before the claim (so before any
reservation and before any person is asked), a call whose ``sum_field`` is missing,
negative, not a number, or more than a reservation holds is refused (``invalid_input``,
its issue naming the field).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from django.db import router, transaction
from django.db.models import Count, Sum

from guarded_tools.core.errors import BudgetExceeded, GuardError, RateLimited, ValidationError
from guarded_tools.core.policy import Budget, Policy, Rule, Run, stricter
from guarded_tools.core.times import site_time, timestamp
from guarded_tools.models import BudgetCounter, Reservation
from guarded_tools.pipeline import budget_alerts, budget_overrides
from guarded_tools.pipeline.stages.base import Call, Stage
from guarded_tools.store import Claim
from guarded_tools.store.values import locked_counter

if TYPE_CHECKING:
    from guarded_tools.core.definition import Tool

#: The amounts a reservation holds (its column: 20 digits, 4 of them after the point).
LARGEST_AMOUNT = Decimal("1e16")


def amount_problem(value: Any) -> tuple[str, str] | None:
    """Why ``value`` cannot be counted in a budget's sum, as a schema issue's keyword and
    message; None for a finite number (or a string of one) from 0 up to what a
    reservation holds."""
    if value is None or isinstance(value, bool) or not isinstance(
            value, int | float | str | Decimal):
        return "type", "must be a number"
    try:
        number = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, ValueError):
        return "type", "must be a number"
    if not number.is_finite():
        return "type", "must be a finite number"
    if number < 0:
        return "minimum", "must be >= 0"
    if number >= LARGEST_AMOUNT:
        return "maximum", f"must be < {LARGEST_AMOUNT:f}"
    return None


def amount_issues(budgets: Sequence[Budget], input: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One issue per sum field of ``budgets`` the input leaves out or gives a value no
    budget can count (see ``amount_problem``), each naming the field."""
    issues: list[dict[str, Any]] = []
    seen: set[str] = set()
    for budget in budgets:
        field = budget.sum_field
        if not field or field in seen:
            continue
        seen.add(field)
        found = ("required", "is missing") if field not in input else amount_problem(
            input[field])
        if found is not None:
            keyword, problem = found
            issues.append({"path": [field], "keyword": keyword,
                           "message": f"{problem} (the budget {budget.name} sums it)"})
    return issues


def refuse_amounts(budgets: Sequence[Budget], input: Mapping[str, Any]) -> None:
    """Raise ``invalid_input`` (422) when ``input`` has an amount ``budgets`` cannot count."""
    issues = amount_issues(budgets, input)
    if issues:
        said = "; ".join(f"/{i['path'][0]} {i['message']}" for i in issues)
        raise ValidationError(issues, f"The input is invalid: {said}.")


def amount(budget: Budget, input: Mapping[str, Any]) -> Decimal:
    """What the call counts against ``budget``'s sum (checked before the claim; checked
    again here for a call that reaches the reservation another way)."""
    if not budget.sum_field:
        return Decimal(0)
    refuse_amounts([budget], input)
    value = input[budget.sum_field]
    return Decimal(str(value)) if isinstance(value, float) else Decimal(value)


def window_start(now: datetime, budget: Budget) -> datetime:
    """When ``budget``'s window that ``now`` falls in started (the site's calendar for days,
    weeks and months: see ``Budget``)."""
    return budget.window_start(now)


class BudgetStage(Stage):
    """The budgets of the tool's policy (``Policy(budgets=[Budget(...)])``)."""

    name = "budget"
    stateless = True

    @classmethod
    def has_work(cls, tool: Tool, hook: str) -> bool:
        if hook in ("before_claim", "after_claim", "on_release"):
            return isinstance(tool.confirm, Policy) and bool(tool.confirm.budgets)
        return True

    @staticmethod
    def budgets(call: Call) -> Sequence[Budget]:
        """The budgets of the tool's policy (none for a tool without one)."""
        policy = call.tool.confirm
        return policy.budgets if isinstance(policy, Policy) else ()

    def before_claim(self, call: Call) -> None:
        """Refuse an amount a budget cannot count, before anything is reserved or asked."""
        budgets = self.budgets(call)
        if not budgets:
            return
        refuse_amounts(budgets, call.inv.input)

    def after_claim(self, call: Call, claim: Claim | None) -> None:
        if not self.budgets(call):
            return
        using = router.db_for_write(Reservation)
        overrides = budget_overrides.overrides_for(
            call.inv.user, (budget.name for budget in self.budgets(call)), using)
        with transaction.atomic(using=using):
            now = call.now(claim)
            for budget in self.budgets(call):
                applied, _chosen = budget_overrides.apply(budget, overrides)
                self.reserve(call, claim, applied, now, using)

    def on_release(self, call: Call, claim: Claim) -> None:
        if self.budgets(call):
            Reservation.objects.using(router.db_for_write(Reservation)).filter(
                operation_id=claim.operation.pk).delete()

    def reserve(self, call: Call, claim: Claim | None, budget: Budget, now: datetime,
                using: str) -> None:
        start = window_start(now, budget)
        counter = locked_counter(BudgetCounter, using, budget=budget.name,
                                 scope=call.inv.scope, window_start=start)
        used = Reservation.objects.using(using).filter(counter=counter).aggregate(
            n=Count("pk"), total=Sum("amount"))
        counted = amount(budget, call.inv.input)
        total = used["total"] or Decimal(0)
        over_count = budget.count is not None and used["n"] + 1 > budget.count
        over_sum = budget.limit is not None and total + counted > Decimal(str(budget.limit))
        if over_count or over_sum:
            frees = budget.window_end(start)
            if budget.escalate is None:
                raise self.refusal(budget, over_count, total, frees, now)
            escalation = Rule(outcome=budget.escalate, name=f"over budget {budget.name}",
                              description=budget.description or f"over budget {budget.name}")
            call.rule = stricter(call.rule or Rule(outcome=Run(), description=""), escalation)
        Reservation.objects.using(using).create(
            counter=counter, amount=counted,
            operation_id=claim.operation.pk if claim is not None else None)
        # Under the same lock: the thresholds this reservation reaches, each told once.
        budget_alerts.record(counter, budget, used["n"] + 1, total + counted, using,
                             call.events)

    def refusal(self, budget: Budget, over_count: bool, total: Decimal, frees: datetime,
                now: datetime) -> GuardError:
        wait = max(1, math.ceil((frees - now).total_seconds()))
        until = site_time(frees)  # the site's time: a day ends at midnight there
        if over_count:
            # A calendar window says when it frees in the site's time; a window of seconds
            # (a minute, an hour) needs only the wait.
            frees_then = f": the {budget.per} frees at {until}" if budget.days or \
                budget.window == "month" else ""
            return RateLimited(
                f"At most {budget.count} calls per {budget.per} (budget {budget.name});"
                f" nothing ran. Retry after {wait} seconds{frees_then}.",
                headers={"Retry-After": str(wait)},
                extra={"budget": {"name": budget.name, "frees_at": timestamp(frees)}},
            )
        remaining = max(Decimal(str(budget.limit)) - total, Decimal(0))
        return BudgetExceeded(
            f"This call would exceed the budget {budget.name}: {remaining:.2f} remains until"
            f" {until}; nothing ran.",
            headers={"Retry-After": str(wait)},
            extra={"budget": {"name": budget.name, "remaining": f"{remaining:.2f}",
                              "frees_at": timestamp(frees)}},
            repair={"action": "ask_user", "instruction": f"Lower the amount to at most"
                    f" {remaining:.2f}, wait until {until}, or ask the user."},
        )
