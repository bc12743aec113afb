"""Allowances cost a fixed number of queries however many a caller has (a call past them,
``tools/list``, the admin's list), are counted on the call's one clock with the budgets,
and a user object that is no row (a stateless token's user) calls with allowances
configured; through REST (token, session), MCP and the admin."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from guarded_tools import Budget, Policy
from guarded_tools.confirmations import allowances
from guarded_tools.models import (
    Allowance,
    AllowanceCounter,
    AuditEntry,
    BudgetCounter,
    Confirmation,
    Operation,
)
from guarded_tools.pipeline.stages.base import Call
from tests.conftest import Effects, StatelessUser
from tests.pipeline.allowance_support import SCHEMA, allowing, bounds, payment, people
from tests.pipeline.policy_support import call

pytestmark = pytest.mark.django_db

MCP = "/agent/mcp/"


@pytest.fixture
def granters(user_factory: Any) -> list[Any]:
    return people(user_factory, "approver", "approver2")


def grant_more(tool: str, user: Any, granter: Any, n: int) -> None:
    """``n`` more active allowances of ``tool`` for ``user``, each with one use."""
    for _ in range(n):
        allowance = allowances.propose(bounds(tool, user), granter)
        counter = AllowanceCounter.objects.create(
            allowance=allowance, window_start=allowance.budget.window_start(timezone.now()))
        counter.uses.create(amount=100)


def queries(do: Callable[[], Any]) -> int:
    with CaptureQueriesContext(connection) as captured:
        do()
    return len(captured.captured_queries)


def mcp_list(client: Any) -> dict[str, Any]:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = client.post(MCP, json.dumps(message), content_type="application/json",
                           headers={"MCP-Protocol-Version": "2025-11-25"})
    assert response.status_code == 200, response.content
    return response.json()["result"]


def test_a_call_past_its_allowances_costs_as_many_queries_with_one_as_with_five(
        make_tool: Any, agent: Any, alice: Any, granters: list[Any]) -> None:
    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    grant_more(definition.name, alice, granters[0], 1)

    def past() -> Any:  # receiver r-99: none of them covers it, each says what is left
        response = call(agent, definition.name, payment(200, receiver="r-99"))
        assert response.status_code == 202, response.content
        return response

    past()  # the caches every first call fills
    one = queries(past)
    grant_more(definition.name, alice, granters[0], 4)
    five = queries(past)
    assert five == one, f"1 allowance: {one} queries, 5: {five}"
    message = past().json()["error"]["message"]  # the rule's name, cut at 300 characters
    assert message.count("2 calls and 800.00 left today") >= 2, message


@pytest.mark.parametrize("transport", ["rest", "mcp"])
def test_tools_list_reads_one_allowance_or_five_in_as_many_queries(
        transport: str, make_tool: Any, agent: Any, alice: Any, granters: list[Any]) -> None:
    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    grant_more(definition.name, alice, granters[0], 1)

    def listed() -> list[str]:
        if transport == "rest":
            tools = agent.get("/agent/tools/").json()["tools"]
            return next(t for t in tools if t["name"] == definition.name)["allowances"]
        entry = next(t for t in mcp_list(agent)["tools"] if t["name"] == definition.name)
        return next(v for k, v in entry["_meta"].items() if k.endswith("/allowances"))

    listed()
    one = queries(listed)
    grant_more(definition.name, alice, granters[0], 4)
    five = queries(listed)
    assert five == one, f"1 allowance: {one} queries, 5: {five}"
    said = listed()
    assert len(said) == 5 and all("2 calls and 800.00 left today" in s for s in said), said


def test_the_admin_list_shows_one_allowance_or_five_in_as_many_queries(
        make_tool: Any, alice: Any, granters: list[Any]) -> None:
    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    grant_more(definition.name, alice, granters[0], 1)
    staff = Client()
    staff.force_login(granters[1])

    def page() -> str:
        response = staff.get("/admin/guarded_tools/allowance/")
        assert response.status_code == 200
        return response.content.decode()

    page()
    one = queries(page)
    grant_more(definition.name, alice, granters[0], 4)
    five = queries(page)
    assert five == one, f"1 allowance: {one} queries, 5: {five}"
    assert page().count("2 calls and 800.00 left today") == 5


@pytest.mark.parametrize("transport", ["rest", "mcp"])
def test_a_user_object_that_is_no_row_calls_with_allowances_configured(
        transport: str, make_tool: Any, client_for: Any, alice: Any,
        granters: list[Any]) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=allowing(), input_schema=SCHEMA)
    allowances.propose(bounds(definition.name, alice), granters[0])
    # The same pk as alice's row: still not alice, so not her allowance.
    holder = client_for(StatelessUser(alice.pk, granted=True))
    if transport == "rest":
        response = call(holder, definition.name, payment(200))
        assert response.status_code == 202, response.content
        tools = holder.get("/agent/tools/").json()["tools"]
    else:
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": definition.name, "arguments": payment(200)}}
        response = holder.post(MCP, json.dumps(message), content_type="application/json",
                               headers={"MCP-Protocol-Version": "2025-11-25"})
        assert response.status_code == 200, response.content
        assert response.json()["result"]["structuredContent"]["code"] == (
            "confirmation_required"), response.content
        tools = mcp_list(holder)["tools"]
    assert handler.count == 0
    entry = next(t for t in tools if t["name"] == definition.name)
    assert "allowances" not in entry and not any(k.endswith("/allowances") for k in entry.get(
        "_meta", {})) and "under your allowance" not in entry["description"]
    asked = Confirmation.objects.get(tool=definition.name)
    assert asked.requested_by_id is None
    # Alice's own calls still run under it.
    assert call(client_for(alice), definition.name, payment(200)).status_code == 200
    assert handler.count == 1


def test_the_allowance_and_the_budget_count_the_call_on_one_clock(
        make_tool: Any, agent: Any, alice: Any, granters: list[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    policy = allowing()
    policy = Policy(version=policy.version, rules=policy.rules,
                    budgets=[Budget(name="payments", window="day", count=10)])
    definition = make_tool(Effects(), confirm=policy, input_schema=SCHEMA)
    allowances.propose(bounds(definition.name, alice), granters[0])
    # The call's clock two days on (a window neither the database's clock nor this
    # process's is in): both stages must count the call in that day.
    then = timezone.now() + timedelta(days=2)
    monkeypatch.setattr(Call, "now", lambda self, claim: then)
    assert call(agent, definition.name, payment(200)).status_code == 200
    day = Budget(name="payments", window="day").window_start(then)
    assert list(BudgetCounter.objects.values_list("window_start", flat=True)) == [day]
    assert list(AllowanceCounter.objects.values_list("window_start", flat=True)) == [day]
    used = AuditEntry.objects.get(action=AuditEntry.Action.ALLOWANCE_USE)
    assert used.operation_id == Operation.objects.get(tool=definition.name).pk
    assert used.data["allowance"] == Allowance.objects.get().pk
