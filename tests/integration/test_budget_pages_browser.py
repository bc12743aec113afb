"""The budget pages in headless Chromium at 1280 px: what their rows are counted as, budget
names that never break inside a word, and windows in the site's time.

The demo's budget names ("send_payment per day", "send_payment per minute") and overrides
beside them; the count under each list says what the rows are ("2 budget windows", not
"2 budget use"); no name is broken inside a word and nothing overflows. With the site in
Europe/Paris, a daily window starts and frees at midnight there, as the 429 says.
``GT_CONSOLE_SCREENSHOTS=<dir>`` saves the pages.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from guarded_tools import Budget, Policy, Rule, Run
from guarded_tools.models import BudgetOverride
from tests.conftest import Effects, key
from tests.integration.browser import expect, fits, log_in, shoot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.xdist_group("console_browser")]

SCHEMA = {"type": "object", "properties": {"operationId": {"type": "string"},
                                           "amount": {"type": "number", "minimum": 0}},
          "required": ["operationId", "amount"]}
DEMO_BUDGETS = Policy(rules=[Rule(outcome=Run(), description="runs")], budgets=[
    Budget(name="send_payment per day", window_seconds=86_400, sum_field="amount",
           limit=2000),
    Budget(name="send_payment per minute", window_seconds=60, count=10),
])

#: The words of a cell drawn on more than one line: a word broken inside.
BROKEN_WORDS = """(selector) => {
  const broken = [];
  for (const cell of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (tops.size > 1) broken.push(match[0]);
      }
    }
  }
  return broken;
}"""


def pay(agent: Any, name: str, amount: float) -> Any:
    return agent.post(f"/agent/tools/{name}/", {"operationId": key(), "amount": amount},
                      format="json")


def test_the_budget_pages_count_windows_and_keep_names_whole(
        page: Any, make_tool: Any, alice: Any, bob: Any,
        user_factory: Any, client_for: Any) -> None:
    definition = make_tool(Effects(), confirm=DEMO_BUDGETS, input_schema=SCHEMA)
    # A site's users have long ids: "auth.user:1234567890" still fits its narrow column.
    carol = user_factory("carol", pk=1_234_567_890)
    for user in (alice, bob, carol):
        assert pay(client_for(user), definition.name, 10).status_code == 200
    BudgetOverride.objects.create(budget="send_payment per day", user=alice,
                                  limit=Decimal("5000"), note="quarter end")
    BudgetOverride.objects.create(budget="send_payment per minute", user=bob, count=20,
                                  note="a batch of refunds this afternoon")
    user_factory("manager", is_staff=True, perms=(
        "guarded_tools.manage_budgets", "guarded_tools.view_budgetcounter"))
    log_in(page, "manager")
    page.set_viewport_size({"width": 1280, "height": 900})

    # Every window, not just the current ones (the list's default): a per-minute window
    # may end between the payments and this page.
    page.goto("/admin/guarded_tools/budgetcounter/?window=all")
    expect(page.locator("#result_list tbody tr")).to_have_count(6)
    expect(page.locator(".paginator")).to_contain_text("6 budget windows")
    expect(page.locator(".paginator")).not_to_contain_text("budget use")
    shoot(page, "budget-use-names-1280.png")
    assert page.evaluate(BROKEN_WORDS, "#result_list td.field-budget_name") == []
    fits(page, "budget use")

    page.goto("/admin/guarded_tools/budgetcounter/?budget=send_payment+per+day&window=all")
    expect(page.locator(".paginator")).to_contain_text("3 budget windows")

    page.goto("/admin/guarded_tools/budgetoverride/")
    expect(page.locator("#result_list tbody tr")).to_have_count(2)
    expect(page.locator(".paginator")).to_contain_text("2 budget overrides")
    shoot(page, "budget-overrides-names-1280.png")
    assert page.evaluate(BROKEN_WORDS, "#result_list .field-budget") == []
    fits(page, "overrides")
