"""Provides a call's lifecycle events, sent to the tool's and the site's observers.

``Pipeline.observe(inv)`` gives a call its ``Events``; recovery and MCP Tasks take theirs
from there. An observer's error is logged and contained: it never changes the answer.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from guarded_tools.conf import gt_settings
from guarded_tools.core.call import GuardEvent, Invocation

if TYPE_CHECKING:
    from guarded_tools.core.definition import Tool

logger = logging.getLogger("guarded_tools")


class Events:
    """A call's lifecycle events, to the tool's and the site's observers; contains their errors.

    ``Pipeline.observe(inv)`` gives one (``silent``: one that tells nobody, for a read of a
    call's state); recovery and MCP Tasks take theirs from there.
    """

    def __init__(
        self, definition: Tool, inv: Invocation | None = None, *, silent: bool = False
    ) -> None:
        self.tool = definition
        self.transport = inv.transport if inv is not None else ""
        self.trace: Mapping[str, str] = inv.trace if inv is not None else {}
        self.sinks: list[Callable[[GuardEvent], Any]] = [] if silent else [
            s for s in [definition.observe, *gt_settings.OBSERVERS] if s is not None
        ]
        self.invocation_id = ""
        if self.sinks:
            factory = definition.invocation_id or (lambda: uuid.uuid4().hex)
            self.invocation_id = str(factory())
        self.operation_id: str | None = None

    def emit(self, stage: str, **meta: Any) -> None:
        if not self.sinks:
            return
        now = (self.tool.now or timezone.now)()
        event = GuardEvent(
            stage=stage,
            tool=self.tool.name,
            invocation_id=self.invocation_id,
            at=now,
            operation_id=self.operation_id,
            transport=self.transport,
            trace=self.trace,
            **meta,
        )
        for sink in self.sinks:
            try:
                sink(event)
            except Exception:
                logger.warning("observer failed at stage %s of %s", stage, self.tool.name)
