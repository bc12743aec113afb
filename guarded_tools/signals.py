"""Provides signals a site connects to notify approvers (Slack, email, …)."""

from django.dispatch import Signal

__all__ = ["confirmation_decided", "confirmation_requested"]

#: Sent with ``confirmation`` when a call starts waiting for a person's approval.
confirmation_requested = Signal()

#: Sent with ``confirmation``, ``decided_by`` and ``approved`` when a person decides.
confirmation_decided = Signal()
