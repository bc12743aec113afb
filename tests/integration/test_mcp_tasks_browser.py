"""End to end: an MCP task over real HTTP, decided by a person in the admin (headless Chromium)."""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from typing import Any

import pytest
from rest_framework.authtoken.models import Token

from tests.conftest import Effects
from tests.integration.browser import decide_in_the_admin, expect, log_in, shoot
from tests.transports import mcp_tasks_schema as ext
from tests.transports.mcp_calls import ITEM, MODERN, URL, meta

# What these add to the admin's browser tests (which run under both Django versions)
# is the MCP Tasks flow and the app's consent page, whatever Django's version: under
# Django 6 only (one_django).
pytestmark = [pytest.mark.browser, pytest.mark.one_django,
              pytest.mark.django_db(transaction=True)]


class McpAgent:
    """A 2026-07-28 client that declares the Tasks extension, with a DRF token."""

    def __init__(self, base_url: str, user: Any) -> None:
        self.url = f"{base_url}{URL}"
        self.token = Token.objects.create(user=user).key

    def send(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        params = {**params, "_meta": meta()}
        headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json",
                   "MCP-Protocol-Version": MODERN, "Mcp-Method": method,
                   "Mcp-Name": params.get("name") or params.get("taskId")}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        request = urllib.request.Request(self.url, data=body.encode(), headers=headers,
                                         method="POST")
        with urllib.request.urlopen(request, timeout=15) as response:
            reply = json.load(response)
        assert "error" not in reply, reply
        return dict(reply["result"])

    def get_task(self, task_id: str) -> dict[str, Any]:
        reply = self.send("tasks/get", {"taskId": task_id})
        ext.GetTaskResult.model_validate(reply)
        return reply


@pytest.mark.parametrize("decision", ["approve", "decline"])
def test_a_person_decides_in_the_admin_and_tasks_get_returns_it(
        decision: str, page: Any, staff: Any, live_server: Any, user_factory: Any,
        make_tool: Any, eager_celery: None) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm="effect-only", input_schema=ITEM,
                           description="Orders stock from the supplier.")
    agent = McpAgent(live_server.url, user_factory("buyer"))
    arguments = {"operationId": uuid.uuid4().hex, "qty": 4}
    created = agent.send("tools/call", {"name": definition.name, "arguments": arguments})
    ext.CreateTaskResult.model_validate(created)
    assert created["resultType"] == "task"
    assert agent.get_task(created["taskId"])["status"] == "working"

    decide_in_the_admin(page, decision, "buyer", shows=(
        "Orders stock from the supplier.", "Quantity", definition.name))

    done = agent.get_task(created["taskId"])
    if decision == "approve":
        assert done["status"] == "completed" and handler.count == 1
        assert done["result"]["isError"] is False
        assert done["result"]["structuredContent"] == {"done": 1}
    else:
        assert done["status"] == "failed" and handler.count == 0
        assert done["error"]["data"]["code"] == "confirmation_declined"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_user_approves_their_own_request_on_the_consent_page(
        scheme: str, page: Any, live_server: Any, user_factory: Any,
        make_tool: Any) -> None:
    from guarded_tools.models import AuditEntry

    handler = Effects()
    definition = make_tool(handler, confirm="owner", input_schema=ITEM,
                           description="Orders stock from the supplier.")
    buyer = user_factory("buyer")
    agent = McpAgent(live_server.url, buyer)
    arguments = {"operationId": uuid.uuid4().hex, "qty": 4}
    asked = agent.send("tools/call", {"name": definition.name, "arguments": arguments})
    assert "/consent/" in asked["content"][0]["text"]  # no URL elicitation declared: the text
    url = asked["_meta"]["io.github.guarded-tools/error"]["confirmation"]["url"]

    # The user's own session, as their browser holds it after they signed in.
    log_in(page, "buyer")
    page.emulate_media(color_scheme=scheme)
    page.goto(url)
    expect(page.get_by_test_id("subject")).to_contain_text(definition.annotations["title"])
    expect(page.locator("body")).to_contain_text("Orders stock from the supplier.")
    expect(page.locator("th", has_text="Quantity")).to_be_visible()
    shoot(page, f"consent_{scheme}.png", full_page=True)
    # A browser agent in this session posts the page's form as it is: session cookie and
    # CSRF token, no password. Refused, and nothing decided (issue 25, item 1).
    token = page.locator("input[name=csrfmiddlewaretoken]").input_value()
    forged = page.request.post(url, form={"decision": "approve", "csrfmiddlewaretoken": token})
    assert forged.status == 403 and "Type your password" in forged.text()
    assert not AuditEntry.objects.exists()
    page.get_by_test_id("step-up").fill("wrong")
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_test_id("step-up-error")).to_contain_text("not right")
    shoot(page, f"consent_wrong_password_{scheme}.png", full_page=True)
    page.get_by_test_id("step-up").fill("pw")  # the user types their password
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_test_id("status")).to_contain_text("You approved this request")
    shoot(page, f"consent_done_{scheme}.png", full_page=True)

    done = agent.send("tools/call", {"name": definition.name, "arguments": arguments})
    assert done["isError"] is False and done["structuredContent"] == {"done": 1}
    assert handler.count == 1
    audit = AuditEntry.objects.get()
    assert audit.actor == buyer and audit.data["verified_by"] == "password"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_demos_owner_tool_signs_the_user_in_then_asks_them(
        scheme: str, page: Any, live_server: Any, django_user_model: Any) -> None:
    """The demo's walk-through: the agent's call names the page; the user opens it signed
    out, logs in as themself (the demo's ``agent``), reads the move, approves it."""
    from decimal import Decimal

    from guarded_tools.models import AuditEntry
    from project.demo.models import Account, LedgerEntry

    user = django_user_model.objects.create_user("agent", password="agent")
    checking = Account.objects.create(owner=user, name="Checking", balance=Decimal("1000.00"))
    savings = Account.objects.create(owner=user, name="Savings", balance=Decimal("250.00"))
    agent = McpAgent(live_server.url, user)
    arguments = {"operationId": uuid.uuid4().hex, "sourceId": checking.pk,
                 "receiverId": savings.pk, "amount": "50.00"}
    asked = agent.send("tools/call", {"name": "move_between_my_accounts",
                                      "arguments": arguments})
    url = asked["_meta"]["io.github.guarded-tools/error"]["confirmation"]["url"]

    page.emulate_media(color_scheme=scheme)
    page.goto(url)  # signed out: the site's login first, then back to the request
    page.fill("#id_username", "agent")
    page.fill("#id_password", "agent")
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(url)
    expect(page.locator("body")).to_contain_text(
        "Move 50.00 EUR from your Checking (balance 1,000.00 EUR) to your Savings"
        " (balance 250.00 EUR)")
    expect(page.locator("th", has_text="From account")).to_be_visible()
    # Issue 28 item 13: who asks, until when (with its zone), and no agent's bookkeeping.
    who = "An agent using your API token"
    expect(page.get_by_test_id("subject")).to_have_text(
        f"{who} asks to run “Move between my accounts” for you")
    expect(page.get_by_test_id("who-asks")).to_have_text(who)
    expect(page.get_by_test_id("deadline")).to_contain_text(re.compile(
        r"You can decide until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))
    expect(page.get_by_test_id("field-amount")).to_have_text("50.00 EUR")
    expect(page.locator("body")).not_to_contain_text(arguments["operationId"])
    expect(page.locator("body")).not_to_contain_text("sourceId")
    expect(page.locator("body")).not_to_contain_text("lapses in")
    page.get_by_test_id("step-up").fill("agent")  # the user types their password again
    dark = "-dark" if scheme == "dark" else ""
    shoot(page, f"consent-move-1280{dark}.png", full_page=True)
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_test_id("status")).to_contain_text("You approved this request (agent, ")
    expect(page.get_by_test_id("subject")).to_have_text("You approved “Move between my accounts”")
    expect(page.get_by_test_id("next-step")).to_contain_text("when your agent asks again, it"
                                                             " runs once")
    expect(page.get_by_test_id("deadline")).to_have_count(0)
    shoot(page, f"consent-move-approved-1280{dark}.png", full_page=True)

    done = agent.send("tools/call", {"name": "move_between_my_accounts",
                                     "arguments": arguments})
    assert done["isError"] is False and done["structuredContent"]["amount"] == "50.00"
    assert LedgerEntry.objects.get().source == checking
    assert AuditEntry.objects.get().actor == user
