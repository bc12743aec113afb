"""The admin changelists issue the same number of queries at any row count.

The operations and confirmations changelists (with their dashboard panels, which run
aggregate queries) must not issue a query per row, whatever the rows hold: users,
deciders, states. Compared at 10 and at 200 rows (two pages' worth). Their time at
1,000,000 rows is measured by ``make bench`` (bench/admin_scale.py), not here.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from guarded_tools.models import (
    AuditEntry,
    Confirmation,
    Operation,
    OperationState,
    unknown_first,
)
from guarded_tools.pipeline.reconciliation import COUNTED_EXACTLY
from tests.console.pages import OP_STATES, add_rows

pytestmark = pytest.mark.django_db

PAGES = {
    "operations": "/admin/guarded_tools/operation/",
    "operations, filtered": "/admin/guarded_tools/operation/?state__exact=outcome_unknown",
    "confirmations": "/admin/guarded_tools/confirmation/",
    "confirmations, waiting": "/admin/guarded_tools/confirmation/?waiting=yes",
    "audit trail": "/admin/guarded_tools/auditentry/",
}
def queries(client: Client) -> dict[str, int]:
    counts = {}
    for name, path in PAGES.items():
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(path)
        assert response.status_code == 200, (name, response.status_code)
        counts[name] = len(ctx.captured_queries)
    return counts


@pytest.mark.parametrize("bound", [None, 50], ids=["default-bound", "bound-crossed"])
@pytest.mark.parametrize("superuser", [True, False], ids=["superuser", "staff-with-view-perms"])
def test_changelists_issue_a_constant_number_of_queries(user_factory: Any, settings: Any,
                                                        superuser: bool,
                                                        bound: int | None) -> None:
    """Also when the rows grow past CONSOLE_COUNT_EXACTLY_UP_TO: counting exactly or
    estimating, the same queries run."""
    if bound is not None:
        settings.GUARDED_TOOLS = {"CONSOLE_COUNT_EXACTLY_UP_TO": bound}
    users = [user_factory(f"u{i}") for i in range(7)]
    if superuser:
        admin = user_factory("boss", is_staff=True, is_superuser=True)
    else:
        admin = user_factory("viewer", is_staff=True, perms=(
            "guarded_tools.view_operation", "guarded_tools.view_confirmation",
            "guarded_tools.view_auditentry"))
    client = Client()
    client.force_login(admin)

    add_rows(10, users)
    assert client.get(PAGES["operations"]).status_code == 200  # warm caches (content types)
    at_10 = queries(client)
    add_rows(190, users)
    at_200 = queries(client)

    assert at_200 == at_10, (at_10, at_200)
    assert Operation.objects.count() == Confirmation.objects.count() == 200
    # A page shows 100 rows: the counts above cover more than one page of users.
    assert max(at_200.values()) < 25, at_200


@pytest.mark.skipif(connection.vendor != "postgresql", reason="reads PostgreSQL's plans")
def test_the_admin_reads_that_grow_with_the_table_have_indexes(user_factory: Any) -> None:
    """The confirmations changelist's first page, its oldest waiting request, "decided
    today" and "recovered in the last day" can each be answered from an index (the
    partial ones' conditions match the queries), so that at a million rows they read
    what they show rather than the table. With sequential scans and sorts made
    prohibitively expensive, the planner must still find a plan without them. (The
    operations list's order has its own index, gt_operation_unknown_first: see
    tests/console/test_console.py.)"""
    add_rows(20, [user_factory("u")])
    today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    reads = {
        # The changelist's first page, in the order the admin asks (it adds the pk).
        "gt_confirmation_created": Confirmation.objects.order_by("-created_at", "-pk")[:100],
        "gt_confirmation_waiting": Confirmation.objects.pending().order_by("created_at")[:1],
        # Counted: a count drops the model's ordering, so the plan is read without it.
        "gt_confirmation_decided": Confirmation.objects.filter(
            decided_at__gte=today).order_by(),
        # The dashboard's "recovered in the last day" counts the audit trail's recoveries.
        "gt_audit_recoveries": AuditEntry.objects.filter(
            action=AuditEntry.Action.RECOVER,
            created_at__gte=timezone.now() - timedelta(days=1)).order_by(),
    }
    # The audit trail's first page, in the order its admin asks.
    from guarded_tools.console.admin.records import AuditEntryAdmin

    reads["guarded_tools_auditentry_pkey"] = AuditEntry.objects.order_by(
        *AuditEntryAdmin.ordering)[:100]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
    for index, queryset in reads.items():
        plan = queryset.explain()
        assert index in plan and "Seq Scan" not in plan and "Sort" not in plan, plan
    # The dashboard's exact counts of the states a person acts on, and the oldest
    # in-flight claim's age, can read the state index alone (not a row of the table).
    # The sweep's partial index also covers in-flight rows, and which of the two a
    # small table's statistics favour (autovacuum may analyze it meanwhile) is not
    # the question: it is dropped for this transaction, which the test rolls back.
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("DROP INDEX gt_operation_open_lease")
    for queryset in (Operation.objects.filter(state__in=COUNTED_EXACTLY).values("state"),
                     Operation.objects.in_flight().values("created_at")):
        plan = queryset.order_by().explain()
        assert "Index Only Scan using gt_operation_state_updated" in plan, plan


def ops_page(client: Client, query: str = "") -> str:
    response = client.get(PAGES["operations"] + query)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def tile(page: str, state: str) -> str:
    """The number a dashboard tile shows."""
    return page.split(f'data-testid="state-{state}"')[1].split("</b>")[0].rsplit(">", 1)[1]


@pytest.mark.sqlite  # exact on SQLite, estimated on PostgreSQL
def test_counts_past_the_bound_say_so_and_the_states_people_act_on_stay_exact(
        user_factory: Any, settings: Any) -> None:
    settings.GUARDED_TOOLS = {"CONSOLE_COUNT_EXACTLY_UP_TO": 5}
    client = Client()
    client.force_login(user_factory("boss", is_staff=True, is_superuser=True))
    add_rows(4 * len(OP_STATES), [user_factory("u")])  # 4 rows of each state, 24 in all
    Operation.objects.filter(state=OperationState.SUCCEEDED).update(
        state=OperationState.OUTCOME_UNKNOWN)  # 8 unknown outcomes, past the bound
    Operation.objects.filter(state=OperationState.RELEASED).update(
        state=OperationState.IN_FLIGHT)  # 8 in flight
    page = ops_page(client)
    # What a person acts on is counted exactly, past the bound too.
    assert 'data-testid="unknown-count">8<' in page
    assert tile(page, "in_flight") == "8" and tile(page, "abandoned") == "4"
    # Below the bound, exact.
    assert tile(page, "failed") == "4" and tile(page, "succeeded") == "0"
    Operation.objects.filter(state=OperationState.IN_FLIGHT).update(
        state=OperationState.SUCCEEDED)
    estimated = connection.vendor == "postgresql"
    if estimated:
        with connection.cursor() as cursor:  # what autovacuum keeps up to date
            cursor.execute("ANALYZE guarded_tools_operation")
    page = ops_page(client)
    if estimated:  # the planner's estimate, never shown as an exact number
        assert tile(page, "succeeded").startswith("about ")
        assert "about 24 operations" in page, page  # the pagination's count
        assert "Select all about 24 operations" in page
        assert "All selected (about 24)" in page
        assert "about 8 results" in ops_page(client, "?state__exact=succeeded")
    else:  # no estimate: a lower bound on the tiles, exact counts in the list
        assert tile(page, "succeeded") == "more than 5"
        assert "24 operations" in page and "about" not in page
    # The exact counts of the list below the bound.
    assert "4 results" in ops_page(client, "?state__exact=failed")


@pytest.mark.postgres
def test_an_estimated_list_still_pages_to_its_last_rows(user_factory: Any, settings: Any,
                                                        monkeypatch: Any) -> None:
    """An estimate that promises more rows than there are: the last page still lists
    the last rows (read from the other end of the order), the pages before it theirs."""
    from django.contrib import admin

    settings.GUARDED_TOOLS = {"CONSOLE_COUNT_EXACTLY_UP_TO": 5}
    monkeypatch.setattr(admin.site._registry[Operation], "list_per_page", 10)
    client = Client()
    client.force_login(user_factory("boss", is_staff=True, is_superuser=True))
    add_rows(30, [user_factory("u")])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE guarded_tools_operation")
    ordered = list(Operation.objects.order_by(unknown_first().asc(), "-created_at", "-pk")
                   .values_list("pk", flat=True))
    Operation.objects.filter(pk__in=ordered[15:]).delete()  # the estimate stays at 30
    ordered = ordered[:15]

    def listed(query: str) -> list[Any]:
        response = client.get(PAGES["operations"] + query)
        assert response.status_code == 200, response.status_code
        assert "about 30 operations" in response.content.decode()
        return [row.pk for row in response.context["cl"].result_list]

    assert listed("") == ordered[:10]
    assert '?p=3"' in client.get(PAGES["operations"]).content.decode()  # the last page
    assert listed("?p=2") == ordered[10:]  # the real end, in order
    assert listed("?p=3") == ordered[-10:]  # what the estimate put past it: the last rows


@pytest.mark.postgres
def test_an_estimate_the_count_disproves_is_not_shown(user_factory: Any, settings: Any) -> None:
    """Statistics from 10 rows, 50 rows now: the planner's guess (a page's worth) is
    below the bound the count just passed, so the list says "more than 25"."""
    settings.GUARDED_TOOLS = {"CONSOLE_COUNT_EXACTLY_UP_TO": 25}
    client = Client()
    client.force_login(user_factory("boss", is_staff=True, is_superuser=True))
    users = [user_factory("u")]
    add_rows(10, users)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE guarded_tools_operation")
    add_rows(40, users)
    page = ops_page(client)
    assert "more than 25 operations" in page and "about" not in page.split('class="paginator"')[1]
