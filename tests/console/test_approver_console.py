"""What an approver reads, through the admin (Django's test client): the queue, the panel,
the request's page, the audit trail, and times to the second with their zone.

Payments go through the demo's ``send_payment`` over REST (token and session), so the
requests carry its policy's rules, approvals and precheck as in the demo.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.html import escape

from guarded_tools.models import AuditEntry, Confirmation
from tests.conftest import key

pytestmark = pytest.mark.django_db

CONF_LIST = "/admin/guarded_tools/confirmation/"
AUDIT_LIST = "/admin/guarded_tools/auditentry/"
OPS_LIST = "/admin/guarded_tools/operation/"
APPROVER = ("guarded_tools.view_confirmation", "guarded_tools.approve_confirmation",
            "guarded_tools.view_auditentry", "guarded_tools.view_operation")
#: A time as a person reads it on every page: to the second, with its zone.
SECONDS_AND_ZONE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]{3,4}"


@pytest.fixture
def payer(user_factory: Any) -> Any:
    return user_factory("payer", perms=("demo.add_ledgerentry",))


@pytest.fixture
def accounts(payer: Any, user_factory: Any) -> tuple[Any, Any, Any]:
    """The payer's checking (5,000.00) and second account, and rita's savings."""
    from project.demo.models import Account

    return (Account.objects.create(owner=payer, name="Checking", balance=Decimal("5000")),
            Account.objects.create(owner=payer, name="Spare"),
            Account.objects.create(owner=user_factory("rita"), name="Savings"))


@pytest.fixture(params=["token", "session"])
def agent(request: Any, payer: Any, client_for: Any, session_client_for: Any) -> Any:
    """The payer's agent, with a token or in the payer's session."""
    return client_for(payer) if request.param == "token" else session_client_for(payer)


def pay(agent: Any, source: Any, receiver: Any, amount: str = "500.00") -> Confirmation:
    """A payment the policy sends to approvers: its pending request."""
    from project.demo.models import PaymentAuthorization

    auth = PaymentAuthorization.objects.create(source=source, source_version=source.version)
    body = {"operationId": key(), "sourceId": source.pk, "receiverId": receiver.pk,
            "amount": amount, "authorizationId": auth.pk}
    asked = agent.post("/agent/tools/send_payment/", body, format="json")
    assert asked.status_code == 202, asked.content
    return Confirmation.objects.get(key=body["operationId"])


def move(agent: Any, source: Any, receiver: Any, amount: str = "75.00") -> Confirmation:
    """A move between the payer's own accounts: only the payer decides it."""
    body = {"operationId": key(), "sourceId": source.pk, "receiverId": receiver.pk,
            "amount": amount}
    asked = agent.post("/agent/tools/move_between_my_accounts/", body, format="json")
    assert asked.status_code == 202, asked.content
    return Confirmation.objects.get(key=body["operationId"])


def staff(user_factory: Any, name: str = "approver", perms: tuple[str, ...] = APPROVER) -> Client:
    client = Client()
    client.force_login(user_factory(name, is_staff=True, perms=perms))
    return client


def decide(client: Client, confirmation: Confirmation, decision: str, reason: str = "") -> None:
    client.post(f"{CONF_LIST}{confirmation.pk}/decide/",
                {"decision": decision, "reason": reason})


def cell(page: str, field: str, row: int = 0) -> str:
    """The HTML of one column's cell in the changelist's ``row``."""
    cells = re.findall(rf'<t[dh] class="field-{field}"[^>]*>(.*?)</t[dh]>', page, re.S)
    return cells[row]


# -- the queue ------------------------------------------------------------------------------
def test_the_queue_lists_what_waits_with_its_amount_rule_and_approvals(
        user_factory: Any, agent: Any, accounts: tuple[Any, Any, Any]) -> None:
    source, _spare, savings = accounts
    declined = pay(agent, source, savings, "120.00")
    large = pay(agent, source, savings, "1200.00")
    small = pay(agent, source, savings, "500.00")
    approver = staff(user_factory)
    decide(approver, declined, "decline", "Not this month.")
    decide(approver, large, "approve")  # one of two

    queue = approver.get(CONF_LIST).content.decode()
    # Pending by default: the declined request is not among those waiting.
    assert f'value="{large.pk}"' in queue and f'value="{small.pk}"' in queue
    assert f'value="{declined.pk}"' not in queue
    # Oldest first: the large payment (asked first of the two), then the small one.
    assert cell(queue, "amount", 0) == "1,200.00" and cell(queue, "amount", 1) == "500.00"
    approvals = cell(queue, "approvals_given", 0)
    assert '>1 of 2</span>' in approvals and 'title="approver"' in approvals
    assert 'data-testid="rule">above 1,000.00<' in approvals
    assert '>0 of 1</span>' in cell(queue, "approvals_given", 1)
    assert 'data-testid="rule">up to 1,000.00<' in cell(queue, "approvals_given", 1)
    assert "23 h" in cell(queue, "age", 1) and " left" in cell(queue, "age", 1)
    # Every status is one click away; the default is marked as chosen.
    assert '?status__exact=all"' in queue
    everything = approver.get(CONF_LIST + "?status__exact=all").content.decode()
    assert f'value="{declined.pk}"' in everything
    declined_row = re.search(rf'value="{declined.pk}".*?</tr>', everything, re.S)
    assert declined_row is not None and ">declined</span>" in declined_row.group(0)
    assert ">approver</div>" in declined_row.group(0)  # who decided, under the status
    assert "1 of 1" not in declined_row.group(0) and ">0 of 1<" in declined_row.group(0)


def test_the_queue_marks_a_request_that_would_fail_now_and_uses_one_placeholder(
        user_factory: Any, agent: Any, accounts: tuple[Any, Any, Any]) -> None:
    from project.demo.models import Account

    source, spare, savings = accounts
    payment = pay(agent, source, savings)
    owners = move(agent, source, spare)
    approver = staff(user_factory)
    queue = approver.get(CONF_LIST).content.decode()
    assert 'data-testid="validity-mark"' not in queue  # it passes the precheck now
    Account.objects.filter(pk=source.pk).update(balance=Decimal("5"))  # spent meanwhile
    queue = approver.get(CONF_LIST).content.decode()
    rows = {pk: re.search(rf'value="{pk}".*?</tr>', queue, re.S) for pk in
            (payment.pk, owners.pk)}
    marked = rows[payment.pk].group(0)  # type: ignore[union-attr]
    assert 'data-testid="validity-mark">would fail now<' in marked
    assert ('title="Would fail now: The source account cannot cover this amount."'
            in marked.replace("&#x27;", "'"))
    other = rows[owners.pk].group(0)  # type: ignore[union-attr]
    # The owner's move has no policy, so no amount and no rule: the one placeholder.
    assert '<td class="field-amount">—</td>' in other and ">owner<" in other
    assert ">-<" not in queue and ">-</td>" not in queue


# -- the panel ------------------------------------------------------------------------------
def tile(page: str, testid: str) -> str:
    return page.split(f'data-testid="{testid}"')[1].split("<")[0].lstrip(">")


def test_the_panel_counts_what_the_viewer_can_decide_and_what_waits_for_its_owner(
        user_factory: Any, agent: Any, accounts: tuple[Any, Any, Any]) -> None:
    source, spare, savings = accounts
    owners = move(agent, source, spare)  # the oldest waiting request: only its owner decides
    Confirmation.objects.filter(pk=owners.pk).update(
        created_at=timezone.now() - timedelta(hours=2))
    payment = pay(agent, source, savings)
    approver = staff(user_factory)
    for url in ("/admin/", CONF_LIST):
        page = approver.get(url).content.decode()
        assert tile(page, "pending-count") == "1", url  # the payment, not the owner's move
        assert tile(page, "owner-count") == "1", url
        oldest = page.split('data-testid="oldest-link"')[0].rsplit("<a", 1)[1]
        assert f'href="{CONF_LIST}{payment.pk}/change/"' in oldest, url
        assert tile(page, "oldest-pending") != "2 h", url
    # Someone who may only look decides nothing: the payment waits for other approvers.
    viewer = staff(user_factory, "viewer", ("guarded_tools.view_confirmation",))
    page = viewer.get("/admin/").content.decode()
    assert tile(page, "pending-count") == "0" and tile(page, "others-count") == "1"
    assert tile(page, "owner-count") == "1"
    # Once approved, nothing waits for the approver.
    decide(approver, payment, "approve")
    page = approver.get("/admin/").content.decode()
    assert tile(page, "pending-count") == "0" and tile(page, "oldest-pending") == "—"


# -- the request's page ---------------------------------------------------------------------
def test_the_request_page_heads_with_the_request_once_and_puts_the_rule_above_the_buttons(
        user_factory: Any, agent: Any, accounts: tuple[Any, Any, Any]) -> None:
    source, _spare, savings = accounts
    large = pay(agent, source, savings, "1200.00")
    approver = staff(user_factory)
    url = f"{CONF_LIST}{large.pk}/change/"
    page = approver.get(url).content.decode()
    body = page.split("<body")[1]
    sentence = "Pay 1,200.00 EUR from payer&#x27;s Checking (balance 5,000.00 EUR) to"
    assert re.search(rf'<h1 class="gt-subject" data-testid="summary">{re.escape(sentence)}',
                     body)
    assert body.count("<h1") == 1 and "View confirmation" not in body
    named = escape(str(large))
    assert body.count(named) == 1  # the breadcrumbs name the row; no subtitle repeats it
    assert 'data-testid="policy-rule">above 1,000.00<' in page
    assert page.index('data-testid="approvals"') < page.index('value="approve"')
    assert page.index('data-testid="policy-rule"') < page.index('class="gt-decide')
    decide(approver, large, "approve", "Invoice 88.")
    page = staff(user_factory, "approver2").get(url).content.decode()
    assert "1 of 2 approvals given: approver (" in page
    audit = page.split('data-testid="audit"')[1].split("</ul>")[0]
    assert "approver: approved (1 of 2 approvals given) — “Invoice 88.”" in audit
    assert "approved confirmation" not in audit and "gt-badge" not in audit


def test_an_approved_request_says_until_when_its_approval_lasts(
        user_factory: Any, agent: Any, accounts: tuple[Any, Any, Any], settings: Any) -> None:
    from guarded_tools.console.formatting import when

    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS,
                              "CONFIRMATION_APPROVAL_TTL_SECONDS": 1800}
    source, _spare, savings = accounts
    payment = pay(agent, source, savings)
    approver = staff(user_factory)
    url = f"{CONF_LIST}{payment.pk}/change/"
    assert 'data-testid="approval-lasts"' not in approver.get(url).content.decode()
    decide(approver, payment, "approve")
    payment.refresh_from_db()
    assert payment.status == "approved" and payment.decided_at is not None
    assert abs((payment.expires_at - payment.decided_at).total_seconds() - 1800) < 5
    page = approver.get(url).content.decode()
    lasts = page.split('data-testid="approval-lasts">')[1].split("</p>")[0]
    assert lasts.startswith(f"The approval lasts until {when(payment.expires_at)} (")
    assert re.search(r"\((29|30)\xa0minutes from now\)", lasts), lasts
    assert "1 of 1 approvals given" in page


#: The day's limit of the ``limited`` tool, which a test lowers after the request.
LIMIT = {"amount": Decimal("100")}


@pytest.fixture
def limited(make_tool: Any) -> Any:
    """A tool whose precheck refuses amounts over ``LIMIT`` and asks to change the amount."""
    from guarded_tools import ToolError

    def precheck(*, input: dict[str, Any], **_: Any) -> None:
        if Decimal(input["amount"]) > LIMIT["amount"]:
            raise ToolError("over_the_limit", "The amount is over today's limit.",
                            repair={"action": "change_input", "fields": ["amount"],
                                    "instruction": "Ask for less."})

    LIMIT["amount"] = Decimal("100")
    return make_tool(confirm="always", precheck=precheck, intent=("operationId", "amount"),
                     input_schema={"type": "object", "properties": {
                         "operationId": {"type": "string"}, "amount": {"type": "string"},
                         "memo": {"type": "string"}}})


def test_a_request_that_would_fail_now_says_what_an_approval_covers(
        user_factory: Any, agent: Any, accounts: tuple[Any, Any, Any], limited: Any,
        payer: Any, client_for: Any) -> None:
    """The demo's stale authorization: its repair (a new authorization) leaves the approved
    fields alone, so an approval is kept. A repair that changes the approved amount makes
    another call, which asks again. Either way Decline is the main button."""
    from project.demo.models import Account

    source, _spare, savings = accounts
    payment = pay(agent, source, savings)
    Account.objects.filter(pk=source.pk).update(version=source.version + 1)  # stale
    approver = staff(user_factory)
    page = approver.get(f"{CONF_LIST}{payment.pk}/change/").content.decode()
    assert ('data-testid="validity">Would fail now: The source account changed after the'
            " payment was authorized.<") in page
    covers = page.split('data-testid="approval-covers">')[1].split("</p>")[0]
    assert ("An approval is bound to operationId, sourceId, receiverId and amount as shown"
            " here. The repair the tool asks for changes the state it checks (and gives a new"
            " authorizationId), leaving those alone, so an approval given now is kept: the"
            " agent&#x27;s repaired retry runs with it.") in covers
    assert 'class="gt-covers gt-covers-kept"' in page
    buttons = page.split('class="gt-buttons">')[1].split("</div>")[0]
    assert buttons.index('value="decline"') < buttons.index('value="approve"')
    assert 'value="decline" class="button default gt-decline"' in buttons
    assert 'value="approve" class="button gt-approve-anyway"' in buttons
    assert ">Approve anyway<" in buttons

    asked = client_for(payer).post(f"/agent/tools/{limited.name}/",
                                   {"operationId": key(), "amount": "80"}, format="json")
    assert asked.status_code == 202, asked.content
    over = Confirmation.objects.get(tool=limited.name)
    LIMIT["amount"] = Decimal("50")  # lowered since
    page = approver.get(f"{CONF_LIST}{over.pk}/change/").content.decode()
    covers = page.split('data-testid="approval-covers">')[1].split("</p>")[0]
    assert ("An approval is bound to operationId and amount as shown here. The repair the"
            " tool asks for changes amount, so the repaired call asks for a new approval: an"
            " approval given now covers only this call, which would fail.") in covers
    assert 'class="gt-covers gt-covers-new"' in page

    # A refusal with no repair: the approval covers the input as it is.
    spent = pay(agent, Account.objects.get(pk=source.pk), savings)
    Account.objects.filter(pk=source.pk).update(balance=Decimal("5"))
    page = approver.get(f"{CONF_LIST}{spent.pk}/change/").content.decode()
    covers = page.split('data-testid="approval-covers">')[1].split("</p>")[0]
    assert ("The tool names no repair: the agent&#x27;s retry with it fails the same way"
            " unless what the tool checks changes first.") in covers


def test_a_passing_request_keeps_approve_as_the_main_button(
        user_factory: Any, agent: Any, accounts: tuple[Any, Any, Any]) -> None:
    source, _spare, savings = accounts
    payment = pay(agent, source, savings)
    page = staff(user_factory).get(f"{CONF_LIST}{payment.pk}/change/").content.decode()
    buttons = page.split('class="gt-buttons">')[1].split("</div>")[0]
    assert buttons.index('value="approve"') < buttons.index('value="decline"')
    assert 'value="approve" class="button default"' in buttons
    assert 'data-testid="approval-covers"' not in page


# -- the audit trail ------------------------------------------------------------------------
def test_the_audit_trail_reads_the_stored_summary_and_filters_by_person_and_date(
        user_factory: Any, agent: Any, accounts: tuple[Any, Any, Any]) -> None:
    source, _spare, savings = accounts
    large = pay(agent, source, savings, "1200.00")
    small = pay(agent, source, savings, "120.00")
    approver, other = staff(user_factory), staff(user_factory, "approver2")
    decide(approver, large, "approve", "Invoice 88.")
    decide(other, small, "decline", "Not this month.")
    AuditEntry.objects.create(action=AuditEntry.Action.RECOVER, status="succeeded")

    trail = approver.get(AUDIT_LIST).content.decode()
    assert "guarded_tools/admin.css" in trail  # its badges and one-line times
    asked = ("Pay 1,200.00 EUR from payer&#x27;s Checking (balance 5,000.00 EUR) to"
             " rita&#x27;s Savings")
    about = [cell(trail, "subject", row) for row in range(3)]
    assert asked in about[2] and f'/confirmation/{large.pk}/change/"' in about[2]
    assert "Pay 120.00 EUR" in about[1] and " by payer" not in "".join(about)
    assert about[0] == "—"  # a recovery of nothing left: the placeholder
    assert "approved confirmation (1 of 2 approvals given)" in cell(trail, "action_and_status", 2)
    # Each time on one line, to the second with its zone; the rows counted as entries.
    assert re.fullmatch(rf'<a href="[^"]+"><span class="gt-time">{SECONDS_AND_ZONE}</span></a>',
                        cell(trail, "at", 0)), cell(trail, "at", 0)
    assert "3 entries" in trail and "audit trail\n" not in trail.split('class="paginator"')[1]

    def listed(query: str) -> list[Any]:
        response = approver.get(AUDIT_LIST + query)
        assert response.status_code == 200
        assert "?e=1" not in response.get("Location", "")
        return [entry.action for entry in response.context["cl"].result_list]

    people = {user.username: user.pk for user in type(large.requested_by).objects.all()}
    assert listed(f"?actor={people['approver']}") == ["approve"]
    assert listed(f"?actor={people['approver2']}") == ["decline"]
    assert listed("?actor=none") == ["recover"]
    assert listed("?actor=no-such-id") == []
    filters = trail.split('id="changelist-filter"')[1]
    assert "By person" in filters and ">approver2</a>" in filters
    assert "By date" in filters and ">Today</a>" in filters
    today = re.search(r'<a href="(\?created_at__gte=[^"]+)">Today</a>', filters)
    assert today is not None
    assert len(listed(today.group(1).replace("&amp;", "&"))) == 3
    midnight = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    before = {"created_at__gte": (midnight - timedelta(days=1)).isoformat(),
              "created_at__lt": midnight.isoformat()}
    response = approver.get(AUDIT_LIST, before)
    assert list(response.context["cl"].result_list) == []  # nothing happened yesterday


# -- times ----------------------------------------------------------------------------------
def test_titles_breadcrumbs_recent_actions_and_history_show_seconds_and_the_zone(
        user_factory: Any, agent: Any, accounts: tuple[Any, Any, Any], settings: Any) -> None:
    """In the site's zone (here Berlin's): the row's name (titles, breadcrumbs, Django's
    *Recent actions*), the History page, the audit trail and the queue's times on hover."""
    from django.contrib.admin.models import LogEntry

    settings.TIME_ZONE = "Europe/Berlin"
    source, _spare, savings = accounts
    payment = pay(agent, source, savings)
    assert re.fullmatch(rf"send_payment by payer, {SECONDS_AND_ZONE} \(pending\)", str(payment))
    assert re.search(r" CES?T \(pending\)$", str(payment)), str(payment)
    approver = staff(user_factory)
    url = f"{CONF_LIST}{payment.pk}/"
    decide(approver, payment, "approve")
    page = approver.get(f"{url}change/").content.decode()
    title = page.split("<title>")[1].split("</title>")[0]
    assert re.match(rf"send_payment by payer, {SECONDS_AND_ZONE} \(approved\)", title)
    breadcrumbs = page.split('class="breadcrumbs"')[1].split("</div>")[0]
    assert re.search(rf"send_payment by payer, {SECONDS_AND_ZONE} \(approved\)", breadcrumbs)
    entry = LogEntry.objects.get(object_id=str(payment.pk))
    assert re.fullmatch(rf"send_payment by payer, {SECONDS_AND_ZONE} \(approved\)",
                        entry.object_repr)
    assert escape(entry.object_repr) in approver.get("/admin/").content.decode()
    history = approver.get(f"{url}history/").content.decode()
    assert re.search(rf'data-testid="history-time">{SECONDS_AND_ZONE}<', history)
    entry_page = approver.get(
        f"{AUDIT_LIST}{AuditEntry.objects.get().pk}/change/").content.decode()
    assert re.search(rf"approved confirmation by approver, {SECONDS_AND_ZONE}",
                     entry_page.split("<title>")[1])
    queue = approver.get(CONF_LIST + "?status__exact=all").content.decode()
    assert re.search(rf'<span class="gt-nowrap" title="{SECONDS_AND_ZONE}">', queue)


def test_a_budget_windows_name_shows_seconds_and_the_zone() -> None:
    from datetime import UTC, datetime

    from guarded_tools.models import BudgetCounter

    counter = BudgetCounter(budget="send_payment per day", scope="auth.user:1",
                            window_start=datetime(2026, 12, 5, 0, 0, tzinfo=UTC))
    assert str(counter) == "send_payment per day · auth.user:1 · 2026-12-05 00:00:00 UTC"


# -- the timeline's WHO ---------------------------------------------------------------------
def test_the_timeline_names_an_agents_user_without_saying_agent_twice(
        user_factory: Any, client_for: Any, make_tool: Any) -> None:
    from guarded_tools.models import Operation

    definition = make_tool()
    named_agent = user_factory("agent")
    assert client_for(named_agent).post(f"/agent/tools/{definition.name}/",
                                        {"operationId": key()}, format="json").status_code == 200
    operation = Operation.objects.get(tool=definition.name)
    operator = staff(user_factory, "operator", ("guarded_tools.view_operation",))
    page = operator.get(f"{OPS_LIST}{operation.pk}/change/").content.decode()
    who = re.findall(r'data-testid="who">([^<]*)<', page)
    assert who and set(who) == {"agent (for user agent)"}, who
    assert "agent agent" not in page
