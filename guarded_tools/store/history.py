"""Provides ``record``: an operation's history, one append-only row per event.

Every transition writes its event where it happens (the store's transitions, recovery,
reconciliation, confirmations' decisions); the console's timeline reads only these rows,
ordered by their id (the recording order), so an event never disappears and events of
the same second keep their order. Writing an event never undoes the transition it
records: a failure is logged, not raised.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from django.db import router
from django.utils import timezone

from guarded_tools.models import OperationEvent

logger = logging.getLogger("guarded_tools")

Kind = OperationEvent.Kind
#: Each string value in an event's details is cut to this many characters.
TEXT_LIMIT = 1000
#: An event keeps at most this many details.
DETAILS_LIMIT = 20


def actor_label(user: Any, *, agent: bool = False) -> str:
    """Who did it, as the timeline's WHO column says it: a person's name, or an agent and
    the user it acts for, ``agent (for user alice)`` (never "agent agent" for a user named
    agent)."""
    if user is None or getattr(user, "pk", None) is None:
        return "agent (anonymous)" if agent else ""
    name = str(user.get_username() if hasattr(user, "get_username") else user)
    return f"agent (for user {name})"[:200] if agent else name[:200]


def _bounded(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return value if len(value) <= TEXT_LIMIT else value[:TEXT_LIMIT - 1] + "…"
    if depth > 4:
        return "…"
    if isinstance(value, dict):
        return {str(k)[:100]: _bounded(v, depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, (list, tuple)):
        return [_bounded(v, depth + 1) for v in value[:50]]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _bounded(str(value), depth)


class Event(NamedTuple):
    """An event not written yet: the values of an ``OperationEvent`` row, by attname.

    The store's statements insert it as it is (each value prepared by its field); the
    ORM's path makes it a row (``row()``). Not a model instance: a call builds two or
    three of them, and a model's ``__init__`` costs more than the rest of an event.
    """

    operation_id: Any
    at: datetime
    kind: str
    actor: str
    fence: int | None
    details: dict[str, Any]

    def row(self) -> OperationEvent:
        """The unsaved row."""
        return OperationEvent(**self._asdict())


def event(operation: Any, kind: str, actor: Any = None, *, fence: int | None = None,
          **details: Any) -> Event:
    """An event of ``operation`` (a row or its id) happening now, its details bounded."""
    operation_id = getattr(operation, "pk", operation)
    who = actor if isinstance(actor, str) else actor_label(actor)
    kept = {k: _bounded(v) for k, v in list(details.items())[:DETAILS_LIMIT]
            if v is not None} if details else {}
    return Event(operation_id, timezone.now(), kind, who[:200], fence, kept)


def record_all(events: Iterable[Event]) -> None:
    """Insert ``events`` in their order, in one statement."""
    rows = [e.row() for e in events]
    if not rows:
        return
    try:
        OperationEvent.objects.using(router.db_for_write(OperationEvent)).bulk_create(rows)
    except Exception:  # the record of a transition never undoes the transition
        logger.exception("could not record %d event(s) of operation %s", len(rows),
                         rows[0].operation_id)


def record(operation: Any, kind: str, actor: Any = None, **details: Any) -> None:
    """Append one event to ``operation``'s history (``fence=`` names the attempt)."""
    record_all([event(operation, kind, actor, **details)])
