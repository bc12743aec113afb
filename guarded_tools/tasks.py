"""Provides the Celery tasks: the periodic sweep, and execution on approval."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import close_old_connections

from guarded_tools.conf import gt_settings


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
