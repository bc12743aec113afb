"""Provides the context stage: whose call it is (its key scope) and the tool's context."""

from __future__ import annotations

from guarded_tools.pipeline.stages.base import Call, Stage


class ContextStage(Stage):
    """Names the call's principal (``not_authenticated`` without one, unless the tool allows
    anonymous calls) and resolves the tool's ``context`` from the validated input."""

    name = "context"

    def before_claim(self, call: Call) -> None:
        inv = call.inv
        inv.scope = self.pipeline.identify(inv)
        inv.context = self.pipeline.resolve_context(inv)

    on_read = before_claim
