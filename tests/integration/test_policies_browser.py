"""A two-approval request's page in headless Chromium: the rule, "1 of 2", who still can."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission

from guarded_tools.core.errors import ConfirmationRequired
from guarded_tools.models import Confirmation
from tests.conftest import Effects, key
from tests.integration.browser import expect, fits, log_in
from tests.pipeline.policy_support import SCHEMA, payments

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.xdist_group("console_browser")]


def test_the_request_page_shows_one_of_two(page: Any, make_tool: Any, alice: Any,
                                           user_factory: Any) -> None:
    perms = Permission.objects.filter(codename__in=["approve_confirmation", "view_confirmation"])
    for name in ("approver", "approver2"):
        user_factory(name, is_staff=True).user_permissions.add(*perms)
    definition = make_tool(Effects(), confirm=payments(), input_schema=SCHEMA)
    with pytest.raises(ConfirmationRequired):
        definition({"operationId": key(), "amount": 1500}, user=alice)
    pending = Confirmation.objects.get()
    log_in(page, "approver")
    page.goto(f"/admin/guarded_tools/confirmation/{pending.pk}/change/")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".messagelist")).to_contain_text("1 of 2 approvals given")
    expect(page.get_by_test_id("policy-rule")).to_contain_text("huge")
    expect(page.get_by_test_id("approvals")).to_contain_text("1 of 2 approvals given: approver")
    expect(page.get_by_test_id("still-can")).to_contain_text("approver2")
    fits(page, "two-approval request")
