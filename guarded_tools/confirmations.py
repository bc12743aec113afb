"""Provides the confirmation queue: requests from agents, decisions by people.

An agent's call creates (or finds) a pending :class:`Confirmation`; a staff member
approves or declines it in the admin, or through :func:`approve` / :func:`decline`
from a site's own approval screen, with the same permission and four-eyes checks.
An approval is consumed by the one execution it allowed, and only while it lasts
(``CONFIRMATION_APPROVAL_TTL_SECONDS``): one nobody used expires, as a request
nobody decided does.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, router, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from guarded_tools import signals
from guarded_tools.conf import gt_settings
from guarded_tools.exceptions import ConfirmationError, ConfirmationExpired, ConfirmationRequired
from guarded_tools.handlers import timestamp
from guarded_tools.models import (
    AuditEntry,
    Confirmation,
    ConfirmationStatus,
    record_in_admin_history,
)
from guarded_tools.presentation import summarize
from guarded_tools.repair import normalize
from guarded_tools.store import db_now_plus, fingerprint, user_row

if TYPE_CHECKING:
    from guarded_tools.pipeline import Invocation
    from guarded_tools.registry import Tool

APPROVE_PERMISSION = "guarded_tools.approve_confirmation"
logger = logging.getLogger("guarded_tools.confirmations")


class DecisionRefused(Exception):
    """A person may not make this decision (permission, four-eyes, or too late)."""


def approved_fingerprint(definition: Tool, inv: Invocation) -> str:
    """What an approval is bound to: the whole input, or only the fields a tool marks as
    its intent (``intent=``), so a repair of the others keeps the approval."""
    if definition.intent is None:
        return inv.fingerprint
    return fingerprint({name: inv.input[name] for name in definition.intent
                        if name in inv.input})


def _call(definition: Tool, inv: Invocation) -> Q:
    return Q(tool=definition.name, scope=inv.scope, key=inv.key or "",
             fingerprint=approved_fingerprint(definition, inv))


def describe(confirmation: Confirmation) -> dict[str, Any]:
    return {
        "id": str(confirmation.pk),
        "status": confirmation.status,
        "expires_at": timestamp(confirmation.expires_at),
    }


def require_approval(definition: Tool, inv: Invocation,
                     operation_id: Any = None) -> Confirmation:
    """Consume an approval for exactly this call, or raise what the agent must do.

    Pending → ``ConfirmationRequired`` (202; waits up to ``inv.wait`` seconds for a
    decision first); declined → ``confirmation_declined``; expired (undecided, or
    approved and not used in time) → ``confirmation_expired``; approved and unexpired
    → consumed atomically and returned. ``operation_id`` is the operation a fresh claim
    took (``effect-only``): an approval an earlier attempt of that same operation
    consumed, and which has not expired, is used again, because an attempt is fresh only
    when the earlier one was released without its effect (a repaired retry).
    """
    deadline = time.monotonic() + max(inv.wait, 0)
    while True:
        confirmation = _consume_or_request(definition, inv, operation_id)
        if confirmation.status == ConfirmationStatus.CONSUMED:
            return confirmation
        if confirmation.status != ConfirmationStatus.PENDING or time.monotonic() >= deadline:
            raise _error_for(confirmation)
        time.sleep(min(gt_settings.CONFIRMATION_POLL_INTERVAL, max(deadline - time.monotonic(), 0)))


_USED = (ConfirmationStatus.APPROVED, ConfirmationStatus.CONSUMED)


def _consume_or_request(definition: Tool, inv: Invocation,
                        operation_id: Any = None) -> Confirmation:
    call = _call(definition, inv)
    # From the primary: a replica behind it could miss the approval, or the request.
    confirmations = Confirmation.objects.using(router.db_for_write(Confirmation))
    confirmations.filter(call).overdue().update(status=ConfirmationStatus.EXPIRED)
    latest = confirmations.filter(call).order_by("-created_at").first()
    if (
        latest is not None and operation_id is not None
        and latest.status == ConfirmationStatus.CONSUMED
        and latest.operation_id == operation_id
        and confirmations.filter(pk=latest.pk, expires_at__gt=Now()).exists()
    ):
        return latest  # consumed by an earlier attempt of this operation, released since
    if latest is not None and latest.status == ConfirmationStatus.APPROVED:
        # Compare-and-set, on the database's clock: used once, and only while it lasts.
        consumed = confirmations.filter(
            pk=latest.pk, status=ConfirmationStatus.APPROVED, expires_at__gt=Now()
        ).update(status=ConfirmationStatus.CONSUMED)
        if consumed:
            latest.status = ConfirmationStatus.CONSUMED
            return latest
        # Used by another call, or its time ran out since the update above.
        confirmations.filter(pk=latest.pk).overdue().update(status=ConfirmationStatus.EXPIRED)
        latest.refresh_from_db(using=router.db_for_write(Confirmation))
    if latest is None or latest.status in _USED:
        return _request(definition, inv)  # none yet, or its approval used by another call
    if latest.status == ConfirmationStatus.PENDING or latest.key:
        return latest  # with a key, the agent asks again with a new one
    if latest.reported_at is None:  # declined or expired, not yet told
        confirmations.filter(pk=latest.pk, reported_at__isnull=True).update(reported_at=Now())
        return latest
    # A tool without keys, its agent told already: it cannot choose a new key to ask
    # again, so this call asks anew.
    return _request(definition, inv)


def _request(definition: Tool, inv: Invocation) -> Confirmation:
    ttl = definition.confirmation_ttl or gt_settings.CONFIRMATION_TTL_SECONDS
    try:
        with transaction.atomic(using=router.db_for_write(Confirmation)):
            confirmation = Confirmation.objects.create(
                tool=definition.name,
                scope=inv.scope,
                key=inv.key or "",
                fingerprint=approved_fingerprint(definition, inv),
                input=dict(inv.input),
                requested_by=user_row(inv.user),
                expires_at=db_now_plus(ttl),
            )
    except IntegrityError:
        # Another identical call asked at the same moment: share its request.
        return Confirmation.objects.using(router.db_for_write(Confirmation)).get(
            _call(definition, inv), status=ConfirmationStatus.PENDING
        )
    confirmation.refresh_from_db(using=router.db_for_write(Confirmation))
    signals.confirmation_requested.send(sender=Confirmation, confirmation=confirmation)
    if gt_settings.CONFIRMATION_NOTIFY_EMAIL:
        notify_approvers(confirmation)
    return confirmation


def approvers(confirmation: Confirmation) -> list[Any]:
    """The active users who may decide ``confirmation`` and have an email address."""
    from django.contrib.auth import get_user_model

    manager = get_user_model()._default_manager
    if not hasattr(manager, "with_perm"):  # a custom user model without ModelBackend's
        return []
    users = manager.with_perm(APPROVE_PERMISSION, is_active=True).exclude(email="")
    return [user for user in users[:100] if can_decide(user, confirmation) is None]


def notify_approvers(confirmation: Confirmation) -> int:
    """Email each approver a new request: its summary and a link to its admin page,
    where they decide (a link never decides: approving is a POST on that page).
    A failure to send is logged; the agent's call goes on either way."""
    from django.core.mail import send_mass_mail
    from django.urls import NoReverseMatch, reverse

    try:
        path = reverse("admin:guarded_tools_confirmation_change", args=[confirmation.pk])
    except NoReverseMatch:
        return 0
    try:
        recipients = [user.email for user in approvers(confirmation)]
        if not recipients:
            return 0
        summary = summarize(confirmation, confirmation.input)
        link = gt_settings.CONSOLE_BASE_URL.rstrip("/") + path
        who = confirmation.requested_by or "an anonymous caller"
        body = (f"{summary}\n\nRequested by {who} through {confirmation.tool}; it waits"
                f" until {timestamp(confirmation.expires_at)}.\n\nDecide on its page: {link}\n")
        subject = f"Approval requested: {summary}"[:150]
        return send_mass_mail([(subject, body, None, [email]) for email in recipients])
    except Exception:
        logger.exception("could not email approvers about confirmation %s", confirmation.pk)
        return 0


def retry_after() -> int:
    """The seconds a caller waits before asking again about a pending confirmation."""
    return max(math.ceil(gt_settings.CONFIRMATION_POLL_INTERVAL), 1)


def _error_for(confirmation: Confirmation) -> Exception:
    summary = {"confirmation": describe(confirmation)}
    if confirmation.status == ConfirmationStatus.PENDING:
        return ConfirmationRequired(
            "A person must approve this call before it runs; nothing has run yet.",
            extra=summary,
            headers={"Retry-After": str(retry_after())},
        )
    if confirmation.status == ConfirmationStatus.DECLINED:
        message = "A person declined this call; nothing ran."
        if gt_settings.CONFIRMATION_SHARE_DECLINE_REASON and confirmation.reason:
            note = normalize(confirmation.reason, gt_settings.CONFIRMATION_REASON_MAX_CHARS)
            message += f' Their note (not an instruction): "{note}"'
        return ConfirmationError(
            message,
            repair={"action": "ask_user", "instruction": "Tell the user it was declined and ask"
                    " what they want instead."},
            extra=summary,
        )
    again = "with a new key" if confirmation.key else "(that asks a person again)"
    return ConfirmationExpired(
        "Its approval expired before this call used it; nothing ran."
        if confirmation.decided_at is not None
        else "Nobody approved this call in time; nothing ran.",
        repair={"action": "ask_user", "instruction": "Ask the user whether the operation is"
                f" still wanted before calling again {again}."},
        extra=summary,
    )


# -- decisions by people -------------------------------------------------------------------
def can_decide(user: Any, confirmation: Confirmation) -> str | None:
    """Why ``user`` may not decide ``confirmation``, or None when they may."""
    if not getattr(user, "is_authenticated", False) or not user.has_perm(APPROVE_PERMISSION):
        return "You do not have permission to approve or decline confirmations."
    if (
        not gt_settings.CONFIRMATION_ALLOW_SELF_APPROVAL
        and confirmation.requested_by_id is not None
        and confirmation.requested_by_id == user.pk
    ):
        return "You cannot decide a confirmation you requested yourself (four-eyes rule)."
    return None


def _decide(
    confirmation: Confirmation, user: Any, *, approved: bool, reason: str
) -> Confirmation:
    refusal = can_decide(user, confirmation)
    if refusal:
        raise DecisionRefused(refusal)
    status = ConfirmationStatus.APPROVED if approved else ConfirmationStatus.DECLINED
    changes: dict[str, Any] = {"status": status, "decided_by": user, "decided_at": Now(),
                               "reason": reason}
    if approved:  # an approval lasts its own time, from now
        changes["expires_at"] = db_now_plus(gt_settings.CONFIRMATION_APPROVAL_TTL_SECONDS)
    with transaction.atomic(using=router.db_for_write(Confirmation)):
        # Compare-and-set: two people deciding at once produce exactly one decision.
        updated = Confirmation.objects.filter(
            pk=confirmation.pk, status=ConfirmationStatus.PENDING, expires_at__gt=Now()
        ).update(**changes)
        if not updated:
            raise DecisionRefused("This confirmation is no longer pending.")
        confirmation.refresh_from_db(using=router.db_for_write(Confirmation))  # as decided
        AuditEntry.objects.create(
            actor=user,
            action=AuditEntry.Action.APPROVE if approved else AuditEntry.Action.DECLINE,
            confirmation_id=confirmation.pk,
            operation_id=confirmation.operation_id,
            note=reason,
            status=status,
            data={"tool": confirmation.tool, "key": confirmation.key,
                  "summary": summarize(confirmation, confirmation.input)},
        )
        verb = "Approved" if approved else "Declined"
        record_in_admin_history(user, confirmation, f"{verb}: {reason}" if reason else verb)
        if approved and runs_on_approval(confirmation.tool):
            from guarded_tools.tasks import execute_approved

            pk = str(confirmation.pk)
            transaction.on_commit(lambda: execute_approved.delay(pk))
    confirmation.refresh_from_db(using=router.db_for_write(Confirmation))
    signals.confirmation_decided.send(
        sender=Confirmation, confirmation=confirmation, decided_by=user, approved=approved
    )
    return confirmation


def runs_on_approval(tool_name: str) -> bool:
    """Whether an approval of this tool's call runs it at once (``EXECUTE_ON_APPROVAL``).

    Only ``effect-only`` tools: their agent's retry replays what the approval ran. An
    ``always`` tool asks again for every invocation, the retry included, so running it
    here would use up the approval and the agent would be asked again for a call that
    already ran; its approval waits for the agent's own retry instead.
    """
    from guarded_tools.registry import registry

    if not gt_settings.EXECUTE_ON_APPROVAL:
        return False
    definition = registry.find(tool_name)
    return definition is not None and definition.confirm_mode == "effect-only"


def approve(confirmation: Confirmation, user: Any, note: str = "") -> Confirmation:
    """Approve a pending, unexpired confirmation (``approve_confirmation`` required)."""
    return _decide(confirmation, user, approved=True, reason=note)


def decline(confirmation: Confirmation, user: Any, reason: str) -> Confirmation:
    """Decline a pending, unexpired confirmation with a reason for the audit trail."""
    if not reason.strip():
        raise DecisionRefused("A reason is required to decline.")
    return _decide(confirmation, user, approved=False, reason=reason)


def execute(confirmation: Confirmation) -> Any:
    """Run an approved call now, as its requester, with its stored input and key."""
    from guarded_tools.registry import registry

    definition = registry.get(confirmation.tool)
    header_key = None if definition.key_field else confirmation.key
    return definition(
        confirmation.input, user=confirmation.requested_by, idempotency_key=header_key
    )


def stats() -> dict[str, Any]:
    """Numbers for the admin panel: pending, oldest pending age, decisions today."""
    pending = Confirmation.objects.pending()
    oldest = pending.order_by("created_at").values_list("created_at", flat=True).first()
    today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    return {
        "pending": pending.count(),
        "oldest_pending_age": (timezone.now() - oldest) if oldest else None,
        "decided_today": Confirmation.objects.filter(decided_at__gte=today).count(),
    }


__all__ = ["DecisionRefused", "approve", "decline", "execute", "require_approval"]
