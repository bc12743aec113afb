"""Provides the output budget stage: the output's JSON size against ``output_budget_bytes``."""

from __future__ import annotations

import logging

from guarded_tools.conf import gt_settings
from guarded_tools.pipeline.stages.base import Call, Stage
from guarded_tools.store import JSON_ENCODER

logger = logging.getLogger("guarded_tools")


class OutputBudgetStage(Stage):
    """Measures the output (kept as ``result.output_json`` for the store and the replay cache).

    Over budget it emits ``output_oversized`` and logs a warning; the result is still
    returned and stored. An output that is not JSON emits ``output_unmeasurable``.
    """

    name = "output_budget"
    stateless = True

    def after_execute(self, call: Call, result: object) -> None:
        result.output_json = self.measure(call, result.output)  # type: ignore[attr-defined]

    def measure(self, call: Call, output: object) -> str | None:
        """The output's JSON text, None if it is not JSON."""
        budget = call.tool.output_budget_bytes or gt_settings.OUTPUT_BUDGET_BYTES
        try:
            text = JSON_ENCODER.encode(output)
        except (TypeError, ValueError):
            call.events.emit("output_unmeasurable")
            logger.warning("tool %s returned an output that is not JSON", call.tool.name)
            return None
        size = len(text.encode("utf-8"))
        if size > budget:
            call.events.emit("output_oversized", extra={"bytes": size, "budget": budget})
            logger.warning(
                "tool %s output is %d bytes, over its budget of %d", call.tool.name, size, budget
            )
            return text
        call.events.emit("output_validated", extra={"bytes": size})
        return text
