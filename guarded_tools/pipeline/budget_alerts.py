"""Provides budget alerts: each threshold of a budget (``Budget(alerts=(80, 100))``) reached
by a principal in a window is recorded once, and the people who manage budgets are told.

The budget stage calls ``record`` right after it reserves, in the reservation's transaction
and under the counter's lock: a threshold the calls or the sum now reach gets its
``BudgetAlert`` row, which a unique constraint (counter, threshold) keeps to one, whatever
the number of processes reserving at once. A reservation rolled back takes its alert with
it. Once the row commits, and only for a row this call inserted:

- the signal ``guarded_tools.signals.budget_alert`` is sent with the alert;
- observers get the lifecycle event ``budget_alert`` (numbers only: threshold, used, limit;
  ``guarded_tools.contrib.otel`` counts it in the metric ``guarded_tools.budget.alerts``);
- with ``BUDGET_ALERT_NOTIFY_EMAIL``, the function ``ENQUEUE_NOTIFY_BUDGET_ALERT`` names
  sends the alert's id to the task queue, whose task emails ``notify_managers``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, router, transaction
from django.utils.module_loading import import_string

from guarded_tools import signals
from guarded_tools.conf import gt_settings
from guarded_tools.core import hosts
from guarded_tools.core.policy import Budget
from guarded_tools.core.times import timestamp
from guarded_tools.models import BudgetAlert, BudgetCounter

logger = logging.getLogger("guarded_tools")

#: The permission of the people told of budget alerts (who set budget overrides).
MANAGE_BUDGETS = "guarded_tools.manage_budgets"


def reached(budget: Budget, calls: int, total: Decimal) -> list[tuple[int, str, Decimal,
                                                                     Decimal]]:
    """The thresholds ``calls`` and ``total`` reach, each once, as (percent, measure, used,
    limit): the calls' when they reach it, else the sum's."""
    found = []
    for percent in sorted(set(budget.alerts)):
        if budget.count is not None and calls * 100 >= percent * budget.count:
            found.append((percent, BudgetAlert.Measure.CALLS.value, Decimal(calls),
                          Decimal(budget.count)))
        elif budget.sum_field and budget.limit is not None and \
                total * 100 >= percent * Decimal(str(budget.limit)):
            found.append((percent, BudgetAlert.Measure.SUM.value, total,
                          Decimal(str(budget.limit))))
    return found


def record(counter: BudgetCounter, budget: Budget, calls: int, total: Decimal, using: str,
           events: Any = None) -> list[BudgetAlert]:
    """Insert the alerts ``counter`` now reaches and has not had; announce each new one
    when the transaction commits (to ``events``, the call's lifecycle events, if given)."""
    found = reached(budget, calls, total)
    if not found:
        return []
    had = set(BudgetAlert.objects.using(using).filter(counter=counter).values_list(
        "threshold", flat=True))
    made = []
    for percent, measure, used, limit in found:
        if percent in had:
            continue
        try:
            with transaction.atomic(using=using):  # a savepoint: a duplicate leaves the rest
                made.append(BudgetAlert.objects.using(using).create(
                    counter=counter, threshold=percent, measure=measure, used=used,
                    limit=limit))
        except IntegrityError:  # recorded by another call: told once, by that one
            continue
    for alert in made:
        transaction.on_commit(_announcing(alert, events), using=using, robust=True)
    return made


def _announcing(alert: BudgetAlert, events: Any) -> Callable[[], None]:
    return lambda: announce(alert, events)


def described(alert: BudgetAlert) -> dict[str, Any]:
    """What the event, the signal's receivers and the email say of ``alert``."""
    counter = alert.counter
    return {"budget": counter.budget, "scope": counter.scope, "threshold": alert.threshold,
            "measure": alert.measure, "used": float(alert.used), "limit": float(alert.limit),
            "window_start": timestamp(counter.window_start)}


def announce(alert: BudgetAlert, events: Any = None) -> None:
    """Tell observers (``events``: the call's ``Events``), the signal's receivers and (by the
    task queue) the managers."""
    if events is not None:
        events.emit("budget_alert", extra=described(alert))
    signals.budget_alert.send(sender=BudgetAlert, alert=alert)
    if gt_settings.BUDGET_ALERT_NOTIFY_EMAIL:
        try:
            import_string(gt_settings.ENQUEUE_NOTIFY_BUDGET_ALERT)(alert.pk)
        except Exception:
            logger.warning("Could not send the email of budget alert %s to the task queue.",
                           alert.pk, exc_info=True)


def managers() -> list[str]:
    """The email addresses of the active people who manage budgets (up to 100)."""
    from django.contrib.auth import get_user_model

    users = get_user_model()._default_manager
    if not hasattr(users, "with_perm"):
        return []
    return [user.email for user in users.with_perm(MANAGE_BUDGETS, is_active=True).exclude(
        email="")[:100]]


def notify_managers(alert_id: Any) -> int:
    """Email the people who manage budgets of one alert; the count sent (0 when it is gone
    or nobody has an address). Run by the task ``guarded_tools.tasks.notify_budget_alert``."""
    from django.core.mail import send_mass_mail
    from django.urls import NoReverseMatch, reverse

    using = router.db_for_write(BudgetAlert)
    alert = BudgetAlert.objects.using(using).select_related("counter").filter(
        pk=alert_id).first()
    if alert is None:
        return 0
    try:
        recipients = managers()
        if not recipients:
            return 0
        said = described(alert)
        what = "calls" if alert.measure == BudgetAlert.Measure.CALLS else "sum"
        subject = (f"Budget {said['budget']}: {alert.threshold} % reached by"
                   f" {said['scope']}")[:150]
        used, limit = f"{alert.used.normalize():f}", f"{alert.limit.normalize():f}"
        body = (f"{said['scope']} has used {used} of {limit}"
                f" ({what}) of the budget {said['budget']} in the window that started at"
                f" {said['window_start']}: {alert.threshold} % of it.\n")
        try:
            path = reverse("admin:guarded_tools_budgetcounter_changelist")
            link = hosts.site_url(f"{path}?budget={said['budget']}")
            if link:
                body += f"\nSee the budget use: {link}\n"
        except NoReverseMatch:
            pass
        return send_mass_mail([(subject, body, None, [email]) for email in recipients])
    except Exception:
        logger.exception("could not email the budget managers about alert %s", alert_id)
        return 0


__all__ = ["MANAGE_BUDGETS", "announce", "managers", "notify_managers", "reached", "record"]
