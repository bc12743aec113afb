"""An approval is held against the rule in force when its call runs.

The rule in force is the policy's rule for the call now, made stricter by a budget over
its limit. An approval given under a laxer rule (fewer approvers, the owner where staff
are asked now) sends the request back to pending with the approvals that count, its
original expiry, and the approvers still needed told again; the agent gets a 202 and
nothing runs. Decisions are taken from the request's row as it stands (never from a page
or an object read earlier), a policy's approvers are never the requester, and the
operation's timeline names every approver.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest
from django.db.models import Sum
from django.test import Client

from guarded_tools import Approvers, Budget, Policy, Rule, Run, confirmations
from guarded_tools.confirmations.requests import approvals_text
from guarded_tools.core.errors import ToolError
from guarded_tools.models import (
    Confirmation,
    ConfirmationStatus,
    Operation,
    OperationState,
    Reservation,
)
from tests.conftest import Effects, key
from tests.pipeline.policy_support import SCHEMA, call, consent, owner_policy, page_of, payments
from tests.store.timeline import rows

pytestmark = pytest.mark.django_db
CONF = "/admin/guarded_tools/confirmation/"
OPS = "/admin/guarded_tools/operation/"


@pytest.fixture
def two_approvers(user_factory: Any) -> list[Any]:
    """approver and approver2: staff who approve and view requests, each with an email."""
    return [user_factory(name, is_staff=True, email=f"{name}@example.com",
                         perms=("guarded_tools.approve_confirmation",
                                "guarded_tools.view_confirmation"))
            for name in ("approver", "approver2")]


def admin_client(person: Any) -> Client:
    client = Client()
    client.force_login(person)
    return client


def approve_in_admin(person: Any, confirmation: Confirmation) -> str:
    """``person`` presses Approve on the request's page; the message the page then shows."""
    answer = admin_client(person).post(f"{CONF}{confirmation.pk}/decide/",
                                       {"decision": "approve"}, follow=True)
    assert answer.status_code == 200
    return " ".join(str(m) for m in answer.context["messages"])


def latest() -> Confirmation:
    return Confirmation.objects.order_by("-created_at").first()


# -- an approval given under a laxer rule -------------------------------------------------
def test_an_approval_asks_again_when_the_policy_now_asks_more(
        make_tool: Any, agent: Any, two_approvers: list[Any], eager_celery: None,
        mailoutbox: list[Any], django_capture_on_commit_callbacks: Any) -> None:
    """v1: 500 needs one approver; one approval; v2: 500 needs two. The agent's retry is
    a 202 with "1 of 2 approvals given", the request keeps its expiry, the approver still
    needed is emailed again (not the one who approved), and nothing runs until then."""
    one, two = two_approvers
    handler = Effects()
    definition = make_tool(handler, confirm=payments(version="1"), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 500}
    first = call(agent, definition.name, body)
    assert first.status_code == 202, first.content
    asked = first.json()["error"]["confirmation"]
    assert asked["approvals"] == {"given": 0, "required": 1}
    assert "Approved." in approve_in_admin(one, latest())
    assert latest().status == ConfirmationStatus.APPROVED

    object.__setattr__(definition, "confirm", payments(version="2", two_above=100))
    mailoutbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        again = call(agent, definition.name, body)
    assert again.status_code == 202, again.content
    error = again.json()["error"]
    assert error["code"] == "confirmation_required"
    assert 'rule "huge" applies: 1 of 2 approvals given' in error["message"]
    assert error["confirmation"]["approvals"] == {"given": 1, "required": 2}
    assert (error["confirmation"]["id"], error["confirmation"]["policy_version"]) == (
        asked["id"], "2")
    assert error["confirmation"]["expires_at"] == asked["expires_at"]  # its original expiry
    assert handler.count == 0
    # The claim was released: the key is fresh, its operation waits for the request.
    operation = Operation.objects.get(tool=definition.name)
    assert operation.state == OperationState.RELEASED
    assert [m.to for m in mailoutbox] == [["approver2@example.com"]]

    # The one who approved cannot give the second approval; another person can.
    assert "approved this request already" in approve_in_admin(one, latest())
    assert "Approved." in approve_in_admin(two, latest())
    assert [a["label"] for a in latest().approvals] == ["approver", "approver2"]
    done = call(agent, definition.name, body)
    assert done.status_code == 200, done.content
    assert handler.count == 1


def test_a_rule_grown_laxer_uses_the_approvals_as_given(
        make_tool: Any, agent: Any, two_approvers: list[Any]) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=payments(two_above=100), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 500}
    assert call(agent, definition.name, body).json()["error"]["confirmation"]["approvals"] == {
        "given": 0, "required": 2}
    for person in two_approvers:
        approve_in_admin(person, latest())
    object.__setattr__(definition, "confirm", payments(version="2"))  # 500: one approver
    done = call(agent, definition.name, body)
    assert done.status_code == 200, done.content
    assert handler.count == 1


def test_an_approval_from_outside_the_group_the_rule_now_names_does_not_count(
        make_tool: Any, agent: Any, two_approvers: list[Any]) -> None:
    from django.contrib.auth.models import Group

    one, two = two_approvers
    finance = Group.objects.create(name="finance")
    two.groups.add(finance)
    flags: dict[str, Any] = {}
    policy = Policy(version="1", rules=[
        Rule(name="finance", when=lambda **kw: flags.get("finance", False),
             outcome=Approvers(1, group="finance"), description="one approver from finance"),
        Rule(name="anyone", outcome=Approvers(1), description="one approver"),
    ])
    handler = Effects()
    definition = make_tool(handler, confirm=policy, input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 500}
    assert call(agent, definition.name, body).status_code == 202
    approve_in_admin(one, latest())
    flags["finance"] = True
    again = call(agent, definition.name, body)
    assert again.status_code == 202, again.content
    assert again.json()["error"]["confirmation"]["approvals"] == {"given": 0, "required": 1}
    assert (latest().approvers_group, latest().policy_rule) == ("finance", "finance")
    assert "Only members of finance" in approve_in_admin(one, latest())
    approve_in_admin(two, latest())
    assert call(agent, definition.name, body).status_code == 200 and handler.count == 1


def test_owner_consent_does_not_count_as_staffs_approval(
        make_tool: Any, agent: Any, alice: Any, two_approvers: list[Any]) -> None:
    """Approved by its owner under Owner(); the policy now asks Approvers(1): the retry
    waits for one staff approval (the owner's consent is not one)."""
    flags: dict[str, Any] = {}
    handler = Effects()
    definition = make_tool(handler, confirm=owner_policy(flags),
                           input_schema={**SCHEMA, "required": ["operationId", "amount"]})
    body = {"operationId": key(), "amount": 400}
    asked = call(agent, definition.name, body).json()["error"]["confirmation"]
    assert asked["decides"] == "owner"
    assert consent(alice, page_of(asked["url"])).status_code == 302
    assert latest().status == ConfirmationStatus.APPROVED
    flags["approvers"] = True
    again = call(agent, definition.name, body)
    assert again.status_code == 202, again.content
    pending = again.json()["error"]["confirmation"]
    assert pending["approvals"] == {"given": 0, "required": 1} and "url" not in pending
    assert pending["rule"] == "staff" and pending["expires_at"] == asked["expires_at"]
    assert handler.count == 0
    approve_in_admin(two_approvers[0], latest())
    assert call(agent, definition.name, body).status_code == 200 and handler.count == 1


def test_a_requester_self_approval_does_not_count_under_a_policy(
        make_tool: Any, user_factory: Any, client_for: Any, settings: Any,
        two_approvers: list[Any]) -> None:
    """A policy's request its requester approved (as it could when self-approval was
    allowed for every request) is not enough at the run: another person approves."""
    boss = user_factory("selfboss", is_staff=True,
                        perms=("guarded_tools.approve_confirmation",))
    handler = Effects()
    definition = make_tool(handler, confirm=payments(), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 500}
    agent = client_for(boss)
    assert call(agent, definition.name, body).status_code == 202
    Confirmation.objects.update(status=ConfirmationStatus.APPROVED, decided_by=boss)
    again = call(agent, definition.name, body)
    assert again.status_code == 202, again.content
    assert again.json()["error"]["confirmation"]["approvals"] == {"given": 0, "required": 1}
    assert handler.count == 0
    approve_in_admin(two_approvers[0], latest())
    assert call(agent, definition.name, body).status_code == 200 and handler.count == 1


@pytest.mark.parametrize("kept", ["by the approval's audit row", "from its creation"])
def test_a_request_asked_again_past_its_original_expiry_has_expired(
        kept: str, make_tool: Any, agent: Any, two_approvers: list[Any]) -> None:
    """Its approval outlived the request's own time: asked again, it has none left. The
    original expiry is the one the approval's audit row kept, else (an approval recorded
    without it) its creation plus the tool's time to live."""
    from datetime import timedelta

    from django.utils import timezone

    from guarded_tools.models import AuditEntry

    handler = Effects()
    definition = make_tool(handler, confirm=payments(), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 500}
    assert call(agent, definition.name, body).status_code == 202
    approve_in_admin(two_approvers[0], latest())  # its approval lasts an hour from now
    audit = AuditEntry.objects.get()
    assert audit.data["request_expires_at"]
    past = timezone.now() - timedelta(minutes=1)
    if kept == "from its creation":
        AuditEntry.objects.update(data={})
        Confirmation.objects.update(created_at=past - timedelta(days=1))
    else:
        AuditEntry.objects.update(data={**audit.data, "request_expires_at": past.isoformat()})
    object.__setattr__(definition, "confirm", payments(version="2", two_above=100))
    again = call(agent, definition.name, body)
    assert again.json()["error"]["code"] == "confirmation_expired", again.content
    assert latest().status == ConfirmationStatus.EXPIRED and handler.count == 0


# -- over MCP: the agent's retry, with the official client ------------------------------
# Django 5.2's environment has the mcp 1.x client; Django 6's runs cover both databases.
@pytest.mark.skipif(
    not __import__("importlib.metadata").metadata.version("mcp").startswith("2"),
    reason="the official client's 2.x API")
@pytest.mark.django_db(transaction=True)
def test_over_mcp_the_retry_is_asked_again_with_the_approvals_it_has(
        live_server: Any, user_factory: Any, make_tool: Any,
        two_approvers: list[Any]) -> None:
    import anyio
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=user_factory("mcp-agent"))
    handler = Effects()
    definition = make_tool(handler, confirm=payments(),
                           input_schema={**SCHEMA, "required": ["operationId", "amount"]})
    arguments = {"operationId": key(), "amount": 500}

    def agent_calls() -> Any:
        """The agent's call (or its retry), with the official client."""
        answer: list[Any] = []

        async def main() -> None:
            http = httpx2.AsyncClient(headers={"Authorization": f"Token {token.key}"},
                                      timeout=30)
            transport = streamable_http_client(f"{live_server.url}/agent/mcp/",
                                               http_client=http)
            async with transport as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                answer.append(await session.call_tool(definition.name, arguments))

        anyio.run(main)
        return answer[0]

    asked = agent_calls()
    assert asked.is_error is True
    assert asked.meta["io.github.guarded-tools/error"]["confirmation"]["approvals"] == {
        "given": 0, "required": 1}
    confirmations.approve(latest(), two_approvers[0])
    object.__setattr__(definition, "confirm", payments(version="2", two_above=100))
    again = agent_calls()
    error = again.meta["io.github.guarded-tools/error"]
    assert again.is_error is True and error["code"] == "confirmation_required"
    assert error["confirmation"]["approvals"] == {"given": 1, "required": 2}
    assert "1 of 2 approvals given" in again.content[0].text
    assert handler.count == 0
    confirmations.approve(latest(), two_approvers[1])
    done = agent_calls()
    assert done.is_error is False, done.content
    assert handler.count == 1


def test_an_mcp_task_stays_working_when_its_approval_is_asked_again(
        make_tool: Any, alice: Any, client_for: Any, two_approvers: list[Any],
        django_capture_on_commit_callbacks: Any, eager_celery: None) -> None:
    """The approval runs the task's call on Celery; the rule now asks two approvers: the
    task keeps working (nothing ran) until the second approval, then completes."""
    from tests.transports.mcp_calls import call as mcp_call
    from tests.transports.mcp_calls import get_task

    handler = Effects()
    definition = make_tool(handler, confirm=payments(),
                           input_schema={**SCHEMA, "required": ["operationId", "amount"]})
    agent = client_for(alice)
    created = mcp_call(agent, definition.name, {"operationId": key(), "amount": 500})
    assert created["resultType"] == "task" and created["status"] == "working"
    object.__setattr__(definition, "confirm", payments(version="2", two_above=100))
    with django_capture_on_commit_callbacks(execute=True):
        confirmations.approve(latest(), two_approvers[0])
    assert handler.count == 0
    assert latest().status == ConfirmationStatus.PENDING and latest().task_error is None
    assert get_task(agent, created["taskId"])["status"] == "working"
    with django_capture_on_commit_callbacks(execute=True):
        confirmations.approve(latest(), two_approvers[1])
    assert handler.count == 1
    assert get_task(agent, created["taskId"])["status"] == "completed"


# -- the day's budget ------------------------------------------------------------------------
def day_policy() -> Policy:
    """The demo's rules on a test tool: up to 50.00 at once, up to 1,000.00 one approver,
    more two; above 2,000.00 a day, two approvers."""
    return Policy(version="1", rules=[
        Rule(name="small", when=lambda input, **kw: input["amount"] <= 50, outcome=Run(),
             description="Payments up to 50.00 run at once"),
        Rule(name="large", when=lambda input, **kw: input["amount"] <= 1000,
             outcome=Approvers(1), description="up to 1,000.00 need one approver"),
        Rule(name="huge", outcome=Approvers(2), description="more need two"),
    ], budgets=[Budget(name="day", sum_field="amount", limit=2000, escalate=Approvers(2),
                       description="above 2,000.00 a day, two approvers")])


class FailsFirst(Effects):
    """Pays; the first attempt of ``operation`` fails before its effect (a stale
    authorization), so its claim is released with the approval it used."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: set[str] = set()

    def __call__(self, input: Any, ctx: Any) -> Any:
        if input["operationId"] in self.failing:
            self.failing.discard(input["operationId"])
            raise ToolError("stale", "The authorization is stale.",
                            repair={"action": "ask_user", "instruction": "Authorize again."})
        return super().__call__(input, ctx)


def day_total() -> Decimal:
    return Reservation.objects.aggregate(total=Sum("amount"))["total"] or Decimal(0)


@pytest.mark.parametrize("first_attempt", ["not used", "used by a released attempt"])
def test_a_day_over_its_budget_is_never_paid_with_one_approval_per_payment(
        first_attempt: str, make_tool: Any, agent: Any, two_approvers: list[Any]) -> None:
    """900 → one approval; 49, 950 and 951 paid (1,950.00 today); the 900's retry would
    take the day to 2,850.00: it waits for a second approver (1 of 2), holding nothing."""
    one, two = two_approvers
    handler = FailsFirst()
    definition = make_tool(handler, confirm=day_policy(), input_schema=SCHEMA)
    big = {"operationId": key(), "amount": 900}
    assert call(agent, definition.name, big).status_code == 202
    approve_in_admin(one, latest())
    if first_attempt != "not used":
        handler.failing.add(big["operationId"])
        failed = call(agent, definition.name, big)
        assert failed.json()["error"]["code"] == "stale", failed.content
        assert latest().status == ConfirmationStatus.CONSUMED and handler.count == 0
    assert call(agent, definition.name, {"operationId": key(), "amount": 49}).status_code == 200
    for amount in (950, 951):
        body = {"operationId": key(), "amount": amount}
        assert call(agent, definition.name, body).status_code == 202
        approve_in_admin(one, latest())
        assert call(agent, definition.name, body).status_code == 200
    assert day_total() == Decimal("1950") and handler.count == 3

    retry = call(agent, definition.name, big)
    assert retry.status_code == 202, retry.content
    pending = retry.json()["error"]["confirmation"]
    assert pending["rule"] == "over budget day"
    assert pending["approvals"] == {"given": 1, "required": 2}
    assert handler.count == 3 and day_total() == Decimal("1950")  # the 900 holds nothing
    assert "Approved." in approve_in_admin(two, Confirmation.objects.get(pk=pending["id"]))
    paid = call(agent, definition.name, big)
    assert paid.status_code == 200, paid.content
    assert handler.count == 4 and day_total() == Decimal("2850")
    used = Confirmation.objects.get(pk=pending["id"])
    assert [a["label"] for a in used.approvals] == ["approver", "approver2"]


@pytest.fixture
def demo_agent() -> Any:
    """The demo's agent, by its token, on the seeded data (as the docs' demo tour)."""
    from io import StringIO

    from django.core.management import call_command
    from rest_framework.test import APIClient

    from project.demo.management.commands.demo_seed import AGENT_TOKEN

    call_command("demo_seed", stdout=StringIO())
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AGENT_TOKEN}")
    return client


def test_the_demo_day_asks_a_second_approver_for_the_payment_past_2000(
        demo_agent: Any) -> None:
    """The demo as walked: 900.00 with one approval, then 49 + 950 + 951, then the 900's
    retry with a fresh authorization: a second approver, not a payment."""
    from tests.integration.demo import Payer, decide, log_in

    payer = Payer(demo_agent)
    approver, approver2 = log_in("approver"), log_in("approver2")

    def paid_with_one_approval(amount: str) -> None:
        body = payer.body(amount)
        assert payer.send(body).status_code == 202
        decide(approver, Confirmation.objects.get(key=body["operationId"]))
        assert payer.send(body).status_code == 200

    big = payer.body("900.00")
    assert payer.send(big).status_code == 202
    decide(approver, Confirmation.objects.get(key=big["operationId"]))
    assert payer.send(payer.body("49.00")).status_code == 200
    paid_with_one_approval("950.00")
    paid_with_one_approval("951.00")
    fresh = {**big, **{k: v for k, v in payer.body("900.00").items()
                       if k not in ("operationId",)}}
    retry = payer.send(fresh)
    assert retry.status_code == 202, retry.content
    pending = retry.json()["error"]["confirmation"]
    assert pending["rule"] == "over budget send_payment per day"
    assert pending["approvals"] == {"given": 1, "required": 2}
    accounts = payer.agent.post("/agent/tools/list_payment_accounts/", {}, format="json")
    assert accounts.json()["output"]["accounts"][0]["balance"] == "3050.00"
    decide(approver2, Confirmation.objects.get(pk=pending["id"]))
    assert payer.send(fresh).status_code == 200


# -- decisions from the row as it stands -----------------------------------------------------
def test_an_object_read_before_the_policy_asked_more_gives_one_approval_of_two(
        make_tool: Any, agent: Any, two_approvers: list[Any]) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=payments(), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 500}
    assert call(agent, definition.name, body).status_code == 202
    seen = latest()  # "0 of 1", as a screen read it
    object.__setattr__(definition, "confirm", payments(version="2", two_above=100))
    assert call(agent, definition.name, body).status_code == 202  # raised to 2
    decided = confirmations.approve(seen, two_approvers[0])
    assert decided.status == ConfirmationStatus.PENDING
    assert approvals_text(decided) == "1 of 2 approvals given"
    again = call(agent, definition.name, body)
    assert again.status_code == 202 and "1 of 2 approvals given" in again.json()["error"][
        "message"]
    assert handler.count == 0


def test_the_admin_decides_from_the_row_as_it_stands(
        make_tool: Any, agent: Any, two_approvers: list[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's retry raises the request to two approvals right after the admin read
    it: the approver's click records one approval of two."""
    from guarded_tools.console.admin import confirmations as admin_confirmations

    handler = Effects()
    definition = make_tool(handler, confirm=payments(), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 500}
    assert call(agent, definition.name, body).status_code == 202
    read = admin_confirmations.get_object_or_404

    def read_then_retry(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        object.__setattr__(definition, "confirm", payments(version="2", two_above=100))
        assert call(agent, definition.name, body).status_code == 202
        return found

    monkeypatch.setattr(admin_confirmations, "get_object_or_404", read_then_retry)
    said = approve_in_admin(two_approvers[0], latest())
    assert "Approval recorded: 1 of 2 approvals given" in said
    assert latest().status == ConfirmationStatus.PENDING
    assert call(agent, definition.name, body).status_code == 202 and handler.count == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_approvals_racing_with_the_retry_that_asks_more_never_run_on_one(
        make_tool: Any, alice: Any, two_approvers: list[Any]) -> None:
    """Two approvers click on a page read when one approval sufficed while the agent's
    retry raises the rule to two, on separate connections, in every order the threads
    find: the call runs only with two distinct approvals."""
    from rest_framework.test import APIClient

    from tests.conftest import in_threads

    handler = Effects()
    definition = make_tool(handler, confirm=payments(), input_schema=SCHEMA)
    agent = APIClient()
    agent.force_authenticate(alice)
    for _round in range(6):
        object.__setattr__(definition, "confirm", payments())
        body = {"operationId": key(), "amount": 500}
        assert call(agent, definition.name, body).status_code == 202
        seen = Confirmation.objects.get(key=body["operationId"])
        object.__setattr__(definition, "confirm", payments(version="2", two_above=100))
        ran_before = handler.count

        def act(i: int, seen: Any = seen, body: Any = body) -> Any:
            if i < 2:
                try:
                    return confirmations.approve(seen, two_approvers[i]).status
                except confirmations.DecisionRefused as refused:
                    return str(refused)
            client = APIClient()
            client.force_authenticate(alice)
            return call(client, definition.name, body).status_code

        results = in_threads(3, act)
        row = Confirmation.objects.get(pk=seen.pk)
        approvers = {given["id"] for given in row.approvals}
        assert row.approvals_required == 2, results
        if handler.count > ran_before or row.status in (ConfirmationStatus.APPROVED,
                                                         ConfirmationStatus.CONSUMED):
            assert approvers == {p.pk for p in two_approvers}, (results, row.approvals)
        final = call(agent, definition.name, body)
        if len(approvers) < 2:
            assert final.status_code == 202, (results, row.status, row.approvals)
            assert handler.count == ran_before
        else:
            assert final.status_code == 200
            assert handler.count == ran_before + 1


# -- a policy's approvers are never the requester ------------------------------------------
@pytest.mark.parametrize("auth", ["token", "session"])
def test_self_approval_allowed_still_never_approves_a_policys_request(
        auth: str, make_tool: Any, user_factory: Any, client_for: Any,
        session_client_for: Any, settings: Any) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "CONFIRMATION_ALLOW_SELF_APPROVAL": True}
    boss = user_factory("selfboss", is_staff=True,
                        perms=("guarded_tools.approve_confirmation",
                               "guarded_tools.view_confirmation"))
    agent = client_for(boss) if auth == "token" else session_client_for(boss)
    handler = Effects()
    definition = make_tool(handler, confirm=payments(), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 500}
    assert call(agent, definition.name, body).status_code == 202
    assert "requested yourself" in approve_in_admin(boss, latest())
    assert latest().status == ConfirmationStatus.PENDING and latest().decided_by is None
    with pytest.raises(confirmations.DecisionRefused, match="requested yourself"):
        confirmations.approve(latest(), boss)
    assert call(agent, definition.name, body).status_code == 202 and handler.count == 0
    # The plain staff confirmation the setting was made for: it may.
    plain_handler = Effects()
    plain = make_tool(plain_handler, confirm="effect-only")
    plain_body = {"operationId": key()}
    assert call(agent, plain.name, plain_body).status_code == 202
    assert "Approved." in approve_in_admin(boss, latest())
    assert call(agent, plain.name, plain_body).status_code == 200
    assert plain_handler.count == 1


# -- the operation's timeline names every approver -----------------------------------------
def test_a_payment_approved_by_two_people_names_both_on_its_timeline(
        make_tool: Any, agent: Any, two_approvers: list[Any], user_factory: Any) -> None:
    def pay(input: Any, ctx: Any) -> Any:
        ctx.operation.write({"phase": "sent", "reference": input["operationId"]})
        return {"paid": str(input["amount"])}

    definition = make_tool(pay, confirm=payments(), input_schema=SCHEMA)
    body = {"operationId": key(), "amount": 1200}
    asked = call(agent, definition.name, body)
    assert asked.status_code == 202, asked.content
    operation = Operation.objects.get(tool=definition.name)
    assert latest().operation_id == operation.pk  # it waits for this request
    said = approve_in_admin(two_approvers[0], latest())
    assert "1 of 2 approvals given" in said
    approve_in_admin(two_approvers[1], latest())
    done = call(agent, definition.name, body)
    assert done.status_code == 200, done.content

    operator = user_factory(f"ops-{uuid.uuid4().hex[:6]}", is_staff=True,
                            perms=("guarded_tools.view_operation",))
    page = admin_client(operator).get(f"{OPS}{operation.pk}/change/").content.decode()
    timeline = rows(page)
    granted = [who for _when, what, _attempt, who in timeline if what == "Approval granted"]
    assert granted == ["approver", "approver2"], timeline
    assert "1 of 2 approvals given" in page and "2 of 2 approvals given" in page
    titles = [what for _when, what, _attempt, _who in timeline]
    assert titles.index("Approval granted") < titles.index("Succeeded"), timeline
