"""Provides ``Stage``, the interface of one step of a call, and ``Call``, what a stage is given.

A stage is a class listed in the stage list (the ``STAGES`` setting, or a tool's
``stages``). The pipeline instantiates it with no arguments (``Stage()``) and walks the
list in order. The pipeline is built once per tool and database when its class, its store
and every stage of the list declare ``stateless``; else for each call, as DRF instantiates
a permission class. Each hook receives the call (a :class:`Call`) and nothing of the
pipeline: the tool's definition is ``call.tool``, the invocation ``call.inv``, whose key
scope ``call.scope``, the key ``call.key``, the cancel signal ``call.signal``, the
handler's context ``call.context_for(handle)``, the operation store ``call.store`` and
the events ``call.events``. A stage overrides only the hooks it needs; the default hooks
do nothing. A hook refuses a call by raising a ``GuardError`` (an error of the catalog):
the agent gets it as it gets any refusal.

==================  ========================================================================
hook                when
==================  ========================================================================
``before_claim``    every call, replays included, before anything is claimed or asked of a
                    person: validation, identity and context, authorization, the key, the
                    approval policy's rule, confirmation "always"
``preconditions``   the tool's business preconditions, with nothing claimed or asked: the
                    confirmation stage checks them before a person is asked, and the
                    console asks every stage of the list through
                    ``Pipeline.check_preconditions`` ("is it still valid?")
``after_claim``     the call is about to execute: a fresh claim (``claim``), or a call with
                    no claim row (``claim`` is None: a tool without idempotency, or the
                    one-transaction path, where this runs inside the transaction that locks
                    the key, so a refusal leaves nothing). Budgets, preconditions and
                    confirmation "effect-only"/"owner". Never on a replay.
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

The execution stage is the one stage with ``execute(call, ctx)``: the last stage of the
list that has it runs the handler.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from guarded_tools.core.call import ToolContext, principal_scope
from guarded_tools.core.cancellation import CancelSignal
from guarded_tools.store.replays import replays
from guarded_tools.store.values import canonical, digest

if TYPE_CHECKING:
    from guarded_tools.core.call import GuardResult, Invocation
    from guarded_tools.core.definition import Tool
    from guarded_tools.pipeline.events import Events
    from guarded_tools.store import Claim, OperationHandle, OperationStore
    from guarded_tools.store.replays import Remembered

#: What ``Call._scope`` holds before the call's scope is worked out (None is a scope's answer).
_UNSET: Any = object()

HOOKS = ("before_claim", "preconditions", "after_claim", "on_release", "after_execute",
         "on_replay", "on_read")


@dataclass
class Call:
    """One call on its way through the stages: everything a stage is given.

    ``tool`` is the tool's definition, ``inv`` the invocation as the transport received
    it (its ``scope``, ``key`` and ``fingerprint`` filled in by the stages before the
    claim), ``events`` the call's observers and ``store`` the operation store.
    """

    tool: Tool
    inv: Invocation
    events: Events
    store: OperationStore | None = None
    #: This process's stored answer for the call's key (the replay cache), when there is one.
    remembered: Remembered | None = None
    #: Set on the one-transaction path, once the key is locked (``after_claim`` runs in it).
    in_transaction: bool = False
    #: The rule of the tool's approval policy that decided the call (the policy stage).
    rule: Any = None
    #: The input's canonical text, once :meth:`fingerprint` has worked it out ("" before).
    canonical: str = field(default="", repr=False)
    _looked_up: bool = field(default=False, repr=False)
    _scope: Any = field(default=_UNSET, repr=False)
    _now: datetime | None = field(default=None, repr=False)

    def now(self, claim: Claim | None) -> datetime:
        """The call's one clock, for every stage that counts it in a window (budgets,
        allowances): the database's clock when the claim was taken (the store set the
        claim's lease to it plus the tool's lease), else this process's (a call with no
        claim row yet). Read once per call: every stage sees the same time."""
        if self._now is None:
            expires = claim.operation.lease_expires_at if claim is not None else None
            self._now = (expires - timedelta(seconds=self.tool.lease)
                         if isinstance(expires, datetime) else timezone.now())
        return self._now

    @property
    def scope(self) -> str:
        """Whose keys the call uses (set by the context stage)."""
        return self.inv.scope

    @property
    def key(self) -> str | None:
        """The call's idempotency key (set by the idempotency stage)."""
        return self.inv.key

    @property
    def signal(self) -> CancelSignal:
        """The call's cancel signal (the caller's, or one made for the call)."""
        if self.inv.signal is None:
            self.inv.signal = CancelSignal()
        return self.inv.signal

    def principal_scope(self) -> str | None:
        """Whose keys the call uses: its principal, "anonymous" where the tool allows
        anonymous calls, else None (worked out once per call)."""
        if self._scope is _UNSET:
            self._scope = scope_of(self.tool, self.inv)
        return self._scope  # type: ignore[no-any-return]

    def given_key(self) -> Any:
        """The key as the caller gave it (an input field or the header), unchecked."""
        spec = self.tool.idempotency_key
        return self.inv.input.get(spec) if isinstance(spec, str) else self.inv.header_key

    def resolve_context(self) -> Any:
        """The tool's ``context`` for this call's input (None for a tool without one)."""
        return resolve_context(self.tool, self.inv)

    def fingerprint(self) -> str:
        """The input's fingerprint, computed once per call (kept on ``inv.fingerprint``).

        A replay whose input has the canonical text the replay cache kept has that entry's
        fingerprint: the text is compared, not hashed again."""
        inv = self.inv
        if not inv.fingerprint:
            text = self.canonical = canonical(inv.input)
            remembered = self.remembered
            if remembered is not None and remembered.canonical and remembered.canonical == text:
                inv.fingerprint = remembered.fingerprint
            else:
                inv.fingerprint = digest(text)
        return inv.fingerprint

    def look_up_replay(self, key: Any) -> Remembered | None:
        """This process's answer for ``key`` (the replay cache), read once per call.

        The pipeline asks before validation for a key the caller gave; the idempotency
        stage asks for a key computed from the validated input. When found, the input's
        fingerprint is computed (once) for the comparison.
        """
        if self._looked_up or not self.tool.idempotent:
            return self.remembered
        scope = self.inv.scope or self.principal_scope()
        if not isinstance(key, str) or not key or scope is None:
            return None  # refused later, by the context or the idempotency stage
        self._looked_up = True
        self.remembered = replays.get(self.tool.name, scope, key)
        if self.remembered is not None:
            self.fingerprint()
        return self.remembered

    def context_for(self, handle: OperationHandle | None = None) -> ToolContext:
        """The ``ToolContext`` the handler (or a check that runs like it) receives."""
        inv = self.inv
        return ToolContext(user=inv.user, context=inv.context, signal=self.signal,
                           operation=handle, request=inv.request, tool=self.tool)


def scope_of(tool: Tool, inv: Invocation) -> str | None:
    """Whose keys a call of ``tool`` uses: its principal, "anonymous" where allowed, else None."""
    scope = principal_scope(inv.user, inv.principal)
    if scope is None and tool.allow_anonymous:
        return "anonymous"
    return scope


def resolve_context(tool: Tool, inv: Invocation) -> Any:
    """The tool's ``context`` for ``inv`` (None for a tool without one)."""
    if tool.context is None:
        return None
    return tool.context(inv.input, user=inv.user, request=inv.request)


class Stage:
    """One step of a call; override the hooks the step needs (see the module's table).

    Instantiated with no arguments; everything a hook needs comes with its ``call``.
    """

    #: The stage's name in the list: a site's stage that replaces a built-in one keeps it.
    name = ""
    #: Declared True in a class's own body when its instances keep nothing of a call (every
    #: built-in stage does): one instance then serves every call of a tool, in every
    #: thread. A stage that does not declare it (a subclass included, as it may add
    #: state) is instantiated for each call.
    stateless = False

    def before_claim(self, call: Call) -> None:
        """Every call, replays included, before the claim and before any person is asked."""

    def preconditions(self, call: Call) -> None:
        """The tool's business preconditions now: raise when the call would fail."""

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

    @classmethod
    def has_work(cls, tool: Tool, hook: str) -> bool:
        """Whether ``hook`` can do anything for a call of ``tool``, decided from the tool's
        definition alone (once per tool): False lets the pipeline skip the hook for that
        tool's calls. The default, True, always walks the hook.

        It answers for the hooks of the class that defines it: a hook a subclass
        implements (a site's stage that overrides a built-in one's hook) is always walked,
        unless that subclass defines ``has_work`` too (see :func:`plan`)."""
        return True


@functools.lru_cache(maxsize=256)
def overriding(classes: tuple[type[Stage], ...], hook: str) -> tuple[int, ...]:
    """The positions of the stages whose class overrides ``hook`` (the others do nothing)."""
    return tuple(i for i, cls in enumerate(classes)
                 if getattr(cls, hook, None) is not getattr(Stage, hook))


def decides(cls: type[Stage], hook: str) -> bool:
    """Whether ``cls.has_work`` decides whether ``hook`` is walked: False when the class
    that implements ``hook`` is more derived than the one that defines ``has_work`` (its
    ``has_work`` knows nothing of the override, which is then always walked)."""
    mro = cls.__mro__
    decider = next(i for i, k in enumerate(mro) if "has_work" in vars(k))
    implementer = next((i for i, k in enumerate(mro) if hook in vars(k)), len(mro))
    return implementer >= decider


#: Per tool definition, by identity while it lives: the stage list its plan was made
#: for, and the plan. A definition's entry goes with it (unregistered, replaced): one
#: entry per live definition, however many were made. By identity, as a definition may
#: compare by its fields and hold unhashable ones.
_plans: dict[int, tuple[tuple[type[Stage], ...], dict[str, tuple[int, ...]]]] = {}


def plan(tool: Tool, classes: tuple[type[Stage], ...]) -> dict[str, tuple[int, ...]]:
    """Each hook's stage positions a call of ``tool`` walks: the stages that override it
    (:func:`overriding`) and have work for this tool (``Stage.has_work``, asked only where
    it :func:`decides`). Decided once per tool definition, for the stage list it was last
    walked with."""
    found = _plans.get(id(tool))
    if found is not None and found[0] == classes:
        return found[1]
    hooks = {hook: tuple(i for i in overriding(classes, hook)
                         if not decides(classes[i], hook) or classes[i].has_work(tool, hook))
             for hook in HOOKS}
    if found is None:  # the entry is dropped when the definition is
        weakref.finalize(tool, _plans.pop, id(tool), None)
    _plans[id(tool)] = (classes, hooks)
    return hooks


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
