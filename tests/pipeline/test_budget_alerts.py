"""Budget alerts: each threshold told once per window and principal, by email, the signal,
an event for observers and the OpenTelemetry metric; under 32 threads on one connection
each (PostgreSQL's counter lock and the alert's unique row), still once.

Through REST with a token (``client_for``), as agents call."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import mail

from guarded_tools import Budget, Policy, Rule, Run, signals
from guarded_tools.models import BudgetAlert
from tests.conftest import in_threads, key, wait_until
from tests.pipeline.policy_support import SCHEMA, pay

pytestmark = pytest.mark.django_db(transaction=True)


def policy(count: int | None = None, limit: float | None = None,
           alerts: tuple[int, ...] = (80, 100)) -> Policy:
    return Policy(rules=[Rule(outcome=Run(), description="Everything runs at once")],
                  budgets=[Budget(name="spend", count=count, limit=limit, alerts=alerts,
                                  sum_field="amount" if limit is not None else None)])


@pytest.fixture
def manager(user_factory: Any) -> Any:
    return user_factory("treasurer", email="treasurer@example.com", is_staff=True,
                        perms=("guarded_tools.manage_budgets",))


@pytest.mark.usefixtures("eager_celery", "manager")
def test_80_and_100_percent_each_told_once_in_a_window(make_tool: Any, alice: Any,
                                                       client_for: Any, settings: Any) -> None:
    seen: list[Any] = []
    settings.GUARDED_TOOLS = {"OBSERVERS": [seen.append]}
    told: list[Any] = []

    def receive(alert: Any, **kwargs: Any) -> None:
        told.append((alert.counter.budget, alert.threshold))

    signals.budget_alert.connect(receive)
    try:
        definition = make_tool(confirm=policy(limit=1000), input_schema=SCHEMA)
        client = client_for(alice)
        for amount, alerts_after in ((500, 0), (300, 1), (100, 1), (100, 2), (50, 2)):
            response = pay(client, definition.name, amount)
            assert response.status_code in (200, 429), response.json()
            assert BudgetAlert.objects.count() == alerts_after, amount
    finally:
        signals.budget_alert.disconnect(receive)
    assert told == [("spend", 80), ("spend", 100)]
    events = [e for e in seen if e.stage == "budget_alert"]
    assert [(e.extra["threshold"], e.extra["measure"], e.extra["used"]) for e in events] == [
        (80, "sum", 800.0), (100, "sum", 1000.0)]
    assert [m.to for m in mail.outbox] == [["treasurer@example.com"]] * 2
    assert mail.outbox[0].subject == f"Budget spend: 80 % reached by auth.user:{alice.pk}"
    assert "800 of 1000 (sum)" in mail.outbox[0].body


@pytest.mark.usefixtures("eager_celery", "manager")
def test_thresholds_are_per_budget_and_per_principal(make_tool: Any, alice: Any, bob: Any,
                                                     client_for: Any) -> None:
    definition = make_tool(confirm=policy(count=4, alerts=(50,)), input_schema=SCHEMA)
    for who in (alice, bob):
        for _ in range(3):
            assert pay(client_for(who), definition.name).status_code == 200
    rows = BudgetAlert.objects.select_related("counter").order_by("counter__scope")
    assert [(r.counter.scope, r.threshold, r.measure, int(r.used)) for r in rows] == [
        (f"auth.user:{alice.pk}", 50, "calls", 2), (f"auth.user:{bob.pk}", 50, "calls", 2)]
    assert len(mail.outbox) == 2


def test_no_alerts_tell_nobody(make_tool: Any, alice: Any, client_for: Any) -> None:
    definition = make_tool(confirm=policy(count=1, alerts=()), input_schema=SCHEMA)
    assert pay(client_for(alice), definition.name).status_code == 200
    assert not BudgetAlert.objects.exists()


def test_a_threshold_out_of_range_fails_the_policy_check() -> None:
    problems = policy(count=1, alerts=(0, 80, 2000)).problems()
    assert problems == ["budget 'spend' alerts at 0 %, not a whole number from 1 to 1000",
                        "budget 'spend' alerts at 2000 %, not a whole number from 1 to 1000"]


def test_the_metric_counts_each_alert(make_tool: Any, alice: Any, client_for: Any,
                                      settings: Any) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from guarded_tools.contrib.otel import OpenTelemetryObserver

    reader = InMemoryMetricReader()
    observer = OpenTelemetryObserver(meter_provider=MeterProvider(metric_readers=[reader]),
                                     gauges=False)
    settings.GUARDED_TOOLS = {"OBSERVERS": [observer], "BUDGET_ALERT_NOTIFY_EMAIL": False}
    definition = make_tool(confirm=policy(count=2), input_schema=SCHEMA)
    for _ in range(3):
        pay(client_for(alice), definition.name)
    points = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "guarded_tools.budget.alerts":
                    for point in metric.data.data_points:
                        points[point.attributes["threshold"]] = point.value
    assert points == {80: 1, 100: 1}


@pytest.mark.postgres
@pytest.mark.usefixtures("eager_celery", "manager")
def test_32_threads_reaching_the_thresholds_at_once_tell_each_once(
        make_tool: Any, alice: Any, client_for: Any) -> None:
    """32 calls at once against 20 calls a day: 80 % and 100 % are reached inside the race,
    by whichever calls hold the counter's lock then; one row, one email each."""
    told: list[int] = []

    def receive(alert: Any, **kwargs: Any) -> None:
        told.append(alert.threshold)

    signals.budget_alert.connect(receive)
    try:
        definition = make_tool(confirm=policy(count=20), input_schema=SCHEMA)

        def call(i: int) -> int:
            client = client_for(alice)
            return client.post(f"/agent/tools/{definition.name}/",
                               {"operationId": key(), "amount": 1}, format="json").status_code

        statuses = in_threads(32, call, timeout=120)
        assert statuses.count(200) == 20 and statuses.count(429) == 12, statuses
        wait_until(lambda: len(mail.outbox) >= 2, message="the two alerts' emails")
    finally:
        signals.budget_alert.disconnect(receive)
    assert sorted(told) == [80, 100]
    assert sorted(BudgetAlert.objects.values_list("threshold", "used")) == [(80, 16), (100, 20)]
    assert len(mail.outbox) == 2


@pytest.mark.postgres
def test_the_unique_row_alone_keeps_an_alert_to_one_without_the_counter_lock() -> None:
    """16 threads record the same threshold at once with no counter lock held (each in its
    own transaction): the unique constraint lets one insert, and only it is announced."""
    from decimal import Decimal

    from django.db import router, transaction
    from django.utils import timezone

    from guarded_tools.models import BudgetCounter
    from guarded_tools.pipeline import budget_alerts

    budget = Budget(name="spend", count=10)
    counter = BudgetCounter.objects.create(budget="spend", scope="auth.user:1",
                                           window_start=budget.window_start(timezone.now()))
    announced: list[str] = []

    class Events:
        def emit(self, stage: str, **meta: Any) -> None:
            announced.append(stage)

    def race(i: int) -> int:
        using = router.db_for_write(BudgetAlert)
        with transaction.atomic(using=using):
            made = budget_alerts.record(counter, budget, 8, Decimal(0), using, Events())
        return len(made)

    made = in_threads(16, race, timeout=60)
    assert sum(made) == 1, made
    assert announced == ["budget_alert"]
    assert BudgetAlert.objects.filter(counter=counter).count() == 1
