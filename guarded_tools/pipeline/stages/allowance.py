"""Provides the allowance stage: a call within a standing approval runs without asking.

After a fresh claim, after the budgets (which still apply: an over-budget call meets its
budget's rule, which no allowance stands in for) and before the confirmation stage asks
anyone: when the rule in force takes allowances (``Approvers(n, allowances=True)``,
``Owner(allowances=True)``), the caller's active allowances of the tool are tried in
turn. One whose bounds the call fits, granted by as many people as the rule asks, is
used under its counter's lock (``guarded_tools.store.allowances.use``) and the call
runs as its rule were ``Run()``: the operation's timeline says "ran under allowance #12,
granted by approver and approver2", and the audit trail keeps the use. A call past
every allowance takes the rule's normal path, its rule's name saying which limit it
passed (the 202 carries it). A released claim gives its use back (``on_release``), once.

Before its use an allowance is checked against the people who granted it (still active,
still allowed to approve) and, when the tool's policy has a new version, against what
that version asks of calls within its bounds: either failing suspends it at that call.

Events: ``allowance_used``, ``allowance_passed`` (it did not cover the call; ``extra``
says why), ``allowance_stopped`` (suspended at this call), ``allowance_returned``.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.db import router

from guarded_tools.confirmations import allowances
from guarded_tools.core.policy import Approvers, Owner, Policy, Rule, Run
from guarded_tools.models import Allowance, AuditEntry
from guarded_tools.models.allowances import amount_of
from guarded_tools.pipeline.stages.base import Call, Stage
from guarded_tools.store import Claim
from guarded_tools.store.allowances import give_back, use
from guarded_tools.store.history import Kind, actor_label, record

if TYPE_CHECKING:
    from guarded_tools.core.definition import Tool

__all__ = ["AllowanceStage", "application_of"]


def application_of(inv: Any) -> str:
    """The client id of the OAuth application the call came through ("" for none)."""
    token = getattr(getattr(inv, "request", None), "auth", None) or getattr(
        inv, "credential", None)
    application = getattr(token, "application", None)
    return str(getattr(application, "client_id", "") or "")


def rule_takes_allowances(rule: Any) -> bool:
    return isinstance(rule, Rule) and isinstance(rule.outcome, Approvers | Owner) and bool(
        rule.outcome.allowances)


def covers(allowance: Allowance, rule: Rule, inv: Any) -> str | None:
    """Why ``allowance``'s grant does not stand in for what ``rule`` asks, else None."""
    outcome = rule.outcome
    if isinstance(outcome, Owner):
        if allowance.approvals_required != 0 or allowance.user_id != getattr(
                inv.user, "pk", None):
            return "the call's rule asks its owner, who did not grant it"
        return None
    assert isinstance(outcome, Approvers)
    if allowance.approvals_required < outcome.n:
        return (f"the call's rule \"{rule.label}\" asks {outcome.n} approvers; it was granted"
                f" by {allowance.approvals_required}")
    if (outcome.group and outcome.group != allowance.approvers_group) or (
            outcome.permission and outcome.permission != allowance.approvers_permission):
        return f"the call's rule \"{rule.label}\" asks other approvers"
    return None


class AllowanceStage(Stage):
    """Allowances granted for the tool's calls (see the module)."""

    name = "allowance"
    stateless = True

    @classmethod
    def has_work(cls, tool: Tool, hook: str) -> bool:
        if hook in ("after_claim", "on_release"):
            # Only a policy's rules (its budgets' included) can take allowances.
            return isinstance(tool.confirm, Policy)
        return True

    def after_claim(self, call: Call, claim: Claim | None) -> None:
        rule = call.rule
        if not rule_takes_allowances(rule):
            return
        policy = call.tool.confirm if isinstance(call.tool.confirm, Policy) else None
        inv = call.inv
        # The call's clock, as the budgets': its windows are the budgets' windows.
        now = call.now(claim)
        found = list(Allowance.objects.using(router.db_for_write(Allowance)).active(now)
                     .for_principal(inv.user, application_of(inv))
                     .filter(tool=call.tool.name).with_use(now).order_by("pk"))
        passed: list[str] = []
        for allowance in found:
            why = allowance.refuses(inv.input) or covers(allowance, rule, inv)
            if why is None:
                stop = allowances.stopped(allowance, policy)
                if stop is not None:
                    call.events.emit("allowance_stopped",
                                     extra={"allowance": allowance.pk, "why": stop})
                    why = f"it was suspended: {stop}"
            if why is None:
                amount = (amount_of(inv.input, allowance.sum_field) or Decimal(0)
                          if allowance.sum_field else Decimal(0))
                operation_id = claim.operation.pk if claim is not None else None
                why = use(allowance, now, amount, operation_id)
                if why is None:
                    self.ran_under(call, claim, allowance, amount)
                    return
            passed.append(f"allowance #{allowance.pk}, {allowances.left_text(allowance, now)}"
                          f" until {allowances.until(allowance.expires_at)}: {why}")
            call.events.emit("allowance_passed", extra={"allowance": allowance.pk, "why": why})
        if passed:
            # The rule's normal path; its name says which limit the call passed (the 202).
            named = f"{rule.label} (past {'; '.join(passed)})"[:300]
            call.rule = dataclasses.replace(rule, name=named)

    def ran_under(self, call: Call, claim: Claim | None, allowance: Allowance,
                  amount: Decimal) -> None:
        inv = call.inv
        said = f"ran under allowance #{allowance.pk}, granted by {allowance.granters}"
        call.rule = Rule(outcome=Run(), name=f"allowance #{allowance.pk}", description=said)
        call.events.emit("allowance_used", extra={"allowance": allowance.pk,
                                                  "granted_by": allowance.granters})
        operation_id = claim.operation.pk if claim is not None else None
        allowances.audit(AuditEntry.Action.ALLOWANCE_USE, allowance.pk, allowance.tool,
                         actor=inv.user, status="used", note=said, operation_id=operation_id,
                         amount=str(amount), granted_by=allowance.granters, key=inv.key or "")
        if operation_id is not None:
            record(operation_id, Kind.ALLOWANCE_USED, actor_label(inv.user, agent=True),
                   allowance=allowance.pk, said=said, granted_by=allowance.granters,
                   amount=str(amount) if allowance.sum_field else None)

    def on_release(self, call: Call, claim: Claim) -> None:
        if not allowances.takes_allowances(call.tool.confirm):
            return
        returned = give_back(claim.operation.pk)
        for pk in returned:
            call.events.emit("allowance_returned", extra={"allowance": pk})
            allowances.audit(
                AuditEntry.Action.ALLOWANCE_RETURN, pk, call.tool.name, actor=None,
                status="returned", operation_id=claim.operation.pk,
                note=f"gave back its use of allowance #{pk} (released without its effect)")
            record(claim.operation.pk, Kind.ALLOWANCE_RETURNED, "", allowance=pk,
                   said=f"gave back its use of allowance #{pk}")
