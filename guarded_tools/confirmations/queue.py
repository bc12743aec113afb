"""Provides the confirmation queue: requests from agents, decisions by people.

An agent's call creates (or finds) a pending :class:`Confirmation`; a staff member
approves or declines it in the admin, or through :func:`approve` / :func:`decline`
from a site's own approval screen, with the same permission and four-eyes checks.
An approval is consumed by the one execution it allowed, and only while it lasts
(``CONFIRMATION_APPROVAL_TTL_SECONDS``): one nobody used expires, as a request
nobody decided does. A policy's request is held against the rule in force when its call
runs: an approval that gives less than that rule asks sends the request back to pending.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import IntegrityError, router, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from guarded_tools import signals
from guarded_tools.conf import gt_settings
from guarded_tools.confirmations.presentation import requested_summary
from guarded_tools.confirmations.requests import (
    approvals_text,
    approved_fingerprint,
    asks_the_owner,
    call_filter,
    describe,
    live_credential,
    pending_message,
    pending_why,
    requested,
)
from guarded_tools.core import hosts
from guarded_tools.core.errors import (
    ConfirmationError,
    ConfirmationExpired,
    ConfirmationRequired,
    GuardError,
)
from guarded_tools.core.registry import registry
from guarded_tools.core.repair import normalize
from guarded_tools.core.times import timestamp
from guarded_tools.models import (
    AuditEntry,
    Confirmation,
    ConfirmationStatus,
    Operation,
    ReleaseReason,
    record_in_admin_history,
)
from guarded_tools.store import db_now_plus, user_row
from guarded_tools.store.history import Kind, record

if TYPE_CHECKING:
    from guarded_tools.core.call import Invocation
    from guarded_tools.core.definition import Tool

APPROVE_PERMISSION = "guarded_tools.approve_confirmation"
#: The URL name of the console's consent page (a `confirm="owner"` request links to it).
CONSENT_URL_NAME = "confirmation-consent"
logger = logging.getLogger("guarded_tools.confirmations")


class DecisionRefused(Exception):
    """A person may not make this decision (permission, four-eyes, or too late)."""


def require_approval(definition: Tool, inv: Invocation,
                     operation_id: Any = None, *,
                     policy: Mapping[str, Any] | None = None) -> Confirmation:
    """Consume an approval for exactly this call, or raise what the agent must do.

    Pending → ``ConfirmationRequired`` (202; waits up to ``inv.wait`` seconds for a
    decision first); declined → ``confirmation_declined``; expired (undecided, or
    approved and not used in time) → ``confirmation_expired``; approved and unexpired
    → consumed atomically and returned. ``operation_id`` is the operation a fresh claim
    took (``effect-only``): an approval an earlier attempt of that same operation
    consumed, and which has not expired, is used again, because an attempt is fresh only
    when the earlier one was released without its effect (a repaired retry). ``policy``
    is what the rule in force asks (``policy_rule``, ``policy_version``,
    ``approvals_required``, the approvers' group and permission): a pending request asks
    at least that many approvals, and an approval not used yet that gives less goes back
    to pending with the approvals that count (see ``_short_of_the_rule``). A pending
    request is linked to ``operation_id``, the operation that waits for it.
    """
    deadline = time.monotonic() + max(inv.wait, 0)
    while True:
        confirmation = _consume_or_request(definition, inv, operation_id, policy)
        if (operation_id is not None and confirmation.status == ConfirmationStatus.PENDING
                and confirmation.operation_id != operation_id):
            # The operation whose claim asked waits for it: its timeline shows the decisions.
            Confirmation.objects.using(router.db_for_write(Confirmation)).filter(
                pk=confirmation.pk).update(operation_id=operation_id)
            confirmation.operation_id = operation_id
        if confirmation.status == ConfirmationStatus.CONSUMED:
            return confirmation
        if confirmation.status != ConfirmationStatus.PENDING or time.monotonic() >= deadline:
            raise error_for(confirmation, inv.request)
        time.sleep(min(gt_settings.CONFIRMATION_POLL_INTERVAL, max(deadline - time.monotonic(), 0)))


_USED = (ConfirmationStatus.APPROVED, ConfirmationStatus.CONSUMED)


def open_request(definition: Tool, inv: Invocation) -> bool:
    """Whether this exact call has a request pending or approved and unused."""
    return Confirmation.objects.using(router.db_for_write(Confirmation)).filter(
        call_filter(definition, inv), expires_at__gt=Now(),
        status__in=[ConfirmationStatus.PENDING, ConfirmationStatus.APPROVED]).exists()


def _stricter(confirmations: Any, call: Q, policy: Mapping[str, Any] | None) -> None:
    """A policy stricter now than when the call was asked: its pending request needs the
    approvals the policy needs now, from the approvers it names (a policy grown laxer
    keeps the request's)."""
    if policy is not None and "approvals_required" in policy:
        confirmations.filter(
            call, status=ConfirmationStatus.PENDING,
            approvals_required__lt=policy["approvals_required"],
        ).update(approvals_required=policy["approvals_required"],
                 policy_rule=policy["policy_rule"], policy_version=policy["policy_version"],
                 approvers_group=policy.get("approvers_group", ""),
                 approvers_permission=policy.get("approvers_permission", ""))


def _consume_or_request(definition: Tool, inv: Invocation, operation_id: Any = None,
                        policy: Mapping[str, Any] | None = None) -> Confirmation:
    call = call_filter(definition, inv)
    # From the primary: a replica behind it could miss the approval, or the request.
    using = router.db_for_write(Confirmation)
    confirmations = Confirmation.objects.using(using)
    confirmations.filter(call).overdue().update(status=ConfirmationStatus.EXPIRED)
    _stricter(confirmations, call, policy)
    latest = confirmations.filter(call).order_by("-created_at").first()
    if (
        latest is not None and operation_id is not None
        and latest.status == ConfirmationStatus.CONSUMED
        and latest.operation_id == operation_id
        and confirmations.filter(pk=latest.pk, expires_at__gt=Now()).exists()
    ):
        # Consumed by an earlier attempt of this operation, released since: used again,
        # when it is enough for the rule in force.
        return _short_of_the_rule(latest, policy, using) or latest
    if latest is not None and latest.status == ConfirmationStatus.APPROVED:
        reopened = _short_of_the_rule(latest, policy, using)
        if reopened is not None:
            return reopened
        if confirmations.consume(latest.pk):
            latest.status = ConfirmationStatus.CONSUMED
            return latest
        # Used by another call, or its time ran out since the update above.
        confirmations.filter(pk=latest.pk).overdue().update(status=ConfirmationStatus.EXPIRED)
        latest.refresh_from_db(using=using)
    if latest is None or latest.status in (*_USED, ConfirmationStatus.WITHDRAWN):
        # None yet, its approval used by another call, or withdrawn (its key released).
        return _request(definition, inv, policy, operation_id)
    if latest.status == ConfirmationStatus.PENDING or latest.key:
        return latest  # with a key, the agent asks again with a new one
    if latest.reported_at is None:  # declined or expired, not yet told
        confirmations.filter(pk=latest.pk, reported_at__isnull=True).update(reported_at=Now())
        return latest
    # A tool without keys, its agent told already: it cannot choose a new key to ask
    # again, so this call asks anew.
    return _request(definition, inv, policy, operation_id)


# -- an approval held against the rule in force at the run ---------------------------------
def _short_of_the_rule(row: Confirmation, policy: Mapping[str, Any] | None,
                       using: str) -> Confirmation | None:
    """``row`` asked again, when its approval falls short of what the rule in force asks.

    ``row`` is approved and not used yet (or used by an attempt of this operation that was
    released without its effect). The rule in force is the policy's for the call now,
    made stricter by a budget over its limit: it may ask more approvals, approvers from
    another group or with another permission, or staff where the owner approved. Then
    the request goes back to pending with the approvals that count under that rule
    ("1 of 2 approvals given"), until its original expiry, and the approvers still
    needed are told again; the call answers ``confirmation_required``. None when the
    approval as given is enough (a rule grown laxer, or the same rule).
    """
    kept = _counted(row, policy)
    if kept is None or policy is None:
        return None
    changed = Confirmation.objects.using(using).filter(
        pk=row.pk, status=row.status, expires_at__gt=Now(),
    ).update(
        status=ConfirmationStatus.PENDING, approvals=_labelled(kept, row),
        approvals_required=policy["approvals_required"],
        approvers_group=policy.get("approvers_group", ""),
        approvers_permission=policy.get("approvers_permission", ""),
        policy_rule=policy.get("policy_rule", row.policy_rule),
        policy_version=policy.get("policy_version", row.policy_version),
        decided_by=None, decided_at=None, expires_at=_asked_until(row, using),
    )
    if not changed:  # used by another call, or expired, meanwhile
        row.refresh_from_db(using=using)
        return None
    confirmations = Confirmation.objects.using(using)
    confirmations.filter(pk=row.pk).overdue().update(status=ConfirmationStatus.EXPIRED)
    row.refresh_from_db(using=using)
    if row.status == ConfirmationStatus.PENDING:
        _announce(row, using)
    return row


def _counted(row: Confirmation, policy: Mapping[str, Any] | None) -> list[Any] | None:
    """The approvals of ``row`` that count under the rule in force, when they are fewer
    than it asks; None when they are enough.

    A rule that asks no person (one kept from a stricter request) or the owner is met by
    any approval. Under ``Approvers(n)`` the requester's approval never counts, nor the
    owner's own consent; an approver counts for a group or a permission the request did
    not ask when they hold it now.
    """
    required = (policy or {}).get("approvals_required") or 0
    if policy is None or required < 1:
        return None
    group, permission = policy.get("approvers_group", ""), policy.get("approvers_permission", "")
    counted = [given for given in _given(row)
               if _counts(given, row, group, permission)]
    return counted if len(counted) < required else None


def _given(row: Confirmation) -> list[dict[str, Any]]:
    """Who approved ``row``: its approvals, else the one person who decided it (not the
    owner deciding their own request)."""
    if row.approvals:
        return [dict(given) for given in row.approvals]
    if row.decided_by_id is None or _owner_consent(row):
        return []
    return [{"id": row.decided_by_id, "label": None, "at": timestamp(row.decided_at)}]


def _counts(given: Mapping[str, Any], row: Confirmation, group: str, permission: str) -> bool:
    """Whether one approval of ``row`` counts under a rule asking ``group``/``permission``."""
    if given.get("id") is None or given.get("id") == row.requested_by_id:
        return False
    if (not group or group == row.approvers_group) and (
            not permission or permission == row.approvers_permission):
        return True  # asked of them already when they approved
    from django.contrib.auth import get_user_model

    user = get_user_model()._default_manager.filter(pk=given["id"], is_active=True).first()
    return user is not None and (not group or user.groups.filter(name=group).exists()) and (
        not permission or user.has_perm(permission))


def _labelled(kept: list[dict[str, Any]], row: Confirmation) -> list[dict[str, Any]]:
    """``kept`` with each approver's name (the one decision of a single approval has none)."""
    return [{**given, "label": str(row.decided_by.get_username()) if row.decided_by else "?"}
            if given.get("label") is None else given for given in kept]


def _asked_until(row: Confirmation, using: str) -> Any:
    """When ``row``'s request expired before its approval moved ``expires_at``: as the
    approval's audit row kept it, else its creation plus its tool's time to live."""
    data = AuditEntry.objects.using(using).filter(
        confirmation_id=row.pk, action=AuditEntry.Action.APPROVE,
        status=ConfirmationStatus.APPROVED,
    ).order_by("-created_at", "-pk").values_list("data", flat=True).first()
    kept = parse_datetime(str(data.get("request_expires_at") or "")) if isinstance(
        data, dict) else None
    if kept is not None:
        return kept
    definition = registry.find(row.tool)
    ttl = (definition.confirmation_ttl if definition is not None else None) or (
        gt_settings.CONFIRMATION_TTL_SECONDS)
    return row.created_at + timedelta(seconds=ttl)


def _request(definition: Tool, inv: Invocation,
             policy: Mapping[str, Any] | None = None, operation_id: Any = None) -> Confirmation:
    ttl = definition.confirmation_ttl or gt_settings.CONFIRMATION_TTL_SECONDS
    asked = requested(definition, inv)  # the hook's reads, before the transaction
    using = router.db_for_write(Confirmation)
    try:
        with transaction.atomic(using=using):
            confirmation = Confirmation.objects.create(
                tool=definition.name,
                scope=inv.scope,
                key=inv.key or "",
                fingerprint=approved_fingerprint(definition, inv),
                input=dict(inv.input),
                expires_at=db_now_plus(ttl),
                operation_id=operation_id,
                **asked, **(policy or {}),
            )
    except IntegrityError:
        # Another identical call asked at the same moment: share its request.
        return Confirmation.objects.using(using).get(
            call_filter(definition, inv), status=ConfirmationStatus.PENDING
        )
    confirmation.refresh_from_db(using=using)
    _announce(confirmation, using)
    return confirmation


def _announce(confirmation: Confirmation, using: str) -> None:
    """Tell whoever waits for new requests that ``confirmation`` waits for a person."""
    signals.confirmation_requested.send(sender=Confirmation, confirmation=confirmation)
    if gt_settings.CONFIRMATION_NOTIFY_EMAIL:
        # Not in the agent's call: a Celery task emails, once the request has committed
        # (a caller's transaction that rolls it back sends nothing).
        pk = str(confirmation.pk)
        transaction.on_commit(lambda: enqueue("ENQUEUE_NOTIFY_APPROVERS", pk), using=using,
                              robust=True)


def consent_url(request: Any, confirmation: Confirmation) -> str:
    """The consent page of ``confirmation`` (the console's route, by its URL name):
    absolute on a host the site owns."""
    path = hosts.app_path(request, CONSENT_URL_NAME, confirmation.pk)
    return hosts.absolute_url(request, path) if request is not None else path


def enqueue(setting: str, confirmation_id: str) -> None:
    """Send ``confirmation_id`` to the task queue by the function ``setting`` names
    (``ENQUEUE_EXECUTE_APPROVED``, ``ENQUEUE_NOTIFY_APPROVERS``), resolved at each send."""
    import_string(getattr(gt_settings, setting))(confirmation_id)


def _eligible(confirmation: Confirmation) -> Any:
    """The active users holding the approve permission (and the rule's, in its group)."""
    from django.contrib.auth import get_user_model

    manager = get_user_model()._default_manager
    if not hasattr(manager, "with_perm"):  # a custom user model without ModelBackend's
        return manager.none()
    users = manager.with_perm(APPROVE_PERMISSION, is_active=True)
    if confirmation.approvers_group:
        users = users.filter(groups__name=confirmation.approvers_group)
    return users


def approvers(confirmation: Confirmation) -> list[Any]:
    """The active users who may decide ``confirmation`` and have an email address."""
    users = _eligible(confirmation).exclude(email="")
    return [user for user in users[:100] if can_decide(user, confirmation) is None]


def who_still_can(confirmation: Confirmation) -> list[str]:
    """The names of the people who may still approve ``confirmation`` (up to 20): none
    for a request its owner decides (its page says so)."""
    if _owner_consent(confirmation):
        return []
    return [str(user.get_username()) for user in _eligible(confirmation)[:100]
            if can_decide(user, confirmation) is None][:20]


def notify_approvers(confirmation: Confirmation) -> int:
    """Email each approver a new request: its summary and a link to its admin page,
    where they decide (a link never decides: approving is a POST on that page).

    Run by the ``guarded_tools.tasks.notify_approvers`` Celery task, after the request
    commits; a failure to send is logged, not raised."""
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
        summary = requested_summary(confirmation)
        who = confirmation.requester
        body = (f"{summary}\n\nRequested by {who} through {confirmation.tool}; it waits"
                f" until {timestamp(confirmation.expires_at)}.\n\n{_where(confirmation, path)}\n")
        subject = f"Approval requested: {summary}"[:150]
        return send_mass_mail([(subject, body, None, [email]) for email in recipients])
    except Exception:
        logger.exception("could not email approvers about confirmation %s", confirmation.pk)
        return 0


def _where(confirmation: Confirmation, path: str) -> str:
    """Where an approver decides: an absolute link on the host the site names
    (``CONSOLE_BASE_URL``), else directions in the admin (a relative link opens nothing)."""
    link = hosts.site_url(path)
    if link is not None:
        return f"Decide on its page: {link}"

    place = (f"{apps.get_app_config('guarded_tools').verbose_name} >"
             f" {confirmation._meta.verbose_name_plural}".title())
    return f"Decide on its page in the Django admin: {place}, request {confirmation.pk}."


def retry_after() -> int:
    """The seconds a caller waits before asking again about a request a person decides."""
    return int(gt_settings.CONFIRMATION_RETRY_AFTER_SECONDS)


def _owner_consent(confirmation: Confirmation) -> bool:
    if asks_the_owner(confirmation):  # a policy's Owner() rule
        return True
    definition = registry.find(confirmation.tool)
    return definition is not None and definition.owner_consent


def owner_decides(confirmation: Confirmation) -> bool:
    """Whether only the user the call acts for decides ``confirmation`` (on its consent
    page): no staff member can. A ``confirm="owner"`` tool's request, or one a policy's
    ``Owner()`` rule asked."""
    return _owner_consent(confirmation)


def error_for(confirmation: Confirmation, request: Any = None) -> GuardError:
    """What the agent is told about ``confirmation``: pending, declined or expired.

    A pending ``confirm="owner"`` request carries ``confirmation.url``, the page where the
    user approves it, in the error and in its message (some hosts show only the message).
    """
    summary = {"confirmation": describe(confirmation)}
    if confirmation.status == ConfirmationStatus.PENDING:
        headers = {"Retry-After": str(retry_after())}
        if not _owner_consent(confirmation):
            return ConfirmationRequired(
                pending_message(confirmation), why=pending_why(confirmation), extra=summary,
                headers=headers,
            )
        url = consent_url(request, confirmation)
        summary["confirmation"]["url"] = url
        rule = (f"The approval policy's rule \"{confirmation.policy_rule}\" applies: "
                if confirmation.policy_rule else "")
        return ConfirmationRequired(
            f"{rule}The user must approve this call themself, signed in to the site at {url} ;"
            " nothing has run yet.",
            why=pending_why(confirmation) or "This tool asks the user it acts for to approve"
            " each call themself, on a page of the site where they are signed in; nobody else"
            " can approve it for them. Nothing has run yet.",
            fix="Give the user the URL in confirmation.url to open; once they have"
            " approved there, repeat the identical call.{keep_key}",
            repair={"action": "retry_same_operation", "instruction": "Ask the user to open"
                    " the URL in confirmation.url and approve there, then repeat this exact"
                    " call with unchanged input.{no_new_key}"},
            extra=summary, headers=headers,
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
    if confirmation.status == ConfirmationStatus.WITHDRAWN:
        return ConfirmationError(
            "The agent withdrew this call before it ran; nothing ran.",
            repair={"action": "ask_user", "instruction": "Ask the user whether the operation"
                    " is still wanted before calling again."},
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
    """Why ``user`` may not decide ``confirmation``, or None when they may.

    A ``confirm="owner"`` request is decided by the user it was made for alone, in their
    own session on the consent page: no staff member, and no client, can stand in.
    """
    if _owner_consent(confirmation):
        if (not getattr(user, "is_authenticated", False)
                or confirmation.requested_by_id is None
                or confirmation.requested_by_id != user.pk):
            return "Only the user this call acts for may approve or decline it, on its page."
        return None
    if not getattr(user, "is_authenticated", False) or not user.has_perm(APPROVE_PERMISSION):
        return "You do not have permission to approve or decline confirmations."
    requester = confirmation.requested_by_id is not None and (
        confirmation.requested_by_id == user.pk)
    # CONFIRMATION_ALLOW_SELF_APPROVAL is for a tool's plain confirmation ("always",
    # "effect-only"); a policy's Approvers(n) are never the requester.
    if requester and (confirmation.policy_rule
                      or not gt_settings.CONFIRMATION_ALLOW_SELF_APPROVAL):
        return "You cannot decide a confirmation you requested yourself (four-eyes rule)."
    return _rule_refusal(user, confirmation)


def _rule_refusal(user: Any, confirmation: Confirmation) -> str | None:
    """Why the policy's rule keeps ``user`` from approving (already approved, not in the
    rule's group, without its permission), or None."""
    if any(given.get("id") == user.pk for given in confirmation.approvals):
        return ("You approved this request already; another person must give the next"
                " approval.")
    if confirmation.approvers_group and not user.groups.filter(
            name=confirmation.approvers_group).exists():
        return f"Only members of {confirmation.approvers_group} may approve this request."
    if confirmation.approvers_permission and not user.has_perm(
            confirmation.approvers_permission):
        return "You do not hold the permission this request's policy rule asks of approvers."
    return None


def _decide(
    confirmation: Confirmation, user: Any, *, approved: bool, reason: str, verified_by: str = ""
) -> Confirmation:
    """Decide the request as its row stands now, under its row lock: a page (or an object)
    read earlier may show fewer approvals required than the row asks since. Two people
    deciding at once produce exactly one decision; an approval of several is recorded
    and the request stays pending."""
    using = router.db_for_write(Confirmation)
    with transaction.atomic(using=using):
        row = Confirmation.objects.using(using).select_for_update().filter(
            pk=confirmation.pk).annotate(open=Q(
                status=ConfirmationStatus.PENDING, expires_at__gt=Now())).first()
        refusal = can_decide(user, row) if row is not None else None
        if refusal:
            raise DecisionRefused(refusal)
        if row is None or not row.open:
            raise DecisionRefused("This confirmation is no longer pending.")
        given = [*row.approvals, _approval_by(user)] if approved else []
        if approved and len(given) < row.approvals_required:
            _one_of_several(row, user, reason, given, using)
        else:
            _final(row, user, approved=approved, reason=reason, verified_by=verified_by,
                   given=given, using=using)
    confirmation.refresh_from_db(using=using)
    if confirmation.status != ConfirmationStatus.PENDING:
        signals.confirmation_decided.send(
            sender=Confirmation, confirmation=confirmation, decided_by=user, approved=approved
        )
    return confirmation


def _final(row: Confirmation, user: Any, *, approved: bool, reason: str, verified_by: str,
           given: list[Any], using: str) -> None:
    """Approve (the last approval needed) or decline the locked ``row``."""
    status = ConfirmationStatus.APPROVED if approved else ConfirmationStatus.DECLINED
    changes: dict[str, Any] = {"status": status, "decided_by": user, "decided_at": Now(),
                               "reason": reason}
    if approved and row.approvals_required > 1:
        changes["approvals"] = given
    if approved:  # an approval lasts its own time, from now
        changes["expires_at"] = db_now_plus(gt_settings.CONFIRMATION_APPROVAL_TTL_SECONDS)
    # Compare-and-set as well as the lock (SQLite has no row locks).
    updated = Confirmation.objects.using(using).filter(
        pk=row.pk, status=ConfirmationStatus.PENDING, expires_at__gt=Now(),
        approvals_required=row.approvals_required,
    ).update(**changes)
    if not updated:
        raise DecisionRefused("This confirmation is no longer pending.")
    asked_until = row.expires_at
    row.refresh_from_db(using=using)  # as decided
    several = approvals_text(row) if approved and row.approvals_required > 1 else None
    AuditEntry.objects.using(using).create(
        actor=user,
        action=AuditEntry.Action.APPROVE if approved else AuditEntry.Action.DECLINE,
        confirmation_id=row.pk,
        operation_id=row.operation_id,
        note=reason,
        status=status,
        data={"tool": row.tool, "key": row.key,
              "summary": requested_summary(row),
              **({"rule": row.policy_rule, "policy_version": row.policy_version}
                 if row.policy_rule else {}),
              **({"approvals": several} if several else {}),
              # What the request waited until: a rule asking more at the run gives it back.
              **({"request_expires_at": asked_until} if approved else {}),
              **({"verified_by": verified_by} if verified_by else {})},
    )
    if row.operation_id is not None:
        record(row.operation_id, Kind.CONFIRMATION_APPROVED if approved
               else Kind.CONFIRMATION_DECLINED, user, reason=reason or None, approvals=several)
        if not approved:  # its released claim no longer waits: it is declined
            _no_longer_waiting(row, ReleaseReason.DECLINED)
    verb = "Approved" if approved else "Declined"
    if verified_by:  # how the person proved it was them, as the audit row says
        verb += f" (verified by {verified_by})"
    record_in_admin_history(user, row, f"{verb}: {reason}" if reason else verb)
    # ``task`` as committed now (read under the row's lock): a task that began to wait
    # since the page was read is run too (see hold_for_task).
    if approved and runs_when_approved(row):
        pk = str(row.pk)
        transaction.on_commit(lambda: enqueue("ENQUEUE_EXECUTE_APPROVED", pk), using=using)


def _approval_by(user: Any) -> dict[str, Any]:
    return {"id": user.pk, "label": str(user.get_username()), "at": timestamp(timezone.now())}


def _one_of_several(row: Confirmation, user: Any, note: str, given: list[Any],
                    using: str) -> None:
    """Record one approval of the locked ``row`` that needs more: audited, in the admin's
    history and on its operation's timeline; the request stays pending."""
    row.approvals = given
    row.save(update_fields=["approvals"])
    AuditEntry.objects.using(using).create(
        actor=user, action=AuditEntry.Action.APPROVE, confirmation_id=row.pk,
        operation_id=row.operation_id, note=note, status=ConfirmationStatus.PENDING,
        data={"tool": row.tool, "key": row.key, "rule": row.policy_rule,
              "policy_version": row.policy_version, "approvals": approvals_text(row)})
    if row.operation_id is not None:
        record(row.operation_id, Kind.CONFIRMATION_APPROVED, user, reason=note or None,
               approvals=approvals_text(row))
    record_in_admin_history(user, row, f"Approved ({approvals_text(row)})")


def runs_on_approval(tool_name: str) -> bool:
    """Whether an approval of this tool's call runs it at once (``EXECUTE_ON_APPROVAL``).

    Only ``effect-only`` tools: their agent's retry replays what the approval ran. An
    ``always`` tool asks again for every invocation, the retry included, so running it
    here would use up the approval and the agent would be asked again for a call that
    already ran; its approval waits for the agent's own retry instead.
    """
    if not gt_settings.EXECUTE_ON_APPROVAL:
        return False
    definition = registry.find(tool_name)
    return definition is not None and definition.confirm_mode in ("effect-only", "policy")


def asks_in_the_pipeline(tool_name: str) -> bool:
    """Whether the tool's pipeline itself asks for (and consumes) a queued approval."""
    definition = registry.find(tool_name)
    return definition is not None and definition.queued_confirmation


def runs_when_approved(confirmation: Confirmation) -> bool:
    """Whether approving ``confirmation`` runs its call at once, on Celery.

    Yes for ``EXECUTE_ON_APPROVAL`` (:func:`runs_on_approval`), and for every call an
    MCP task waits on: its client polls ``tasks/get`` instead of calling again, so
    nothing else would run it.
    """
    if confirmation.task:
        return True
    # A request its owner decides runs on the agent's retry, as a confirm="owner" tool's.
    return runs_on_approval(confirmation.tool) and not asks_the_owner(confirmation)


def hold_for_task(confirmation_id: Any) -> Confirmation | None:
    """Mark a pending confirmation as awaited by an MCP task (its approval runs the call).

    An approval that came first, while no task waited on it, is run now instead.
    """
    using = router.db_for_write(Confirmation)
    Confirmation.objects.using(using).filter(pk=confirmation_id, task=False).update(task=True)
    current = Confirmation.objects.using(using).filter(pk=confirmation_id).first()
    if current is not None and current.status == ConfirmationStatus.APPROVED and not (
        runs_on_approval(current.tool)
    ):
        enqueue("ENQUEUE_EXECUTE_APPROVED", str(current.pk))
    return current


def withdraw(confirmation: Confirmation, user: Any, note: str) -> bool:
    """Withdraw a request whose call has not started (pending, or approved and unused).

    Compare-and-set: a decision or an execution that wins the race makes this False.
    The agent's own act, recorded in the audit trail as a person's decisions are; the
    key is free again (a later call with it asks anew).
    """
    using = router.db_for_write(Confirmation)
    with transaction.atomic(using=using):
        withdrawn = Confirmation.objects.using(using).filter(
            pk=confirmation.pk,
            status__in=[ConfirmationStatus.PENDING, ConfirmationStatus.APPROVED],
        ).update(status=ConfirmationStatus.WITHDRAWN, reason=note)
        if withdrawn:
            _no_longer_waiting(confirmation, ReleaseReason.WITHDRAWN)
            AuditEntry.objects.using(using).create(
                actor=user_row(user),
                action=AuditEntry.Action.WITHDRAW,
                confirmation_id=confirmation.pk,
                note=note,
                data={"tool": confirmation.tool, "key": confirmation.key},
            )
    if withdrawn:
        confirmation.status = ConfirmationStatus.WITHDRAWN
    return bool(withdrawn)


def _no_longer_waiting(confirmation: Confirmation, reason: ReleaseReason) -> None:
    """The claim released while ``confirmation`` waited is released for ``reason`` now."""
    if confirmation.operation_id is not None:
        Operation.objects.using(router.db_for_write(Operation)).filter(
            pk=confirmation.operation_id).waiting_for_approval().update(release_reason=reason)


def approve(confirmation: Confirmation, user: Any, note: str = "", *,
            verified_by: str = "") -> Confirmation:
    """Approve a pending, unexpired confirmation (``approve_confirmation`` required).

    ``verified_by`` says how the person was verified at the moment of deciding (the
    consent page's step-up: ``"password"``, …); the audit row and the admin history keep it.
    """
    return _decide(confirmation, user, approved=True, reason=note, verified_by=verified_by)


def decline(confirmation: Confirmation, user: Any, reason: str, *,
            verified_by: str = "") -> Confirmation:
    """Decline a pending, unexpired confirmation with a reason for the audit trail."""
    if not reason.strip():
        raise DecisionRefused("A reason is required to decline.")
    return _decide(confirmation, user, approved=False, reason=reason, verified_by=verified_by)


def execute(confirmation: Confirmation) -> Any:
    """Run an approved call now, as its requester, with its stored input and key.

    As a replay would: the credential it was requested with must still stand and its
    user be active (``CredentialRevoked`` otherwise), then the pipeline checks the
    permissions, the token's scopes and ``authorize`` before anything runs.
    """
    definition = registry.get(confirmation.tool)
    token = live_credential(confirmation)  # then permissions, scopes, authorize: the pipeline's
    header_key = None if definition.key_field else confirmation.key
    return definition(
        confirmation.input, user=confirmation.requested_by, idempotency_key=header_key,
        credential=token,
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
