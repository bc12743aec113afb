"""Provides signals a site connects to notify approvers (Slack, email, …)."""

from django.dispatch import Signal

__all__ = ["budget_alert", "confirmation_decided", "confirmation_requested"]

#: Sent with ``confirmation`` when a call starts waiting for a person's approval.
confirmation_requested = Signal()

#: Sent with ``confirmation``, ``decided_by`` and ``approved`` when a person decides.
confirmation_decided = Signal()

#: Sent with ``alert`` (a ``BudgetAlert``) when a principal reaches one of a budget's
#: thresholds in a window, once per threshold, window and principal, after it commits.
budget_alert = Signal()
