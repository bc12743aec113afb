"""Approval policies (issue 27): the ``Owner()`` outcome, and refusals that never re-decide a
replay.

A rule whose outcome is ``Owner()`` sends the call through the owner-consent flow of
``confirm="owner"``: the user the call acts for decides on the consent page (with their
step-up), no staff member can, and the 202 names the rule.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client as DjangoClient

from guarded_tools import Approvers, Budget, Owner, Policy, Refuse, Rule, Run, confirmations
from guarded_tools.models import AuditEntry, Confirmation, ConfirmationStatus
from guarded_tools.store.replays import replays
from guarded_tools.transports.mcp.approvals import CONSENT_REQUEST
from tests.conftest import Effects, key
from tests.pipeline.policy_support import SCHEMA as PAYMENT
from tests.pipeline.policy_support import (
    browser_of,
    call,
    consent,
    owner_policy,
    page_of,
)

pytestmark = pytest.mark.django_db
CONF = "/admin/guarded_tools/confirmation/"
SCHEMA = {**PAYMENT, "required": ["operationId", "amount"]}


@pytest.fixture
def staff(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("boss", password="pw")


def test_an_owner_rule_asks_the_user_not_staff_over_rest(
        make_tool: Any, agent: Any, alice: Any, staff: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=owner_policy(), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 400}
    asked = call(agent, definition.name, body)
    assert asked.status_code == 202, asked.content
    error = asked.json()["error"]
    pending = error["confirmation"]
    assert (pending["rule"], pending["policy_version"], pending["decides"]) == (
        "yours", "4", "owner")
    assert "approvals" not in pending  # nobody's approvals are counted: the user decides
    assert 'rule "yours" applies' in error["message"] and pending["url"] in error["message"]
    assert "confirmation.url" in error["repair"]["instruction"]
    stored = Confirmation.objects.get()
    assert (stored.policy_rule, stored.policy_version, stored.approvals_required) == (
        "yours", "4", 0)
    assert pending["url"].endswith(f"/agent/confirmations/{stored.pk}/consent/")
    # Staff cannot decide it: not in code, not in the admin (whose page says who decides).
    with pytest.raises(confirmations.DecisionRefused):
        confirmations.approve(stored, staff)
    admin = DjangoClient()
    admin.force_login(staff)
    shown = admin.get(f"{CONF}{stored.pk}/change/").content.decode()
    assert 'data-testid="owner-decides"' in shown and 'value="approve"' not in shown
    assert 'data-testid="policy-rule">yours' in shown
    assert "the user this call acts for decides it" in shown
    admin.post(f"{CONF}{stored.pk}/decide/", {"decision": "approve"})
    stored.refresh_from_db()
    assert stored.status == ConfirmationStatus.PENDING and not AuditEntry.objects.exists()
    again = call(agent, definition.name, body)
    assert again.status_code == 202 and handler.count == 0
    # The user decides on their page, with their password; the audit row names the rule.
    assert consent(alice, page_of(pending["url"])).status_code == 302
    audit = AuditEntry.objects.get()
    assert audit.actor == alice and audit.action == AuditEntry.Action.APPROVE
    assert (audit.data["rule"], audit.data["policy_version"]) == ("yours", "4")
    assert audit.data["verified_by"] == "password"
    done = call(agent, definition.name, body)
    assert done.status_code == 200, done.content
    assert handler.count == 1
    assert call(agent, definition.name, body).headers["Idempotent-Replayed"] == "true"
    assert handler.count == 1


def test_another_user_never_sees_an_owner_rule_request(
        make_tool: Any, client_for: Any, alice: Any, bob: Any) -> None:
    definition = make_tool(Effects(), confirm=owner_policy(), input_schema=SCHEMA)
    asked = call(client_for(alice), definition.name, {"operationId": key(), "amount": 400})
    page = page_of(asked.json()["error"]["confirmation"]["url"])
    stranger = DjangoClient()
    stranger.force_login(bob)
    assert stranger.get(page).status_code == 404


def test_an_owner_rule_declined_by_the_user_declines(
        make_tool: Any, client_for: Any, alice: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=owner_policy(), input_schema=SCHEMA)
    agent = client_for(alice)
    body = {"operationId": key(), "amount": 400}
    page = page_of(call(agent, definition.name, body).json()["error"]["confirmation"]["url"])
    assert consent(alice, page, "decline", reason="not mine").status_code == 302
    assert Confirmation.objects.get().status == ConfirmationStatus.DECLINED
    assert call(agent, definition.name, body).status_code == 409 and handler.count == 0


def mcp_call(client: Any, name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    from tests.transports.mcp_calls import result, send

    return result(send(client, "tools/call", {"name": name, "arguments": arguments, **extra},
                       tasks=True, url_elicitation=True))


def test_an_owner_rule_over_mcp_is_a_url_elicitation_not_a_task(
        make_tool: Any, client_for: Any, alice: Any, staff: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=owner_policy(), input_schema=SCHEMA)
    agent = client_for(alice)
    arguments = {"operationId": key(), "amount": 400}
    asked = mcp_call(agent, definition.name, arguments)
    assert asked["resultType"] == "input_required", asked  # the client declares Tasks too
    request = asked["inputRequests"][CONSENT_REQUEST]
    assert request["method"] == "elicitation/create" and request["params"]["mode"] == "url"
    stored = Confirmation.objects.get()
    assert stored.task is False and stored.policy_rule == "yours"
    page = page_of(request["params"]["url"])
    assert page == f"/agent/confirmations/{stored.pk}/consent/"
    with pytest.raises(confirmations.DecisionRefused):
        confirmations.approve(stored, staff)
    assert consent(alice, page).status_code == 302
    retry = mcp_call(agent, definition.name, arguments,
                     inputResponses={CONSENT_REQUEST: {"action": "accept"}})
    assert retry["isError"] is False and retry["structuredContent"] == {"done": 1}
    assert handler.count == 1


def test_an_owner_rule_over_mcp_without_elicitation_gives_the_url(
        make_tool: Any, client_for: Any, alice: Any) -> None:
    from tests.transports.mcp_calls import result, send

    definition = make_tool(Effects(), confirm=owner_policy(), input_schema=SCHEMA)
    answer = result(send(client_for(alice), "tools/call", {
        "name": definition.name, "arguments": {"operationId": key(), "amount": 400}},
        tasks=False))
    assert answer["isError"] is True
    error = answer["_meta"]["io.github.guarded-tools/error"]
    assert error["confirmation"]["decides"] == "owner" and error["confirmation"]["rule"] == "yours"
    assert error["confirmation"]["url"] in answer["content"][0]["text"]


def test_a_declined_elicitation_withdraws_an_owner_rule_request(
        make_tool: Any, client_for: Any, alice: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=owner_policy(), input_schema=SCHEMA)
    agent = client_for(alice)
    arguments = {"operationId": key(), "amount": 400}
    mcp_call(agent, definition.name, arguments)
    answer = mcp_call(agent, definition.name, arguments,
                      inputResponses={CONSENT_REQUEST: {"action": "decline"}})
    assert answer["isError"] is True
    assert Confirmation.objects.get().status == ConfirmationStatus.WITHDRAWN
    assert handler.count == 0


def test_owner_sits_between_run_and_approvers_when_the_policy_changes(
        make_tool: Any, client_for: Any, alice: Any, staff: Any) -> None:
    """Asked of the owner, the policy now asks an approver: the approver decides (stricter),
    and the consent page is gone. Asked of an approver, the policy now asks the owner: the
    approver still decides."""
    flags: dict[str, Any] = {}
    handler = Effects()
    definition = make_tool(handler, confirm=owner_policy(flags), input_schema=SCHEMA)
    agent = client_for(alice)
    body = {"operationId": key(), "amount": 400}
    page = page_of(call(agent, definition.name, body).json()["error"]["confirmation"]["url"])
    flags["approvers"] = True
    again = call(agent, definition.name, body)
    assert again.status_code == 202
    assert again.json()["error"]["confirmation"]["approvals"] == {"given": 0, "required": 1}
    assert "url" not in again.json()["error"]["confirmation"]
    assert browser_of(alice).get(page).status_code == 404
    flags["approvers"] = False  # the policy asks the owner again: the approver still decides
    kept = call(agent, definition.name, body)
    assert kept.json()["error"]["confirmation"]["rule"] == "staff"
    confirmations.approve(Confirmation.objects.get(), staff)
    assert call(agent, definition.name, body).status_code == 200 and handler.count == 1


def test_the_listing_states_an_owner_rule(make_tool: Any, client_for: Any, alice: Any) -> None:
    definition = make_tool(confirm=owner_policy(), input_schema=SCHEMA)
    listed = client_for(alice).get("/agent/tools/").json()
    rows = listed["tools"] if isinstance(listed, dict) else listed
    text = next(r for r in rows if r["name"] == definition.name)["policy"]
    assert text.startswith("Payments up to 50.00 run at once; for now, one approver decides"
                           " the rest; more need your own approval.")
    assert "user's own approval" in text and "confirmation.url" in text
    mcp = client_for(alice).post("/agent/mcp/", {"jsonrpc": "2.0", "id": 1,
                                                 "method": "tools/list"}, format="json")
    assert "confirmation.url" in mcp.content.decode()


def test_problems_accept_owner_and_refuse_an_escalation_to_no_one() -> None:
    assert owner_policy().problems() == []
    odd = Policy(rules=[Rule(outcome=Run(), description="all")],
                 budgets=[Budget(name="day", limit=10, sum_field="amount", escalate=Run())])
    assert odd.problems() == ["budget 'day' escalates to Run(), not to people (Owner() or"
                              " Approvers(n))"]
    with pytest.raises(ValueError, match="escalates to Run"):
        from guarded_tools import tool

        tool(name=f"t_odd_{key()[:6]}", confirm=odd, input_schema=SCHEMA,
             idempotency_key="operationId")(lambda input, ctx: {})


def test_an_over_budget_call_can_escalate_to_its_owner(
        make_tool: Any, client_for: Any, alice: Any) -> None:
    handler = Effects()
    policy = Policy(rules=[Rule(outcome=Run(), description="Everything runs at once")],
                    budgets=[Budget(name="day", sum_field="amount", limit=100,
                                    escalate=Owner())])
    definition = make_tool(handler, confirm=policy, input_schema=SCHEMA)
    agent = client_for(alice)
    assert call(agent, definition.name, {"operationId": key(), "amount": 80}).status_code == 200
    body = {"operationId": key(), "amount": 50}
    asked = call(agent, definition.name, body)
    assert asked.status_code == 202, asked.content
    pending = asked.json()["error"]["confirmation"]
    assert pending["decides"] == "owner" and pending["rule"] == "over budget day"
    assert consent(alice, page_of(pending["url"])).status_code == 302
    assert call(agent, definition.name, body).status_code == 200 and handler.count == 2


# -- a refusal never re-decides a replay -----------------------------------------------------
def refusing(flags: dict[str, Any]) -> Policy:
    return Policy(rules=[
        Rule(name="closed", when=lambda **kw: flags.get("closed", False), outcome=Refuse(),
             description="While payments are closed, none runs"),
        Rule(name="open", outcome=Run(), description="otherwise payments run at once"),
    ])


@pytest.mark.parametrize("cache", ["replay cache", "database"])
def test_a_refusing_rule_still_replays_a_completed_call(
        cache: str, make_tool: Any, agent: Any) -> None:
    flags: dict[str, Any] = {}
    handler = Effects()
    definition = make_tool(handler, confirm=refusing(flags), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 10}
    first = call(agent, definition.name, body)
    assert first.status_code == 200 and handler.count == 1
    flags["closed"] = True
    if cache == "database":
        replays.clear()  # another process: the replay is read from the database
    replayed = call(agent, definition.name, body)
    assert replayed.status_code == 200, replayed.content
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.json()["output"] == first.json()["output"]
    # A new call is refused, naming the rule; the same key with another input is not run.
    fresh = call(agent, definition.name, {"operationId": key(), "amount": 10})
    assert fresh.status_code == 403 and fresh.json()["error"]["policy"]["rule"] == "closed"
    reused = call(agent, definition.name, {**body, "amount": 11})
    assert reused.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    assert handler.count == 1


def test_a_refusing_rule_refuses_a_key_released_without_its_effect(
        make_tool: Any, agent: Any, staff: Any) -> None:
    """A released key (its call declined, refused or proven not run) is fresh: the refusal
    applies to it."""
    flags: dict[str, Any] = {}
    policy = Policy(rules=[
        Rule(name="closed", when=lambda **kw: flags.get("closed", False), outcome=Refuse(),
             description="While payments are closed, none runs"),
        Rule(name="ask", outcome=Approvers(1), description="otherwise one approver"),
    ])
    handler = Effects()
    definition = make_tool(handler, confirm=policy, input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 10}
    assert call(agent, definition.name, body).status_code == 202  # its claim released
    flags["closed"] = True
    refused = call(agent, definition.name, body)
    assert refused.status_code == 403 and refused.json()["error"]["policy"]["rule"] == "closed"
    assert handler.count == 0


def test_an_owner_rule_runs_on_the_agents_retry_even_with_execute_on_approval(
        make_tool: Any, client_for: Any, alice: Any, settings: Any,
        django_capture_on_commit_callbacks: Any) -> None:
    """As a confirm="owner" tool's: the user's approval never runs the call by itself."""
    from project.celery import app

    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "EXECUTE_ON_APPROVAL": True}
    handler = Effects()
    definition = make_tool(handler, confirm=owner_policy(), input_schema=SCHEMA)
    agent = client_for(alice)
    body = {"operationId": key(), "amount": 400}
    page = page_of(call(agent, definition.name, body).json()["error"]["confirmation"]["url"])
    app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            assert consent(alice, page).status_code == 302
    finally:
        app.conf.task_always_eager = False
    assert callbacks == [] and handler.count == 0
    assert call(agent, definition.name, body).status_code == 200 and handler.count == 1
