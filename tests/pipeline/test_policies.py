"""Approval policies (issue 27): rules decide per call, in words, recorded with the request."""

from __future__ import annotations

from typing import Any

import pytest

from guarded_tools import Approvers, Policy, Rule, confirmations
from guarded_tools.models import Confirmation, ConfirmationStatus
from tests.conftest import Effects, key
from tests.pipeline.policy_support import SCHEMA, budgeted, call, payments

pytestmark = pytest.mark.django_db


@pytest.fixture
def approver(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("boss", password="pw")


def test_small_payment_runs_without_a_person(make_tool: Any, agent: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=payments(), input_schema=SCHEMA)
    answer = call(agent, definition.name, {"operationId": key(), "amount": 12.5})
    assert answer.status_code == 200, answer.content
    assert handler.count == 1 and not Confirmation.objects.exists()


def test_an_observer_sees_the_rule_that_decided(make_tool: Any, agent: Any) -> None:
    """With an observer (the demo's OpenTelemetry one, a site's own), the policy's decision
    is an event carrying the rule and the version, and the call still runs."""
    seen: list[Any] = []
    handler = Effects()
    definition = make_tool(handler, confirm=payments(version="3"), input_schema=SCHEMA,
                           observe=seen.append)
    answer = call(agent, definition.name, {"operationId": key(), "amount": 12.5})
    assert answer.status_code == 200, answer.content
    decided = [event for event in seen if event.stage == "policy_decided"]
    assert len(decided) == 1 and decided[0].extra == {"rule": "small", "version": "3"}
    assert handler.count == 1


def test_large_payment_names_its_rule_and_stores_it(make_tool: Any, agent: Any,
                                                    approver: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=payments(version="7"), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 500}
    first = call(agent, definition.name, body)
    assert first.status_code == 202, first.content
    error = first.json()["error"]
    assert error["confirmation"]["rule"] == "large"
    assert error["confirmation"]["policy_version"] == "7"
    assert error["confirmation"]["approvals"] == {"given": 0, "required": 1}
    assert 'rule "large"' in error["message"] and "0 of 1 approvals given" in error["message"]
    stored = Confirmation.objects.get()
    assert (stored.policy_rule, stored.policy_version, stored.approvals_required) == (
        "large", "7", 1)
    confirmations.approve(stored, approver)
    done = call(agent, definition.name, body)
    assert done.status_code == 200 and handler.count == 1
    assert call(agent, definition.name, body).headers["Idempotent-Replayed"] == "true"


def test_refusal_names_its_rule_and_repair(make_tool: Any, agent: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=payments(), input_schema=SCHEMA)
    answer = call(agent, definition.name, {"operationId": key(), "amount": 200_000})
    assert answer.status_code == 403, answer.content
    error = answer.json()["error"]
    assert error["code"] == "authorization_denied" and "absurd" in error["message"]
    assert error["policy"] == {"rule": "absurd", "version": "1"}
    assert error["repair"]["instruction"] == "Ask for less."
    assert handler.count == 0 and not Confirmation.objects.exists()


def test_listing_states_the_policy_in_words(make_tool: Any, client_for: Any, alice: Any) -> None:
    definition = make_tool(confirm=payments(), input_schema=SCHEMA)
    text = ("Payments up to 50.00 run at once; up to 1,000.00 need one approver; more need two;"
            " above 100,000.00 are refused.")
    listed = client_for(alice).get("/agent/tools/").json()
    rows = listed["tools"] if isinstance(listed, dict) else listed
    row = next(r for r in rows if r["name"] == definition.name)
    assert row["policy"] == text and row["confirmation"] == "policy"
    mcp = client_for(alice).post("/agent/mcp/", {"jsonrpc": "2.0", "id": 1,
                                                 "method": "tools/list"}, format="json")
    assert text in mcp.content.decode()


def test_a_policy_grown_stricter_applies_to_the_pending_request(
        make_tool: Any, agent: Any, approver: Any, settings: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=payments(), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 500}
    assert call(agent, definition.name, body).status_code == 202
    object.__setattr__(definition, "confirm", payments(version="2", two_above=100))
    again = call(agent, definition.name, body)
    assert again.status_code == 202
    assert again.json()["error"]["confirmation"]["approvals"]["required"] == 2
    assert Confirmation.objects.get().policy_version == "2"


def test_a_policy_grown_laxer_keeps_the_request(make_tool: Any, agent: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=payments(), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 40}
    object.__setattr__(definition, "confirm", Policy(rules=[
        Rule(outcome=Approvers(1), description="everything needs one approver")]))
    assert call(agent, definition.name, body).status_code == 202
    object.__setattr__(definition, "confirm", payments(version="2"))  # 40 would now run
    assert call(agent, definition.name, body).status_code == 202
    assert handler.count == 0
    assert Confirmation.objects.get().status == ConfirmationStatus.PENDING


def test_openapi_states_the_policy(make_tool: Any, client_for: Any, alice: Any) -> None:
    definition = make_tool(confirm=payments(), input_schema=SCHEMA)
    document = client_for(alice).get("/agent/openapi.json").json()
    text = "Approval policy: Payments up to 50.00 run at once"
    assert any(text in (op.get("description") or "") for path in document["paths"].values()
               for op in path.values() if op.get("operationId") == f"call_{definition.name}")


# -- N-of-M approval ------------------------------------------------------------------------
CONF = "/admin/guarded_tools/confirmation/"


@pytest.fixture
def two_approvers(user_factory: Any) -> list[Any]:
    from django.contrib.auth.models import Permission

    perm = Permission.objects.get(codename="approve_confirmation")
    people = []
    for name in ("approver", "approver2"):
        person = user_factory(name, is_staff=True)
        person.user_permissions.add(perm, *Permission.objects.filter(
            codename="view_confirmation"))
        people.append(person)
    return people


def admin_client(person: Any) -> Any:
    from django.test import Client

    client = Client()
    client.force_login(person)
    return client


def test_two_approvals_from_distinct_people_in_the_admin(
        make_tool: Any, agent: Any, alice: Any, two_approvers: list[Any]) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=payments(), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 1500}
    first = call(agent, definition.name, body)
    assert first.status_code == 202
    assert "0 of 2 approvals given" in first.json()["error"]["message"]
    pending = Confirmation.objects.get()
    one, two = (admin_client(p) for p in two_approvers)
    page = one.get(f"{CONF}{pending.pk}/change/").content.decode()
    assert 'data-testid="policy-rule">huge' in page and "approver2" in page
    one.post(f"{CONF}{pending.pk}/decide/", {"decision": "approve"})
    pending.refresh_from_db()
    assert pending.status == ConfirmationStatus.PENDING and len(pending.approvals) == 1
    again = call(agent, definition.name, body)
    assert again.status_code == 202 and handler.count == 0
    assert "1 of 2 approvals given" in again.json()["error"]["message"]
    assert again.json()["error"]["confirmation"]["approvals"] == {"given": 1, "required": 2}
    # The same person cannot give the second approval; the page says who still can.
    page = one.get(f"{CONF}{pending.pk}/change/").content.decode()
    assert "1 of 2 approvals given: approver" in page and "approved this request already" in page
    one.post(f"{CONF}{pending.pk}/decide/", {"decision": "approve"})
    pending.refresh_from_db()
    assert pending.status == ConfirmationStatus.PENDING and len(pending.approvals) == 1
    two.post(f"{CONF}{pending.pk}/decide/", {"decision": "approve"})
    pending.refresh_from_db()
    assert pending.status == ConfirmationStatus.APPROVED
    assert [a["label"] for a in pending.approvals] == ["approver", "approver2"]
    assert call(agent, definition.name, body).status_code == 200 and handler.count == 1
    from guarded_tools.models import AuditEntry

    rules = list(AuditEntry.objects.filter(confirmation_id=pending.pk).values_list(
        "data__rule", flat=True))
    assert rules == ["huge", "huge"]


def test_the_requester_never_approves_a_two_approval_request(
        make_tool: Any, user_factory: Any, client_for: Any, settings: Any) -> None:
    from django.contrib.auth.models import Permission

    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "CONFIRMATION_ALLOW_SELF_APPROVAL": True}
    boss = user_factory("selfboss", is_staff=True)
    boss.user_permissions.add(*Permission.objects.filter(
        codename__in=["approve_confirmation", "view_confirmation"]))
    definition = make_tool(Effects(), confirm=payments(), input_schema=SCHEMA)
    assert call(client_for(boss), definition.name,
                {"operationId": key(), "amount": 1500}).status_code == 202
    pending = Confirmation.objects.get()
    admin_client(boss).post(f"{CONF}{pending.pk}/decide/", {"decision": "approve"})
    pending.refresh_from_db()
    assert pending.approvals == [] and pending.status == ConfirmationStatus.PENDING


def test_declining_once_declines(make_tool: Any, agent: Any, two_approvers: list[Any]) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=payments(), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 1500}
    call(agent, definition.name, body)
    pending = Confirmation.objects.get()
    admin_client(two_approvers[0]).post(f"{CONF}{pending.pk}/decide/", {"decision": "approve"})
    admin_client(two_approvers[1]).post(f"{CONF}{pending.pk}/decide/",
                                        {"decision": "decline", "reason": "too much"})
    pending.refresh_from_db()
    assert pending.status == ConfirmationStatus.DECLINED
    assert call(agent, definition.name, body).status_code == 409 and handler.count == 0


def test_an_mcp_task_waiting_for_its_second_approval_stays_working(
        make_tool: Any, alice: Any, client_for: Any, two_approvers: list[Any],
        django_capture_on_commit_callbacks: Any) -> None:
    from project.celery import app
    from tests.transports.mcp_calls import call as mcp_call
    from tests.transports.mcp_calls import get_task

    handler = Effects()
    schema = {**SCHEMA, "required": ["operationId", "amount"]}
    definition = make_tool(handler, confirm=payments(), input_schema=schema)
    agent = client_for(alice)
    created = mcp_call(agent, definition.name, {"operationId": key(), "amount": 1500})
    assert created["resultType"] == "task" and created["status"] == "working"
    app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True):
            confirmations.approve(Confirmation.objects.get(), two_approvers[0])
        assert get_task(agent, created["taskId"])["status"] == "working"
        assert handler.count == 0
        with django_capture_on_commit_callbacks(execute=True):
            confirmations.approve(Confirmation.objects.get(), two_approvers[1])
    finally:
        app.conf.task_always_eager = False
    assert handler.count == 1
    assert get_task(agent, created["taskId"])["status"] == "completed"


# -- budgets and rate limits ----------------------------------------------------------------
def test_a_count_budget_answers_rate_limited_with_retry_after(make_tool: Any,
                                                             agent: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=budgeted(count=2), input_schema=SCHEMA)
    bodies = [{"operationId": key(), "amount": 1} for _ in range(3)]
    assert [call(agent, definition.name, b).status_code for b in bodies[:2]] == [200, 200]
    refused = call(agent, definition.name, bodies[2])
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"]["code"] == "rate_limited"
    # Replays do not count.
    assert call(agent, definition.name, bodies[0]).headers["Idempotent-Replayed"] == "true"
    assert handler.count == 2


def test_a_sum_budget_says_what_remains_and_a_release_gives_back(make_tool: Any,
                                                                 agent: Any) -> None:
    definition = make_tool(Effects(), confirm=budgeted(limit=100), input_schema=SCHEMA)
    assert call(agent, definition.name, {"operationId": key(), "amount": 60}).status_code == 200
    refused = call(agent, definition.name, {"operationId": key(), "amount": 50})
    assert refused.status_code == 429, refused.content
    error = refused.json()["error"]
    assert error["code"] == "budget_exceeded" and error["budget"]["remaining"] == "40.00"
    assert "frees_at" in error["budget"] and "40.00" in error["repair"]["instruction"]
    # The refused call reserved nothing: 40 still remains.
    assert call(agent, definition.name, {"operationId": key(), "amount": 30}).status_code == 200
    assert call(agent, definition.name, {"operationId": key(), "amount": 10}).status_code == 200


def test_a_released_attempt_gives_its_reservation_back(make_tool: Any, agent: Any) -> None:
    from guarded_tools.core.errors import ToolError
    from guarded_tools.models import Reservation

    def handler(input: Any, ctx: Any) -> Any:
        raise ToolError("not now", repair={"action": "ask_user", "instruction": "x"})

    definition = make_tool(handler, confirm=budgeted(limit=100), input_schema=SCHEMA)
    assert call(agent, definition.name, {"operationId": key(), "amount": 90}).status_code != 200
    assert not Reservation.objects.exists()


def test_over_budget_escalates_to_two_approvers_and_a_decline_gives_back(
        make_tool: Any, agent: Any, two_approvers: list[Any]) -> None:
    from guarded_tools.models import Reservation

    handler = Effects()
    definition = make_tool(handler, confirm=budgeted(limit=100, escalate=Approvers(2)),
                           input_schema=SCHEMA)
    assert call(agent, definition.name, {"operationId": key(), "amount": 80}).status_code == 200
    body = {"operationId": key(), "amount": 50}
    asked = call(agent, definition.name, body)
    assert asked.status_code == 202
    assert asked.json()["error"]["confirmation"]["rule"] == "over budget spend"
    assert asked.json()["error"]["confirmation"]["approvals"]["required"] == 2
    assert Reservation.objects.count() == 1  # the waiting call holds nothing
    confirmations.decline(Confirmation.objects.get(), two_approvers[0], "no")
    assert call(agent, definition.name, body).status_code == 409
    assert Reservation.objects.count() == 1 and handler.count == 1
