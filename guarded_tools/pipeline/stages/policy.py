"""Provides the policy stage: the tool's approval policy decides how the call may run.

Before the claim, on every call: the first rule that holds for the input, the caller and
the caller's recent history decides. ``Refuse`` answers its catalog error now, naming the
rule; ``Run`` and ``Approvers`` are kept on the call for the confirmation stage, which asks
the people after a fresh claim (a replay asks nobody).
"""

from __future__ import annotations

from guarded_tools.core.errors import GuardError
from guarded_tools.core.policy import Policy, Refuse
from guarded_tools.models import Operation
from guarded_tools.pipeline.stages.base import Call, Stage


class PolicyStage(Stage):
    """The tool's ``Policy`` (``confirm=Policy(...)``) decides; other tools pass through."""

    name = "policy"

    def before_claim(self, call: Call) -> None:
        policy = self.tool.confirm
        if not isinstance(policy, Policy):
            return
        inv = call.inv
        # Lazy: only a rule that reads the history queries it.
        history = Operation.objects.filter(tool=self.tool.name, scope=inv.scope)
        rule = policy.decide(input=inv.input, user=inv.user, history=history)
        call.rule = rule
        call.events.emit("policy_decided", extra={"rule": rule.label, "version": policy.version})
        if isinstance(rule.outcome, Refuse):
            raise GuardError(
                f"The tool's approval policy refuses this call (rule: {rule.label}); nothing"
                " ran.",
                code=rule.outcome.code, repair=rule.outcome.repair or {
                    "action": "ask_user", "instruction": "Tell the user the site's policy"
                    f" refuses this call ({rule.label}) and ask what they want instead."},
                extra={"policy": {"rule": rule.label, "version": policy.version}},
            )
