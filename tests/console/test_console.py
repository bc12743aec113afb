"""The approver's and the operator's console (issue 18), through the admin and HTTP."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.mail.backends import locmem
from django.db import transaction
from django.test import Client
from django.utils.html import escape

from guarded_tools import tasks
from guarded_tools.confirmations import queue as confirmations
from guarded_tools.core.errors import ConfirmationRequired
from guarded_tools.models import Confirmation
from tests.conftest import key, wait_until
from tests.console.pages import OPS_LIST, RECONCILER, incident, reconcile, staff_client

pytestmark = pytest.mark.django_db

CONF_LIST = "/admin/guarded_tools/confirmation/"
APPROVER = ("guarded_tools.view_confirmation", "guarded_tools.approve_confirmation")
@pytest.fixture
def requester(user_factory: Any) -> Any:
    return user_factory("requester")


@pytest.fixture
def refund(make_tool: Any) -> Any:
    return make_tool(confirm="always", input_schema={"type": "object", "properties": {
        "operationId": {"type": "string"}, "amount": {"type": "string", "title": "Amount"}}})


def ask(client_for: Any, user: Any, definition: Any, **input: Any) -> Any:
    return client_for(user).post(f"/agent/tools/{definition.name}/",
                                 {"operationId": key(), **input}, format="json")


def test_bulk_approve_counts_what_it_approved_and_skipped(
        user_factory: Any, requester: Any, client_for: Any, refund: Any) -> None:
    for amount in ("1.00", "2.00", "3.00"):
        ask(client_for, requester, refund, amount=amount)
    first, *others = Confirmation.objects.order_by("created_at")
    Confirmation.objects.filter(pk=first.pk).update(status="declined")
    client = staff_client(user_factory, *APPROVER)
    # From the list of waiting requests: what it approves leaves that list.
    page = client.post(f"{CONF_LIST}?waiting=yes", {"action": "approve_selected", "post": "yes",
                                   ACTION_CHECKBOX_NAME: [c.pk for c in (first, *others)]},
                       follow=True).content.decode()
    assert "2 confirmations approved." in page
    assert "skipped" not in page  # the declined one is not in the waiting list at all
    third = ask(client_for, requester, refund, amount="4.00")
    assert third.status_code == 202
    fourth = Confirmation.objects.order_by("-created_at").first()
    assert fourth is not None
    page = client.post(CONF_LIST + "?status__exact=pending", {
        "action": "approve_selected", "post": "yes", ACTION_CHECKBOX_NAME: [fourth.pk]},
        follow=True).content.decode()
    assert "1 confirmation approved." in page and "skipped" not in page


# -- nobody approves a call that cannot succeed; an approval survives its repair -------------
@pytest.fixture
def payer(user_factory: Any) -> Any:
    return user_factory("payer", perms=("demo.add_ledgerentry",))


@pytest.fixture
def accounts(payer: Any, user_factory: Any) -> tuple[Any, Any]:
    from project.demo.models import Account

    return (Account.objects.create(owner=payer, name="Checking", balance=Decimal("1000")),
            Account.objects.create(owner=user_factory("rita"), name="Savings"))


def payment(source: Any, receiver_id: int, amount: str = "500.00") -> dict[str, Any]:
    from project.demo.models import PaymentAuthorization

    auth = PaymentAuthorization.objects.create(source=source, source_version=source.version)
    return {"operationId": key(), "sourceId": source.pk, "receiverId": receiver_id,
            "amount": amount, "authorizationId": auth.pk}


def pay(client_for: Any, payer: Any, body: dict[str, Any]) -> Any:
    return client_for(payer).post("/agent/tools/send_payment/", body, format="json")


@pytest.mark.parametrize(("receiver", "amount", "code"), [
    ("missing", "500.00", "receiver_not_found"), ("savings", "1000.01", "insufficient_funds")])
def test_a_payment_that_cannot_succeed_is_refused_before_anyone_approves_it(
        client_for: Any, payer: Any, accounts: tuple[Any, Any], receiver: str, amount: str,
        code: str) -> None:
    source, savings = accounts
    body = payment(source, savings.pk + 1000 if receiver == "missing" else savings.pk, amount)
    response = pay(client_for, payer, body)
    assert response.status_code in (409, 422)
    assert response.json()["error"]["code"] == code
    assert not Confirmation.objects.exists()  # nobody was asked
    # The key is fresh again: the repaired call asks for approval, as any payment does.
    repaired = pay(client_for, payer, {**body, "receiverId": savings.pk, "amount": "500.00"})
    assert repaired.status_code == 202


@pytest.mark.parametrize("authorization", ["stale", "of-another-account", "missing"])
def test_a_payment_with_a_stale_authorization_is_refused_before_anyone_approves_it(
        client_for: Any, payer: Any, accounts: tuple[Any, Any], authorization: str) -> None:
    """Issue 25 item 15: the precheck refuses it (409 with the plan), never a 202 first."""
    from project.demo.models import Account, PaymentAuthorization

    source, savings = accounts
    body = payment(source, savings.pk)
    if authorization == "stale":  # a payment since changed the source's state
        Account.objects.filter(pk=source.pk).update(version=source.version + 1)
    elif authorization == "of-another-account":
        other = PaymentAuthorization.objects.create(source=savings, source_version=1)
        body["authorizationId"] = other.pk
    else:
        body["authorizationId"] += 1000
    response = pay(client_for, payer, body)
    assert response.status_code == 409, response.json()
    error = response.json()["error"]
    assert error["code"] == "payment_source_stale"
    assert [step["tool"] for step in error["repair"]["steps"]] == [
        "list_payment_accounts", "prepare_payment_authorization", "send_payment"]
    assert not Confirmation.objects.exists()  # nobody was asked
    # The plan works: a new authorization, same operationId, amount and receiverId.
    source.refresh_from_db()
    fresh = PaymentAuthorization.objects.create(source=source, source_version=source.version)
    assert pay(client_for, payer, {**body, "authorizationId": fresh.pk}).status_code == 202


def test_an_approval_survives_a_repaired_retry_of_its_intent(
        client_for: Any, payer: Any, accounts: tuple[Any, Any], user_factory: Any) -> None:
    from guarded_tools.confirmations import approve
    from project.demo.models import Account, LedgerEntry, PaymentAuthorization

    source, savings = accounts
    body = payment(source, savings.pk)
    assert pay(client_for, payer, body).status_code == 202
    approve(Confirmation.objects.get(), user_factory("boss", is_superuser=True))
    Account.objects.filter(pk=source.pk).update(version=source.version + 1)  # stale now
    stale = pay(client_for, payer, body)
    assert stale.json()["error"]["code"] == "payment_source_stale"
    fresh = PaymentAuthorization.objects.create(source=source, source_version=source.version + 1)
    done = pay(client_for, payer, {**body, "authorizationId": fresh.pk})
    assert done.status_code == 200, done.json()
    assert Confirmation.objects.count() == 1 and LedgerEntry.objects.count() == 1
    # A retry that changes what was approved (the amount) is a new request to a person
    # (with an authorization of the source as the payment left it).
    source.refresh_from_db()
    other = pay(client_for, payer, {**payment(source, savings.pk), "amount": "413.00"})
    assert other.status_code == 202 and Confirmation.objects.count() == 2


# -- the operations list at scale ------------------------------------------------------------
@pytest.mark.postgres
def test_an_index_serves_the_operations_lists_unknown_first_order(user_factory: Any) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = staff_client(user_factory, "guarded_tools.view_operation")
    with CaptureQueriesContext(connection) as queries:
        assert client.get(OPS_LIST).status_code == 200
    page = next(q["sql"] for q in queries.captured_queries if "ORDER BY CASE" in q["sql"])
    with connection.cursor() as cursor:
        # Whatever an empty table's statistics suggest: can the order come from an index?
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {page} LIMIT 100")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "gt_operation_unknown_first" in plan and "Sort" not in plan, plan


# -- one audit trail, which is also the admin's history -------------------------------------
@pytest.fixture
def unknown(make_tool: Any, requester: Any, client_for: Any) -> Any:
    """An operation whose handler may have had its effect, and recover cannot tell."""
    from guarded_tools.models import Operation

    def handler(input: Any, ctx: Any) -> Any:
        ctx.operation.write({"phase": "transferred"})
        raise ConnectionError("upstream reset")

    definition = make_tool(handler, recover=lambda **_: {"outcome": "unknown"},
                           output_schema={"type": "object", "properties": {
                               "paid": {"type": "boolean"}}})
    answer = ask(client_for, requester, definition)
    assert answer.json()["error"]["code"] == "outcome_unknown"
    return Operation.objects.get(tool=definition.name)


def history(client: Client, url: str) -> str:
    return str(client.get(f"{url}history/").content.decode())


def test_approvals_and_declines_are_the_admins_history_with_the_status_then(
        user_factory: Any, requester: Any, client_for: Any, refund: Any) -> None:
    from guarded_tools.models import AuditEntry

    ask(client_for, requester, refund, amount="1.00")
    ask(client_for, requester, refund, amount="2.00")
    first, second = Confirmation.objects.order_by("created_at")
    client = staff_client(user_factory, *APPROVER)
    client.post(f"{CONF_LIST}{first.pk}/decide/", {"decision": "approve", "reason": "ok"})
    client.post(f"{CONF_LIST}{second.pk}/decide/", {"decision": "decline",
                                                   "reason": "not today"})
    assert "Approved: ok" in history(client, f"{CONF_LIST}{first.pk}/")
    assert "Declined: not today" in history(client, f"{CONF_LIST}{second.pk}/")
    second.refresh_from_db()
    recent = client.get("/admin/").content.decode()  # Recent actions names it, as declined
    assert escape(str(second)) in recent and "(declined)" in str(second)
    Confirmation.objects.filter(pk=first.pk).update(status="consumed")  # used since
    audit = {a.confirmation_id: a.status for a in AuditEntry.objects.all()}
    assert audit == {first.pk: "approved", second.pk: "declined"}


@pytest.mark.parametrize(("action", "fields", "state"), [
    ("mark_succeeded", {"output": '{"paid": true}'}, "succeeded"),
    ("mark_not_executed", {}, "released"),
    ("mark_failed", {"code": "payment_bounced", "message": "Bounced."}, "failed")])
def test_each_reconciliation_is_the_admins_history_and_keeps_what_it_replaced(
        user_factory: Any, unknown: Any, action: str, fields: dict[str, str],
        state: str) -> None:
    from guarded_tools.models import AuditEntry

    stored_error = unknown.error
    assert stored_error  # what the failed attempt left, before a person decides
    client = staff_client(user_factory, *RECONCILER)
    reconcile(client, unknown, action, note="asked the bank", **fields)
    unknown.refresh_from_db()
    assert unknown.state == state
    page = history(client, f"{OPS_LIST}{unknown.pk}/")
    assert "asked the bank" in page and f"attempt {unknown.fence}" in page
    decision = AuditEntry.objects.get(action=action)
    assert decision.status == state and decision.data["before"]["error"] == stored_error


def test_a_sweep_recovery_is_in_the_audit_trail(make_tool: Any, requester: Any) -> None:
    from guarded_tools.models import AuditEntry, Operation
    from guarded_tools.pipeline.recovery import sweep

    definition = make_tool(recover=lambda **_: {"recovered": True, "output": {"ok": True}})
    k = key()
    Operation.objects.create(
        tool=definition.name, scope=f"auth.user:{requester.pk}", key=k, user=requester,
        fingerprint="f", input={"operationId": k}, state="abandoned")
    assert sweep().completed == 1
    entry = AuditEntry.objects.get()
    assert entry.action == "recover" and entry.actor is None and entry.status == "succeeded"
    assert entry.data["by"] == "sweep" and entry.data["outcome"] == "completed"


# -- the approver's queue ---------------------------------------------------------------------
def test_the_approver_reads_the_payment_in_one_sentence_with_the_accounts(
        user_factory: Any, client_for: Any, payer: Any, accounts: tuple[Any, Any]) -> None:
    source, savings = accounts
    assert pay(client_for, payer, payment(source, savings.pk)).status_code == 202
    confirmation = Confirmation.objects.get()
    client = staff_client(user_factory, *APPROVER, "demo.view_account")
    sentence = ("Pay 500.00 EUR from payer&#x27;s Checking (balance 1,000.00 EUR) to"
                " rita&#x27;s Savings")
    queue = client.get(CONF_LIST).content.decode()
    assert sentence in queue
    page = client.get(f"{CONF_LIST}{confirmation.pk}/change/").content.decode()
    assert f'data-testid="summary">{sentence}<' in page
    assert f'href="/admin/demo/account/{savings.pk}/change/"' in page  # objects, linked
    assert "Expires at" in page and "left to decide" in page
    client.post(f"{CONF_LIST}{confirmation.pk}/decide/", {"decision": "decline",
                                                          "reason": "not this month"})
    decided = client.get(f"{CONF_LIST}{confirmation.pk}/change/").content.decode()
    assert "Expires at" not in decided and "left to decide" not in decided
    assert "not this month" in decided and 'data-testid="decided"' in decided


@pytest.mark.parametrize("how", ["token", "session"])
def test_the_request_page_runs_the_precheck_again_and_says_whether_it_would_fail_now(
        how: str, user_factory: Any, client_for: Any, session_client_for: Any, payer: Any,
        accounts: tuple[Any, Any], monkeypatch: Any, caplog: Any) -> None:
    """Issue 28 item 10: "would fail now: insufficient funds", beside the summary, checked
    as the requester (their context, their input); amounts read with their currency."""
    from project.demo import tools as demo_tools
    from project.demo.models import Account

    source, savings = accounts
    agent = client_for(payer) if how == "token" else session_client_for(payer)
    asked = agent.post("/agent/tools/send_payment/", payment(source, savings.pk), format="json")
    assert asked.status_code == 202, asked.content
    confirmation = Confirmation.objects.get()
    client = staff_client(user_factory, *APPROVER, "demo.view_account")
    url = f"{CONF_LIST}{confirmation.pk}/change/"
    page = client.get(url).content.decode()
    assert 'data-testid="validity">Checked now: it would pass the tool&#x27;s precheck.<' in page
    assert 'data-testid="field-amount">500.00 EUR<' in page
    Account.objects.filter(pk=source.pk).update(balance=Decimal("5"))  # spent meanwhile
    page = client.get(url).content.decode()
    assert ('data-testid="validity">Would fail now: The source account cannot cover this'
            " amount.<") in page
    assert page.index('data-testid="summary"') < page.index('data-testid="validity"')

    def broken(**_: Any) -> None:
        raise RuntimeError("postgres://admin:hunter2@db.internal")

    monkeypatch.setattr(demo_tools, "precheck_payment", broken)
    page = client.get(url).content.decode()
    assert 'data-testid="validity">Could not be checked now; the log has why.<' in page
    assert "hunter2" not in page and "db.internal" not in page
    assert any("precheck of confirmation" in r.getMessage() for r in caplog.records)
    # A decided request is not checked again: nothing is left to decide.
    client.post(f"{CONF_LIST}{confirmation.pk}/decide/", {"decision": "decline",
                                                          "reason": "spent"})
    assert 'data-testid="validity"' not in client.get(url).content.decode()


def queue_queries(client: Client) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        assert client.get(CONF_LIST).status_code == 200
    return len(ctx.captured_queries)


def test_the_queue_costs_the_same_queries_for_a_page_and_more_and_reads_them_as_asked(
        user_factory: Any, client_for: Any, payer: Any, accounts: tuple[Any, Any]) -> None:
    """``send_payment``'s ``present`` queries the accounts: the queue never calls it per
    row; each row reads as it did when it was asked, and the detail page reads it now.
    The tool's precheck runs for each waiting request shown (its "would fail now" mark),
    so a page costs the same once it is full (25 rows), however many more wait."""
    from django.contrib import admin

    from project.demo.models import Account

    page_size = admin.site.get_model_admin(Confirmation).list_per_page
    source, savings = accounts
    client = staff_client(user_factory, *APPROVER, "demo.view_account")
    for _ in range(page_size):
        assert pay(client_for, payer, payment(source, savings.pk)).status_code == 202
    full = queue_queries(client)
    for _ in range(50 - page_size):
        assert pay(client_for, payer, payment(source, savings.pk)).status_code == 202
    assert Confirmation.objects.count() == 50
    assert queue_queries(client) == full
    Account.objects.filter(pk=source.pk).update(balance=Decimal("600"))
    asked = ("Pay 500.00 EUR from payer&#x27;s Checking (balance 1,000.00 EUR) to"
             " rita&#x27;s Savings")
    queue = client.get(CONF_LIST).content.decode()
    assert queue.count(asked) == page_size and "600.00" not in queue
    confirmation = Confirmation.objects.order_by("created_at").first()
    assert confirmation is not None
    page = client.get(f"{CONF_LIST}{confirmation.pk}/change/").content.decode()
    assert ('data-testid="summary">Pay 500.00 EUR from payer&#x27;s Checking'
            " (balance 600.00 EUR) to"
            " rita&#x27;s Savings<") in page  # the decision reads the balance now
    assert f'data-testid="requested-summary">{asked}<' in page


def test_a_request_stored_without_a_summary_reads_from_its_schema_without_its_hook(
        user_factory: Any, client_for: Any, payer: Any, accounts: tuple[Any, Any]) -> None:
    """Requests from before summaries were stored: the tool's title and field values."""
    source, savings = accounts
    assert pay(client_for, payer, payment(source, savings.pk)).status_code == 202
    Confirmation.objects.update(summary="")
    client = staff_client(user_factory, *APPROVER)
    queue = client.get(CONF_LIST).content.decode()
    assert (f"Send payment: From account {source.pk}, To account {savings.pk}, Amount 500.00"
            in queue)
    assert "Checking (balance" not in queue


def test_the_queue_lists_the_oldest_request_first_with_its_age_and_time_left(
        user_factory: Any, requester: Any, client_for: Any, refund: Any) -> None:
    from datetime import timedelta

    from django.utils import timezone

    for amount in ("1.00", "2.00"):
        ask(client_for, requester, refund, amount=amount)
    older = Confirmation.objects.get(input__amount="2.00")
    Confirmation.objects.filter(pk=older.pk).update(
        created_at=timezone.now() - timedelta(minutes=5))
    client = staff_client(user_factory, *APPROVER)
    rows = client.get(CONF_LIST).context["cl"].result_list
    assert [row.input["amount"] for row in rows] == ["2.00", "1.00"]
    page = client.get(CONF_LIST).content.decode()
    assert "5 min" in page and "23 h 59 min" in page  # waiting, and time left


# -- the operator's operation page ------------------------------------------------------------
def test_the_operation_page_shows_the_timeline_the_evidence_and_the_decisions(
        user_factory: Any, unknown: Any) -> None:
    client = staff_client(user_factory, *RECONCILER)
    page = client.get(f"{OPS_LIST}{unknown.pk}/change/").content.decode()
    assert "guarded_tools/admin.css" in page  # the app's styles, badges and all
    assert 'data-testid="failure" class="gt-mono">ConnectionError<' in page
    # The handler's text is for operators only (the agent got the correlation id).
    assert page.count("upstream reset") == 1
    assert "upstream reset" in page.split('data-testid="what-failed"')[1].split("</td>")[0]
    assert 'data-testid="recover-said">outcome unknown<' in page
    assert 'data-testid="effect-warning"' in page and "transferred" in page
    timeline = page.split('data-testid="timeline"')[1].split("</table>")[0]
    # The history in recording order (its sequence), whatever the clock's second says.
    kinds = re.findall(r'class="gt-event gt-event-(\w+)"', timeline)
    assert kinds == ["claimed", "journal", "outcome_unknown"], timeline
    assert re.search(r"<td class=\"gt-nowrap\">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC",
                     timeline)
    for action in ("mark_succeeded", "mark_not_executed", "mark_failed"):
        assert f'data-testid="{action}"' in page  # the decisions, on the page itself
    # The not-executed form carries the same evidence, the warning first of all.
    form = reconcile(client, unknown, "mark_not_executed").content.decode()
    assert 'data-testid="effect-warning"' in form and "transferred" in form
    done = reconcile(client, unknown, "mark_not_executed", note="bank: nothing").content
    assert f"{unknown}: marked not executed." in done.decode()
    after = client.get(f"{OPS_LIST}{unknown.pk}/change/").content.decode()
    assert "Marked operation not executed" in after and 'data-testid="reconcile"' not in after
    assert "bank: nothing" in after
    # Every event keeps its row: the decision is added, nothing is gone.
    after_timeline = after.split('data-testid="timeline"')[1].split("</table>")[0]
    assert re.findall(r'class="gt-event gt-event-(\w+)"', after_timeline) == [
        "claimed", "journal", "outcome_unknown", "journal_removed", "decision"]


def test_mark_succeeded_starts_from_the_stored_output(
        user_factory: Any, make_tool: Any, requester: Any, client_for: Any) -> None:
    from guarded_tools.models import Operation

    definition = make_tool(lambda input, ctx: {"paid": True}, verify=lambda **_: False)
    answer = ask(client_for, requester, definition)
    assert answer.json()["error"]["code"] == "verification_failed"
    operation = Operation.objects.get()
    assert operation.state == "outcome_unknown" and operation.output == {"paid": True}
    client = staff_client(user_factory, *RECONCILER)
    form = reconcile(client, operation, "mark_succeeded")
    assert form.context["form"]["output"].value().replace(" ", "").replace("\n", "") \
        == '{"paid":true}'


def test_lists_show_neutral_marks_and_tiles_that_say_what_they_count(
        user_factory: Any, client_for: Any, payer: Any, accounts: tuple[Any, Any]) -> None:
    from guarded_tools.models import Operation

    source, savings = accounts
    assert pay(client_for, payer, payment(source, savings.pk)).status_code == 202
    assert Operation.objects.get().state == "released"  # a payment waiting for its approval
    client = staff_client(user_factory, *RECONCILER, *APPROVER)
    page = client.get(OPS_LIST).content.decode()
    assert "icon-no.svg" not in page and "icon-yes.svg" not in page
    # Each tile counts the rows of the list it links to: the released claim waiting for
    # its approval is one of the released rows (the queue's tile counts the request).
    assert 'data-testid="awaiting-approval"' not in page
    released = page.split('data-testid="state-released"')[1].split("</a>")[0]
    assert "<b>1</b>" in released and "waiting for approval" in released
    assert "?state__exact=succeeded" in page  # each tile links to its rows


def test_approvers_are_emailed_a_link_to_the_request_never_a_decision(
        user_factory: Any, requester: Any, client_for: Any, refund: Any, mailoutbox: Any,
        settings: Any, eager_celery: None, django_capture_on_commit_callbacks: Any) -> None:
    settings.GUARDED_TOOLS = {"CONSOLE_BASE_URL": "https://ops.example.com"}
    user_factory("approver", perms=APPROVER, email="approver@example.com")
    user_factory("viewer", perms=APPROVER[:1], email="viewer@example.com")
    requester.email = "requester@example.com"
    requester.save()
    with django_capture_on_commit_callbacks() as after_commit:
        assert ask(client_for, requester, refund, amount="9.99").status_code == 202
    assert mailoutbox == []  # nothing sent in the agent's call
    for callback in after_commit:
        callback()  # the request committed: the task emails (eager here)
    confirmation = Confirmation.objects.get()
    assert [m.to for m in mailoutbox] == [["approver@example.com"]]
    mail = mailoutbox[0]
    assert "Amount 9.99" in mail.subject
    assert f"https://ops.example.com{CONF_LIST}{confirmation.pk}/change/" in mail.body
    assert "approve" not in mail.body.split("https://")[1]  # a page to decide on, not a GET


@pytest.mark.parametrize("auth", ["token", "session"])
@pytest.mark.parametrize("base", ["", "ops.example.com", "/"])
def test_without_a_base_the_email_says_where_to_decide_and_links_nowhere(
        user_factory: Any, session_client_for: Any, refund: Any, mailoutbox: Any,
        settings: Any, eager_celery: None, django_capture_on_commit_callbacks: Any,
        auth: str, base: str) -> None:
    """Issue 25, item 14: with no ``CONSOLE_BASE_URL`` (or one that names no host) the
    email said "Decide on its page: /admin/…", a link no mail reader opens. It names the
    admin's page in words instead, and never the Host the agent's request came with."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    settings.ALLOWED_HOSTS = ["*"]
    settings.GUARDED_TOOLS = {"CONSOLE_BASE_URL": base} if base else {}
    user_factory("approver", perms=APPROVER, email="approver@example.com")
    requester = user_factory("asker")
    if auth == "token":
        agent = APIClient()
        agent.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=requester).key}")
    else:
        agent = session_client_for(requester)
    with django_capture_on_commit_callbacks(execute=True):
        asked = agent.post(f"/agent/tools/{refund.name}/", {"operationId": key(), "amount": "5"},
                           format="json", HTTP_HOST="rebind.attacker.example")
    assert asked.status_code == 202, asked.content[:300]
    confirmation = Confirmation.objects.get()
    [mail] = mailoutbox
    assert "attacker" not in mail.body
    assert f"{CONF_LIST}{confirmation.pk}/change/" not in mail.body  # no relative link
    assert "Guarded Tools > Confirmations" in mail.body and str(confirmation.pk) in mail.body


def test_a_request_decided_before_the_email_task_runs_emails_nobody(
        user_factory: Any, requester: Any, client_for: Any, refund: Any, mailoutbox: Any,
        eager_celery: None, django_capture_on_commit_callbacks: Any) -> None:
    approver = user_factory("approver", perms=APPROVER, email="approver@example.com")
    with django_capture_on_commit_callbacks() as after_commit:
        ask(client_for, requester, refund, amount="1.00")
        ask(client_for, requester, refund, amount="2.00")
        ask(client_for, requester, refund, amount="3.00")
    declined, approved, withdrawn = Confirmation.objects.order_by("created_at")
    confirmations.decline(declined, approver, "not this one")
    confirmations.approve(approved, approver)
    assert confirmations.withdraw(withdrawn, requester, "no longer needed")
    assert len(after_commit) == 3
    for callback in after_commit:
        callback()
    assert mailoutbox == []


@pytest.mark.django_db(transaction=True)  # real commits and rollbacks
def test_a_request_rolled_back_with_its_callers_transaction_emails_nobody(
        user_factory: Any, requester: Any, refund: Any, mailoutbox: Any,
        eager_celery: None) -> None:
    user_factory("approver", perms=APPROVER, email="approver@example.com")
    with pytest.raises(ConfirmationRequired), transaction.atomic():
        refund({"operationId": key(), "amount": "5.00"}, user=requester)
    assert not Confirmation.objects.exists() and mailoutbox == []
    with pytest.raises(ConfirmationRequired):  # the same call, committed: emailed
        refund({"operationId": key(), "amount": "5.00"}, user=requester)
    assert [m.to for m in mailoutbox] == [["approver@example.com"]]


@pytest.mark.django_db(transaction=True)  # the request commits: the email is sent on
def test_a_failing_send_to_the_broker_still_answers_the_agents_202(
        user_factory: Any, requester: Any, client_for: Any, refund: Any, mailoutbox: Any,
        monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    user_factory("approver", perms=APPROVER, email="approver@example.com")

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the broker refused the message")

    monkeypatch.setattr(tasks.notify_approvers, "delay", refuse)
    with caplog.at_level(logging.WARNING, logger="guarded_tools.tasks"):
        answer = ask(client_for, requester, refund, amount="7.00")
    assert answer.status_code == 202, answer.content
    confirmation = Confirmation.objects.get()
    assert f"approvers' email of confirmation {confirmation.pk}" in caplog.text
    assert "the broker refused the message" not in answer.content.decode()
    assert mailoutbox == []


class BlockingBackend(locmem.EmailBackend):
    """Django's test backend, except that sending waits until the test sets ``release``."""

    started = threading.Event()
    release = threading.Event()

    def send_messages(self, messages: Any) -> int:
        type(self).started.set()
        if not type(self).release.wait(30):  # a bound, so a regression fails, not hangs
            raise TimeoutError("the test never released the mail")
        return super().send_messages(messages)


@pytest.fixture
def embedded_worker() -> Iterator[None]:
    """A Celery worker in a thread of this process, on its in-memory broker."""
    from celery import signals
    from celery.contrib.testing.worker import start_worker
    from django.db import connections

    from project.celery import app

    def keep_logging(**_: Any) -> None:  # Celery leaves the test run's logging alone
        return None

    def close_connections(**_: Any) -> None:  # the worker thread's own connection
        connections.close_all()

    signals.setup_logging.connect(keep_logging, weak=False)
    signals.task_postrun.connect(close_connections, weak=False)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
            yield
    finally:
        signals.task_postrun.disconnect(close_connections)
        signals.setup_logging.disconnect(keep_logging)


@pytest.mark.django_db(transaction=True)  # the worker thread reads the committed request
def test_the_agents_202_does_not_wait_for_the_approvers_email(
        user_factory: Any, requester: Any, client_for: Any, refund: Any, mailoutbox: Any,
        settings: Any, embedded_worker: None) -> None:
    settings.EMAIL_BACKEND = "tests.console.test_console.BlockingBackend"
    BlockingBackend.started, BlockingBackend.release = threading.Event(), threading.Event()
    user_factory("approver", perms=APPROVER, email="approver@example.com")
    answer = ask(client_for, requester, refund, amount="8.00")
    assert answer.status_code == 202  # answered while the mail is not sent, nor can be
    wait_until(BlockingBackend.started.is_set)  # the worker is sending: blocked
    assert mailoutbox == []
    BlockingBackend.release.set()
    wait_until(lambda: len(mailoutbox) == 1)
    assert mailoutbox[0].to == ["approver@example.com"]


# -- demo incidents -----------------------------------------------------------------------------
def test_demo_incidents_give_an_operator_something_to_reconcile_and_to_recover(
        user_factory: Any) -> None:
    from io import StringIO

    from django.core.management import call_command

    from guarded_tools.models import Operation
    from guarded_tools.pipeline.recovery import sweep
    from project.demo.models import LedgerEntry

    call_command("demo_seed", stdout=StringIO())
    out = StringIO()
    call_command("demo_incident", "unknown", stdout=out)
    unknown = Operation.objects.get(state="outcome_unknown")
    assert f"{OPS_LIST}{unknown.pk}/change/" in out.getvalue()
    client = staff_client(user_factory, *RECONCILER)
    page = client.get(f"{OPS_LIST}{unknown.pk}/change/").content.decode()
    assert "Pay 500.00 EUR from agent&#x27;s Checking" in page
    assert 'data-testid="effect-warning"' in page
    call_command("demo_incident", "abandoned", stdout=StringIO())
    assert sweep().released == 1  # no ledger row: proven not run, the key is fresh again
    assert Operation.objects.filter(state="released").count() == 1
    assert not LedgerEntry.objects.exists()


LINKS = {"js": "javascript:alert(document.cookie)", "spaced": " JaVaScRiPt:alert(1)",
         "tabbed": "java\tscript:alert(1)", "data": "data:text/html,<script>alert(1)</script>",
         "web": "https://crm.example/customers/7?tab=1", "site": "/admin/demo/account/"}


def test_only_http_and_relative_links_of_a_present_hook_reach_the_approvers_page(
        user_factory: Any, requester: Any, client_for: Any, make_tool: Any) -> None:
    """Issue 25, item 12: a ``present`` hook's ``javascript:`` link rendered as
    ``<a href="javascript:…">`` on the approver's page, one click from running in a staff
    session. Only http(s) and relative links are links now; the others are plain text."""
    properties = {name: {"type": "string", "title": name.title()} for name in LINKS}
    definition = make_tool(
        confirm="always",
        input_schema={"type": "object",
                      "properties": {"operationId": {"type": "string"}, **properties}},
        present=lambda input, user: {"fields": {
            name: (f"shown {name}", url) for name, url in LINKS.items()}})
    assert ask(client_for, requester, definition, **dict.fromkeys(LINKS, "x")).status_code == 202
    confirmation = Confirmation.objects.get()
    page = staff_client(user_factory, *APPROVER).get(
        f"{CONF_LIST}{confirmation.pk}/change/").content.decode()
    for name in LINKS:
        assert f"shown {name}" in page  # every field still shown
    hrefs = page.split('data-testid="field-')
    for name in ("js", "spaced", "tabbed", "data"):
        cell = next(h for h in hrefs if h.startswith(f'{name}"')).split("</td>")[0]
        assert "<a " not in cell, cell
    assert "javascript:" not in page.lower() and "data:text/html" not in page
    assert 'href="https://crm.example/customers/7?tab=1"' in page
    assert 'href="/admin/demo/account/"' in page


# -- issue 28, second pass: operators act from the page ---------------------------------------
def tile(page: str, testid: str) -> str:
    return page.split(f'data-testid="{testid}"')[1].split("</a>")[0]


def test_an_expired_lease_reads_abandoned_and_recover_now_runs_the_sweeps_recovery(
        user_factory: Any) -> None:
    """Item 5: not "in flight" nor "running now"; "Recover now" audited, by the person."""
    from django.contrib.admin.models import LogEntry

    from guarded_tools.models import AuditEntry

    operation = incident("abandoned")
    client = staff_client(user_factory, *RECONCILER)
    listing = client.get(OPS_LIST).content.decode()
    assert "<b>0</b>" in tile(listing, "state-in_flight")
    assert "<b>1</b>" in tile(listing, "state-abandoned")
    assert '?lease=expired" data-testid="state-abandoned"' in listing
    assert client.get(OPS_LIST + "?lease=expired").context["cl"].result_count == 1
    assert client.get(OPS_LIST + "?lease=live").context["cl"].result_count == 0
    assert 'gt-badge gt-abandoned' in listing
    detail = client.get(f"{OPS_LIST}{operation.pk}/change/").content.decode()
    assert 'data-testid="state">abandoned' in detail and "lease expired at" in detail
    assert 'data-testid="recover-now"' in detail
    # A viewer sees the state, not the button; a GET or a viewer's POST does nothing.
    viewer = staff_client(user_factory, "guarded_tools.view_operation", name="viewer")
    assert 'data-testid="recover-now"' not in viewer.get(
        f"{OPS_LIST}{operation.pk}/change/").content.decode()
    assert viewer.post(f"{OPS_LIST}{operation.pk}/recover/").status_code == 403
    assert client.get(f"{OPS_LIST}{operation.pk}/recover/").status_code == 403
    page = client.post(f"{OPS_LIST}{operation.pk}/recover/", follow=True).content.decode()
    assert "Recovery ran:" in page
    operation.refresh_from_db()
    assert operation.state != "in_flight" and operation.fence == 2
    row = AuditEntry.objects.get(action="recover")
    assert row.actor is not None and row.actor.username == "staffer"
    assert row.data["by"] == "operator"
    assert LogEntry.objects.filter(object_id=str(operation.pk),
                                   change_message__startswith="Recover now").exists()
    timeline = page.split('data-testid="timeline"')[1].split("</table>")[0]
    assert re.search(r"Recovery by the operator: \w+</td>\s*<td>2</td>\s*"
                     r'<td data-testid="who">staffer</td>',
                     timeline), timeline
    # Once recovered it is not abandoned: a second POST recovers nothing.
    again = client.post(f"{OPS_LIST}{operation.pk}/recover/", follow=True).content.decode()
    assert "Nothing was recovered" in again
    assert AuditEntry.objects.filter(action="recover").count() == 1


def test_mark_succeeded_shows_the_output_schema_beside_an_empty_output(
        user_factory: Any, make_tool: Any) -> None:
    """Item 6: the schema beside; titles, not raw JSON. The output starts empty, the
    required fields as its placeholder: a value typed in for the person would be
    recorded as the result if left unchanged (issue 44)."""
    from guarded_tools.models import Operation

    definition = make_tool(
        input_schema={"type": "object", "properties": {
            "operationId": {"type": "string"}, "amount": {"type": "string", "title": "Amount"}}},
        output_schema={"type": "object", "required": ["paymentId", "amount", "settled"],
                       "properties": {"paymentId": {"type": "integer", "title": "Payment"},
                                      "amount": {"type": "string"},
                                      "settled": {"type": "boolean"},
                                      "note": {"type": "string"}}})
    k = key()
    operation = Operation.objects.create(
        tool=definition.name, scope="s", key=k, fingerprint="f",
        input={"operationId": k, "amount": "9.99"}, state="outcome_unknown")
    client = staff_client(user_factory, *RECONCILER)
    form = client.post(OPS_LIST, {"action": "mark_succeeded", ACTION_CHECKBOX_NAME: [
        operation.pk], f"fence-{operation.pk}": operation.fence})
    assert not form.context["form"]["output"].value()
    html = form.content.decode()
    assert 'placeholder="Required: paymentId (integer), amount (string), settled' \
        ' (boolean)"' in html
    assert 'data-testid="output-schema"' in html and "paymentId" in html
    detail = client.get(f"{OPS_LIST}{operation.pk}/change/").content.decode()
    assert 'data-testid="input-rows"' in detail and "<th>Amount" in detail


def test_the_journal_warning_is_only_where_mark_not_executed_applies(
        user_factory: Any, make_tool: Any) -> None:
    """Item 7: a succeeded operation's journal is evidence, not a warning."""
    from guarded_tools.models import JournalEntry, Operation

    definition = make_tool()
    operation = Operation.objects.create(tool=definition.name, scope="s", key=key(),
                                         fingerprint="f", input={}, state="succeeded",
                                         output={"ok": True})
    JournalEntry.objects.create(operation=operation, fence=1, data={"phase": "done"})
    client = staff_client(user_factory, *RECONCILER)
    html = client.get(f"{OPS_LIST}{operation.pk}/change/").content.decode()
    assert 'data-testid="effect-warning"' not in html and "before marking it" not in html
    assert 'data-testid="journal"' in html and 'data-testid="journal-empty"' not in html
    Operation.objects.filter(pk=operation.pk).update(state="outcome_unknown")
    html = client.get(f"{OPS_LIST}{operation.pk}/change/").content.decode()
    assert 'data-testid="effect-warning"' in html


def test_recoveries_in_the_last_day_count_what_the_audit_trail_shows(
        user_factory: Any) -> None:
    """Item 8: two sweep recoveries (outcome unknown both) are two, linked to the trail."""
    from guarded_tools.models import Operation
    from guarded_tools.pipeline.recovery import sweep

    for _ in range(2):
        operation = incident("abandoned")
        Operation.objects.filter(pk=operation.pk).update(tool="no_such_tool")
    assert sweep().unknown == 2
    client = staff_client(user_factory, *RECONCILER, "guarded_tools.view_auditentry")
    page = client.get(OPS_LIST).content.decode()
    recovered = tile(page, "recovered-last-day")
    assert "<b>2</b>" in recovered
    assert 'auditentry/?action__exact=recover" data-testid="recovered-last-day"' in page
    trail = client.get("/admin/guarded_tools/auditentry/?action__exact=recover")
    assert trail.context["cl"].result_count == 2
    # The queue's tile and the operations' tiles count different things, each once.
    index = client.get("/admin/").content.decode()
    assert "calls waiting for approval (not run yet)" not in index


def test_lists_show_one_time_format_and_tool_names_break_only_between_words(
        user_factory: Any) -> None:
    """Item 12: the journal list in UTC ISO with its zone; a summary column; <wbr>."""
    operation = incident("unknown")
    client = staff_client(user_factory, *RECONCILER, "guarded_tools.view_journalentry")
    journal = client.get("/admin/guarded_tools/journalentry/").content.decode()
    assert re.search(r"\d{4}-\d\d-\d\d<br>\d\d:\d\d:\d\d UTC", journal), journal[-3000:]
    assert " p.m." not in journal and " a.m." not in journal
    listing = client.get(OPS_LIST).content.decode()
    assert "send_<wbr>payment" in listing
    assert "field-summary" in listing and "Amount 500.00" in listing
    entry = operation.journal.first()
    detail = client.get(f"/admin/guarded_tools/journalentry/{entry.pk}/change/").content.decode()
    assert " p.m." not in detail and " a.m." not in detail and " UTC" in detail


# -- issue 28, second pass: approvers see the risk and cannot slip ----------------------------
def test_bulk_approval_shows_each_request_first_and_leaves_out_what_is_not_theirs(
        user_factory: Any, requester: Any, client_for: Any, refund: Any,
        make_tool: Any) -> None:
    """Item 9: an intermediate page as "delete selected"; owner-only, own and decided out."""
    for amount in ("1.00", "2.00", "3.00"):
        ask(client_for, requester, refund, amount=amount)
    owners = make_tool(confirm="owner", input_schema=refund.input_schema)
    ask(client_for, requester, owners, amount="4.00")
    client = staff_client(user_factory, *APPROVER)
    approver = Confirmation.objects.model._meta.get_field("requested_by").remote_field.model \
        .objects.get(username="staffer")
    ask(client_for, approver, refund, amount="5.00")  # the approver's own request
    first, second, third, owner_only, own = Confirmation.objects.order_by("created_at")
    Confirmation.objects.filter(pk=third.pk).update(status="declined")
    chosen = [c.pk for c in (first, second, third, owner_only, own)]
    # Selected on the list of every status (the queue lists the pending ones alone).
    everything = CONF_LIST + "?status__exact=all"
    page = client.post(everything, {"action": "approve_selected",
                                   ACTION_CHECKBOX_NAME: chosen})
    assert page.status_code == 200 and not Confirmation.objects.filter(
        status="approved").exists()  # nothing approved without the second look
    html = page.content.decode()
    to_approve = html.split('data-testid="to-approve"')[1].split("</ul>")[0]
    left_out = html.split('data-testid="left-out"')[1].split("</ul>")[0]
    assert "Amount 1.00" in to_approve and "Amount 2.00" in to_approve
    assert "Amount 4.00" not in to_approve and "Amount 5.00" not in to_approve
    assert "already decided" in left_out and "Only the user this call acts for" in left_out
    assert "four-eyes" in left_out
    assert 'name="post" value="yes"' in html and "csrfmiddlewaretoken" in html
    done = client.post(everything, {"action": "approve_selected", "post": "yes",
                                    ACTION_CHECKBOX_NAME: chosen}, follow=True).content.decode()
    assert "2 confirmations approved." in done and "3 left out" in done
    assert set(Confirmation.objects.filter(status="approved").values_list("pk", flat=True)) \
        == {first.pk, second.pk}


def test_the_request_page_lists_other_calls_and_owner_only_requests_say_so(
        user_factory: Any, requester: Any, client_for: Any, make_tool: Any) -> None:
    """Item 11: not the very call being decided as "released"; owner-only marked."""
    from guarded_tools.models import Operation

    effect_only = make_tool(confirm="effect-only", input_schema={
        "type": "object", "properties": {"operationId": {"type": "string"},
                                         "amount": {"type": "string"}}})
    assert ask(client_for, requester, effect_only, amount="1.00").status_code == 202
    confirmation = Confirmation.objects.get()
    assert Operation.objects.filter(key=confirmation.key).exists()  # its released claim
    client = staff_client(user_factory, *APPROVER, "guarded_tools.view_operation")
    html = client.get(f"{CONF_LIST}{confirmation.pk}/change/").content.decode()
    assert 'data-testid="recent-calls"' not in html and "None yet." in html
    owners = make_tool(confirm="owner", input_schema=effect_only.input_schema)
    ask(client_for, requester, owners, amount="2.00")
    owner_only = Confirmation.objects.get(tool=owners.name)
    queue = client.get(CONF_LIST).content.decode()
    assert queue.count('data-testid="owner-only"') == 1
    page = client.get(f"{CONF_LIST}{owner_only.pk}/change/").content.decode()
    assert 'data-testid="owner-decides"' in page and "They have not decided yet." in page
