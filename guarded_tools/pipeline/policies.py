"""Provides approval policies for ``confirm=`` (defined in ``guarded_tools.core.policy``)."""

from guarded_tools.core.policy import Approvers, Budget, Owner, Policy, Refuse, Rule, Run, stricter

__all__ = ["Approvers", "Budget", "Owner", "Policy", "Refuse", "Rule", "Run", "stricter"]
