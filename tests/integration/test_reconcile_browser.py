"""An unknown outcome's page in headless Chromium at 1280 px: the deciding fact and the
reconcile form are on the first screen, and a refused decision keeps what was typed.

``GT_CONSOLE_SCREENSHOTS=<folder>`` saves the screenshots (light and dark).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from guarded_tools.models import Operation
from tests.integration.browser import OPS_LIST, expect, fits, incident, log_in, open_page, shoot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.xdist_group("console_browser")]

PLACEHOLDER = {"amount": "", "paymentId": 0, "receiverId": 0}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_deciding_fact_and_the_form_are_on_the_first_screen(
        browser: Any, live_server: Any, demo: dict[str, Any],
        scheme: str) -> None:
    operation = incident()
    page = open_page(browser, live_server.url, 1280, scheme)
    try:
        log_in(page, "staff")
        page.goto(f"{OPS_LIST}{operation.pk}/change/")
        fits(page, f"unknown outcome, {scheme}")
        # 1280 x 900: the banner, the fact it rests on, the note and every decision, unscrolled.
        expect(page.get_by_test_id("reconcile")).to_contain_text("Nobody could prove")
        fact = page.get_by_test_id("fact-evidence").last
        expect(fact).to_have_text("no ledger entry with this reference")
        for shown in (page.get_by_test_id("summary"), fact, page.get_by_test_id("fact-recover"),
                      page.locator("#id_note"), page.get_by_test_id("mark_succeeded"),
                      page.get_by_test_id("mark_not_executed"),
                      page.get_by_test_id("mark_failed")):
            expect(shown).to_be_in_viewport()
        action = page.get_by_test_id("reconcile-form").get_attribute("action")
        assert action == f"{OPS_LIST}{operation.pk}/reconcile/"
        shoot(page, f"console-unknown-1280-{scheme}.png")
    finally:
        page.context.close()


def test_a_refused_decision_keeps_what_was_typed_at_its_own_address(
        browser: Any, live_server: Any, demo: dict[str, Any],
        ) -> None:
    """The placeholder typed back is refused by the server, with the note kept; the
    output the person found is recorded and the page says so."""
    operation = incident()
    page = open_page(browser, live_server.url)
    try:
        log_in(page, "staff")
        page.goto(f"{OPS_LIST}{operation.pk}/change/")
        expect(page.locator("#id_output")).to_have_value("")  # no made-up output to accept
        page.fill("#id_note", "The bank's statement lists it.")
        page.fill("#id_output", json.dumps(PLACEHOLDER))
        page.get_by_test_id("mark_succeeded").click()
        expect(page.get_by_test_id("refused")).to_contain_text("Nothing was changed")
        expect(page.locator(".gt-choice .errorlist")).to_contain_text(
            "not what the operation produced")
        assert page.url.endswith(f"{OPS_LIST}{operation.pk}/reconcile/")
        expect(page.locator("#id_note")).to_have_value("The bank's statement lists it.")
        expect(page.locator("#id_output")).to_have_value(json.dumps(PLACEHOLDER))
        for shown in (page.get_by_test_id("refused"), page.locator(".gt-choice .errorlist"),
                      page.get_by_test_id("mark_succeeded")):
            expect(shown).to_be_in_viewport()
        fits(page, "refused reconcile form")
        shoot(page, "console-reconcile-refused-1280-light.png")
        found = {"paymentId": 41, "amount": "500.00", "receiverId": demo["receiver"].pk}
        page.fill("#id_output", json.dumps(found))
        page.get_by_test_id("mark_succeeded").click()
        expect(page.locator(".messagelist")).to_contain_text("1 operation reconciled.")
        expect(page.get_by_test_id("state")).to_have_text("succeeded")
        operation.refresh_from_db()
        assert operation.output == found and operation.reconciled
        assert Operation.objects.filter(pk=operation.pk, state="succeeded").exists()
    finally:
        page.context.close()
