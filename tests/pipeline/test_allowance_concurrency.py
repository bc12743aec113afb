"""An allowance is never exceeded: 32 threads, one connection each, against one allowance
(and, in the second test, a budget too, whose counter every call locks first).

Runs on SQLite (its IMMEDIATE write transactions serialise) and on PostgreSQL (the
counter rows' ``select_for_update``) alike.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from rest_framework.test import APIClient

from guarded_tools import Budget, Policy
from guarded_tools.confirmations import allowances
from guarded_tools.models import AllowanceStatus, AllowanceUse, Reservation
from tests.conftest import Effects, in_threads
from tests.pipeline.allowance_support import SCHEMA, allowing, bounds, payment, people

pytestmark = pytest.mark.django_db(transaction=True)


def granted_by_two(tool: str, user: Any, granters: list[Any], **extra: Any) -> Any:
    allowance = allowances.propose(bounds(tool, user, **extra), granters[0])
    assert allowance.approvals_required == 2, "the bound reaches the two-approver tier"
    allowances.grant(allowance, granters[1])
    assert allowance.status == AllowanceStatus.ACTIVE
    return allowance


def pay_in_threads(tool: str, user: Any, amount: float) -> list[int]:
    def pay(i: int) -> int:
        client = APIClient()
        client.force_authenticate(user)
        return client.post(f"/agent/tools/{tool}/", payment(amount), format="json").status_code

    return in_threads(32, pay, timeout=180)


def test_32_calls_against_10_allowed_run_exactly_10(make_tool: Any, alice: Any,
                                                    user_factory: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=allowing(one_up_to=100), input_schema=SCHEMA)
    granted_by_two(definition.name, alice, people(user_factory, "approver", "approver2"),
                   count=10, limit=None)
    statuses = pay_in_threads(definition.name, alice, 200)
    assert statuses.count(200) == 10 and statuses.count(202) == 22, statuses
    assert handler.count == 10 and AllowanceUse.objects.count() == 10


def test_32_calls_with_a_budget_and_an_allowance_take_both_counters(
        make_tool: Any, alice: Any, user_factory: Any) -> None:
    """The budget (5,000.00 a day: 25 calls of 200) and the allowance (4,000.00 a day:
    20) are both locked by every call, in one order: exactly 20 run, none deadlocks.
    A call past either waits for people (202) or is refused by the budget (429); one
    asked of people is released, and gives its budget reservation back."""
    handler = Effects()
    policy = allowing(one_up_to=100)
    budgeted = Policy(version=policy.version, rules=policy.rules,
                      budgets=[Budget(name="daily", sum_field="amount", limit=5000)])
    definition = make_tool(handler, confirm=budgeted, input_schema=SCHEMA)
    granted_by_two(definition.name, alice, people(user_factory, "approver", "approver2"),
                   count=None, limit=Decimal("4000"))
    statuses = pay_in_threads(definition.name, alice, 200)
    assert statuses.count(200) == 20, statuses
    assert statuses.count(202) + statuses.count(429) == 12, statuses
    assert handler.count == 20 and AllowanceUse.objects.count() == 20
    assert Reservation.objects.count() == 20
