"""Provides the budgets as they apply to one user: the declared ones and staff's overrides.

A ``BudgetOverride`` replaces a budget's ``count`` and/or ``limit`` for one user or for
the members of one group. The user's own override beats their groups'; among several
groups, each of count and limit is the most generous any of them gives (a part a group's
override leaves empty is the budget's own; no limit at all is the most generous). The
overrides of one call are read in one query, and only for a tool with budgets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q

from guarded_tools.core.policy import Budget, Policy
from guarded_tools.core.registry import registry
from guarded_tools.models import AuditEntry, BudgetOverride, record_in_admin_history


def declared_budgets() -> dict[str, Budget]:
    """Every budget the registered tools declare, by name (the first declaration of a name
    shared by several tools)."""
    found: dict[str, Budget] = {}
    for definition in registry:
        policy = definition.confirm
        if isinstance(policy, Policy):
            for budget in policy.budgets:
                found.setdefault(budget.name, budget)
    return dict(sorted(found.items()))


def is_person(user: Any) -> bool:
    """Whether ``user`` is a saved user of ``AUTH_USER_MODEL`` (whom overrides can name)."""
    return (user is not None and getattr(user, "is_authenticated", False)
            and isinstance(user, get_user_model()) and user.pk is not None)


def overrides_for(user: Any, names: Iterable[str], using: str | None = None
                  ) -> list[BudgetOverride]:
    """The overrides of these budgets for ``user`` and their groups: one query (none for
    someone no override can name)."""
    names = list(names)
    if not names or not is_person(user):
        return []
    match = Q(user_id=user.pk)
    if hasattr(user, "groups"):  # PermissionsMixin; the groups as a subquery
        match |= Q(group__in=user.groups.values("pk"))
    return list(BudgetOverride.objects.using(using).filter(match, budget__in=names))


def _most(values: Sequence[Any]) -> Any:
    """The most generous of the values: ``None`` (no limit) beats any number."""
    return None if any(value is None for value in values) else max(values)


def apply(budget: Budget, overrides: Sequence[BudgetOverride]
          ) -> tuple[Budget, list[BudgetOverride]]:
    """The budget as it applies given the principal's overrides, and the overrides that
    decided it (the user's own, else their groups')."""
    mine = [o for o in overrides if o.budget == budget.name]
    chosen = [o for o in mine if o.user_id is not None] or [o for o in mine if o.user_id is None]
    if not chosen:
        return budget, []
    count = _most([budget.count if o.count is None else o.count for o in chosen])
    limit = budget.limit
    if budget.sum_field:
        # As the budget declares it (a float): str() of a float gives back its decimals.
        most = _most([budget.limit if o.limit is None else Decimal(o.limit) for o in chosen])
        limit = None if most is None else float(most)
    return dataclasses.replace(budget, count=count, limit=limit), chosen


def current_windows(now: datetime) -> Q:
    """The counters of the windows ``now`` falls in (those the next call reserves in), for
    the budgets declared now (a budget no tool declares has no window any more)."""
    match = Q(pk__in=[])
    for name, budget in declared_budgets().items():
        match |= Q(budget=name, window_start=budget.window_start(now))
    return match


def described(override: BudgetOverride | None) -> dict[str, Any] | None:
    """What the audit trail keeps of an override, before or after a change."""
    if override is None:
        return None
    return {"budget": override.budget, "user": override.user_id, "group": override.group_id,
            "principal": override.principal, "count": override.count,
            "limit": None if override.limit is None else f"{Decimal(override.limit):.4f}",
            "note": override.note}


def record_change(actor: Any, override: BudgetOverride, before: dict[str, Any] | None,
                  removed: bool = False, history: bool = False) -> AuditEntry:
    """An audit row for a person's change of ``override`` (set, changed or removed), and,
    with ``history``, a line in Django's admin history (the admin writes its own)."""
    after = None if removed else described(override)
    entry = AuditEntry.objects.create(
        actor=actor, note=override.note,
        action=AuditEntry.Action.BUDGET_OVERRIDE_REMOVED if removed
        else AuditEntry.Action.BUDGET_OVERRIDE_SET,
        data={"budget_override": override.pk, "budget": override.budget,
              "principal": override.principal, "before": before, "after": after},
    )
    if history:
        verb = "Removed" if removed else "Set"
        record_in_admin_history(actor, override, f"{verb} the budget override {override}.")
    return entry


__all__ = ["apply", "current_windows", "declared_budgets", "described", "is_person",
           "overrides_for", "record_change"]
