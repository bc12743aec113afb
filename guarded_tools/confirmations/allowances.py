"""Provides allowances as people grant, suspend and revoke them, and as agents read them.

An allowance is granted by as many distinct people as the strictest rule of the tool's
policy that any call within its bounds would meet (:func:`requirement`), each of whom
could approve such a call; until then it is pending. Every grant, suspension and
revocation is audited and kept in the admin's history. The allowance stage
(:mod:`guarded_tools.pipeline.stages.allowance`) uses it for calls.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import router, transaction
from django.db.models.functions import Now
from django.utils import timezone

from guarded_tools.core.call import user_row
from guarded_tools.core.policy import Approvers, Owner, Policy, Refuse, Rule, Run
from guarded_tools.core.registry import registry
from guarded_tools.core.times import local_time, timestamp
from guarded_tools.models import (
    Allowance,
    AllowanceStatus,
    AuditEntry,
    Confirmation,
    ConfirmationStatus,
    record_in_admin_history,
)
from guarded_tools.store.allowances import remaining

APPROVE_PERMISSION = "guarded_tools.approve_confirmation"
#: Fractions of an allowance's amount bound at which its calls are tried against the
#: policy: a call within the bounds meets the strictest rule at one of them for the
#: usual rules (thresholds on the amount).
PROBES = (Decimal(1), Decimal("0.5"), Decimal("0.1"), Decimal("0.01"), Decimal(0))
#: The most combinations of constrained values tried.
MOST_COMBINATIONS = 50

__all__ = ["GrantRefused", "Requirement", "grant", "like_request", "propose",
           "requirement", "revoke", "suspend", "takes_allowances", "words_for_agent"]


class GrantRefused(Exception):
    """A person may not grant (or revoke) this allowance, or its bounds cannot be granted."""


@dataclass(frozen=True)
class Requirement:
    """What granting an allowance needs: ``n`` distinct people (0: the owner), from
    ``group`` and holding ``permission`` when the rule names them; the rule that asks it."""

    n: int
    rule: str
    group: str = ""
    permission: str = ""
    #: Why it cannot be granted at all (a rule that does not take allowances), else "".
    problem: str = ""


def policy_of(tool: str) -> Policy | None:
    definition = registry.find(tool)
    policy = getattr(definition, "confirm", None)
    return policy if isinstance(policy, Policy) else None


def probes(allowance: Allowance, base: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Inputs within the allowance's bounds to try the policy on: ``base`` (the request's
    input, granting from its page) with each combination of constrained values and
    amounts from its bound down."""
    fields = sorted((allowance.constraints or {}).items())
    combos = list(itertools.islice(itertools.product(*[list(v) for _, v in fields]),
                                   MOST_COMBINATIONS)) if fields else [()]
    bounds = [b for b in (allowance.per_call, allowance.limit) if b is not None]
    amounts: list[Decimal | None] = [None]
    if allowance.sum_field:
        # No bound on the amount: a call may ask anything; try a very large one.
        bound = min(bounds) if bounds else Decimal("1e15")
        amounts = [(bound * f).quantize(Decimal("0.01")) for f in PROBES]
    found = []
    for combo in combos:
        for amount in amounts:
            input = {**dict(base), **{name: value for (name, _), value in zip(fields, combo,
                                                                               strict=True)}}
            if amount is not None:
                input[allowance.sum_field] = float(amount)
            found.append(input)
    return found


def requirement(allowance: Allowance, base: Mapping[str, Any] | None = None,
                policy: Policy | None = None) -> Requirement:
    """How many people must grant ``allowance``: the strictest rule any call within its
    bounds meets under the tool's policy now (refusing rules aside: those calls are
    refused anyway). A rule that cannot be told (its ``when`` raises on a probe) counts
    as the strictest rule that takes people."""
    policy = policy or policy_of(allowance.tool)
    if policy is None:
        return Requirement(0, "", problem="the tool has no approval policy")
    user = allowance.user if allowance.user_id is not None else None
    strictest: Rule | None = None
    for input in probes(allowance, base or {}):
        try:
            met = [policy.decide(input=input, user=user, history=_no_history())]
        except Exception:
            met = [rule for rule in policy.rules if not isinstance(rule.outcome, Refuse)]
        for rule in met:
            if isinstance(rule.outcome, Refuse):
                continue
            if strictest is None or rule.outcome.strictness > strictest.outcome.strictness:
                strictest = rule
    if strictest is None or isinstance(strictest.outcome, Run):
        return Requirement(0, strictest.label if strictest else "",
                           problem="calls within these bounds need nobody's approval")
    outcome = strictest.outcome
    if not getattr(outcome, "allowances", False):
        return Requirement(0, strictest.label, problem=f"the rule \"{strictest.label}\" does"
                           " not take allowances (Approvers(n, allowances=True))")
    if isinstance(outcome, Owner):
        return Requirement(0, strictest.label)
    assert isinstance(outcome, Approvers)
    return Requirement(outcome.n, strictest.label, outcome.group or "",
                       outcome.permission or "")


def like_request(confirmation: Confirmation, *, count: int | None = 5,
                 days: int = 30) -> Allowance:
    """An unsaved allowance for calls like ``confirmation``'s: its requester, its tool, its
    amount as the bound a call (the field the tool's budgets sum, else ``amount``), the
    other fields an approval binds (the tool's ``intent``, else its text fields) as the only
    values allowed, ``count`` calls a day, for ``days``."""
    from datetime import timedelta

    definition = registry.find(confirmation.tool)
    policy = getattr(definition, "confirm", None)
    sum_field = next((b.sum_field for b in policy.budgets if b.sum_field), "") if isinstance(
        policy, Policy) else ""
    if not sum_field and "amount" in confirmation.input:
        sum_field = "amount"
    key_field = getattr(definition, "key_field", None)
    value = confirmation.input.get(sum_field) if sum_field else None
    try:
        per_call = Decimal(str(value)) if value is not None else None
    except ArithmeticError:
        per_call = None
    # The fields an approval binds (the tool's ``intent``), else the text fields.
    intent = getattr(definition, "intent", None)
    constraints = {name: [value] for name, value in confirmation.input.items()
                   if name not in (key_field, sum_field) and (
                       name in intent if intent else isinstance(value, str))
                   and isinstance(value, str | int) and not isinstance(value, bool)}
    return Allowance(tool=confirmation.tool, user_id=confirmation.requested_by_id,
                     confirmation=confirmation, sum_field=sum_field, per_call=per_call,
                     count=count, window="day", constraints=constraints,
                     expires_at=timezone.now() + timedelta(days=days))


def _no_history() -> Any:
    from guarded_tools.models import Operation

    return Operation.objects.none()


def may_grant(user: Any, allowance: Allowance) -> str | None:
    """Why ``user`` may not grant ``allowance``, or None: a person who could approve a call
    within its bounds (the approve permission, the rule's group and permission), never
    for their own calls, and once each."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return "Sign in to grant allowances."
    if allowance.approvals_required == 0:  # the owner's own
        if allowance.user_id != user.pk:
            return "Only the user it is for may grant it, on the consent page."
        return None
    if not user.has_perm(APPROVE_PERMISSION):
        return "You do not have permission to approve these calls, so you cannot allow them."
    if allowance.user_id is not None and allowance.user_id == user.pk:
        return "You cannot grant an allowance for your own calls (four-eyes rule)."
    if allowance.group_id is not None and user.groups.filter(pk=allowance.group_id).exists():
        return "You cannot grant an allowance for a group you belong to (four-eyes rule)."
    if any(given.get("id") == user.pk for given in allowance.approvals):
        return "You granted it already; another person must give the next grant."
    if allowance.approvers_group and not user.groups.filter(
            name=allowance.approvers_group).exists():
        return f"Only members of {allowance.approvers_group} may grant it."
    if allowance.approvers_permission and not user.has_perm(allowance.approvers_permission):
        return "You do not hold the permission the policy's rule asks of approvers."
    return None


def still_may_grant(given: Mapping[str, Any], allowance: Allowance) -> bool:
    """Whether the person who gave ``given`` still holds what granting needed (active,
    the approve permission, the rule's group and permission)."""
    from django.contrib.auth import get_user_model

    pk: Any = given.get("id")
    user = get_user_model()._default_manager.filter(pk=pk, is_active=True).first()
    if user is None:
        return False
    if allowance.approvals_required == 0:
        return bool(user.pk == allowance.user_id)
    return user.has_perm(APPROVE_PERMISSION) and (
        not allowance.approvers_group
        or user.groups.filter(name=allowance.approvers_group).exists()) and (
        not allowance.approvers_permission or user.has_perm(allowance.approvers_permission))


def propose(allowance: Allowance, user: Any, *, base: Mapping[str, Any] | None = None,
            note: str = "", verified_by: str = "") -> Allowance:
    """Save a new ``allowance`` (its bounds set, not saved) with ``user``'s grant: active
    when one grant is enough, else pending for the others. ``base`` is the input of the
    request it is granted from (to try the policy on)."""
    policy = policy_of(allowance.tool)
    needed = requirement(allowance, base, policy)
    if needed.problem:
        raise GrantRefused(f"This allowance cannot be granted: {needed.problem}.")
    allowance.approvals_required = needed.n
    allowance.policy_rule = needed.rule[:300]
    allowance.policy_version = policy.version if policy is not None else ""
    allowance.approvers_group = needed.group
    allowance.approvers_permission = needed.permission
    allowance.status = AllowanceStatus.PENDING
    allowance.approvals = []
    allowance.note = note or allowance.note
    refusal = may_grant(user, allowance)
    if refusal:
        raise GrantRefused(refusal)
    using = router.db_for_write(Allowance)
    with transaction.atomic(using=using):
        allowance.created_by = user
        allowance.save(using=using)
        _grant(allowance, user, note, verified_by, using)
    allowance.refresh_from_db(using=using)
    if allowance.confirmation_id is not None:
        _approve_request(allowance, user, note)
    return allowance


def audit(action: str, allowance: Any, tool: str, *, actor: Any, status: str, note: str = "",
          using: str | None = None, operation_id: Any = None, confirmation_id: Any = None,
          **data: Any) -> AuditEntry:
    """The audit trail's entry for what happened to allowance ``allowance`` (its id) of
    ``tool``: granted, revoked, suspended, used by a call or given back. ``actor`` is the
    person (None: the system); a user object that is no row is kept without one. ``data``
    adds to the allowance's id and tool."""
    return AuditEntry.objects.using(using or router.db_for_write(AuditEntry)).create(
        actor=user_row(actor), action=action, note=note, status=status,
        operation_id=operation_id, confirmation_id=confirmation_id,
        data={"allowance": allowance, "tool": tool, **data})


def grant(allowance: Allowance, user: Any, note: str = "", *,
          verified_by: str = "") -> Allowance:
    """``user``'s grant of a pending (or suspended: granted again) ``allowance``, under its
    row's lock; the last grant it needs makes it active."""
    using = router.db_for_write(Allowance)
    with transaction.atomic(using=using):
        row = Allowance.objects.using(using).select_for_update().filter(
            pk=allowance.pk).first()
        if row is None or row.status not in (AllowanceStatus.PENDING,
                                             AllowanceStatus.SUSPENDED):
            raise GrantRefused("This allowance is not waiting for a grant.")
        if row.status == AllowanceStatus.SUSPENDED:
            # Granted again, under the policy as it is now, by as many people as it asks.
            policy = policy_of(row.tool)
            needed = requirement(row, None, policy)
            if needed.problem:
                raise GrantRefused(f"This allowance cannot be granted: {needed.problem}.")
            row.approvals_required, row.policy_rule = needed.n, needed.rule[:300]
            row.approvers_group, row.approvers_permission = needed.group, needed.permission
            row.policy_version = policy.version if policy is not None else ""
            row.approvals, row.status = [], AllowanceStatus.PENDING
            row.save(using=using)
        refusal = may_grant(user, row)
        if refusal:
            raise GrantRefused(refusal)
        _grant(row, user, note, verified_by, using)
    allowance.refresh_from_db(using=using)
    return allowance


def _grant(row: Allowance, user: Any, note: str, verified_by: str, using: str) -> None:
    given = [*row.approvals, {"id": user.pk, "label": str(user.get_username()),
                              "at": timestamp(timezone.now())}]
    done = len(given) >= max(row.approvals_required, 1)
    Allowance.objects.using(using).filter(pk=row.pk).update(
        approvals=given, status=AllowanceStatus.ACTIVE if done else AllowanceStatus.PENDING,
        status_reason="", **({"granted_at": Now()} if done else {}))
    row.refresh_from_db(using=using)
    audit(AuditEntry.Action.ALLOWANCE_GRANT, row.pk, row.tool, actor=user,
          status=row.status, note=note, using=using, confirmation_id=row.confirmation_id,
          principal=row.principal, bounds=bounds_text(row), rule=row.policy_rule,
          policy_version=row.policy_version,
          granted=f"{len(given)} of {max(row.approvals_required, 1)} grants given",
          **({"verified_by": verified_by} if verified_by else {}))
    record_in_admin_history(user, row, f"Granted ({len(given)} of"
                            f" {max(row.approvals_required, 1)})" + (f": {note}" if note else ""))


def _approve_request(allowance: Allowance, user: Any, note: str) -> None:
    """Granting from a request's page approves that request too, when it still waits and
    the person may decide it (its own rule asks no more than the allowance's)."""
    from guarded_tools.confirmations.queue import DecisionRefused, approve, can_decide

    pk: Any = allowance.confirmation_id
    request = Confirmation.objects.filter(pk=pk, status=ConfirmationStatus.PENDING).first()
    if request is None or can_decide(user, request) is not None:
        return
    try:
        approve(request, user, note or f"Granted allowance #{allowance.pk}")
    except DecisionRefused:
        pass


def revoke(allowance: Allowance, user: Any, note: str = "") -> bool:
    """Revoke ``allowance`` at once: the next call waits for a person. Anyone who may grant
    allowances of the tool (the approve permission) or the owner of their own may."""
    if not getattr(user, "is_authenticated", False) or not (
            user.has_perm(APPROVE_PERMISSION) or allowance.user_id == user.pk):
        raise GrantRefused("You do not have permission to revoke this allowance.")
    using = router.db_for_write(Allowance)
    with transaction.atomic(using=using):
        done = Allowance.objects.using(using).filter(pk=allowance.pk).exclude(
            status=AllowanceStatus.REVOKED).update(
            status=AllowanceStatus.REVOKED, revoked_by=user, revoked_at=Now(),
            status_reason=note)
        if done:
            audit(AuditEntry.Action.ALLOWANCE_REVOKE, allowance.pk, allowance.tool,
                  actor=user, status=AllowanceStatus.REVOKED, note=note, using=using,
                  principal=allowance.principal)
            record_in_admin_history(user, allowance, "Revoked" + (f": {note}" if note else ""))
    allowance.refresh_from_db(using=using)
    return bool(done)


def suspend(allowance: Allowance, why: str) -> bool:
    """Suspend an active ``allowance`` until people grant it again (audited, no actor)."""
    using = router.db_for_write(Allowance)
    done = Allowance.objects.using(using).filter(
        pk=allowance.pk, status=AllowanceStatus.ACTIVE).update(
        status=AllowanceStatus.SUSPENDED, status_reason=why)
    if done:
        audit(AuditEntry.Action.ALLOWANCE_SUSPEND, allowance.pk, allowance.tool, actor=None,
              status=AllowanceStatus.SUSPENDED, note=why, using=using,
              principal=allowance.principal)
        allowance.status = AllowanceStatus.SUSPENDED
    return bool(done)


def stopped(allowance: Allowance, policy: Policy | None) -> str | None:
    """Why ``allowance`` must stop now (and it is suspended), else None: a granter who
    lost what granting needed or was deactivated, or a policy version that asks more
    of calls within its bounds than was granted."""
    lost = [str(given.get("label") or given.get("id")) for given in allowance.approvals
            if not still_may_grant(given, allowance)]
    if lost:
        why = (f"{', '.join(lost)}, who granted it, may no longer approve these calls"
               " (permission removed or deactivated)")
        suspend(allowance, why)
        return why
    if policy is not None and policy.version != allowance.policy_version:
        needed = requirement(allowance, None, policy)
        if needed.problem or needed.n > allowance.approvals_required or (
                needed.group and needed.group != allowance.approvers_group) or (
                needed.permission and needed.permission != allowance.approvers_permission):
            why = (f"the policy's version {policy.version} asks more of these calls"
                   f" (rule \"{needed.rule}\") than version {allowance.policy_version},"
                   " under which it was granted")
            suspend(allowance, why)
            return why
    return None


def bounds(allowance: Allowance) -> list[str]:
    """Its bounds, one phrase each: "up to 5 calls and 300.00 per day", "at most 100.00
    a call", "receiverId in r-17" (its end aside)."""
    per = allowance.budget.per
    window = []
    if allowance.count is not None:
        window.append(f"{allowance.count} calls")
    if allowance.limit is not None:
        window.append(f"{allowance.limit:.2f}")
    phrases = [f"up to {' and '.join(window)} per {per}"]
    if allowance.per_call is not None:
        phrases.append(f"at most {allowance.per_call:.2f} a call")
    for field, allowed in sorted((allowance.constraints or {}).items()):
        phrases.append(f"{field} in {', '.join(str(v) for v in allowed)}")
    return phrases


def bounds_text(allowance: Allowance) -> str:
    """Its bounds in words: "up to 5 calls and 300.00 per day, at most 100.00 a call,
    receiverId in r-17, until 2026-12-31 23:59:59 UTC"."""
    return ", ".join([*bounds(allowance), f"until {until(allowance.expires_at)}"])


def until(when: datetime) -> str:
    """When an allowance ends, as the console shows every time: in the current time zone,
    to the second, with the zone ("2026-12-31 23:59:59 UTC")."""
    return local_time(when)


def left_text(allowance: Allowance, now: datetime | None = None) -> str:
    """What is left now: "2 calls and 300.00 left this day". Counted in one query, or
    in none for an allowance read ``with_use`` in the same window."""
    calls, left = remaining(allowance, now or timezone.now())
    parts = []
    if calls is not None:
        parts.append(f"{calls} call{'s' if calls != 1 else ''}")
    if left is not None:
        parts.append(f"{left:.2f}")
    per = allowance.budget.per
    today = {"day": "today", "week": "this week", "month": "this month"}.get(per, f"this {per}")
    return f"{' and '.join(parts)} left {today}"


def takes_allowances(policy: Any) -> bool:
    """Whether a rule of ``policy`` takes allowances."""
    return isinstance(policy, Policy) and any(
        isinstance(rule.outcome, Approvers | Owner) and rule.outcome.allowances
        for rule in policy.rules)


def words_for_agent(definition: Any, user: Any, application: str = "") -> list[str]:
    """What the caller's active allowances of the tool let run without approval, one
    sentence each, for ``tools/list`` (none for a tool whose rules take none)."""
    if not takes_allowances(getattr(definition, "confirm", None)):
        return []
    now = timezone.now()
    found = Allowance.objects.active().for_principal(user, application).filter(
        tool=definition.name).with_use(now)
    return [f"Runs without approval under your allowance #{a.pk} ({bounds_text(a)}):"
            f" {left_text(a, now)}, until {until(a.expires_at)}." for a in found[:5]]
