"""Provides the Celery tasks: the periodic sweep, execution on approval, approver emails."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import Task, shared_task
from kombu.exceptions import OperationalError

from guarded_tools.conf import gt_settings
from guarded_tools.pipeline.recovery import close_old_connections

__all__ = [
    "enqueue_execute_approved",
    "enqueue_notify_approvers",
    "enqueue_notify_budget_alert",
    "execute_approved",
    "notify_approvers",
    "notify_budget_alert",
    "remind_approvers",
    "sweep",
]

logger = logging.getLogger(__name__)


class SweepTask(Task):  # type: ignore[misc]
    """Time limits follow the configured lease, read when a worker runs the task.

    A sweep must end (or be stopped) before the leases it took expire, or another
    sweeper could take the same operations over while its ``recover`` still runs.
    Limits are enforced by the prefork pool (not ``--pool=solo``).
    """

    @property
    def soft_time_limit(self) -> int:  # type: ignore[override]
        return max(int(gt_settings.LEASE_SECONDS) // 2, 1)

    @property
    def time_limit(self) -> int:  # type: ignore[override]
        return max(int(gt_settings.LEASE_SECONDS) * 3 // 4, 2)


@shared_task(
    base=SweepTask,
    name="guarded_tools.tasks.sweep",
    ignore_result=True,
    acks_late=False,
)
def sweep() -> dict[str, Any]:
    """Recover abandoned operations. Safe to deliver twice or run concurrently."""
    from guarded_tools.pipeline.gateway import sweep as run_sweep

    close_old_connections()
    try:
        return run_sweep().as_dict()
    finally:
        close_old_connections()


@shared_task(name="guarded_tools.tasks.execute_approved", ignore_result=True)
def execute_approved(confirmation_id: str) -> None:
    """Run an approved call at once, so the agent's retry replays its result.

    Safe to deliver twice: the approval is consumed once, and the operation's key
    makes a second run a replay.
    """

    from guarded_tools.confirmations import queue as confirmations
    from guarded_tools.core.credentials import CredentialRevoked
    from guarded_tools.core.errors import GuardError
    from guarded_tools.models import Confirmation, ConfirmationStatus
    from guarded_tools.pipeline.gateway import run_approved

    close_old_connections()
    confirmation = Confirmation.objects.filter(pk=confirmation_id).first()
    if confirmation is None or not confirmations.runs_when_approved(confirmation):
        return  # gone, or its tool now asks for every invocation: the agent's retry runs it
    if confirmation.task and confirmation.status != ConfirmationStatus.APPROVED:
        return  # used by the agent's own call already, or withdrawn: nothing to run
    if confirmation.task and not confirmations.asks_in_the_pipeline(confirmation.tool):
        # A long-running tool's call: nothing in its pipeline consumes the request, so
        # this does, against a withdrawal (tasks/cancel) racing for the same row.
        if not Confirmation.objects.consume(confirmation.pk):
            return
    try:
        run_approved(confirmation)
    except CredentialRevoked as exc:
        # Final: the approval is used up by this refusal (a new credential asks anew), and
        # the row says why, for the task's poll and for the admin.
        Confirmation.objects.consume(confirmation.pk)
        _keep_for_the_task(confirmation, exc)
        logger.info("Approved call of confirmation %s refused: its credential no longer"
                    " stands.", confirmation.pk)
    except Exception as exc:
        # Stored on the operation (or nothing ran); the agent's retry reports it. A task's
        # client does not retry: its poll reads what this run answered (an exception the
        # guard does not own as internal_error, its text only in the log).
        if not confirmation.task and not isinstance(exc, GuardError):
            raise
        if confirmation.task:
            _keep_for_the_task(confirmation, exc)
    finally:
        close_old_connections()


SWEEP_TASK = "guarded_tools.tasks.sweep"


def sweep_schedule() -> Any:
    """The beat schedule of the sweep (a Celery ``schedule``, ``crontab``…), or ``None``.

    Read from Django settings (``CELERY_BEAT_SCHEDULE``), else from the current Celery
    app; a database scheduler (django-celery-beat) is not looked into.
    """
    from celery import current_app
    from celery.schedules import maybe_schedule
    from django.conf import settings

    entries = getattr(settings, "CELERY_BEAT_SCHEDULE", None)
    if entries is None:
        entries = current_app.conf.get("beat_schedule", None)
    for entry in (entries or {}).values() if isinstance(entries, dict) else ():
        if isinstance(entry, dict) and entry.get("task") == SWEEP_TASK and entry.get("schedule"):
            return maybe_schedule(entry["schedule"], app=current_app)
    return None


@dataclass(frozen=True)
class NextSweep:
    """What can be known of the next sweep: when, how often, when the last one ran."""

    at: datetime | None
    """When it runs; ``None`` when that cannot be known here (see ``every``)."""
    every: float | None
    """Seconds between sweeps, when they run at an interval; ``None`` if not scheduled."""
    last: datetime | None
    """When the last sweep this process's cache saw started."""
    scheduled: bool
    """Whether a beat entry or a sweep loop says sweeps run at all."""

    @property
    def overdue(self) -> bool:
        """The last sweep's interval has run out and no later sweep wrote its time."""
        from django.utils import timezone

        return self.at is not None and self.at < timezone.now()


def next_sweep() -> NextSweep:
    """When the next sweep runs, as far as this process can tell.

    A crontab (or solar) entry says it from the clock alone. An interval needs the last
    sweep's time, which each sweep writes to Django's cache: with a cache every process
    shares, the next is the last plus the interval; with a per-process cache only the
    interval is known (``at`` is ``None``).
    """
    from celery.schedules import schedule as interval_schedule
    from django.utils import timezone

    from guarded_tools.pipeline.recovery import last_sweep

    last = last_sweep()
    last_at = last["at"] if last else None
    loop_every = last.get("every") if last else None
    entry = sweep_schedule()
    if entry is not None and not isinstance(entry, interval_schedule):
        now = timezone.now()
        # The estimate counts from its own clock's reading, a little after ``now``: to
        # the nearest second, a crontab's minute is exact again.
        at = now + entry.remaining_estimate(now) + timedelta(milliseconds=500)
        return NextSweep(at.replace(microsecond=0), None, last_at, True)
    every = (float(entry.seconds) if entry is not None
             else float(loop_every) if isinstance(loop_every, (int, float)) else None)
    if every is None:
        return NextSweep(None, None, last_at, False)
    at = last_at + timedelta(seconds=every) if last_at is not None else None
    return NextSweep(at, every, last_at, True)


def enqueue_execute_approved(confirmation_id: str) -> bool:
    """Send ``execute_approved`` to the broker; False, with a warning, if it is unreachable.

    The approval is committed either way, and nothing else needs the task: the agent's
    retry runs the approved call (once). So a broker outage costs the approver no error
    page, only the "at once".
    """
    return _enqueue(execute_approved, confirmation_id, (OperationalError,),
                    "the approved call", "the agent's retry runs it")


@shared_task(name="guarded_tools.tasks.notify_approvers", ignore_result=True)
def notify_approvers(confirmation_id: str) -> int:
    """Email the approvers of a request that still waits for a decision; the count sent.

    A request decided, withdrawn or expired before this runs (or gone) sends nothing.
    """
    from django.db import router

    from guarded_tools.confirmations import queue as confirmations
    from guarded_tools.models import Confirmation

    close_old_connections()
    try:
        # From the primary: a replica behind it could miss the request just committed.
        waiting = Confirmation.objects.using(router.db_for_write(Confirmation)).pending()
        confirmation = waiting.filter(pk=confirmation_id).first()
        if confirmation is None:
            return 0
        return confirmations.notify_approvers(confirmation)
    finally:
        close_old_connections()


def enqueue_notify_approvers(confirmation_id: str) -> bool:
    """Send ``notify_approvers`` to the broker; False, with a warning, if that fails.

    Called after the request commits, in the agent's call: whatever goes wrong here
    (the broker down, a publish error), the agent's 202 is answered and nothing retries.
    """
    return _enqueue(notify_approvers, confirmation_id, (Exception,),
                    "the approvers' email", "nobody is emailed about it")


@shared_task(name="guarded_tools.tasks.notify_budget_alert", ignore_result=True)
def notify_budget_alert(alert_id: int) -> int:
    """Email the people who manage budgets of one budget alert; the count sent."""
    from guarded_tools.pipeline.budget_alerts import notify_managers

    close_old_connections()
    try:
        return notify_managers(alert_id)
    finally:
        close_old_connections()


def enqueue_notify_budget_alert(alert_id: int) -> bool:
    """Send ``notify_budget_alert`` to the broker; False, with a warning, if that fails
    (the call that reached the threshold is answered either way)."""
    return _enqueue(notify_budget_alert, alert_id, (Exception,),
                    "the budget managers' email", "nobody is emailed about it")


@shared_task(name="guarded_tools.tasks.remind_approvers", ignore_result=True)
def remind_approvers() -> int:
    """Beat task: remind approvers, once, of the requests that expire soon; emails sent.

    Safe to run from several beats or workers at once (each request is marked reminded by
    compare-and-set before its email)."""
    from guarded_tools.confirmations.reminders import remind_due

    close_old_connections()
    try:
        return remind_due()
    finally:
        close_old_connections()


def _enqueue(task: Any, confirmation_id: Any, errors: tuple[type[Exception], ...],
             what: str, consequence: str) -> bool:
    try:
        task.delay(confirmation_id)
    except errors as exc:
        logger.warning("Could not send %s of confirmation %s to the broker (%s): %s.",
                       what, confirmation_id, exc, consequence)
        return False
    return True


def _keep_for_the_task(confirmation: Any, exc: Exception) -> None:
    from guarded_tools.core.registry import registry
    from guarded_tools.core.repair import Audience
    from guarded_tools.models import Confirmation
    from guarded_tools.pipeline.gateway import agent_error

    error = agent_error(exc)
    if error.code == "operation_in_flight":
        # Another caller's call of the same operation holds the key (an agent's retry that
        # consumed this approval first): that call runs it, and the task's state is read
        # from the operation it is running, not from this run's refusal.
        return
    if error.code == "confirmation_required":
        # The rule in force asks more than this approval gave: the request waits again,
        # and the task with it (working), until the approvals still needed run it.
        return
    definition = registry.find(confirmation.tool)
    audience = Audience(transport="mcp", keyed=bool(definition and definition.idempotent))
    Confirmation.objects.filter(pk=confirmation.pk).update(
        task_error=error.as_dict("", audience))
