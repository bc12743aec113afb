"""What the tests of approval policies and budgets share: a payment tool's schema, a call,
the policies (one budget, one or two approvers, the owner's consent) and the consent page.

The agent acting for alice (the ``agent`` fixture) is in ``tests/pipeline/conftest.py``."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client as DjangoClient

from guarded_tools import Approvers, Budget, Owner, Policy, Refuse, Rule, Run
from tests.conftest import key

URL = "/agent/tools/{}/"
SCHEMA = {"type": "object", "properties": {"operationId": {"type": "string"},
                                           "amount": {"type": "number"}}}


def call(client: Any, name: str, body: Any) -> Any:
    return client.post(URL.format(name), body, format="json")


def budgeted(name: str = "spend", *, count: int | None = None, limit: float | None = None,
             escalate: Any = None) -> Policy:
    """Everything runs, within one budget of ``count`` calls and/or ``limit`` of amount."""
    return Policy(rules=[Rule(outcome=Run(), description="Everything runs at once")],
                  budgets=[Budget(name=name, count=count,
                                  sum_field="amount" if limit is not None else None,
                                  limit=limit, escalate=escalate)])


def payments(version: str = "1", two_above: float = 1000) -> Policy:
    return Policy(version=version, rules=[
        Rule(name="small", when=lambda input, **kw: input["amount"] <= 50, outcome=Run(),
             description="Payments up to 50.00 run at once"),
        Rule(name="large", when=lambda input, **kw: input["amount"] <= two_above,
             outcome=Approvers(1), description="up to 1,000.00 need one approver"),
        Rule(name="huge", when=lambda input, **kw: input["amount"] <= 100_000,
             outcome=Approvers(2), description="more need two"),
        Rule(name="absurd", outcome=Refuse(repair={"action": "ask_user",
                                                   "instruction": "Ask for less."}),
             description="above 100,000.00 are refused"),
    ])


def pay(client: Any, name: str, amount: float = 100) -> Any:
    return client.post(URL.format(name), {"operationId": key(), "amount": amount},
                       format="json")


CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def owner_policy(flags: dict[str, Any] | None = None) -> Policy:
    """Up to 50 runs; above it the user decides; ``flags["approvers"]`` makes it staff's."""
    flags = flags if flags is not None else {}
    return Policy(version="4", rules=[
        Rule(name="small", when=lambda input, **kw: input["amount"] <= 50, outcome=Run(),
             description="Payments up to 50.00 run at once"),
        Rule(name="staff", when=lambda **kw: flags.get("approvers", False),
             outcome=Approvers(1), description="for now, one approver decides the rest"),
        Rule(name="yours", outcome=Owner(), description="more need your own approval"),
    ])


def consent(user: Any, page: str, decision: str = "approve", **extra: str) -> Any:
    browser = browser_of(user)
    shown = browser.get(page)
    assert shown.status_code == 200, shown.status_code
    found = CSRF.search(shown.content.decode())
    assert found is not None
    return browser.post(page, {"decision": decision, "password": "pw",
                               "csrfmiddlewaretoken": found.group(1), **extra})


def page_of(url: str) -> str:
    return url.split("testserver", 1)[-1]


def browser_of(user: Any) -> DjangoClient:
    """The user's own browser session (CSRF enforced), as on the consent page."""
    browser = DjangoClient(enforce_csrf_checks=True)
    assert browser.login(username=user.get_username(), password="pw")
    return browser
