"""A budget is never exceeded: 32 threads, one connection each, against one budget.

Runs on SQLite (its IMMEDIATE write transactions serialise) and on PostgreSQL (the
counter row's ``select_for_update``) alike.
"""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from guarded_tools import Budget, Policy, Rule, Run
from guarded_tools.models import Reservation
from tests.conftest import Effects, in_threads, key

pytestmark = pytest.mark.django_db(transaction=True)


def test_32_payments_of_100_against_2000_run_exactly_20(make_tool: Any, alice: Any) -> None:
    handler = Effects()
    policy = Policy(rules=[Rule(outcome=Run(), description="Payments run at once")],
                    budgets=[Budget(name="daily", sum_field="amount", limit=2000)])
    definition = make_tool(handler, confirm=policy, input_schema={
        "type": "object", "properties": {"operationId": {"type": "string"},
                                         "amount": {"type": "number"}}})

    def pay(i: int) -> int:
        client = APIClient()
        client.force_authenticate(alice)
        return client.post(f"/agent/tools/{definition.name}/",
                           {"operationId": key(), "amount": 100}, format="json").status_code

    statuses = in_threads(32, pay, timeout=120)
    assert sorted(statuses).count(200) == 20, statuses
    assert statuses.count(429) == 12 and handler.count == 20
    assert Reservation.objects.count() == 20


def test_32_payments_against_a_users_override_of_500_run_exactly_5(make_tool: Any,
                                                                   alice: Any) -> None:
    """The override staff set for the user is the limit, under the same counter lock."""
    from decimal import Decimal

    from django.contrib.auth.models import Group

    from guarded_tools.models import BudgetOverride

    handler = Effects()
    policy = Policy(rules=[Rule(outcome=Run(), description="Payments run at once")],
                    budgets=[Budget(name="daily", sum_field="amount", limit=2000)])
    definition = make_tool(handler, confirm=policy, input_schema={
        "type": "object", "properties": {"operationId": {"type": "string"},
                                         "amount": {"type": "number"}}})
    generous = Group.objects.create(name="generous")
    alice.groups.add(generous)
    BudgetOverride.objects.create(budget="daily", group=generous, limit=Decimal("9000"))
    BudgetOverride.objects.create(budget="daily", user=alice, limit=Decimal("500"))

    def pay(i: int) -> int:
        client = APIClient()
        client.force_authenticate(alice)
        return client.post(f"/agent/tools/{definition.name}/",
                           {"operationId": key(), "amount": 100}, format="json").status_code

    statuses = in_threads(32, pay, timeout=120)
    assert statuses.count(200) == 5 and statuses.count(429) == 27, statuses
    assert handler.count == 5 and Reservation.objects.count() == 5
