"""Provides ``Stage``, the interface of one step of a call, and ``Call``, what a stage is given.

A stage is a class the pipeline instantiates once per call with the pipeline
(``Stage(pipeline)``; ``self.tool`` is the tool's definition) and walks in the order of the
stage list (``STAGES`` setting, or the tool's ``stages``), as DRF walks its policy classes.
Each hook is called on every stage of the list, in order; a stage overrides only the hooks
it needs, and the default hooks do nothing. A hook refuses a call by raising a
``GuardError`` (an error of the catalog): the agent gets it as it gets any refusal.

==================  ========================================================================
hook                when
==================  ========================================================================
``before_claim``    every call, replays included, before anything is claimed or asked of a
                    person: validation, identity and context, authorization, the key,
                    confirmation "always" (approval policies decide here whether the call
                    runs, needs N approvals, needs its owner, or is refused)
``after_claim``     the call is about to execute: a fresh claim (``claim``), or a call with
                    no claim row (``claim`` is None: a tool without idempotency, or the
                    one-transaction path, where this runs inside the transaction that locks
                    the key, so a refusal leaves nothing). Preconditions and confirmation
                    "effect-only"/"owner". Never on a replay.
``on_release``      the call's fresh claim was released without its effect (refused after
                    the claim, declined, proven not executed by the call, by recovery or
                    by a person): give back what ``after_claim`` reserved (the
                    budgets). Once per claim, in the release's transaction; for a release
                    outside the call, ``call.inv`` is rebuilt from the operation
``after_execute``   a result to keep (executed or recovered), before it is stored: output
                    budget, verification
``on_replay``       a stored result answered again (verification, unless a person decided it)
``on_read``         a read of the call's state (its operation, confirmation or MCP task):
                    the authorization its replay would face, with no events
==================  ========================================================================

Budgets reserve "atomically with the claim": on the one-transaction path
``after_claim`` already runs inside the claim's transaction; on the ordinary path the
store's claim commits in a transaction of its own, and the reservation needs the store to
call the stages inside it (an ``in_claim(call, claim)`` hook, for the store to offer).

The execution stage is the one stage with ``execute(call, ctx)``: the last stage of the
list that has it runs the handler.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guarded_tools.core.call import GuardResult, Invocation
    from guarded_tools.pipeline.events import Events
    from guarded_tools.store import Claim
    from guarded_tools.store.replays import Remembered

HOOKS = ("before_claim", "after_claim", "on_release", "after_execute", "on_replay", "on_read")


@dataclass
class Call:
    """One call on its way through the stages: the invocation, its events, what is known."""

    inv: Invocation
    events: Events
    #: This process's stored answer for the call's key (the replay cache), when there is one.
    remembered: Remembered | None = None
    #: Set on the one-transaction path, once the key is locked (``after_claim`` runs in it).
    in_transaction: bool = False
    #: The rule of the tool's approval policy that decided the call (the policy stage).
    rule: Any = None


class Stage:
    """One step of a call; override the hooks the step needs (see the module's table)."""

    #: The stage's name in the list: a site's stage that replaces a built-in one keeps it.
    name = ""

    def __init__(self, pipeline: Any) -> None:
        #: The ``guarded_tools.pipeline.Pipeline`` walking this stage (not imported here:
        #: the pipeline builds on its stages).
        self.pipeline = pipeline
        self.tool = pipeline.tool

    def before_claim(self, call: Call) -> None:
        """Every call, replays included, before the claim and before any person is asked."""

    def after_claim(self, call: Call, claim: Claim | None) -> None:
        """The call is about to execute (a fresh claim, or no claim row yet)."""

    def on_release(self, call: Call, claim: Claim) -> None:
        """The fresh claim was released without its effect: give back what was reserved."""

    def after_execute(self, call: Call, result: GuardResult) -> None:
        """A result to keep (executed or recovered), before it is stored."""

    def on_replay(self, call: Call, result: GuardResult) -> None:
        """A stored result answered again."""

    def on_read(self, call: Call) -> None:
        """A read of the call's state: refuse it as its replay would be refused."""


@functools.lru_cache(maxsize=256)
def overriding(classes: tuple[type[Stage], ...], hook: str) -> tuple[int, ...]:
    """The positions of the stages whose class overrides ``hook`` (the others do nothing)."""
    return tuple(i for i, cls in enumerate(classes)
                 if getattr(cls, hook, None) is not getattr(Stage, hook))


@functools.lru_cache(maxsize=512)
def _takes(hook: Callable[..., Any], name: str) -> bool:
    """Whether ``hook`` accepts the keyword argument ``name`` (by name or ``**kwargs``)."""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # no signature to read: pass only what it always got
        return False
    return any(p.kind is p.VAR_KEYWORD or (p.name == name and p.kind is not p.POSITIONAL_ONLY)
               for p in parameters)


def principal_kwargs(hook: Callable[..., Any], inv: Invocation) -> dict[str, Any]:
    """Whose operation it is, ``user`` and ``scope``, for a hook that takes them.

    ``recover`` and ``verify`` read state by the operation's key, which the agent chose:
    they must scope what they read by its principal too. These arguments came after
    the hooks' first signatures, so a hook that does not name them (or take
    ``**kwargs``) is called as before.
    """
    def takes(name: str) -> bool:
        try:
            return _takes(hook, name)
        except TypeError:  # an unhashable callable object: read its signature each time
            return _takes.__wrapped__(hook, name)

    return {name: value for name, value in (("user", inv.user), ("scope", inv.scope))
            if takes(name)}


def decision(value: Any, yes: str) -> tuple[bool, str]:
    """Hooks answer a bool or a mapping like ``{"allowed": bool, "reason": str}``."""
    if isinstance(value, Mapping):
        return bool(value.get(yes)), str(value.get("reason") or "")
    return bool(value), ""
