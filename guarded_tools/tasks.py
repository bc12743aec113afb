"""Provides the Celery tasks: the periodic sweep, and execution on approval."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from guarded_tools.conf import gt_settings
from guarded_tools.recovery import close_old_connections


@shared_task(
    name="guarded_tools.tasks.sweep",
    ignore_result=True,
    acks_late=False,
    soft_time_limit=max(int(gt_settings.defaults["LEASE_SECONDS"]) // 2, 10),
)
def sweep() -> dict[str, Any]:
    """Recover abandoned operations. Safe to deliver twice or run concurrently."""
    from guarded_tools.recovery import sweep as run_sweep

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
    from guarded_tools import confirmations
    from guarded_tools.exceptions import GuardError
    from guarded_tools.models import Confirmation

    close_old_connections()
    confirmation = Confirmation.objects.filter(pk=confirmation_id).first()
    if confirmation is None:
        return
    try:
        confirmations.execute(confirmation)
    except GuardError:
        pass  # stored on the operation (or nothing ran); the agent's retry reports it
    finally:
        close_old_connections()
