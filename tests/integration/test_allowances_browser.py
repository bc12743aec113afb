"""An allowance granted from a request's page in headless Chromium, a second granter in the
list, then the list with what is used and left and who granted it; light and dark.

``GT_CONSOLE_SCREENSHOTS=<dir>`` saves the pages at 1280 px.
"""

from __future__ import annotations

from typing import Any

import pytest

from guarded_tools.models import Allowance, AllowanceStatus, Confirmation
from tests.conftest import Effects
from tests.integration.browser import choose_action, expect, fits, log_in, open_page, shoot
from tests.pipeline.allowance_support import SCHEMA, allowing, payment, people
from tests.pipeline.policy_support import call

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.xdist_group("console_browser")]


def test_two_approvers_grant_from_a_request_page_and_the_list_shows_it(
        page: Any, browser: Any, live_server: Any, make_tool: Any, alice: Any,
        user_factory: Any, client_for: Any) -> None:
    handler = Effects()
    # Above 100.00 two approvers: a request of 250.00 needs both, and so does its allowance.
    definition = make_tool(handler, confirm=allowing(one_up_to=100), input_schema=SCHEMA)
    people(user_factory, "approver", "approver2")
    agent = client_for(alice)
    body = payment(250)
    assert call(agent, definition.name, body).status_code == 202
    request = Confirmation.objects.get()

    log_in(page, "approver")
    page.goto(f"/admin/guarded_tools/confirmation/{request.pk}/change/")
    offer = page.get_by_test_id("allow")
    expect(offer).to_contain_text("Allow alice calls like this without asking")
    shoot(page, "allowance-request-page-1280.png")
    fits(page, "request page")
    page.get_by_test_id("allow-link").click()
    expect(page.locator("#id_tool")).to_have_value(definition.name)
    expect(page.locator("#id_per_call")).to_have_value("250")
    expect(page.locator("#id_constraints")).to_contain_text('"receiverId": ["r-17"]')
    page.locator("#id_count").fill("3")
    page.locator("#id_note").fill("Rent to r-17, three times a day at most")
    shoot(page, "allowance-form-1280.png", full_page=True)
    fits(page, "allowance form")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")
    row = page.locator("#result_list tbody tr")
    expect(row.locator("td.field-state")).to_have_text("waiting for more granters (1 of 2)")
    allowance = Allowance.objects.get()
    assert allowance.approvals_required == 2 and allowance.status == AllowanceStatus.PENDING
    assert call(agent, definition.name, payment(200)).status_code == 202

    second = open_page(browser, live_server.url)
    try:
        log_in(second, "approver2")
        second.goto("/admin/guarded_tools/allowance/")
        second.locator("#result_list input.action-select").first.check()
        choose_action(second, "grant_selected")
        expect(second.locator(".messagelist")).to_contain_text("Granted 1 allowance.")
        assert call(agent, definition.name, payment(200)).status_code == 200
        second.goto("/admin/guarded_tools/allowance/")
        row = second.locator("#result_list tbody tr")
        expect(row.locator("td.field-state")).to_have_text("active")
        expect(row.locator("td.field-granted_by")).to_have_text("approver and approver2")
        expect(row.locator("td.field-left")).to_have_text("2 calls left today")
        expect(row.locator("td.field-bounds")).to_contain_text("at most 250.00 a call")
        shoot(second, "allowances-list-1280.png")
        fits(second, "allowances list")
        row.locator("th.field-number a").click()
        expect(second.locator(".field-granted_by .readonly")).to_have_text(
            "approver and approver2")
        shoot(second, "allowance-detail-1280.png", full_page=True)
        fits(second, "allowance detail")
    finally:
        second.context.close()

    dark = open_page(browser, live_server.url, scheme="dark")
    try:
        log_in(dark, "approver")
        dark.goto("/admin/guarded_tools/allowance/")
        expect(dark.locator("#result_list tbody tr")).to_have_count(1)
        shoot(dark, "allowances-list-1280-dark.png")
    finally:
        dark.context.close()
    assert handler.count == 1
