"""Who sees the budget pages: the model's view permission or ``manage_budgets``, nothing else.

Django's default view permission accepts the change permission too; here the change
permission gives nothing (the docs: ``view_budgetoverride`` or ``manage_budgets`` shows
the overrides, ``view_budgetcounter`` or ``manage_budgets`` the budget use). Through
Django's test client, logged in through the admin's own form.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from guarded_tools.models import BudgetCounter, BudgetOverride, Reservation
from tests.pipeline.policy_support import SCHEMA, budgeted

pytestmark = pytest.mark.django_db

OVERRIDES = "/admin/guarded_tools/budgetoverride/"
USE = "/admin/guarded_tools/budgetcounter/"


@pytest.fixture
def override(make_tool: Any, alice: Any) -> BudgetOverride:
    make_tool(confirm=budgeted(limit=100), input_schema=SCHEMA)
    return BudgetOverride.objects.create(budget="spend", user=alice, limit=Decimal("300"),
                                         note="quarter end, secret reason")


@pytest.fixture
def in_use(override: BudgetOverride, alice: Any) -> BudgetCounter:
    from guarded_tools import Budget
    from guarded_tools.pipeline.stages.budget import window_start

    counter = BudgetCounter.objects.create(
        budget="spend", scope=f"auth.user:{alice.pk}",
        window_start=window_start(timezone.now(), Budget(name="spend")))
    Reservation.objects.create(counter=counter, amount=Decimal("42.00"))
    return counter


def staff(user_factory: Any, session_client_for: Any, *perms: str) -> Any:
    return session_client_for(user_factory("staffer", is_staff=True, perms=perms))


@pytest.mark.usefixtures("in_use")
def test_the_change_permission_alone_shows_no_override(
        override: BudgetOverride, user_factory: Any, session_client_for: Any) -> None:
    clerk = staff(user_factory, session_client_for, "guarded_tools.change_budgetoverride")
    assert clerk.get(OVERRIDES).status_code == 403
    for page in ("change", "history"):
        assert clerk.get(f"{OVERRIDES}{override.pk}/{page}/").status_code == 403
    index = clerk.get("/admin/")
    assert OVERRIDES not in index.content.decode()


@pytest.mark.usefixtures("in_use")
def test_the_change_permission_alone_shows_no_budget_use(
        user_factory: Any, session_client_for: Any) -> None:
    clerk = staff(user_factory, session_client_for, "guarded_tools.change_budgetcounter")
    assert clerk.get(USE).status_code == 403
    index = clerk.get("/admin/").content.decode()
    assert USE not in index and 'data-testid="budget-use"' not in index


@pytest.mark.parametrize("perm", ["guarded_tools.view_budgetoverride",
                                  "guarded_tools.manage_budgets"])
@pytest.mark.usefixtures("in_use")
def test_the_view_permission_or_manage_budgets_shows_the_overrides(
        perm: str, override: BudgetOverride, user_factory: Any,
        session_client_for: Any) -> None:
    viewer = staff(user_factory, session_client_for, perm)
    listing = viewer.get(OVERRIDES)
    assert listing.status_code == 200 and "quarter end, secret reason" in listing.content.decode()
    assert viewer.get(f"{OVERRIDES}{override.pk}/change/").status_code == 200
    # The link to the budget use page only where that page opens too.
    assert (USE in listing.content.decode()) == (perm == "guarded_tools.manage_budgets")


@pytest.mark.parametrize("perm", ["guarded_tools.view_budgetcounter",
                                  "guarded_tools.manage_budgets"])
@pytest.mark.usefixtures("in_use")
def test_the_view_permission_or_manage_budgets_shows_the_budget_use(
        perm: str, user_factory: Any, session_client_for: Any) -> None:
    viewer = staff(user_factory, session_client_for, perm)
    page = viewer.get(USE)
    assert page.status_code == 200 and "<b>42.00</b>" in page.content.decode()
    assert 'data-testid="budget-use"' in viewer.get("/admin/").content.decode()
