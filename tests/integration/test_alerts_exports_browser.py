"""The budget use page's alert thresholds and the lists' Export buttons in headless Chromium
at 1280 px. ``GT_CONSOLE_SCREENSHOTS=<dir>`` saves the pages."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from guarded_tools import Approvers, Budget, Policy, Rule, Run
from guarded_tools.models import AuditEntry
from tests.conftest import Effects, key
from tests.integration.browser import expect, fits, log_in, shoot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.xdist_group("console_browser")]

SCHEMA = {"type": "object", "properties": {"operationId": {"type": "string"},
                                           "amount": {"type": "number", "minimum": 0}},
          "required": ["operationId", "amount"]}
DEMO_BUDGETS = Policy(rules=[Rule(outcome=Run(), description="runs")], budgets=[
    Budget(name="send_payment per day", window_seconds=86_400, sum_field="amount",
           limit=2000, escalate=Approvers(2), alerts=(50, 80, 100)),
    Budget(name="send_payment per hour", window_seconds=3600, count=10),
])


def clear_of_a_window_end(margin: float = 60) -> None:
    """Return once no hour (so no day) ends within ``margin`` seconds: every payment of the
    test then counts in the same windows. Near an hour's end, wait for the next to begin."""
    while 3600 - time.time() % 3600 < margin:
        time.sleep(0.5)


def test_the_budget_use_page_shows_the_thresholds_reached(
        page: Any, make_tool: Any, alice: Any, user_factory: Any, client_for: Any) -> None:
    definition = make_tool(Effects(), confirm=DEMO_BUDGETS, input_schema=SCHEMA)
    clear_of_a_window_end()
    agent = client_for(alice)
    for amount in (700, 400, 600):  # 1,100.00 passes 50 %, 1,700.00 passes 80 %
        done = agent.post(f"/agent/tools/{definition.name}/",
                          {"operationId": key(), "amount": amount}, format="json")
        assert done.status_code == 200
    assert done.json()["meta"]["budgets"][0]["sum"]["remaining"] == "300.00"
    user_factory("treasurer", is_staff=True, email="treasurer@example.com", perms=(
        "guarded_tools.manage_budgets", "guarded_tools.view_budgetcounter"))
    log_in(page, "treasurer")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto("/admin/guarded_tools/budgetcounter/?window=all")  # an hour may end by now
    daily = page.locator("#result_list tbody tr", has_text="send_payment per day")
    expect(daily.locator("[data-testid=alert-reached]")).to_have_text(["50 %", "80 %"])
    expect(daily.locator("[data-testid=alert-pending]")).to_have_text(["100 %"])
    expect(daily.locator("td.field-amount")).to_contain_text("1,700.00")
    minute = page.locator("#result_list tbody tr", has_text="send_payment per hour")
    expect(minute.locator("[data-testid=alert-pending]")).to_have_text(["80 %", "100 %"])
    assert "reached at" in (daily.locator("[data-testid=alert-reached]").first
                            .get_attribute("title") or "")
    shoot(page, "budget-alerts-1280.png")
    fits(page, "budget use with alerts")
    page.emulate_media(color_scheme="dark")
    shoot(page, "budget-alerts-1280-dark.png")


def test_the_audit_trail_exports_what_its_filters_show(
        page: Any, user_factory: Any, alice: Any) -> None:
    for i in range(30):
        AuditEntry.objects.create(actor=alice, action="approve" if i % 2 else "decline",
                                  note=f"payment {i}")
    user_factory("auditor", is_staff=True, perms=(
        "guarded_tools.view_auditentry", "guarded_tools.view_operation",
        "guarded_tools.view_confirmation", "guarded_tools.export_records"))
    log_in(page, "auditor")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto("/admin/guarded_tools/auditentry/")
    page.get_by_role("link", name="declined confirmation").first.click()  # the filter
    expect(page).to_have_url(__import__("re").compile(r"action__exact=decline"))
    buttons = page.locator("a.gt-export")
    expect(buttons).to_have_text(["Export CSV", "Export JSON Lines"])
    shoot(page, "audit-export-1280.png")
    fits(page, "audit trail with export buttons")
    with page.expect_download() as download:
        buttons.nth(1).click()
    saved = download.value
    assert saved.suggested_filename.startswith("audit-")
    assert saved.suggested_filename.endswith(".jsonl")
    rows = [json.loads(line) for line in open(saved.path(), encoding="utf-8")]
    assert len(rows) == 15 and {r["action"] for r in rows} == {"decline"}
    page.goto("/admin/guarded_tools/auditentry/?action__exact=export")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list tbody tr")).to_contain_text("auditor")
    expect(page.locator("#result_list tbody tr td.field-subject")).to_have_text(
        "15 rows · action__exact = decline")
    shoot(page, "audit-export-recorded-1280.png")
    entry = AuditEntry.objects.get(action="export")
    assert entry.data["filters"] == "action__exact=decline" and entry.data["rows"] == 15
    for listed, name in (("operation", "operations"), ("confirmation", "confirmations")):
        page.goto(f"/admin/guarded_tools/{listed}/")
        expect(page.locator("a.gt-export")).to_have_text(["Export CSV", "Export JSON Lines"])
        shoot(page, f"{name}-export-1280.png")
        fits(page, f"{name} with export buttons")
