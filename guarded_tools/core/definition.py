"""Provides a tool's definition: its handler, its hooks and every policy the pipeline applies.

A definition is immutable: every field is computed before it is constructed (``Tool.build``
normalises ``@tool``'s options; ``guarded_tools.tools.binding`` derives the schemas from
``input=``/``output=`` first), and a frozen dataclass refuses any later assignment.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from django.core.signals import setting_changed

from guarded_tools.core.call import GuardResult, Invocation
from guarded_tools.core.policy import Policy
from guarded_tools.core.schema.fast import compile_fast_check
from guarded_tools.core.schema.validation import compile_schema, schema_names

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

    from guarded_tools.core.cancellation import CancelSignal

Handler = Callable[..., Any]
CONFIRM_MODES = ("always", "effect-only", "owner")
#: Modes whose confirmation is asked after the claim, for fresh claims only: a replay
#: answers what ran without asking again.
AFTER_CLAIM_MODES = ("effect-only", "owner", "policy")


@dataclass(frozen=True, kw_only=True, eq=False)
class Tool:
    """A guarded tool: the handler plus every policy the pipeline applies to it.

    Built by :func:`tool` (registered, reachable over HTTP) or :func:`guard`
    (unregistered, called from Python). Calling it runs the whole pipeline.
    """

    name: str
    handler: Handler
    description: str = ""
    title: str | None = None
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    output_schema: Mapping[str, Any] | None = None
    permissions: tuple[str, ...] = ()
    #: OAuth scopes a bearer token must carry to call the tool (``guarded_tools.contrib.oauth``).
    scopes: tuple[str, ...] = ()
    #: The module that declares the tool, whose installed app ``scope_per_app`` names:
    #: the handler's own module unless given (published views give their view's). Kept
    #: because the handler of a derived tool becomes a wrapper defined in this library.
    module: str = ""
    authorize: Callable[..., Any] | None = None
    context: Callable[..., Any] | None = None
    confirm: Callable[..., Any] | str | Mapping[str, Any] | Policy | None = None
    idempotency_key: str | Callable[..., str] | None = None
    journal: bool = True
    recover: Callable[..., Any] | None = None
    verify: Callable[..., Any] | None = None
    verify_timeout: float | None = None
    output_budget_bytes: int | None = None
    observe: Callable[..., Any] | None = None
    invocation_id: Callable[[], str] | None = None
    now: Callable[[], Any] | None = None
    read_only: bool = False
    destructive: bool | None = None
    atomic: bool = False
    lease_seconds: int | None = None
    allow_anonymous: bool = False
    confirmation_ttl: int | None = None
    #: A DRF serializer class or a Pydantic model class: the input schema is derived
    #: from it, its own validation runs before the handler, which gets what it returns.
    input: Any = None
    #: A DRF serializer class or a Pydantic model class: the output schema, and what
    #: turns the handler's return value (a model instance, a dict) into the output.
    output: Any = None
    #: Fields the ``input``/``output`` mapping could not express (system check E011).
    schema_problems: tuple[str, ...] = field(repr=False, default=())
    #: ``input_check(input, ctx)``: the serializer's, model's or view's own validation,
    #: without the effect, raising ``InputRejected``; set for ``input=``, type hints and
    #: published views. It runs before a confirmation asked after the claim, so that
    #: nobody is asked to approve a call its own validation refuses.
    input_check: Callable[[Mapping[str, Any], Any], Any] | None = field(repr=False, default=None)
    #: Over MCP, for a client with the Tasks extension, a call answers a task at once and
    #: runs on Celery (as an approved call does); every other caller waits as before.
    long_running: bool = False
    #: Business preconditions, checked before a person is asked to confirm (and before
    #: the handler of a tool without confirmation): ``precheck(input=, context=, user=)``
    #: raises the tool's ``ToolError`` with a repair when the call cannot succeed.
    precheck: Callable[..., Any] | None = None
    #: How a request reads to people: ``present(input=, user=)`` returns a mapping with
    #: an optional ``"summary"`` and ``"fields"`` ({name: text or (text, admin url)}).
    present: Callable[..., Any] | None = None
    #: Where a journal entry's ``reference`` lives: ``evidence(reference=, operation=)``
    #: returns ``(label, url)`` (url may be empty) for the operation's timeline.
    evidence: Callable[..., Any] | None = None
    #: A one-line summary: a ``str.format`` template over the input fields, or
    #: ``summary(input=, user=)``; ``present``'s summary wins when it gives one.
    summary: str | Callable[..., str] | None = None
    #: The input fields that define what a person approves: an approval survives a
    #: repaired retry of its operation that changes only other fields.
    intent: tuple[str, ...] | None = None
    #: ``(viewset, action)`` of a published viewset's action (system check W013).
    published_action: tuple[type, str] | None = field(repr=False, default=None)

    @classmethod
    def build(cls, **options: Any) -> Tool:
        """A definition from ``@tool``'s options, each normalised before it is constructed.

        Lists become tuples, a mapping ``confirm`` a read-only view, ``module`` the
        handler's own module: once built, nothing in a definition changes.
        """
        return cls(**normalized(options))

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 128:
            raise ValueError("A tool name is 1 to 128 characters.")
        if isinstance(self.scopes, str):
            raise ValueError("scopes is a list of OAuth scope names, not one string.")
        for option in ("permissions", "scopes", "schema_problems"):
            if not isinstance(getattr(self, option), tuple):
                raise TypeError(f"Tool {self.name!r}: {option} is a tuple"
                                " (Tool.build makes it one).")
        if self.intent is not None and not isinstance(self.intent, tuple):
            raise TypeError(f"Tool {self.name!r}: intent is a tuple (Tool.build makes it one).")
        if isinstance(self.confirm, Mapping) and not isinstance(self.confirm, MappingProxyType):
            raise TypeError(f"Tool {self.name!r}: a mapping confirm is read-only"
                            " (Tool.build makes it so).")
        self.validator  # noqa: B018 -- compiled now: a bad schema is refused at registration
        if self.output_schema is not None:
            compile_schema(dict(self.output_schema), name=self.name)
        for problem, hint in self.disabled_guards():
            raise ValueError(f"Tool {self.name!r}: {problem} {hint}")
        if self.verify_timeout is not None and self.verify_timeout <= 0:
            raise ValueError("verify_timeout is a positive number of seconds.")
        if self.output_budget_bytes is not None and self.output_budget_bytes <= 0:
            raise ValueError("output_budget_bytes is a positive integer.")

    @cached_property
    def validator(self) -> Draft202012Validator:
        """The input schema's validator, compiled once (at construction)."""
        return compile_schema(dict(self.input_schema), name=self.name)

    @cached_property
    def is_async(self) -> bool:
        """Whether the handler is an ``async def`` (asked once, not on every call)."""
        return inspect.iscoroutinefunction(self.handler)

    @cached_property
    def accepts(self) -> Callable[[Any], bool] | None:
        """A check compiled once that answers True only for an input the validator
        certainly accepts (flat objects of scalar fields), or None for other schemas:
        the validator runs whenever it does not say True."""
        return compile_fast_check(self.input_schema)

    @cached_property
    def schema_names(self) -> frozenset[str]:
        """Every property name the input schema declares (safe in error paths)."""
        return schema_names(dict(self.input_schema))

    def disabled_guards(self) -> Iterator[tuple[str, str]]:
        """``(problem, hint)`` for each guard this definition declares but would never run.

        Refused at construction (``ValueError``) and reported by the system check
        ``guarded_tools.E007`` for any registered tool that got past it.
        """
        confirm = self.confirm
        if confirm is None:
            return
        if isinstance(confirm, Policy):
            yield from ((f"confirm's policy: {problem}.", "Give every rule an outcome:"
                         " Run(), Owner(), Approvers(n) with n >= 1, or Refuse(); a budget"
                         " escalates to Owner() or Approvers(n).")
                        for problem in confirm.problems())
        elif isinstance(confirm, Mapping):
            mode = confirm.get("mode", "always")
            if mode not in CONFIRM_MODES:
                yield (f"confirm's mode is {mode!r}, which no stage runs, so the hook would"
                       " never be called.", f"Use one of {CONFIRM_MODES} (the default is"
                       " 'always').")
            if not callable(confirm.get("request")):
                yield ("confirm={'mode': ..., 'request': fn} needs a callable request.",
                       "Pass the hook that decides as 'request'.")
        elif isinstance(confirm, str):
            if confirm not in CONFIRM_MODES:
                yield (f"confirm={confirm!r} is not a confirmation mode.",
                       f"Use one of {CONFIRM_MODES}, a callable or a mapping.")
        elif not callable(confirm):
            yield (f"confirm={confirm!r} is not a callable, a mapping or a mode.",
                   f"Use one of {CONFIRM_MODES}, a callable or a mapping.")
        if self.read_only and self.confirm_mode in AFTER_CLAIM_MODES:
            yield (f"read_only=True with an {self.confirm_mode!r} confirmation: a read-only"
                   " tool takes no claim, so it would run unconfirmed while tools/ advertises the"
                   " confirmation.", "Use confirm='always' to confirm every call of a read"
                   " (or drop read_only if the tool has an effect).")

    # -- derived policy -------------------------------------------------------------
    @property
    def idempotent(self) -> bool:
        """Read-only tools run without a claim; every other tool needs a key."""
        return not self.read_only

    @property
    def confirm_mode(self) -> str | None:
        """``always``, ``effect-only`` or None; callables are always-confirm."""
        if self.confirm is None:
            return None
        if isinstance(self.confirm, str):
            return self.confirm
        if isinstance(self.confirm, Policy):
            return "policy"
        if isinstance(self.confirm, Mapping):
            return str(self.confirm.get("mode", "always"))
        return "always"

    @property
    def confirms_after_claim(self) -> bool:
        """Whether the confirmation is asked after the claim (``effect-only``, ``owner``)."""
        return self.confirm_mode in AFTER_CLAIM_MODES

    @property
    def owner_consent(self) -> bool:
        """``confirm="owner"``: the user the agent acts for approves, on the site's page."""
        return self.confirm_mode == "owner"

    @property
    def queued_confirmation(self) -> bool:
        """True when a person approves calls in the admin (string modes)."""
        return isinstance(self.confirm, str | Policy)

    @property
    def annotations(self) -> dict[str, Any]:
        destructive = self.destructive if self.destructive is not None else not self.read_only
        return {
            "title": self.title or self.name.replace("_", " ").capitalize(),
            "readOnlyHint": self.read_only,
            "destructiveHint": bool(destructive) and not self.read_only,
            "idempotentHint": self.read_only or self.idempotent,
            "openWorldHint": False,
        }

    @property
    def lease(self) -> int:
        """Seconds of lease a claim gets: the tool's own, else ``LEASE_SECONDS``."""
        from guarded_tools.conf import gt_settings

        return int(self.lease_seconds or gt_settings.LEASE_SECONDS)

    @property
    def reachable_over_mcp(self) -> bool:
        """MCP agents cannot set headers per call: the key must come from the input."""
        return self.read_only or self.idempotency_key is not None

    @property
    def key_field(self) -> str | None:
        return self.idempotency_key if isinstance(self.idempotency_key, str) else None

    def describe(self) -> dict[str, Any]:
        from guarded_tools.conf import gt_settings

        data: dict[str, Any] = {
            "name": self.name,
            "title": self.annotations["title"],
            "description": self.description,
            "inputSchema": dict(self.input_schema),
            "annotations": self.annotations,
            "confirmation": self.confirm_mode,
            "idempotencyKey": (
                None
                if not self.idempotent
                else {"field": self.key_field}
                if self.key_field
                else {"header": gt_settings.IDEMPOTENCY_HEADER}  # the one the view reads
            ),
        }
        if isinstance(self.confirm, Policy):
            data["policy"] = self.confirm.text
        if self.output_schema is not None:
            data["outputSchema"] = dict(self.output_schema)
        return data

    def __call__(
        self,
        input: Mapping[str, Any],
        *,
        user: Any = None,
        principal: str | None = None,
        idempotency_key: str | None = None,
        request: Any = None,
        signal: CancelSignal | None = None,
        credential: Any = None,
    ) -> GuardResult:
        """Run the guard pipeline for one call and return its result.

        ``credential``: the OAuth access token of a call made without a request (an
        approved run), whose scopes are checked as a request's token's are.
        """
        invocation = Invocation(
            input=input,
            user=user,
            principal=principal,
            header_key=idempotency_key,
            request=request,
            signal=signal,
            credential=credential,
        )
        result: GuardResult = build_pipeline(self).run(invocation)
        return result


#: Where a definition keeps the pipelines built for it: in its own ``__dict__`` (the
#: pipelines name the definition, so both go together, when the garbage collector
#: frees them).
_KEPT = "_guarded_tools_pipelines"
#: Counts the changes of the settings a pipeline is built from: pipelines kept under an
#: older count are built again.
_generation = [0]
#: The settings a pipeline is built from: its class, its stages and store (``GUARDED_TOOLS``),
#: and the database the store writes to and how (``DATABASES``, ``DATABASE_ROUTERS``).
PIPELINE_SETTINGS = frozenset({"GUARDED_TOOLS", "DATABASES", "DATABASE_ROUTERS"})


def build_pipeline(definition: Tool) -> Any:
    """The one factory of pipelines: the site's ``PIPELINE_CLASS`` for ``definition``.

    A pipeline that keeps nothing of a call on itself (``shared``: its class, its store's
    and every stage's declare ``stateless``) is built once per definition and per what the
    class's ``shared_per`` names (the database operations are written to, which a
    router may choose per request), and serves every such call of the tool, in every
    thread, until a setting it is built from changes; any other is built for each call,
    as a DRF view builds its permission classes.

    Here, below every layer, so that a tool called in code reaches it with no upward
    import; everything above calls it as ``guarded_tools.pipeline.get_pipeline``.
    """
    from guarded_tools.conf import gt_settings

    cls = gt_settings.PIPELINE_CLASS
    shared_per = getattr(cls, "shared_per", None)
    if shared_per is None or not stateless(cls):  # never shared: nothing to look up
        return cls(definition)
    place = shared_per(definition)
    kept = definition.__dict__.get(_KEPT)
    # The definition's identity too: a copy of a definition (copy.copy) copies its dict.
    if kept is None or kept[0] != (_generation[0], id(definition)):
        kept = ((_generation[0], id(definition)), {})
    pipeline = kept[1].get(place)
    if pipeline is None:
        pipeline = cls(definition)
        if getattr(pipeline, "shared", False) is True:
            # The frozen dataclass refuses assignment; the definition's own dict takes it.
            kept[1][place] = pipeline
            definition.__dict__[_KEPT] = kept
    return pipeline


def stateless(cls: type) -> bool:
    """Whether ``cls`` declares, in its own body, that its instances keep nothing of a
    call (``stateless = True``): a subclass says so again, as it may add state."""
    return vars(cls).get("stateless") is True


def _forget_pipelines(*, setting: str, **kwargs: Any) -> None:
    if setting in PIPELINE_SETTINGS:
        _generation[0] += 1


setting_changed.connect(_forget_pipelines)


def normalized(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` as a definition holds them: tuples, a read-only ``confirm``, a module."""
    values = dict(options)
    if isinstance(values.get("scopes"), str):
        raise ValueError("scopes is a list of OAuth scope names, not one string.")
    for option in ("permissions", "scopes", "schema_problems"):
        if option in values:
            values[option] = tuple(values[option])
    if values.get("intent") is not None:
        values["intent"] = tuple(values["intent"])
    confirm = values.get("confirm")
    if isinstance(confirm, Mapping):  # kept as given: a later change to it is none
        values["confirm"] = MappingProxyType(dict(confirm))
    if not values.get("module"):
        values["module"] = str(getattr(values.get("handler"), "__module__", "") or "")
    return values
