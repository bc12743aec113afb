"""What the tests of approval policies and budgets share: a payment tool's schema, the
agent acting for alice (by token and by session), a call, and a policy with one budget."""

from __future__ import annotations

from typing import Any

import pytest

from guarded_tools import Budget, Policy, Rule, Run

URL = "/agent/tools/{}/"
SCHEMA = {"type": "object", "properties": {"operationId": {"type": "string"},
                                           "amount": {"type": "number"}}}


@pytest.fixture(params=["token", "session"], name="agent")
def alice_agent(request: pytest.FixtureRequest, alice: Any, client_for: Any,
          session_client_for: Any) -> Any:
    """``agent``: the agent acting for alice, once with her token and once in her session
    (a module that imports ``alice_agent`` has the fixture)."""
    return (client_for if request.param == "token" else session_client_for)(alice)


def call(client: Any, name: str, body: Any) -> Any:
    return client.post(URL.format(name), body, format="json")


def budgeted(name: str = "spend", *, count: int | None = None, limit: float | None = None,
             escalate: Any = None) -> Policy:
    """Everything runs, within one budget of ``count`` calls and/or ``limit`` of amount."""
    return Policy(rules=[Rule(outcome=Run(), description="Everything runs at once")],
                  budgets=[Budget(name=name, count=count,
                                  sum_field="amount" if limit is not None else None,
                                  limit=limit, escalate=escalate)])
