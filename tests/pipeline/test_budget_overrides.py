"""Budget overrides per user and group (issue 27), and the budget use page.

Over REST with a token and with a session: an override moves the point where the
429 comes; a user's own override beats their groups', the most generous group wins.
In the admin: only staff with ``manage_budgets`` add, change or remove one, each change
audited and in Django's history; the budget use page is read-only, its queries constant
in its number of rows.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from guarded_tools import Budget, Policy, Rule, Run
from guarded_tools.models import AuditEntry, BudgetCounter, BudgetOverride, Reservation
from tests.conftest import Effects
from tests.pipeline.policy_support import SCHEMA, budgeted, pay

pytestmark = pytest.mark.django_db
ADD = "/admin/guarded_tools/budgetoverride/add/"
USE = "/admin/guarded_tools/budgetcounter/"


def statuses(client: Any, name: str, n: int, amount: float = 100) -> list[int]:
    return [pay(client, name, amount).status_code for _ in range(n)]


# -- the override where the effect happens --------------------------------------------------
def test_a_user_override_raises_the_sum_limit(make_tool: Any, agent: Any, alice: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=budgeted(limit=200), input_schema=SCHEMA)
    BudgetOverride.objects.create(budget="spend", user=alice, limit=Decimal("350"))
    assert statuses(agent, definition.name, 3) == [200, 200, 200]
    refused = pay(agent, definition.name)
    assert refused.status_code == 429, refused.content
    error = refused.json()["error"]
    assert error["code"] == "budget_exceeded" and error["budget"]["remaining"] == "50.00"
    assert pay(agent, definition.name, 50).status_code == 200
    assert handler.count == 4


def test_a_user_override_lowers_the_count(make_tool: Any, agent: Any, alice: Any) -> None:
    definition = make_tool(Effects(), confirm=budgeted(count=5), input_schema=SCHEMA)
    BudgetOverride.objects.create(budget="spend", user=alice, count=2)
    assert statuses(agent, definition.name, 3) == [200, 200, 429]
    refused = pay(agent, definition.name)
    assert refused.json()["error"]["code"] == "rate_limited"
    assert "At most 2 calls" in refused.json()["error"]["message"]
    assert int(refused.headers["Retry-After"]) >= 1


def test_an_override_of_another_budget_or_user_changes_nothing(make_tool: Any, agent: Any,
                                                               bob: Any) -> None:
    definition = make_tool(Effects(), confirm=budgeted(count=2), input_schema=SCHEMA)
    BudgetOverride.objects.create(budget="spend", user=bob, count=9)
    BudgetOverride.objects.create(budget="other", group=Group.objects.create(name="g"), count=9)
    assert statuses(agent, definition.name, 3) == [200, 200, 429]


def test_the_most_generous_group_applies_and_the_users_own_beats_it(
        make_tool: Any, agent: Any, alice: Any) -> None:
    definition = make_tool(Effects(), confirm=budgeted(count=1), input_schema=SCHEMA)
    few, many = Group.objects.create(name="few"), Group.objects.create(name="many")
    alice.groups.add(few, many)
    BudgetOverride.objects.create(budget="spend", group=few, count=2)
    BudgetOverride.objects.create(budget="spend", group=many, count=3)
    assert statuses(agent, definition.name, 4) == [200, 200, 200, 429]
    Reservation.objects.all().delete()
    BudgetOverride.objects.create(budget="spend", user=alice, count=1)  # lower, but hers
    assert statuses(agent, definition.name, 2) == [200, 429]


def test_a_group_override_leaves_the_part_it_does_not_give(make_tool: Any, agent: Any,
                                                           alice: Any) -> None:
    policy = Policy(rules=[Rule(outcome=Run(), description="runs")], budgets=[
        Budget(name="spend", count=2, sum_field="amount", limit=1000)])
    definition = make_tool(Effects(), confirm=policy, input_schema=SCHEMA)
    finance = Group.objects.create(name="finance")
    alice.groups.add(finance)
    BudgetOverride.objects.create(budget="spend", group=finance, limit=Decimal("5000"))
    assert statuses(agent, definition.name, 2, amount=900) == [200, 200]  # 1,800 > 1,000
    assert pay(agent, definition.name, 1).json()["error"]["code"] == "rate_limited"


def test_one_query_reads_the_overrides_and_only_for_a_tool_with_budgets(
        make_tool: Any, client_for: Any, alice: Any) -> None:
    agent = client_for(alice)
    budgeted_tool = make_tool(Effects(), input_schema=SCHEMA, confirm=Policy(
        rules=[Rule(outcome=Run(), description="runs")],
        budgets=[Budget(name="spend", count=50), Budget(name="per-minute", count=50,
                                                       window_seconds=60)]))
    plain = make_tool(Effects(), input_schema=SCHEMA)

    def overrides_read(name: str) -> tuple[int, int]:
        with CaptureQueriesContext(connection) as ctx:
            assert pay(agent, name).status_code == 200
        sql = [q["sql"] for q in ctx.captured_queries]
        return sum("guarded_tools_budgetoverride" in s for s in sql), len(sql)

    # One read for the reservation, one for what the answer says is left (its
    # RateLimit fields and meta.budgets), whatever the number of budgets and overrides.
    assert overrides_read(budgeted_tool.name)[0] == 2  # the first creates the counter
    reads, without_rows = overrides_read(budgeted_tool.name)
    assert reads == 2
    assert overrides_read(plain.name)[0] == 0
    groups = [Group.objects.create(name=f"g{i}") for i in range(5)]
    alice.groups.add(*groups)
    for group in groups:
        BudgetOverride.objects.create(budget="spend", group=group, count=60)
    assert overrides_read(budgeted_tool.name) == (2, without_rows)


# -- the admin: who may change overrides, and the record of it ------------------------------
@pytest.fixture
def manager(user_factory: Any) -> Any:
    return user_factory("manager", is_staff=True, perms=(
        "guarded_tools.manage_budgets", "guarded_tools.view_budgetcounter",
        "guarded_tools.view_auditentry"))


@pytest.fixture
def staff_without(user_factory: Any) -> Any:
    """Staff with every model permission of overrides but not ``manage_budgets``."""
    return user_factory("clerk", is_staff=True, perms=tuple(
        f"guarded_tools.{p}_budgetoverride" for p in ("view", "add", "change", "delete")))


def form(person: Any, **fields: Any) -> dict[str, Any]:
    return {"budget": "spend", "user": str(person.pk), "group": "", "count": "",
            "limit": "", "note": "", **{k: str(v) for k, v in fields.items()}}


def test_staff_without_manage_budgets_cannot_add_change_or_delete(
        make_tool: Any, session_client_for: Any, staff_without: Any, alice: Any) -> None:
    make_tool(confirm=budgeted(limit=100), input_schema=SCHEMA)
    override = BudgetOverride.objects.create(budget="spend", user=alice, limit=Decimal("300"))
    clerk = session_client_for(staff_without)
    change = f"/admin/guarded_tools/budgetoverride/{override.pk}/change/"
    assert clerk.get("/admin/guarded_tools/budgetoverride/").status_code == 200  # may view
    assert clerk.get(ADD).status_code == 403
    assert clerk.post(ADD, form(alice, limit=900)).status_code == 403
    assert clerk.post(change, form(alice, limit=900)).status_code == 403
    assert clerk.post(f"/admin/guarded_tools/budgetoverride/{override.pk}/delete/",
                      {"post": "yes"}).status_code == 403
    override.refresh_from_db()
    assert override.limit == Decimal("300") and not AuditEntry.objects.exists()


def test_a_manager_sets_changes_and_removes_an_override_each_audited(
        make_tool: Any, session_client_for: Any, manager: Any, alice: Any,
        client_for: Any) -> None:
    definition = make_tool(Effects(), confirm=budgeted(limit=100), input_schema=SCHEMA)
    staff = session_client_for(manager)
    added = staff.post(ADD, form(alice, limit=300, note="quarter end"))
    assert added.status_code == 302, added.content.decode()[-3000:]
    override = BudgetOverride.objects.get()
    assert (override.user, override.limit, override.created_by) == (alice, 300, manager)
    entry = AuditEntry.objects.get()
    assert entry.action == AuditEntry.Action.BUDGET_OVERRIDE_SET and entry.actor == manager
    assert entry.note == "quarter end" and entry.data["before"] is None
    assert entry.data["after"]["limit"] == "300.0000"
    assert LogEntry.objects.filter(object_id=str(override.pk), action_flag=ADDITION).exists()
    assert statuses(client_for(alice), definition.name, 4) == [200, 200, 200, 429]

    change = f"/admin/guarded_tools/budgetoverride/{override.pk}/change/"
    assert staff.post(change, form(alice, limit=150, note="back down")).status_code == 302
    changed = AuditEntry.objects.order_by("-pk").first()
    assert changed is not None and changed.data["before"]["limit"] == "300.0000"
    assert changed.data["after"]["limit"] == "150.0000"
    assert LogEntry.objects.filter(object_id=str(override.pk), action_flag=CHANGE).exists()

    removed = staff.post(f"/admin/guarded_tools/budgetoverride/{override.pk}/delete/",
                         {"post": "yes"})
    assert removed.status_code == 302 and not BudgetOverride.objects.exists()
    gone = AuditEntry.objects.order_by("-pk").first()
    assert gone is not None and gone.action == AuditEntry.Action.BUDGET_OVERRIDE_REMOVED
    assert gone.data["before"]["limit"] == "150.0000" and gone.data["after"] is None
    assert LogEntry.objects.filter(object_id=str(override.pk), action_flag=DELETION).exists()
    trail = staff.get("/admin/guarded_tools/auditentry/").content.decode()
    assert "removed budget override" in trail and "budget spend for user alice" in trail


def test_a_bulk_removal_is_audited_per_override(make_tool: Any, session_client_for: Any,
                                                manager: Any, alice: Any, bob: Any) -> None:
    make_tool(confirm=budgeted(count=3), input_schema=SCHEMA)
    rows = [BudgetOverride.objects.create(budget="spend", user=u, count=9) for u in (alice, bob)]
    staff = session_client_for(manager)
    done = staff.post("/admin/guarded_tools/budgetoverride/", {
        "action": "delete_selected", "post": "yes", "_selected_action": [r.pk for r in rows]})
    assert done.status_code == 302 and not BudgetOverride.objects.exists()
    assert AuditEntry.objects.filter(action=AuditEntry.Action.BUDGET_OVERRIDE_REMOVED).count() == 2


@pytest.mark.parametrize(("fields", "message"), [
    ({"budget": "nobody-declares-it", "limit": 5}, "Select a valid choice"),
    ({"limit": 0}, "The limit must be positive"),
    ({"count": 0}, "The count must be positive"),
    ({}, "Give a count, a limit or both"),
    ({"user": "", "count": 3}, "Give a user or a group, not both and not neither"),
    ({"budget": "calls", "limit": 5}, "This budget counts calls only"),
])
def test_the_form_refuses_what_cannot_apply(make_tool: Any, session_client_for: Any,
                                            manager: Any, alice: Any, fields: dict[str, Any],
                                            message: str) -> None:
    make_tool(confirm=budgeted(limit=100), input_schema=SCHEMA)
    make_tool(confirm=budgeted("calls", count=3), input_schema=SCHEMA)
    answer = session_client_for(manager).post(ADD, form(alice, **fields))
    assert answer.status_code == 200 and message in answer.content.decode()
    assert not BudgetOverride.objects.exists() and not AuditEntry.objects.exists()


def test_a_second_override_of_the_same_user_is_refused(make_tool: Any, session_client_for: Any,
                                                       manager: Any, alice: Any) -> None:
    make_tool(confirm=budgeted(limit=100), input_schema=SCHEMA)
    BudgetOverride.objects.create(budget="spend", user=alice, limit=Decimal("300"))
    answer = session_client_for(manager).post(ADD, form(alice, limit=5))
    assert "already has an override of this budget" in answer.content.decode()
    assert BudgetOverride.objects.count() == 1


def test_the_form_offers_the_declared_budgets_with_their_limits(
        make_tool: Any, session_client_for: Any, manager: Any) -> None:
    make_tool(confirm=budgeted(limit=2000), input_schema=SCHEMA)
    make_tool(confirm=Policy(rules=[Rule(outcome=Run(), description="r")], budgets=[
        Budget(name="per-minute", window_seconds=60, count=10)]), input_schema=SCHEMA)
    page = session_client_for(manager).get(ADD).content.decode()
    assert "spend: at most 2,000.00 of amount per day" in page
    assert "per-minute: at most 10 calls per minute" in page


@pytest.mark.parametrize(("seconds", "words"), [
    (86_400, "day"), (172_800, "2 days"), (604_800, "week"), (3600, "hour"),
    (7200, "2 hours"), (5400, "90 minutes"), (60, "minute"), (90, "90 seconds"),
])
def test_a_window_reads_as_a_person_says_it(seconds: int, words: str) -> None:
    from guarded_tools.console.admin.budgets import window_words

    assert window_words(seconds) == words


def test_the_user_and_group_are_searched_where_the_manager_may_view_them(
        make_tool: Any, session_client_for: Any, manager: Any, user_factory: Any) -> None:
    """With ``auth.view_user`` and ``auth.view_group`` the form searches names (the
    admin's autocomplete, which asks those permissions); without, the user is a raw id."""
    make_tool(confirm=budgeted(limit=100), input_schema=SCHEMA)
    page = session_client_for(manager).get(ADD).content.decode()
    assert 'class="vForeignKeyRawIdAdminField"' in page and "admin-autocomplete" not in page
    viewer = user_factory("viewer", is_staff=True, perms=(
        "guarded_tools.manage_budgets", "auth.view_user", "auth.view_group"))
    client = session_client_for(viewer)
    page = client.get(ADD).content.decode()
    assert page.count("admin-autocomplete") >= 2 and "vForeignKeyRawIdAdminField" not in page
    found = client.get("/admin/autocomplete/", {
        "app_label": "guarded_tools", "model_name": "budgetoverride", "field_name": "user",
        "term": "mana"})
    assert found.status_code == 200
    assert [r["text"] for r in found.json()["results"]] == ["manager"]

# -- the budget use page ---------------------------------------------------------------------
def use_rows(n: int, user_factory: Any, window: timedelta = timedelta(0)) -> list[Any]:
    """``n`` users, each with 2 reservations of 30 in today's window of "spend"."""
    from guarded_tools.pipeline.stages.budget import window_start

    start = window_start(timezone.now(), Budget(name="spend")) - window
    finance = Group.objects.get_or_create(name="finance")[0]
    BudgetOverride.objects.get_or_create(budget="spend", group=finance,
                                         defaults={"limit": Decimal("500")})
    users = []
    for _ in range(n):
        user = user_factory()
        user.groups.add(finance)
        counter = BudgetCounter.objects.create(budget="spend", scope=f"auth.user:{user.pk}",
                                               window_start=start)
        Reservation.objects.bulk_create([Reservation(counter=counter, amount=30)] * 2)
        users.append(user)
    return users


def test_the_budget_use_page_shows_use_limit_frees_at_and_override(
        make_tool: Any, session_client_for: Any, manager: Any, user_factory: Any) -> None:
    make_tool(confirm=budgeted(limit=200), input_schema=SCHEMA)
    users = use_rows(2, user_factory)
    BudgetOverride.objects.create(budget="spend", user=users[0], limit=Decimal("80"))
    use_rows(1, user_factory, window=timedelta(days=3))  # a past window
    staff = session_client_for(manager)
    page = staff.get(USE).content.decode()
    assert page.count('<b>60.00</b><br><small class="quiet">of 80.00') == 1  # her own
    assert page.count('<b>60.00</b><br><small class="quiet">of 500.00') == 1  # her group's
    assert f"user {users[0].username}" in page and "group finance" in page
    tomorrow = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%d")
    assert f"{tomorrow}<br>00:00:00 UTC" in page  # frees at, the zone shown
    assert staff.get(USE, {"window": "past"}).content.decode().count("of 500.00") == 1
    found = staff.get(USE, {"q": users[1].username}).content.decode()
    assert users[1].username in found and users[0].username not in found
    index = staff.get("/admin/").content.decode()
    assert 'data-testid="budget-use"' in index and USE in index


def test_the_budget_use_page_is_read_only(make_tool: Any, session_client_for: Any,
                                          manager: Any, user_factory: Any) -> None:
    make_tool(confirm=budgeted(limit=200), input_schema=SCHEMA)
    use_rows(1, user_factory)
    counter = BudgetCounter.objects.get()
    superuser = user_factory("root", is_staff=True, is_superuser=True)
    for person in (manager, superuser):
        staff = session_client_for(person)
        assert staff.get(USE + "add/").status_code == 403
        assert staff.post(f"{USE}{counter.pk}/delete/", {"post": "yes"}).status_code == 403
        assert staff.post(f"{USE}{counter.pk}/change/", {"scope": "x"}).status_code == 403
    counter.refresh_from_db()
    assert counter.scope.startswith("auth.user:")


def test_the_budget_use_page_costs_the_same_queries_for_2_or_20_rows(
        make_tool: Any, session_client_for: Any, manager: Any, user_factory: Any) -> None:
    make_tool(confirm=budgeted(limit=200), input_schema=SCHEMA)
    staff = session_client_for(manager)

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert staff.get(USE).status_code == 200
        return len(ctx.captured_queries)

    use_rows(2, user_factory)
    few = queries()
    users = use_rows(18, user_factory)
    for user in users[:9]:
        BudgetOverride.objects.create(budget="spend", user=user, count=4)
    assert queries() == few
