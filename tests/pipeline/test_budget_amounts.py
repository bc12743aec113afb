"""A budget's sum counts finite amounts of at least 0, and nothing else.

Over REST with a token and with a session: a call whose summed field is missing,
negative, not a number or more than a reservation holds is refused before the claim
(``422 invalid_input``, its issue naming the field): nothing is reserved, no operation is
claimed, nobody is asked, the handler never runs; a negative amount never makes room for
the next call. The system check ``guarded_tools.W015`` warns of an input schema that lets
such an amount through, through ``manage.py check`` and the checks registry.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command

from guarded_tools import Approvers, Budget, Policy, Rule, Run
from guarded_tools.models import BudgetCounter, Confirmation, Operation, Reservation
from tests.conftest import Effects, key
from tests.pipeline.policy_support import SCHEMA, URL, budgeted

pytestmark = pytest.mark.django_db

MISSING = object()
#: A schema that lets any amount through (check W015 warns of it): the stage refuses.
ANY_AMOUNT = {"type": "object", "properties": {"operationId": {"type": "string"},
                                               "amount": {}}}


def pay(agent: Any, name: str, amount: Any) -> Any:
    body: dict[str, Any] = {"operationId": key()}
    if amount is not MISSING:
        body["amount"] = amount
    return agent.post(URL.format(name), body, format="json")


@pytest.mark.parametrize(("amount", "said"), [
    (MISSING, "is missing"),
    (-5, "must be >= 0"),
    ("-0.01", "must be >= 0"),
    ("NaN", "must be a finite number"),
    ("Infinity", "must be a finite number"),
    ("12,50", "must be a number"),
    ("abc", "must be a number"),
    (True, "must be a number"),
    (None, "must be a number"),
    ({"value": 5}, "must be a number"),
    (1e17, "must be < 10000000000000000"),
], ids=["missing", "negative", "negative-string", "nan", "infinity", "comma", "word", "true",
        "null", "object", "too-large"])
def test_an_amount_a_budget_cannot_count_is_refused_naming_the_field(
        amount: Any, said: str, make_tool: Any, agent: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=budgeted(limit=1000), input_schema=ANY_AMOUNT)
    refused = pay(agent, definition.name, amount)
    assert refused.status_code == 422, refused.content
    error = refused.json()["error"]
    assert error["code"] == "invalid_input"
    assert error["issues"] == [{"path": ["amount"], "keyword": error["issues"][0]["keyword"],
                                "message": f"{said} (the budget spend sums it)"}]
    assert error["repair"]["fields"] == ["amount"]
    assert f"/amount {said}" in error["message"]
    assert handler.count == 0
    assert not Operation.objects.exists() and not Reservation.objects.exists()
    assert not BudgetCounter.objects.exists()


@pytest.mark.parametrize("amount", [0, 12.5, "12.50", "1000"])
def test_finite_amounts_of_at_least_zero_count(amount: Any, make_tool: Any,
                                               agent: Any) -> None:
    definition = make_tool(Effects(), confirm=budgeted(limit=1000), input_schema=ANY_AMOUNT)
    assert pay(agent, definition.name, amount).status_code == 200
    assert [str(r.amount) for r in Reservation.objects.all()] == [
        {0: "0.0000", 12.5: "12.5000", "12.50": "12.5000", "1000": "1000.0000"}[amount]]


def test_a_negative_amount_never_makes_room(make_tool: Any, agent: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=budgeted(limit=100), input_schema=SCHEMA)
    assert pay(agent, definition.name, 100).status_code == 200
    assert pay(agent, definition.name, -50).status_code == 422
    refused = pay(agent, definition.name, 50)
    assert refused.status_code == 429, refused.content
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert refused.json()["error"]["budget"]["remaining"] == "0.00"
    assert handler.count == 1


def test_nobody_is_asked_to_approve_an_amount_the_budget_refuses(make_tool: Any,
                                                                 agent: Any) -> None:
    """A rule that asks an approver, and a budget that escalates: the bad amount is refused
    before either asks anyone."""
    policy = Policy(rules=[Rule(outcome=Approvers(1), description="one approver")],
                    budgets=[Budget(name="spend", sum_field="amount", limit=100,
                                    escalate=Approvers(2))])
    definition = make_tool(Effects(), confirm=policy, input_schema=ANY_AMOUNT)
    assert pay(agent, definition.name, -500).status_code == 422
    assert pay(agent, definition.name, "abc").status_code == 422
    assert not Confirmation.objects.exists() and not Reservation.objects.exists()
    asked = pay(agent, definition.name, 10)
    assert asked.status_code == 202, asked.content  # a good amount is asked as before


# -- the system check --------------------------------------------------------------------
def budget_policy(*budgets: Budget) -> Policy:
    return Policy(rules=[Rule(outcome=Run(), description="runs")], budgets=budgets)


def w015(name: str) -> list[Any]:
    return [m for m in checks.run_checks() if m.id == "guarded_tools.W015"
            and f"Tool {name!r}" in m.msg]


def schema(amount: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"type": "object", "properties": {"operationId": {"type": "string"},
                                             "amount": amount},
            "required": ["operationId", "amount"] if required else ["operationId"]}


SPEND = Budget(name="spend", sum_field="amount", limit=100)


@pytest.mark.parametrize(("amount", "required", "said"), [
    ({"type": "number"}, False, "does not require and allows to be negative (such as -1)"),
    ({"type": "number"}, True, "allows to be negative (such as -1)"),
    ({}, True, "allows to be negative (such as -1) and allows to be no number (such as"
     ' "abc")'),
    ({"type": "string"}, True, 'allows to be negative (such as "-1") and allows to be no'
     ' number (such as "abc")'),
    ({"type": "string", "pattern": r"^-?\d+$"}, True, 'allows to be negative (such as "-1")'),
    ({"type": "number", "minimum": 0}, False, "does not require"),
], ids=["optional-number", "number", "anything", "string", "signed-digits", "optional"])
def test_the_check_warns_of_a_schema_that_lets_a_bad_amount_through(
        amount: dict[str, Any], required: bool, said: str, make_tool: Any) -> None:
    definition = make_tool(confirm=budget_policy(SPEND),
                           input_schema=schema(amount, required=required))
    [warning] = w015(definition.name)
    assert warning.msg == (f"Tool {definition.name!r}: the budget 'spend' sums the input field"
                           f" 'amount', which the input schema {said}.")
    assert "\"minimum\": 0" in warning.hint and "invalid_input" in warning.hint
    assert warning.level == checks.WARNING


@pytest.mark.parametrize("amount", [
    {"type": "number", "minimum": 0},
    {"type": "integer", "exclusiveMinimum": 0},
    {"type": "string", "pattern": r"^\d{1,9}(\.\d{1,2})?$"},  # the demo's
    {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": r"^\d+$"}]},
], ids=["number", "positive-integer", "digits", "either"])
def test_the_check_passes_a_schema_that_refuses_bad_amounts(amount: dict[str, Any],
                                                            make_tool: Any) -> None:
    definition = make_tool(confirm=budget_policy(SPEND, Budget(name="count", count=5)),
                           input_schema=schema(amount))
    assert w015(definition.name) == []


def test_manage_py_check_shows_the_warning(make_tool: Any) -> None:
    definition = make_tool(confirm=budgeted(limit=100), input_schema=SCHEMA)
    out, err = StringIO(), StringIO()
    call_command("check", stdout=out, stderr=err)
    said = out.getvalue() + err.getvalue()
    assert f"(guarded_tools.W015) Tool {definition.name!r}: the budget 'spend' sums" in said


def test_the_demo_tools_pass_the_check() -> None:
    assert [m for m in checks.run_checks() if m.id == "guarded_tools.W015"] == []
