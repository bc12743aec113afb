"""Provides the policy stage: the tool's approval policy decides how the call may run.

Before the claim, on every call: the first rule that holds for the input, the caller and
the caller's recent history decides. ``Refuse`` answers its catalog error now, naming the
rule; ``Run``, ``Owner`` and ``Approvers`` are kept on the call for the confirmation stage,
which asks the people after a fresh claim (a replay asks nobody).

Replays do not re-decide: a call whose key already names an operation that was not released
(completed, in flight, waiting for recovery) is not refused here, even by a rule that would
refuse it now; the claim answers it (its stored result, in flight, recovery, or key reuse),
and nothing new runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import router

from guarded_tools.core.errors import GuardError
from guarded_tools.core.policy import Policy, Refuse
from guarded_tools.models import Operation, OperationState
from guarded_tools.pipeline.stages.base import Call, Stage

if TYPE_CHECKING:
    from guarded_tools.core.definition import Tool


class PolicyStage(Stage):
    """The tool's ``Policy`` (``confirm=Policy(...)``) decides; other tools pass through."""

    name = "policy"
    stateless = True

    @classmethod
    def has_work(cls, tool: Tool, hook: str) -> bool:
        if hook == "before_claim":
            return isinstance(tool.confirm, Policy)  # no approval policy: nothing to decide
        return True

    def before_claim(self, call: Call) -> None:
        policy = call.tool.confirm
        if not isinstance(policy, Policy):
            return
        inv = call.inv
        # Lazy: only a rule that reads the history queries it.
        history = Operation.objects.filter(tool=call.tool.name, scope=inv.scope)
        rule = policy.decide(input=inv.input, user=inv.user, history=history)
        call.rule = rule
        call.events.emit("policy_decided", extra={"rule": rule.label, "version": policy.version})
        if isinstance(rule.outcome, Refuse) and not self.claimed_before(call):
            raise GuardError(
                f"The tool's approval policy refuses this call (rule: {rule.label}); nothing"
                " ran.",
                code=rule.outcome.code, repair=rule.outcome.repair or {
                    "action": "ask_user", "instruction": "Tell the user the site's policy"
                    f" refuses this call ({rule.label}) and ask what they want instead."},
                extra={"policy": {"rule": rule.label, "version": policy.version}},
            )

    def claimed_before(self, call: Call) -> bool:
        """Whether the call's key names an earlier operation the claim answers without
        running anything new (a replay, from this process's cache or the database)."""
        inv = call.inv
        if call.remembered is not None:
            return True
        if not call.tool.idempotent or not inv.key:
            return False
        return Operation.objects.using(router.db_for_write(Operation)).filter(
            tool=call.tool.name, scope=inv.scope, key=inv.key,
        ).exclude(state=OperationState.RELEASED).exists()
