"""The admin's *Budget use* page on a site whose tools declare no budget.

Its default filter (the current windows of the declared budgets) is then a query that
matches nothing, which Django never sends: on PostgreSQL the count's estimate read an
empty ``EXPLAIN`` as JSON, and the page answered 500 in every new site (found by
``make newsite``).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Q
from django.test import Client

from guarded_tools.models import BudgetCounter
from guarded_tools.store.counting import count_up_to, estimate

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_budgets(monkeypatch: Any) -> None:
    """No registered tool declares a budget (the demo's payments do)."""
    monkeypatch.setattr("guarded_tools.pipeline.budget_overrides.declared_budgets", dict)
    monkeypatch.setattr("guarded_tools.console.admin.budgets.declared_budgets", dict)


def test_the_page_answers_on_a_site_without_budgets(no_budgets: None,
                                                    user_factory: Any) -> None:
    staff = Client()
    staff.force_login(user_factory("boss", is_staff=True, is_superuser=True))
    answer = staff.get("/admin/guarded_tools/budgetcounter/")
    assert answer.status_code == 200
    assert answer.context["cl"].result_count == 0


def test_a_count_of_a_query_that_matches_nothing() -> None:
    nothing = BudgetCounter.objects.filter(Q(pk__in=[]))
    assert count_up_to(nothing).n == 0 and count_up_to(nothing).exact
    assert estimate(nothing) in (None, 0)  # None: not PostgreSQL, which has no estimate
