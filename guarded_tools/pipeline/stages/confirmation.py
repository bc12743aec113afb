"""Provides the confirmation stage: the tool's preconditions, then a person's (or a hook's) yes.

Mode ``always`` asks before the claim, on every call; ``effect-only`` and ``owner`` ask
after a fresh claim only, so a replay never asks. The tool's ``precheck`` (and, before a
confirmation asked after the claim, the input's own validation) runs first, so nobody is
asked to approve a call that cannot succeed; for a tool that confirms nothing it runs
right before the handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from guarded_tools.core.errors import ConfirmationError
from guarded_tools.core.policy import Approvers, Owner, Policy, Rule, Run
from guarded_tools.pipeline.stages.base import Call, Stage, decision
from guarded_tools.store import Claim

if TYPE_CHECKING:
    from guarded_tools.core.definition import Tool


class ConfirmationStage(Stage):
    """Preconditions and confirmation, before the claim or after a fresh one."""

    name = "confirmation"
    stateless = True

    @classmethod
    def has_work(cls, tool: Tool, hook: str) -> bool:
        if hook == "before_claim":
            return tool.confirm_mode == "always"  # the others are asked after the claim
        if hook == "after_claim":  # the preconditions, and a confirmation asked after the claim
            return tool.precheck is not None or tool.confirms_after_claim
        return True

    def before_claim(self, call: Call) -> None:
        if call.tool.confirm_mode == "always":
            self.preconditions(call)
            self.confirm(call)

    def after_claim(self, call: Call, claim: Claim | None) -> None:
        if call.tool.confirm_mode == "always" and not call.in_transaction:
            return  # checked before the claim (in the key's transaction, checked again)
        self.preconditions(call)
        if claim is not None and call.tool.confirms_after_claim:
            self.confirm(call, claim)

    def preconditions(self, call: Call) -> None:
        """The tool's business preconditions, before anyone is asked to confirm the call.

        ``precheck(input=, context=, user=)`` raises the tool's ``ToolError`` (with its
        repair) for a call that cannot succeed. Before a confirmation asked after the
        claim, the input's own validation (``Tool.input_check``: a serializer's, a
        model's, a published view's) runs first, without saving: a call it refuses
        answers ``invalid_input`` and no person is asked. It runs again, as always,
        right before the handler (what it looks up may change meanwhile).
        """
        inv, tool = call.inv, call.tool
        if tool.input_check is not None and tool.confirms_after_claim:
            tool.input_check(dict(inv.input), call.context_for(None))
        if tool.precheck is not None:
            tool.precheck(input=inv.input, context=inv.context, user=inv.user)

    def confirm(self, call: Call, claim: Claim | None = None) -> None:
        if isinstance(call.rule, Rule) and isinstance(call.rule.outcome, Run) and not (
                self.earlier_request(call)):
            return  # the policy runs it without a person (its rule is in the events)
        call.events.emit("confirmation_requested")
        if call.tool.queued_confirmation:
            self.queued(call, claim)
        else:
            self.asked(call)
        call.events.emit("confirmed")

    def queued(self, call: Call, claim: Claim | None) -> None:
        """A person decides, in the admin or on the consent page."""
        from guarded_tools.confirmations.queue import require_approval

        try:
            confirmation = require_approval(
                call.tool, call.inv, claim.operation.pk if claim is not None else None,
                policy=self.policy_fields(call))
        except ConfirmationError:
            call.events.emit("declined")
            raise
        if claim is not None:
            type(confirmation).objects.filter(pk=confirmation.pk).update(
                operation_id=claim.operation.pk)

    def policy_fields(self, call: Call) -> dict[str, Any] | None:
        """What the rule in force asks of the request: its name, version, approvals.

        The rule in force is the policy's for this call now, made stricter by a budget
        over its limit (the budget stage, under the counter's lock). A pending request
        is raised to it, and an approval not used yet is held against it at the run.
        """
        if not isinstance(call.tool.confirm, Policy) or not isinstance(call.rule, Rule):
            return None
        outcome = call.rule.outcome
        fields = {"policy_rule": call.rule.label, "policy_version": call.tool.confirm.version}
        if isinstance(outcome, Owner):
            # No staff approval: the user the call acts for decides (as confirm="owner").
            return {**fields, "approvals_required": 0}
        if not isinstance(outcome, Approvers):
            # A request kept from a stricter policy (see confirm): it asks what it asked;
            # a new one (that request used meanwhile) asks one approver.
            return fields
        return {**fields, "approvals_required": outcome.n,
                "approvers_group": outcome.group or "",
                "approvers_permission": outcome.permission or ""}

    def earlier_request(self, call: Call) -> bool:
        """Whether this call was asked of people already: a policy that runs it now
        without a person changed since, and the stricter outcome (the request's) applies."""
        from guarded_tools.confirmations.queue import open_request

        return open_request(call.tool, call.inv)

    def asked(self, call: Call) -> None:
        """The tool's ``confirm`` hook decides, now."""
        inv, hook = call.inv, call.tool.confirm
        request: Any = hook["request"] if isinstance(hook, Mapping) else hook
        assert callable(request)
        confirmed, reason = decision(
            request(input=inv.input, context=inv.context, user=inv.user,
                    signal=call.signal),
            "confirmed",
        )
        if not confirmed:
            call.events.emit("declined")
            raise ConfirmationError(
                "The call was declined." + (f" Reason: {reason}" if reason else ""),
                repair={"action": "ask_user", "instruction": "Ask the user how to proceed."},
            )
