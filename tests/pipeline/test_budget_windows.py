"""A budget's day, week and month are the site's (``TIME_ZONE``), daylight saving included.

With the site in Europe/Paris: a call at 23:30 and one at 00:10 there fall in two days
(both are the same day in UTC), a daily window frees at midnight there, and the day the
clocks go forward lasts 23 hours. Over REST with a token and with a session, the 429 says
when the window frees in the site's time and ``budget.frees_at`` is that instant; the
budget use page shows the same start and end. The call's clock is the database's; here
it is set by hand (``Call.now``, the call's one clock) to the instants each case needs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from guarded_tools import Budget, Policy, Rule, Run
from guarded_tools.models import BudgetCounter
from guarded_tools.pipeline.stages.base import Call
from tests.conftest import Effects, key
from tests.pipeline.policy_support import URL

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"operationId": {"type": "string"},
                                           "amount": {"type": "number", "minimum": 0}},
          "required": ["operationId", "amount"]}
USE = "/admin/guarded_tools/budgetcounter/"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def paris(settings: Any) -> None:
    settings.TIME_ZONE = "Europe/Paris"


@pytest.fixture
def clock(monkeypatch: Any) -> list[datetime]:
    """The instant the budget stage reads as the database's clock: ``clock[0]``."""
    now = [utc("2026-03-28T12:00:00")]
    monkeypatch.setattr(Call, "now", lambda self, claim: now[0])
    return now


def policy(**budget: Any) -> Policy:
    return Policy(rules=[Rule(outcome=Run(), description="runs")],
                  budgets=[Budget(name="spend", **budget)])


def pay(agent: Any, name: str, amount: float = 10) -> Any:
    return agent.post(URL.format(name), {"operationId": key(), "amount": amount},
                      format="json")


@pytest.mark.usefixtures("paris")
def test_a_daily_count_frees_at_the_sites_midnight(make_tool: Any, agent: Any,
                                                   clock: list[datetime], user_factory: Any,
                                                   session_client_for: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=policy(count=1), input_schema=SCHEMA)
    clock[0] = utc("2026-03-28T22:30:00")  # Saturday 23:30 in Paris (CET, UTC+1)
    assert pay(agent, definition.name).status_code == 200
    clock[0] = utc("2026-03-28T23:10:00")  # Sunday 00:10 in Paris: the same day in UTC
    assert pay(agent, definition.name).status_code == 200, "a new day in Paris"
    clock[0] = utc("2026-03-29T12:00:00")  # Sunday 14:00 in Paris (CEST since 02:00)
    refused = pay(agent, definition.name)
    assert refused.status_code == 429, refused.content
    error = refused.json()["error"]
    assert error["code"] == "rate_limited"
    # Sunday lasts 23 hours: it ends at Monday's midnight, 22:00 UTC, ten hours on.
    assert error["budget"]["frees_at"] == "2026-03-29T22:00:00.000Z"
    assert refused.headers["Retry-After"] == "36000"
    assert error["message"].startswith(
        "At most 1 calls per day (budget spend); nothing ran. Retry after 36000 seconds:"
        " the day frees at 2026-03-30 00:00:00 CEST (Europe/Paris).")
    assert handler.count == 2
    starts = sorted(BudgetCounter.objects.values_list("window_start", flat=True))
    assert starts == [utc("2026-03-27T23:00:00"), utc("2026-03-28T23:00:00")]

    viewer = session_client_for(user_factory("viewer", is_staff=True,
                                             perms=("guarded_tools.view_budgetcounter",)))
    page = viewer.get(USE, {"window": "all"}).content.decode()
    # Sunday's window: from Sunday's midnight (still CET) to Monday's (CEST), as the 429 says.
    assert '<span class="gt-time">2026-03-29<br>00:00:00 CET</span>' in page
    assert '<span class="gt-time">2026-03-30<br>00:00:00 CEST</span>' in page
    assert "2026-03-29<br>01:00:00" not in page  # nothing at midnight in UTC
    assert "months are the site's, in Europe/Paris: a day frees at midnight there." in page


@pytest.mark.usefixtures("paris")
def test_a_daily_sum_says_until_when_in_the_sites_time(make_tool: Any, agent: Any,
                                                       clock: list[datetime]) -> None:
    definition = make_tool(Effects(), confirm=policy(sum_field="amount", limit=100),
                           input_schema=SCHEMA)
    clock[0] = utc("2026-10-25T20:00:00")  # Sunday 21:00 in Paris: back to CET at 03:00
    assert pay(agent, definition.name, 80).status_code == 200
    refused = pay(agent, definition.name, 30)
    assert refused.status_code == 429, refused.content
    error = refused.json()["error"]
    assert error["code"] == "budget_exceeded"
    assert error["budget"] == {"name": "spend", "remaining": "20.00",
                               "frees_at": "2026-10-25T23:00:00.000Z"}
    assert ("20.00 remains until 2026-10-26 00:00:00 CET (Europe/Paris); nothing ran"
            in error["message"])
    assert "wait until 2026-10-26 00:00:00 CET (Europe/Paris)" in error["repair"]["instruction"]
    clock[0] = utc("2026-10-25T23:00:00")  # Monday's midnight in Paris
    assert pay(agent, definition.name, 30).status_code == 200
    # Sunday lasted 25 hours: from Saturday 22:00 UTC to Sunday 23:00 UTC.
    assert sorted(BudgetCounter.objects.values_list("window_start", flat=True)) == [
        utc("2026-10-24T22:00:00"), utc("2026-10-25T23:00:00")]


@pytest.mark.usefixtures("paris")
@pytest.mark.parametrize(("budget", "at", "start", "end"), [
    # A day: midnight to midnight in Paris, 23 and 25 hours long on the two changes.
    ({}, "2026-03-29T12:00:00", "2026-03-28T23:00:00", "2026-03-29T22:00:00"),
    ({"window": "day"}, "2026-10-25T12:00:00", "2026-10-24T22:00:00", "2026-10-25T23:00:00"),
    # A week: Monday's midnight to the next Monday's.
    ({"window_seconds": 604_800}, "2026-03-29T12:00:00", "2026-03-22T23:00:00",
     "2026-03-29T22:00:00"),
    ({"window": "week"}, "2026-03-30T00:30:00", "2026-03-29T22:00:00", "2026-04-05T22:00:00"),
    # Two days, counted from Monday 5 January 1970: Monday 30 March starts one.
    ({"window_seconds": 172_800}, "2026-03-31T12:00:00", "2026-03-29T22:00:00",
     "2026-03-31T22:00:00"),
    # A month: the 1st's midnight to the next 1st's, December into January.
    ({"window": "month"}, "2026-03-31T22:30:00", "2026-03-31T22:00:00", "2026-04-30T22:00:00"),
    ({"window": "month"}, "2026-12-31T22:59:59", "2026-11-30T23:00:00", "2026-12-31T23:00:00"),
    # Shorter windows: multiples of their length since the epoch.
    ({"window_seconds": 60}, "2026-03-29T01:00:30", "2026-03-29T01:00:00",
     "2026-03-29T01:01:00"),
    ({"window_seconds": 3600}, "2026-03-29T01:30:00", "2026-03-29T01:00:00",
     "2026-03-29T02:00:00"),
], ids=["day-23h", "day-25h", "week", "week-from-monday", "2-days", "month",
        "month-december", "minute", "hour"])
def test_the_window_an_instant_falls_in(budget: dict[str, Any], at: str, start: str,
                                        end: str) -> None:
    declared = Budget(name="spend", count=1, **budget)
    began = declared.window_start(utc(at))
    assert began == utc(start)
    assert declared.window_end(began) == utc(end)
    assert utc(start) <= utc(at) < utc(end)


def test_a_zone_whose_clocks_skip_midnight_starts_its_day_when_the_clocks_do(
        settings: Any) -> None:
    """Santiago moves from 00:00 to 01:00 on 6 September 2026: that day starts at 01:00."""
    settings.TIME_ZONE = "America/Santiago"
    day = Budget(name="spend", count=1)
    began = day.window_start(utc("2026-09-06T12:00:00"))
    assert began == utc("2026-09-06T04:00:00")  # 01:00 at UTC-3, the day's first instant
    assert day.window_end(began) == utc("2026-09-07T03:00:00")


def test_an_unknown_calendar_window_is_refused_at_registration(make_tool: Any) -> None:
    with pytest.raises(Exception, match="window 'fortnight'"):
        make_tool(confirm=policy(count=1, window="fortnight"), input_schema=SCHEMA)


def test_a_month_reads_as_a_person_says_it_in_the_override_form(make_tool: Any) -> None:
    from guarded_tools.console.admin.budgets import in_words

    assert in_words(Budget(name="spend", window="month", sum_field="amount",
                           limit=Decimal("500"))) == (
        "spend: at most 500.00 of amount per month")
