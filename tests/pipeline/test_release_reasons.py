"""Why a claim was released, as operators and approvers read it in the admin.

A call waiting for approval, one a person declined, one a rate limit refused and one a
person marked not executed each read "released" with their reason: on the operation's
timeline, in the operations list's state column and in the request page's recent calls.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from guarded_tools import Approvers, Budget, Policy, Rule, Run
from guarded_tools.models import Confirmation, Operation, OperationEvent, ReleaseReason
from tests.conftest import Effects, key
from tests.pipeline.policy_support import SCHEMA, URL

pytestmark = pytest.mark.django_db

OPS_LIST = "/admin/guarded_tools/operation/"
CONF_LIST = "/admin/guarded_tools/confirmation/"
STAFF = ("guarded_tools.view_operation", "guarded_tools.view_confirmation",
         "guarded_tools.approve_confirmation", "guarded_tools.reconcile_operation")


def small_run_large_ask(count: int) -> Policy:
    """Up to 50 runs at once, more asks one approver; at most ``count`` calls a minute."""
    return Policy(rules=[
        Rule(name="small", when=lambda input, **kw: input["amount"] <= 50, outcome=Run(),
             description="up to 50 run at once"),
        Rule(name="large", outcome=Approvers(1), description="more need one approver"),
    ], budgets=[Budget(name="calls a minute", window_seconds=60, count=count)])


@pytest.fixture
def staff(user_factory: Any) -> Client:
    client = Client()
    client.force_login(user_factory("operator", is_staff=True, perms=STAFF))
    return client


def state_cell(listing: str, operation: Operation) -> str:
    """The state column of ``operation``'s row in the operations list."""
    row = next(r for r in listing.split("<tr")[1:] if operation.key in r)
    return row.split('class="field-state_badge"')[1].split("</td>")[0]


def timeline(client: Client, operation: Operation) -> list[str]:
    """The titles of ``operation``'s timeline rows, in order."""
    page = client.get(f"{OPS_LIST}{operation.pk}/change/").content.decode()
    table = page.split('data-testid="timeline"')[1].split("</table>")[0]
    return re.findall(r'data-testid="event"><td class="gt-nowrap">[^<]*</td>\s*<td>([^<]*)</td>',
                      table)


@pytest.mark.parametrize("how", ["token", "session"])
def test_waiting_declined_and_rate_limited_calls_say_why_they_were_released(
        how: str, make_tool: Any, alice: Any, client_for: Any, session_client_for: Any,
        staff: Client) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=small_run_large_ask(count=2), input_schema=SCHEMA)
    agent = client_for(alice) if how == "token" else session_client_for(alice)

    def pay(body: dict[str, Any]) -> Any:
        return agent.post(URL.format(definition.name), body, format="json")

    waiting, declined = ({"operationId": key(), "amount": n} for n in (500, 600))
    assert pay(waiting).status_code == 202
    assert pay(declined).status_code == 202
    request = Confirmation.objects.get(key=declined["operationId"])
    decided = staff.post(f"{CONF_LIST}{request.pk}/decide/", {"decision": "decline",
                                                              "reason": "not today"})
    assert decided.status_code == 302
    answer = pay(declined)  # the agent's retry: told it was declined
    assert answer.status_code == 409 and answer.json()["error"]["code"] == \
        "confirmation_declined"
    for amount in (1, 2):  # the minute's two calls run
        assert pay({"operationId": key(), "amount": amount}).status_code == 200
    limited = {"operationId": key(), "amount": 3}
    assert pay(limited).status_code == 429
    assert handler.count == 2

    reasons = {
        waiting["operationId"]: ReleaseReason.WAITING_FOR_APPROVAL,
        declined["operationId"]: ReleaseReason.DECLINED,
        limited["operationId"]: ReleaseReason.RATE_LIMITED,
    }
    listing = staff.get(OPS_LIST).content.decode()
    for k, reason in reasons.items():
        operation = Operation.objects.get(key=k)
        assert (operation.state, operation.release_reason) == ("released", reason)
        cell = state_cell(listing, operation)
        assert ">released<" in cell and \
            f'<div class="gt-release-reason">{reason.label}</div>' in cell, cell
        titles = timeline(staff, operation)
        assert titles[-1] == f"Released: {reason.label}", titles
        event = OperationEvent.objects.filter(operation=operation, kind="released").last()
        assert event is not None and event.details["reason"] == reason.value
    # The declined call was claimed twice: each release says its own reason.
    titles = timeline(staff, Operation.objects.get(key=declined["operationId"]))
    assert [t for t in titles if t.startswith(("Claimed", "Released"))] == [
        "Claimed", "Released: waiting for approval", "Claimed again (a retry)",
        "Released: declined"], titles
    # The calls that ran read their state alone.
    ran = Operation.objects.filter(state="succeeded").first()
    assert ran is not None and "gt-release-reason" not in state_cell(listing, ran)


def test_an_approved_retry_clears_the_reason_and_the_request_page_says_why(
        make_tool: Any, alice: Any, client_for: Any, staff: Client) -> None:
    """The requester's recent calls on a request's page: a call waiting for its approval
    reads so, not as bare "released"; once its retry runs, the reason is gone."""
    definition = make_tool(Effects(), confirm=small_run_large_ask(count=10),
                           input_schema=SCHEMA)
    agent = client_for(alice)

    def pay(body: dict[str, Any]) -> Any:
        return agent.post(URL.format(definition.name), body, format="json")

    earlier, later = ({"operationId": key(), "amount": n} for n in (700, 800))
    assert pay(earlier).status_code == 202 and pay(later).status_code == 202
    request = Confirmation.objects.get(key=later["operationId"])
    page = staff.get(f"{CONF_LIST}{request.pk}/change/").content.decode()
    recent = page.split('data-testid="recent-calls"')[1].split("</table>")[0]
    assert earlier["operationId"][:30] in recent
    assert 'data-testid="release-reason">waiting for approval<' in recent, recent
    first = Confirmation.objects.get(key=earlier["operationId"])
    staff.post(f"{CONF_LIST}{first.pk}/decide/", {"decision": "approve", "reason": "ok"})
    assert pay(earlier).status_code == 200
    operation = Operation.objects.get(key=earlier["operationId"])
    assert (operation.state, operation.release_reason) == ("succeeded", "")
    page = staff.get(f"{CONF_LIST}{request.pk}/change/").content.decode()
    recent = page.split('data-testid="recent-calls"')[1].split("</table>")[0]
    assert "release-reason" not in recent and ">succeeded<" in recent
