"""Issue 28 items 1-4: the operation's history is a record (the console's timeline)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.management import call_command

from guarded_tools.models import Operation, OperationEvent
from tests.conftest import key
from tests.console.pages import OPS_LIST, RECONCILER, reconcile, staff_client
from tests.store.timeline import SCHEMA, Payment, rows

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("auth", ["token", "session"])
def test_the_timeline_keeps_every_event_through_a_sweep_a_decision_and_a_retry(
        auth: Any, user_factory: Any, make_tool: Any, client_for: Any, settings: Any) -> None:
    from rest_framework.test import APIClient

    payment = Payment()
    definition = make_tool(payment.handler, recover=payment.recover, input_schema=SCHEMA)
    alice = user_factory("alice")
    if auth == "token":
        agent = client_for(alice)
    else:
        agent = APIClient(enforce_csrf_checks=False)
        agent.force_login(alice)
    body = {"operationId": key(), "note": "the secret invoice 4711"}
    first = agent.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert first.status_code == 500, first.content
    operation = Operation.objects.get(tool=definition.name)
    assert operation.state == "abandoned"
    Operation.objects.filter(pk=operation.pk).update(lease_expires_at=None)
    call_command("guarded_tools_sweep")
    operation.refresh_from_db()
    assert operation.state == "outcome_unknown"
    operator = staff_client(user_factory, *RECONCILER)
    done = reconcile(operator, operation, "mark_not_executed", note="bank: nothing")
    assert "marked not executed" in done.content.decode()
    payment.fail = False
    again = agent.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert again.status_code == 200, again.content

    page = operator.get(f"{OPS_LIST}{operation.pk}/change/").content.decode()
    timeline = rows(page)
    assert [(what, attempt, who) for _when, what, attempt, who in timeline] == [
        ("Claimed", "1", "agent (for user alice)"),
        ("Journal: entry", "1", "agent (for user alice)"),
        ("Abandoned (lease given up)", "1", "agent (for user alice)"),
        ("Taken over for recovery", "2", "sweep"),
        ("Outcome unknown", "2", "sweep"),
        ("Recovery by the sweep: unknown", "2", "sweep"),
        ("Journal entries removed (1)", "2", "staffer"),
        ("Marked operation not executed", "2", "staffer"),
        ("Claimed again (a retry)", "3", "agent (for user alice)"),
        ("Journal: entry", "3", "agent (for user alice)"),
        ("Succeeded", "3", "agent (for user alice)"),
    ], timeline
    # The time to the millisecond, with its zone; the rows within one second in their
    # recording order, whatever the clock says.
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", when)
               for when, *_ in timeline), timeline
    assert "by a person&#x27;s decision" in page
    assert "removed by a decision" not in page
    OperationEvent.objects.filter(operation_id=operation.pk).update(at=operation.created_at)
    same_second = rows(operator.get(f"{OPS_LIST}{operation.pk}/change/").content.decode())
    assert [row[1:] for row in same_second] == [row[1:] for row in timeline]


def test_the_failure_row_shows_the_message_redacted_the_correlation_id_and_a_trace_link(
        user_factory: Any, make_tool: Any, client_for: Any, settings: Any) -> None:
    settings.GUARDED_TOOLS = {**getattr(settings, "GUARDED_TOOLS", {}),
                              "CONSOLE_TRACE_URL": "https://logs.example/trace/{trace_id}"}
    payment = Payment()
    definition = make_tool(payment.handler, input_schema=SCHEMA)  # no recover: unknown
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    answer = client_for(user_factory("alice")).post(
        f"/agent/tools/{definition.name}/", {"operationId": key(), "note": "invoice 4711"},
        format="json", HTTP_TRACEPARENT=f"00-{trace}-00f067aa0ba902b7-01")
    error = answer.json()["error"]
    assert error["code"] == "outcome_unknown", error
    assert "upstream reset" not in answer.content.decode()  # never to the agent
    correlation = error["correlation_id"]
    operation = Operation.objects.get(tool=definition.name)
    operator = staff_client(user_factory, *RECONCILER)
    page = operator.get(f"{OPS_LIST}{operation.pk}/change/").content.decode()
    failed = page.split('data-testid="what-failed"')[1].split("</td>")[0]
    assert "upstream reset while paying [redacted]" in failed, failed
    assert "invoice 4711" not in page.split('data-testid="timeline"')[1]
    assert correlation in failed
    assert f'href="https://logs.example/trace/{trace}"' in failed


def test_a_journal_reference_links_to_where_its_evidence_lives(
        user_factory: Any, make_tool: Any, client_for: Any) -> None:
    payment = Payment()

    def evidence(*, reference: str, operation: Any) -> Any:
        if reference == "known":
            return ("ledger entry #7", "/admin/demo/ledgerentry/7/change/")
        return "no ledger entry with this reference"

    definition = make_tool(payment.handler, input_schema=SCHEMA, evidence=evidence)
    agent = client_for(user_factory("alice"))
    operator = staff_client(user_factory, *RECONCILER)
    for reference, shown in [
        ("known", '<a href="/admin/demo/ledgerentry/7/change/">ledger entry #7</a>'),
        ("other", "no ledger entry with this reference"),
    ]:
        agent.post(f"/agent/tools/{definition.name}/", {"operationId": reference,
                                                        "note": "n"}, format="json")
        operation = Operation.objects.get(tool=definition.name, key=reference)
        page = operator.get(f"{OPS_LIST}{operation.pk}/change/").content.decode()
        assert shown in page.split('data-testid="evidence"')[1].split("</div>")[0], page
