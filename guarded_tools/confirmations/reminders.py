"""Provides the reminder approvers get once before a request they may decide expires.

``remind_due()`` finds the requests still pending whose expiry is less than
``CONFIRMATION_REMIND_BEFORE_SECONDS`` away, marks each reminded by compare-and-set (a
request is reminded once, whatever the number of beat ticks or workers running it at the
same moment) and emails the people who may still decide it. A request its owner decides is
marked, and nobody else is emailed about it. The Celery beat task
``guarded_tools.tasks.remind_approvers`` runs it.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import router
from django.db.models.functions import Now
from django.utils import timezone

from guarded_tools.conf import gt_settings
from guarded_tools.confirmations import queue
from guarded_tools.confirmations.presentation import requested_summary
from guarded_tools.core.times import timestamp
from guarded_tools.models import Confirmation, ConfirmationStatus

logger = logging.getLogger("guarded_tools")

#: The most requests one run reminds of (the next tick takes the rest).
BATCH = 200


def remind_due() -> int:
    """Remind the approvers of each pending request expiring soon, once; the emails sent."""
    before = int(gt_settings.CONFIRMATION_REMIND_BEFORE_SECONDS)
    if before <= 0:
        return 0
    using = router.db_for_write(Confirmation)
    rows = Confirmation.objects.using(using)
    now = timezone.now()
    due = rows.filter(status=ConfirmationStatus.PENDING, reminded_at__isnull=True,
                      expires_at__gt=now, expires_at__lte=now + timedelta(seconds=before))
    sent = 0
    for pk in list(due.order_by("expires_at").values_list("pk", flat=True)[:BATCH]):
        won = rows.filter(pk=pk, reminded_at__isnull=True,
                          status=ConfirmationStatus.PENDING).update(reminded_at=Now())
        if not won:  # another run reminded of it
            continue
        confirmation = rows.get(pk=pk)
        if queue.owner_decides(confirmation):
            continue
        sent += remind(confirmation)
    return sent


def remind(confirmation: Confirmation) -> int:
    """Email the people who may still decide ``confirmation`` that it expires soon."""
    from django.core.mail import send_mass_mail

    try:
        recipients = [user.email for user in queue.approvers(confirmation)]
        if not recipients:
            return 0
        summary = requested_summary(confirmation)
        subject = f"Expires soon: {summary}"[:150]
        body = (f"{summary}\n\nRequested by {confirmation.requester} through"
                f" {confirmation.tool}; it still waits for a decision and expires at"
                f" {timestamp(confirmation.expires_at)}.\n")
        return send_mass_mail([(subject, body, None, [email]) for email in recipients])
    except Exception:
        logger.exception("could not remind the approvers of confirmation %s", confirmation.pk)
        return 0


__all__ = ["remind", "remind_due"]
