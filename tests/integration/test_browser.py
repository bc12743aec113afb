"""End to end: agents call over real HTTP, people decide and reconcile in headless Chromium.

One Chromium per module, a fresh browser context (cookies, storage) per test. People log
in through the admin's form in two tests (``log_in_with_the_form``) and with a session
cookie in the others (``log_in``). The agent side uses ``urllib`` with a DRF token
against ``live_server``. Set ``GT_CONSOLE_SCREENSHOTS=/some/dir`` to save screenshots of
the confirmation detail page and the operations changelist there.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.authtoken.models import Token

from guarded_tools.models import AuditEntry, Confirmation, Operation, OperationState
from project.demo.models import Account, LedgerEntry
from tests.conftest import Effects
from tests.integration.browser import (
    CONF_LIST,
    OPS_LIST,
    WAIT_MS,
    choose_action,
    expect,
    label,
    log_in,
    log_in_with_the_form,
    shoot,
)

# One xdist worker runs this file's tests, in order: its module-scoped fixtures start once.
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.xdist_group("browser")]


# -- the agent ---------------------------------------------------------------------------------
class Agent:
    """An agent calling tools over real HTTP with a DRF token."""

    def __init__(self, base_url: str, user: Any) -> None:
        self.base_url = base_url
        self.token = Token.objects.create(user=user).key

    def call(self, tool: str, body: dict[str, Any],
             **headers: str) -> tuple[int, dict[str, str], Any]:
        request = urllib.request.Request(
            f"{self.base_url}/agent/tools/{tool}/", data=json.dumps(body).encode(),
            method="POST", headers={"Authorization": f"Token {self.token}",
                                    "Content-Type": "application/json", **headers})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, dict(response.headers), json.load(response)
        except urllib.error.HTTPError as error:
            with error:
                return error.code, dict(error.headers), json.load(error)


@pytest.fixture
def agent_for(live_server: Any) -> Callable[[Any], Agent]:
    return lambda user: Agent(live_server.url, user)


def request_confirmation(agent: Agent, tool: str, body: dict[str, Any]) -> str:
    status, _, payload = agent.call(tool, body)
    assert status == 202, payload
    error = payload["error"]
    assert error["code"] == "confirmation_required"
    assert error["confirmation"]["status"] == "pending"
    return str(error["confirmation"]["id"])


# -- scenarios ---------------------------------------------------------------------------------
def test_approve_in_the_admin_then_the_retry_pays_once(page: Any, staff: Any, user_factory: Any,
                                                      agent_for: Any) -> None:
    payer = user_factory("payer", perms=("demo.add_ledgerentry",))
    source = Account.objects.create(owner=payer, name="Checking", balance="1000.00")
    receiver = Account.objects.create(owner=user_factory("payee"), name="Rent", balance="0")
    agent = agent_for(payer)
    status, _, prepared = agent.call("prepare_payment_authorization",
                                     {"requestId": str(uuid.uuid4()), "sourceId": source.pk})
    assert status == 200, prepared
    body = {"operationId": str(uuid.uuid4()), "sourceId": source.pk, "receiverId": receiver.pk,
            "amount": "500.00", "authorizationId": prepared["output"]["authorizationId"]}
    confirmation_id = request_confirmation(agent, "send_payment", body)
    assert not LedgerEntry.objects.exists()

    log_in_with_the_form(page)
    page.goto(CONF_LIST)
    # The queue lists the pending requests (its status filter's default): no status column.
    chosen = page.locator("#changelist-filter li.selected", has_text=label("pending"))
    expect(chosen).to_be_visible()
    row = page.locator("#result_list tbody tr", has_text="payer")
    row.get_by_role("link", name=re.compile(r"^Pay 500\.00 EUR from payer's Checking")).click()
    expect(page).to_have_url(re.compile(f"{CONF_LIST}{confirmation_id}/change/$"))
    detail = page.locator(".gt-detail")
    expect(detail).to_contain_text(
        "Payments up to 50.00 run at once; larger ones wait for approval.")
    expect(page.get_by_test_id("requester")).to_have_text("payer")
    expect(page.get_by_test_id("status")).to_have_text(label("pending"))
    for title in ("From account", "To account", "Amount", "Authorization", "Operation id"):
        expect(detail.locator("th", has_text=title).last).to_be_visible()  # the raw input
    expect(detail.locator("tr", has_text="Amount").locator(".gt-str").last
           ).to_have_text('"500.00"')
    shoot(page, "confirmation_detail.png", full_page=True)

    # A <form> nested in the admin's change form is dropped by the browser: the buttons must
    # live in their own form that posts to decide/.
    expect(page.locator("form.gt-decide")).to_have_attribute("action", re.compile(r"/decide/$"))
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".messagelist")).to_contain_text("Approved.")
    expect(page.get_by_test_id("status")).to_have_text(label("approved"))
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(detail).to_contain_text("Audit trail")
    shoot(page, "confirmation_approved.png", full_page=True)

    status, headers, done = agent.call("send_payment", body)
    assert status == 200, done
    assert done["output"]["amount"] == "500.00" and done["operation"]["replayed"] is False
    assert "Idempotent-Replayed" not in headers
    assert LedgerEntry.objects.filter(reference=body["operationId"]).count() == 1
    source.refresh_from_db()
    assert str(source.balance) == "500.00"
    assert Confirmation.objects.get(pk=confirmation_id).status == "consumed"

    status, headers, replay = agent.call("send_payment", body)
    assert status == 200 and headers.get("Idempotent-Replayed") == "true"
    assert replay["output"] == done["output"] and replay["operation"]["replayed"] is True
    assert LedgerEntry.objects.count() == 1


def test_decline_in_the_admin_then_the_retry_is_refused(page: Any, staff: Any, make_tool: Any,
                                                       user_factory: Any,
                                                       agent_for: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm="effect-only", description="Delete a mailbox.",
                           input_schema={"type": "object", "properties": {
                               "operationId": {"type": "string"},
                               "mailbox": {"type": "string", "title": "Mailbox"}}})
    agent = agent_for(user_factory("requester"))
    body = {"operationId": uuid.uuid4().hex, "mailbox": "ceo@example.com"}
    confirmation_id = request_confirmation(agent, definition.name, body)

    log_in(page)
    page.goto(f"{CONF_LIST}{confirmation_id}/change/")
    expect(page.locator(".gt-detail")).to_contain_text("Delete a mailbox.")
    page.get_by_role("button", name="Decline").click()  # no reason yet
    expect(page.locator(".messagelist .error")).to_contain_text("A reason is required")
    expect(page.get_by_test_id("status")).to_have_text(label("pending"))

    page.fill("#gt-reason", "Nobody asked for this.")
    page.get_by_role("button", name="Decline").click()
    expect(page.locator(".messagelist")).to_contain_text("Declined.")
    expect(page.get_by_test_id("status")).to_have_text(label("declined"))
    expect(page.locator(".gt-detail")).to_contain_text("Nobody asked for this.")

    status, _, refused = agent.call(definition.name, body)
    assert status == 409
    assert refused["error"]["code"] == "confirmation_declined"
    assert handler.count == 0
    assert not Operation.objects.filter(tool=definition.name,
                                        state=OperationState.SUCCEEDED).exists()
    audit = AuditEntry.objects.get()
    assert audit.action == "decline" and audit.actor == staff


def test_reconcile_an_unknown_outcome_in_the_admin(page: Any, staff: Any, make_tool: Any,
                                                   user_factory: Any, agent_for: Any) -> None:
    def lost_response(input: Any, ctx: Any) -> Any:
        ctx.operation.write({"phase": "sent", "upstream": "req-42"})
        raise ConnectionError("the bank hung up after the request was sent")

    definition = make_tool(lost_response, journal=True, description="Pay a supplier.",
                           output_schema={"type": "object", "required": ["paid"],
                                          "properties": {"paid": {"type": "boolean"}}})
    agent = agent_for(user_factory("requester"))
    body = {"operationId": uuid.uuid4().hex}
    status, _, unknown = agent.call(definition.name, body)
    assert status == 500 and unknown["error"]["code"] == "outcome_unknown", unknown
    operation = Operation.objects.get(tool=definition.name)
    # With no recover hook nobody can prove the outcome, so it waits for a person at once;
    # the retry is told so too, and the handler never runs again.
    status, _, unknown = agent.call(definition.name, body)
    assert status == 500 and unknown["error"]["code"] == "outcome_unknown", unknown
    operation.refresh_from_db()
    assert operation.state == OperationState.OUTCOME_UNKNOWN
    # A newer, settled operation: the unknown one must still come first.
    Operation.objects.create(tool="other_tool", scope="s", key="settled-later", fingerprint="f",
                             state=OperationState.SUCCEEDED)

    log_in(page)
    page.goto(OPS_LIST)
    expect(page.get_by_test_id("unknown-count")).to_have_text("1")
    first = page.locator("#result_list tbody tr").first
    expect(first).to_contain_text(definition.name)
    expect(first.locator(".gt-badge")).to_have_text(label("outcome unknown"))
    shoot(page, "operations_changelist.png", full_page=True)

    first.locator("input.action-select").check()
    choose_action(page, "mark_succeeded")
    expect(page.locator("#content h1")).to_have_text("Mark succeeded")
    page.fill("textarea[name=output]", '{"paid": "yes"}')
    page.fill("textarea[name=note]", "The bank statement shows the transfer.")
    page.click("input[type=submit][value='Mark succeeded']")
    expect(page.locator(".errornote")).to_contain_text("output schema")
    shoot(page, "mark_succeeded_form.png", full_page=True)
    operation.refresh_from_db()
    assert operation.state == OperationState.OUTCOME_UNKNOWN

    page.fill("textarea[name=output]", '{"paid": true}')
    page.fill("textarea[name=note]", "The bank statement shows the transfer.")
    page.click("input[type=submit][value='Mark succeeded']")
    expect(page.locator(".messagelist")).to_contain_text("1 operation reconciled.")
    expect(page.get_by_test_id("state")).to_have_text(label("succeeded"))  # back on its page
    page.goto(OPS_LIST)
    expect(page.get_by_test_id("unknown-count")).to_have_text("0")

    status, headers, replay = agent.call(definition.name, body)
    assert status == 200 and headers.get("Idempotent-Replayed") == "true"
    assert replay["output"] == {"paid": True}
    audit = AuditEntry.objects.get(operation=operation)
    assert audit.action == "mark_succeeded" and audit.actor == staff
    assert audit.note == "The bank statement shows the transfer."


def test_a_stale_reconcile_form_is_refused_in_the_browser(
        browser: Any, live_server: Any, staff: Any, django_user_model: Any, make_tool: Any,
        user_factory: Any, agent_for: Any) -> None:
    """Two operators: the first opens "mark not executed" on attempt 1, the second
    decides it, attempt 2 runs and ends unknown; the first one's submission is refused."""
    runs: list[int] = []

    def lost_response(input: Any, ctx: Any) -> Any:
        runs.append(1)
        ctx.operation.write({"attempt": len(runs)})
        raise ConnectionError("the bank hung up after the request was sent")

    definition = make_tool(lost_response, journal=True)
    django_user_model.objects.create_superuser("boss2", password="pw")
    agent = agent_for(user_factory("requester"))
    body = {"operationId": uuid.uuid4().hex}
    assert agent.call(definition.name, body)[2]["error"]["code"] == "outcome_unknown"
    operation = Operation.objects.get(tool=definition.name)
    contexts = [browser.new_context(base_url=live_server.url,
                                    viewport={"width": 1280, "height": 900})
                for _ in range(2)]
    try:
        first, second = (context.new_page() for context in contexts)
        for page, name in ((first, "boss"), (second, "boss2")):
            page.set_default_timeout(WAIT_MS)
            log_in(page, name)
            page.goto(OPS_LIST)
            page.check(f"input.action-select[value='{operation.pk}']")
            choose_action(page, "mark_not_executed")
            expect(page.locator("#content h1")).to_have_text("Mark not executed")
        second.fill("textarea[name=note]", "The bank has no record of it.")
        second.click("input[type=submit][value='Mark not executed']")
        expect(second.locator(".messagelist")).to_contain_text("1 operation reconciled.")
        assert agent.call(definition.name, body)[2]["error"]["code"] == "outcome_unknown"
        assert runs == [1, 1]

        first.fill("textarea[name=note]", "Decided on attempt 1.")
        first.click("input[type=submit][value='Mark not executed']")
        expect(first.locator(".messagelist")).to_contain_text("moved on")
        operation.refresh_from_db()
        assert operation.state == OperationState.OUTCOME_UNKNOWN and operation.fence == 2
        assert agent.call(definition.name, body)[2]["error"]["code"] == "outcome_unknown"
        assert runs == [1, 1]
    finally:
        for context in contexts:
            context.close()


def test_bulk_decline_with_the_reason_form(page: Any, staff: Any, make_tool: Any,
                                           user_factory: Any, agent_for: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm="effect-only")
    agent = agent_for(user_factory("requester"))
    bodies = [{"operationId": uuid.uuid4().hex} for _ in range(3)]
    ids = [request_confirmation(agent, definition.name, body) for body in bodies]

    log_in(page)
    page.goto(CONF_LIST)
    expect(page.get_by_test_id("pending-count")).to_have_text("3")
    for pk in ids[:2]:
        page.check(f"input.action-select[value='{pk}']")
    choose_action(page, "decline_selected")
    expect(page.locator("#content h1")).to_have_text("Decline confirmations")
    expect(page.locator("#content ul li")).to_have_count(2)
    page.fill("textarea[name=reason]", "Duplicate requests.")
    shoot(page, "bulk_decline_form.png", full_page=True)
    page.click("input[type=submit][value=Decline]")
    expect(page.locator(".messagelist")).to_contain_text("2 confirmations declined.")
    expect(page.get_by_test_id("pending-count")).to_have_text("1")

    for body in bodies[:2]:
        status, _, refused = agent.call(definition.name, body)
        assert status == 409 and refused["error"]["code"] == "confirmation_declined"
    status, _, waiting = agent.call(definition.name, bodies[2])
    assert status == 202 and waiting["error"]["confirmation"]["id"] == ids[2]
    assert handler.count == 0
    assert AuditEntry.objects.filter(action="decline", note="Duplicate requests.").count() == 2


# -- a browser agent in its user's own session ----------------------------------------------
FETCH = """async ([url, body, headers]) => {
    const token = document.cookie.split("; ").find(c => c.startsWith("csrftoken="));
    const response = await fetch(url, {method: "POST", credentials: "same-origin", body,
        headers: {"Content-Type": "application/json", "X-CSRFToken": token.split("=")[1],
                  ...headers}});
    return [response.status, await response.json()];
}"""


@pytest.mark.parametrize("atomic", [False, True], ids=["plain", "atomic"])
def test_a_page_script_calls_permissioned_tools_in_its_users_session(
    page: Any, user_factory: Any, make_tool: Any, atomic: bool,
) -> None:
    effects = Effects()
    definition = make_tool(effects, permissions=["demo.change_order"], atomic=atomic)
    user_factory("clerk", perms=("demo.change_order",), is_staff=True)
    user_factory("intern", is_staff=True)

    def call(over: str, body: dict[str, Any]) -> tuple[int, Any]:
        if over == "rest":
            status, data = page.evaluate(FETCH, [f"/agent/tools/{definition.name}/",
                                                 json.dumps(body), {}])
            return status, data.get("output") or data["error"]["code"]
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": definition.name, "arguments": body}}
        status, data = page.evaluate(FETCH, ["/agent/mcp/", json.dumps(message),
                                             {"MCP-Protocol-Version": "2025-11-25"}])
        result = data["result"]
        return status, (result["structuredContent"]["code"] if result["isError"]
                        else result["structuredContent"])

    log_in(page, "clerk")
    page.goto("/admin/")  # the page the script runs in, and its CSRF cookie
    assert call("rest", {"operationId": "r-1"}) == (200, {"done": 1})
    assert call("mcp", {"operationId": "m-1"}) == (200, {"done": 2})
    page.context.clear_cookies()  # another person, in a session of their own
    log_in(page, "intern")
    page.goto("/admin/")
    assert call("rest", {"operationId": "r-2"}) == (403, "authorization_denied")
    assert call("mcp", {"operationId": "m-2"}) == (200, "authorization_denied")
    assert effects.count == 2
