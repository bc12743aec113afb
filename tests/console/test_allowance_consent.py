"""Under ``Owner(allowances=True)`` the owner grants an allowance for their own account on
the consent page, with the same step-up as their approval; nobody else can."""

from __future__ import annotations

from typing import Any

import pytest

from guarded_tools import Owner, Policy, Rule, Run
from guarded_tools.models import Allowance, AllowanceStatus, AuditEntry
from tests.conftest import Effects
from tests.pipeline.allowance_support import SCHEMA, payment
from tests.pipeline.policy_support import browser_of, call, consent, page_of

pytestmark = pytest.mark.django_db


def yours(allowances: bool = True) -> Policy:
    return Policy(version="1", rules=[
        Rule(name="small", when=lambda input, **kw: input["amount"] <= 50, outcome=Run(),
             description="Payments up to 50.00 run at once"),
        Rule(name="yours", outcome=Owner(allowances=allowances),
             description="more need your own approval")])


def test_the_owner_grants_with_the_step_up_and_later_calls_run(make_tool: Any,
                                                               client_for: Any,
                                                               alice: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=yours(), input_schema=SCHEMA)
    agent = client_for(alice)
    body = payment(120)
    asked = call(agent, definition.name, body)
    assert asked.status_code == 202
    page = page_of(asked.json()["error"]["confirmation"]["url"])
    shown = browser_of(alice).get(page).content.decode()
    assert 'data-testid="offer-allowance"' in shown and "at most 120.00 a call" in shown
    # A wrong password decides nothing and grants nothing.
    assert consent(alice, page, password="wrong", allow="1").status_code == 403
    assert not Allowance.objects.exists()
    done = consent(alice, page, allow="1", allow_count="2", allow_per_call="150",
                   allow_days="7")
    assert done.status_code == 302
    allowance = Allowance.objects.get()
    assert allowance.status == AllowanceStatus.ACTIVE and allowance.approvals_required == 0
    assert allowance.user_id == alice.pk and allowance.count == 2
    assert AuditEntry.objects.get(action="allowance_grant").data["verified_by"] == "password"
    assert call(agent, definition.name, body).status_code == 200  # the approved call
    assert call(agent, definition.name, payment(150)).status_code == 200  # the allowance
    assert call(agent, definition.name, payment(151)).status_code == 202  # past 150 a call
    assert handler.count == 2


def test_no_offer_where_the_rule_takes_no_allowances(make_tool: Any, client_for: Any,
                                                     alice: Any) -> None:
    definition = make_tool(Effects(), confirm=yours(allowances=False), input_schema=SCHEMA)
    asked = call(client_for(alice), definition.name, payment(120))
    page = page_of(asked.json()["error"]["confirmation"]["url"])
    assert 'data-testid="offer-allowance"' not in browser_of(alice).get(page).content.decode()
    assert consent(alice, page, allow="1").status_code == 302
    assert not Allowance.objects.exists()
