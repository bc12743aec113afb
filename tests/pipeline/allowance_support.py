"""What the tests of allowances share: a payment policy whose rules take allowances, the
people who grant them, and an allowance's bounds."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone

from guarded_tools import Approvers, Policy, Refuse, Rule, Run
from guarded_tools.models import Allowance
from tests.conftest import key

SCHEMA = {"type": "object", "properties": {"operationId": {"type": "string"},
                                           "amount": {"type": "number"},
                                           "receiverId": {"type": "string"}}}


def allowing(version: str = "1", one_up_to: float = 1000) -> Policy:
    """Up to 50 runs; up to ``one_up_to`` one approver; up to 100,000 two; more refused.
    Both approver rules take allowances."""
    return Policy(version=version, rules=[
        Rule(name="small", when=lambda input, **kw: input["amount"] <= 50, outcome=Run(),
             description="Payments up to 50.00 run at once"),
        Rule(name="large", when=lambda input, **kw: input["amount"] <= one_up_to,
             outcome=Approvers(1, allowances=True), description="up to 1,000.00 need one"
             " approver"),
        Rule(name="huge", when=lambda input, **kw: input["amount"] <= 100_000,
             outcome=Approvers(2, allowances=True), description="more need two"),
        Rule(name="absurd", outcome=Refuse(), description="above 100,000.00 are refused"),
    ])


def bounds(tool: str, user: Any, **extra: Any) -> Allowance:
    """An unsaved allowance for ``user``'s calls of ``tool``: 3 calls and 900.00 a day, at
    most 300.00 a call, to receiver r-17, for a week."""
    values: dict[str, Any] = {
        "tool": tool, "user": user, "count": 3, "limit": Decimal("900"),
        "per_call": Decimal("300"), "sum_field": "amount",
        "constraints": {"receiverId": ["r-17"]},
        "expires_at": timezone.now() + timedelta(days=7)}
    values.update(extra)
    return Allowance(**values)


def payment(amount: float = 100, receiver: str = "r-17") -> dict[str, Any]:
    return {"operationId": key(), "amount": amount, "receiverId": receiver}


def people(user_factory: Any, *names: str) -> list[Any]:
    """Staff who may approve (and so grant) these calls."""
    from django.contrib.auth.models import Permission

    perms = Permission.objects.filter(codename__in=[
        "approve_confirmation", "view_confirmation", "view_allowance", "add_allowance",
        "change_allowance"])
    found = []
    for name in names:
        person = user_factory(name, is_staff=True)
        person.user_permissions.add(*perms)
        found.append(type(person).objects.get(pk=person.pk))
    return found
