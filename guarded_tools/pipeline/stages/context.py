"""Provides the context stage: whose call it is (its key scope) and the tool's context."""

from __future__ import annotations

from guarded_tools.core.errors import NotAuthenticated
from guarded_tools.pipeline.stages.base import Call, Stage


class ContextStage(Stage):
    """Names the call's principal (``not_authenticated`` without one, unless the tool allows
    anonymous calls) and resolves the tool's ``context`` from the validated input."""

    name = "context"
    stateless = True

    def before_claim(self, call: Call) -> None:
        inv = call.inv
        scope = call.principal_scope()
        if scope is None:
            raise NotAuthenticated()
        inv.scope = scope
        inv.context = call.resolve_context()

    on_read = before_claim
