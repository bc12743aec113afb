"""A budget override added through the admin's form in headless Chromium, then the budget
use page: the used amount of the overridden limit and when the window frees it.

``GT_CONSOLE_SCREENSHOTS=<dir>`` saves both pages at 1280 px.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from guarded_tools.models import AuditEntry, BudgetOverride
from tests.conftest import Effects
from tests.integration.browser import expect, fits, log_in, shoot
from tests.pipeline.policy_support import SCHEMA, budgeted, pay

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.xdist_group("console_browser")]


def test_a_manager_adds_an_override_and_sees_the_budget_use(
        page: Any, make_tool: Any,
        alice: Any, user_factory: Any, client_for: Any) -> None:
    definition = make_tool(Effects(), confirm=budgeted(limit=200), input_schema=SCHEMA)
    user_factory("manager", is_staff=True, perms=(
        "guarded_tools.manage_budgets", "guarded_tools.view_budgetcounter", "auth.view_user"))
    log_in(page, "manager")
    page.goto("/admin/")
    page.get_by_role("link", name="Budget overrides").click()
    page.get_by_role("link", name="Add budget override").click()
    page.locator("#id_budget").select_option("spend")
    page.locator(".field-user .select2-selection").click()  # the user is found by name
    page.locator(".select2-search__field").fill("ali")
    page.get_by_role("option", name="alice").click()
    expect(page.locator("#select2-id_user-container")).to_have_attribute("title", "alice")
    page.get_by_label("Sum per window:").fill("350")
    page.get_by_label("Why:").fill("Quarter end: more payments this week")
    shoot(page, "budget-override-form-1280.png")
    fits(page, "override form")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")
    expect(page.locator("#result_list td.field-principal")).to_have_text("user alice")
    shoot(page, "budget-overrides-1280.png")
    fits(page, "overrides")
    override = BudgetOverride.objects.get()
    assert override.limit == 350 and override.user == alice
    assert AuditEntry.objects.get().action == AuditEntry.Action.BUDGET_OVERRIDE_SET

    agent = client_for(alice)
    assert [pay(agent, definition.name).status_code for _ in range(4)] == [200, 200, 200, 429]

    page.goto("/admin/")
    expect(page.get_by_test_id("budget-use")).to_contain_text("1")  # one window in use
    shoot(page, "budget-index-1280.png")
    page.get_by_test_id("budget-use").click()
    row = page.locator("#result_list tbody tr").filter(has_text="alice")
    expect(row).to_have_count(1)
    expect(row.locator("td.field-amount")).to_have_text("300.00of 350.00")
    tomorrow = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%d")
    expect(row.locator("td.field-frees_at")).to_have_text(f"{tomorrow}00:00:00 UTC")
    expect(row.locator("td.field-override")).to_have_text("user alice")
    shoot(page, "budget-use-1280.png")
    fits(page, "budget use")
    row.locator("td.field-override a").click()
    expect(page.get_by_label("Sum per window:")).to_have_value("350.0000")
