"""Provides the approvals service: people's decisions on what agents asked to do.

A call that needs a person's approval opens a request in the queue (``queue``), which
says what it is bound to and who asks (``requests``) and how it reads to people
(``presentation``). A site's own approval screen decides through :func:`approve` and
:func:`decline`, with the admin's permission and four-eyes checks (:func:`can_decide`).
"""

from guarded_tools.confirmations.queue import DecisionRefused, approve, can_decide, decline

__all__ = ["DecisionRefused", "approve", "can_decide", "decline"]
