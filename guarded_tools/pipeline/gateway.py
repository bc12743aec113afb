"""Provides the one way in above the pipeline: run a call, read its state, start an approved
run, resume and recover.

The transports (REST, MCP), the Celery tasks and the console call this module and nothing
else of the pipeline's machinery. ``Gateway(definition)`` is one tool's door, built once
per request: it holds one pipeline (``get_pipeline``, the one factory) for every step the
request takes. The module's functions are the steps that belong to no one tool: an
approved call's run, recovery, the sweep, and an exception as the agent reads it.

Approvals are a service of their own (:mod:`guarded_tools.confirmations`): the pipeline
asks it from the confirmation stage, and a person's decision is taken there; what runs a
call once it is approved is here (``run_approved``).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from guarded_tools.confirmations import queue
from guarded_tools.core.agent_errors import to_guard_error
from guarded_tools.core.call import GuardResult, Invocation
from guarded_tools.core.errors import GuardError
from guarded_tools.pipeline import Pipeline, get_pipeline, recovery
from guarded_tools.pipeline.stages import Call

if TYPE_CHECKING:
    from guarded_tools.core.definition import Tool
    from guarded_tools.models import Confirmation, Operation

__all__ = ["Gateway", "agent_error", "recover_now", "run_approved", "sweep"]


class Gateway:
    """One tool's way in: every step a request takes with its calls, on one pipeline."""

    def __init__(self, definition: Tool) -> None:
        self.tool = definition

    @cached_property
    def pipeline(self) -> Pipeline:
        return get_pipeline(self.tool)

    # -- a call -------------------------------------------------------------------------
    def run(self, inv: Invocation) -> GuardResult:
        """Run one call through its stages (its events, its claim, its result)."""
        return self.pipeline.run(inv)

    def prepare(self, inv: Invocation) -> Call:
        """Every stage before the claim, then stop (a call handed to a worker later)."""
        return self.pipeline.prepare(inv, self.pipeline.observe(inv))

    def proceed(self, call: Call) -> GuardResult:
        """From the claim on, for a call ``prepare`` stopped."""
        return self.pipeline.proceed(call)

    # -- reads of a call's state ---------------------------------------------------------
    def scope_of(self, user: Any, principal: str | None = None) -> str | None:
        """Whose keys a call of this tool by ``user`` uses; None for nobody's."""
        return self.pipeline.scope_of(Invocation(input={}, user=user, principal=principal))

    def authorize_read(self, inv: Invocation) -> None:
        """Refuse a read of a call's state as the call's replay would be refused."""
        self.pipeline.authorize_read(inv)

    def stored_error(self, operation: Operation) -> GuardError:
        """The error a terminal operation answers to every replay."""
        return self.pipeline.stored_error(operation)

    def check_preconditions(self, inv: Invocation) -> None:
        """The tool's preconditions now (every stage's ``preconditions``), with the tool's
        context resolved for ``inv`` first; nothing is claimed or run."""
        inv.context = self.pipeline.resolve_context(inv)
        self.pipeline.check_preconditions(inv)


# -- steps that belong to no one tool ------------------------------------------------------
def run_approved(confirmation: Confirmation) -> Any:
    """Run the call a person approved (or an MCP task queued), as its requester."""
    return queue.execute(confirmation)


def recover_now(operation: Operation, user: Any) -> recovery.Outcome:
    """A person's "Recover now": ask the tool's ``recover`` for an abandoned operation."""
    return recovery.recover_now(operation, user)


def sweep(**options: Any) -> recovery.SweepReport:
    """Recover what crashed workers left behind (the periodic task's body)."""
    return recovery.sweep(**options)


def agent_error(exc: BaseException) -> GuardError:
    """Any exception as the error an agent reads (a catalog error; 500 for the unforeseen)."""
    return to_guard_error(exc)
