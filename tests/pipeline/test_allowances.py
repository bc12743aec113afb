"""Allowances: granted by as many people as the strictest rule within their bounds asks,
used atomically with the claim, given back once, stopped by revocation, expiry, a
stricter policy or a granter who lost the permission; through REST (token, session)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from guarded_tools import Budget, Policy, ToolError
from guarded_tools.confirmations import allowances
from guarded_tools.models import (
    Allowance,
    AllowanceStatus,
    AllowanceUse,
    AuditEntry,
    Confirmation,
    OperationEvent,
)
from tests.conftest import Effects
from tests.pipeline.allowance_support import SCHEMA, allowing, bounds, payment, people
from tests.pipeline.policy_support import call

pytestmark = pytest.mark.django_db


@pytest.fixture
def granters(user_factory: Any) -> list[Any]:
    return people(user_factory, "approver", "approver2")


def test_bounded_to_900_needs_one_approver_and_5000_needs_two(make_tool: Any,
                                                              alice: Any) -> None:
    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    assert allowances.requirement(bounds(definition.name, alice)).n == 1
    two = allowances.requirement(bounds(definition.name, alice, per_call=None,
                                        limit=Decimal("5000")))
    assert (two.n, two.rule) == (2, "huge")
    # A bound past the policy's refusal: those calls are refused anyway.
    assert allowances.requirement(bounds(definition.name, alice, per_call=None,
                                         limit=Decimal("10000000"))).n == 2


def test_a_rule_without_allowances_cannot_be_granted(make_tool: Any, alice: Any,
                                                     granters: list[Any]) -> None:
    from tests.pipeline.policy_support import payments

    definition = make_tool(Effects(), confirm=payments(), input_schema=SCHEMA)
    with pytest.raises(allowances.GrantRefused, match="does not take allowances"):
        allowances.propose(bounds(definition.name, alice), granters[0])
    assert not Allowance.objects.exists()


def test_two_granters_let_exactly_the_allowed_calls_run(make_tool: Any, agent: Any,
                                                        alice: Any,
                                                        granters: list[Any]) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=allowing(one_up_to=100), input_schema=SCHEMA)
    one, two = granters
    allowance = allowances.propose(bounds(definition.name, alice), one, note="weekly rent")
    assert allowance.status == AllowanceStatus.PENDING and allowance.approvals_required == 2
    first = call(agent, definition.name, payment(200))
    assert first.status_code == 202 and handler.count == 0  # one grant of two: nothing yet
    with pytest.raises(allowances.GrantRefused, match="granted it already"):
        allowances.grant(allowance, one)
    allowances.grant(allowance, two)
    assert allowance.status == AllowanceStatus.ACTIVE
    listing = agent.get("/agent/tools/").json()
    entry = next(t for t in listing["tools"] if t["name"] == definition.name)
    assert "under your allowance" in entry["description"] and "3 calls and 900.00 left today" \
        in entry["description"], entry["description"]
    ran = [call(agent, definition.name, payment(200)) for _ in range(3)]
    assert [r.status_code for r in ran] == [200, 200, 200] and handler.count == 3
    fourth = call(agent, definition.name, payment(200))
    assert fourth.status_code == 202 and handler.count == 3
    message = fourth.json()["error"]["message"]
    assert f"past allowance #{allowance.pk}, 0 calls and 300.00 left today until" in message
    assert "the 3 calls it allows per day are used" in message, message
    # The timeline and the audit trail say under which allowance, granted by whom.
    said = OperationEvent.objects.filter(kind="allowance_used").values_list(
        "details__said", flat=True)
    assert list(said) == [f"ran under allowance #{allowance.pk}, granted by approver and"
                          " approver2"] * 3
    assert AuditEntry.objects.filter(action="allowance_use").count() == 3
    assert AuditEntry.objects.filter(action="allowance_grant").count() == 2


def test_calls_outside_the_bounds_wait_for_a_person(make_tool: Any, agent: Any, alice: Any,
                                                    granters: list[Any]) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=allowing(), input_schema=SCHEMA)
    allowance = allowances.propose(bounds(definition.name, alice), granters[0])
    assert allowance.status == AllowanceStatus.ACTIVE
    other = call(agent, definition.name, payment(100, receiver="r-99"))
    assert other.status_code == 202
    assert "receiverId is not one the allowance names" in other.json()["error"]["message"]
    big = call(agent, definition.name, payment(400))
    assert big.status_code == 202 and "more than 300.00 a call" in big.json()["error"][
        "message"]
    assert call(agent, definition.name, payment(300)).status_code == 200
    assert call(agent, definition.name, payment(300)).status_code == 200
    # 600 used of 900 a day: 300 more runs, 301 passes the sum.
    over = call(agent, definition.name, payment(300.01))
    assert over.status_code == 202
    assert "more than 300.00 a call" in over.json()["error"]["message"]
    assert handler.count == 2


def test_a_revoked_allowance_sends_the_next_call_to_a_person(make_tool: Any, agent: Any,
                                                             alice: Any,
                                                             granters: list[Any]) -> None:
    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    allowance = allowances.propose(bounds(definition.name, alice), granters[0])
    assert call(agent, definition.name, payment()).status_code == 200
    assert allowances.revoke(allowance, granters[1], "no longer needed")
    assert call(agent, definition.name, payment()).status_code == 202
    assert AuditEntry.objects.filter(action="allowance_revoke", actor=granters[1]).exists()


def test_an_expired_allowance_sends_the_next_call_to_a_person(make_tool: Any, agent: Any,
                                                              alice: Any,
                                                              granters: list[Any]) -> None:
    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    allowance = allowances.propose(bounds(definition.name, alice), granters[0])
    assert call(agent, definition.name, payment()).status_code == 200
    Allowance.objects.filter(pk=allowance.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1))
    assert call(agent, definition.name, payment()).status_code == 202


def test_a_granter_who_lost_the_permission_stops_it(make_tool: Any, agent: Any, alice: Any,
                                                    granters: list[Any]) -> None:
    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    allowance = allowances.propose(bounds(definition.name, alice), granters[0])
    assert call(agent, definition.name, payment()).status_code == 200
    granters[0].user_permissions.clear()
    stopped = call(agent, definition.name, payment())
    assert stopped.status_code == 202
    allowance.refresh_from_db()
    assert allowance.status == AllowanceStatus.SUSPENDED
    assert "approver, who granted it, may no longer approve" in allowance.status_reason
    assert AuditEntry.objects.filter(action="allowance_suspend").count() == 1


def test_a_deactivated_granter_stops_it(make_tool: Any, agent: Any, alice: Any,
                                        granters: list[Any]) -> None:
    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    allowance = allowances.propose(bounds(definition.name, alice), granters[0])
    type(granters[0]).objects.filter(pk=granters[0].pk).update(is_active=False)
    assert call(agent, definition.name, payment()).status_code == 202
    allowance.refresh_from_db()
    assert allowance.status == AllowanceStatus.SUSPENDED


def test_a_stricter_policy_version_suspends_it_until_granted_again(
        make_tool: Any, agent: Any, alice: Any, granters: list[Any]) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=allowing(), input_schema=SCHEMA)
    allowance = allowances.propose(bounds(definition.name, alice), granters[0])
    assert call(agent, definition.name, payment(200)).status_code == 200
    # Version 2: above 100.00 needs two approvers; the allowance reaches 300.00 a call.
    object.__setattr__(definition, "confirm", allowing(version="2", one_up_to=100))
    assert call(agent, definition.name, payment(60)).status_code == 202
    allowance.refresh_from_db()
    assert allowance.status == AllowanceStatus.SUSPENDED and "version 2" in \
        allowance.status_reason
    allowances.grant(allowance, granters[0])
    assert allowance.status == AllowanceStatus.PENDING and allowance.approvals_required == 2
    allowances.grant(allowance, granters[1])
    assert allowance.status == AllowanceStatus.ACTIVE and allowance.policy_version == "2"
    assert call(agent, definition.name, payment(200)).status_code == 200
    assert handler.count == 2


def test_a_laxer_policy_version_keeps_it(make_tool: Any, agent: Any, alice: Any,
                                         granters: list[Any]) -> None:
    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    allowance = allowances.propose(bounds(definition.name, alice), granters[0])
    object.__setattr__(definition, "confirm", allowing(version="2", one_up_to=5000))
    assert call(agent, definition.name, payment(200)).status_code == 200
    allowance.refresh_from_db()
    assert allowance.status == AllowanceStatus.ACTIVE


def test_a_release_gives_the_use_back_exactly_once(make_tool: Any, agent: Any, alice: Any,
                                                   granters: list[Any]) -> None:
    fail = {"now": True}

    def handler(input: Any, ctx: Any) -> Any:
        if fail["now"]:
            raise ToolError("receiver_busy", "The receiver is busy.", retry="as_is")
        return {"paid": input["amount"]}

    definition = make_tool(handler, confirm=allowing(), input_schema=SCHEMA)
    allowance = allowances.propose(bounds(definition.name, alice, count=1), granters[0])
    body = payment(100)
    assert call(agent, definition.name, body).status_code == 409
    assert not AllowanceUse.objects.exists()
    assert AuditEntry.objects.filter(action="allowance_return").count() == 1
    assert OperationEvent.objects.filter(kind="allowance_returned").count() == 1
    fail["now"] = False
    assert call(agent, definition.name, body).status_code == 200  # the same key, given back
    assert AllowanceUse.objects.count() == 1
    assert call(agent, definition.name, body).status_code == 200  # a replay uses nothing
    assert AllowanceUse.objects.count() == 1
    assert call(agent, definition.name, payment(100)).status_code == 202  # its 1 call used
    assert allowance.pk


def test_budgets_still_apply_under_an_allowance(make_tool: Any, agent: Any, alice: Any,
                                                granters: list[Any]) -> None:
    policy = allowing()
    budgeted = Policy(version=policy.version, rules=policy.rules,
                      budgets=[Budget(name="pay-count", count=1)])
    definition = make_tool(Effects(), confirm=budgeted, input_schema=SCHEMA)
    allowances.propose(bounds(definition.name, alice), granters[0])
    assert call(agent, definition.name, payment()).status_code == 200
    assert call(agent, definition.name, payment()).status_code == 429


def test_another_users_calls_are_not_allowed(make_tool: Any, client_for: Any, alice: Any,
                                            bob: Any, granters: list[Any]) -> None:
    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    allowances.propose(bounds(definition.name, alice), granters[0])
    assert call(client_for(bob), definition.name, payment()).status_code == 202
    assert call(client_for(alice), definition.name, payment()).status_code == 200


def test_a_group_allowance_covers_its_members(make_tool: Any, client_for: Any, alice: Any,
                                              granters: list[Any]) -> None:
    from django.contrib.auth.models import Group

    payers = Group.objects.create(name="payers")
    alice.groups.add(payers)
    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    allowances.propose(bounds(definition.name, None, group=payers), granters[0])
    assert call(client_for(alice), definition.name, payment()).status_code == 200


def test_nobody_grants_for_their_own_calls(make_tool: Any, user_factory: Any) -> None:
    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    (boss,) = people(user_factory, "selfgranter")
    with pytest.raises(allowances.GrantRefused, match="four-eyes"):
        allowances.propose(bounds(definition.name, boss), boss)


def test_granting_from_a_request_approves_it_too(make_tool: Any, agent: Any, alice: Any,
                                                 granters: list[Any]) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=allowing(), input_schema=SCHEMA)
    body = payment(250)
    assert call(agent, definition.name, body).status_code == 202
    request = Confirmation.objects.get()
    allowances.propose(bounds(definition.name, alice, confirmation=request), granters[0],
                       base=request.input)
    request.refresh_from_db()
    assert request.status == "approved"
    assert call(agent, definition.name, body).status_code == 200
    assert call(agent, definition.name, payment(250)).status_code == 200
    assert handler.count == 2


# -- over MCP, with the official client -------------------------------------------------
@pytest.mark.skipif(
    not __import__("importlib.metadata").metadata.version("mcp").startswith("2"),
    reason="the official client's 2.x API")
@pytest.mark.django_db(transaction=True)
def test_over_mcp_the_agent_reads_its_allowance_and_runs_under_it(
        live_server: Any, user_factory: Any, make_tool: Any, granters: list[Any]) -> None:
    import anyio
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from rest_framework.authtoken.models import Token

    agent_user = user_factory("mcp-agent")
    token = Token.objects.create(user=agent_user)
    handler = Effects()
    definition = make_tool(handler, confirm=allowing(), input_schema={
        **SCHEMA, "required": ["operationId", "amount", "receiverId"]})
    allowance = allowances.propose(bounds(definition.name, agent_user, count=1), granters[0])

    def session_does(*arguments: dict[str, Any]) -> tuple[Any, list[Any]]:
        answers: list[Any] = []
        listed: list[Any] = []

        async def main() -> None:
            http = httpx2.AsyncClient(headers={"Authorization": f"Token {token.key}"},
                                      timeout=30)
            transport = streamable_http_client(f"{live_server.url}/agent/mcp/",
                                               http_client=http)
            async with transport as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                listed.append(await session.list_tools())
                for args in arguments:
                    answers.append(await session.call_tool(definition.name, args))

        anyio.run(main)
        return listed[0], answers

    listed, (ran, past) = session_does(payment(120), payment(120))
    tool = next(t for t in listed.tools if t.name == definition.name)
    assert f"under your allowance #{allowance.pk}" in (tool.description or "")
    assert "1 call and 900.00 left today" in (tool.description or ""), tool.description
    assert tool.meta["io.github.guarded-tools/allowances"]
    assert ran.is_error is False, ran.content
    assert past.is_error is True
    error = past.meta["io.github.guarded-tools/error"]
    assert error["code"] == "confirmation_required"
    assert f"past allowance #{allowance.pk}, 0 calls and 780.00 left today" in \
        past.content[0].text
    assert "the 1 call it allows per day is used" in \
        past.content[0].text
    assert handler.count == 1


def test_an_observer_sees_the_allowance_used_passed_and_given_back(
        make_tool: Any, client_for: Any, alice: Any, granters: list[Any]) -> None:
    seen: list[Any] = []
    fail = {"now": False}

    def handler(input: Any, ctx: Any) -> Any:
        if fail["now"]:
            raise ToolError("receiver_busy", "The receiver is busy.", retry="as_is")
        return {"paid": input["amount"]}

    definition = make_tool(handler, confirm=allowing(), input_schema=SCHEMA,
                           observe=seen.append)
    allowance = allowances.propose(bounds(definition.name, alice, count=2), granters[0])
    agent = client_for(alice)
    assert call(agent, definition.name, payment()).status_code == 200
    fail["now"] = True
    assert call(agent, definition.name, payment()).status_code == 409
    fail["now"] = False
    assert call(agent, definition.name, payment(120, receiver="r-99")).status_code == 202
    stages = [(e.stage, e.extra.get("allowance")) for e in seen
              if e.stage.startswith("allowance_")]
    assert stages == [("allowance_used", allowance.pk), ("allowance_used", allowance.pk),
                      ("allowance_returned", allowance.pk), ("allowance_passed", allowance.pk)]
    used = next(e for e in seen if e.stage == "allowance_used")
    assert used.extra["granted_by"] == "approver"
