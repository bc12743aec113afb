"""Provides the words of one call: its invocation, its context, its result and its events.

The pipeline, the transports and a tool's hooks all speak them; they sit below every
layer (``guarded_tools.pipeline`` re-exports them, so existing imports keep working).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.signals import setting_changed

from guarded_tools.core.cancellation import CancelSignal
from guarded_tools.core.jsonvalues import storable_json


@dataclass
class Invocation:
    """One call of a tool, as the transport received it."""

    input: Mapping[str, Any]
    user: Any = None
    principal: str | None = None
    header_key: str | None = None
    request: Any = None
    signal: CancelSignal | None = None
    wait: float = 0
    context: Any = None
    key: str | None = None
    scope: str = ""
    fingerprint: str = ""
    #: How the call arrived: ``rest``, ``mcp``, or ``python`` (``tool(...)`` in code).
    transport: str = "python"
    #: The caller's W3C trace context (``trace_carrier``): metadata for observers, not input.
    trace: Mapping[str, str] = field(default_factory=dict)
    #: The credential (an OAuth access token) of a call with no request: a run an approval
    #: started. Its scopes are checked as the request's would be.
    credential: Any = None


#: W3C Trace Context keys a call may carry, each with the longest value kept.
TRACE_KEYS = {"traceparent": 128, "tracestate": 512}


def trace_carrier(source: Mapping[str, Any] | None) -> dict[str, str]:
    """The W3C trace context in request headers or MCP ``params._meta``, bounded.

    Only ``traceparent`` and ``tracestate`` (``tracestate`` only beside a
    ``traceparent``), as printable ASCII no longer than W3C allows; anything else is
    dropped. Observers continue the caller's trace from it (``guarded_tools.contrib.otel``).
    """
    carrier: dict[str, str] = {}
    for name, limit in TRACE_KEYS.items():
        value = source.get(name) if source is not None else None
        if isinstance(value, str) and len(value) <= limit and value.isascii() and (
            value.isprintable()
        ):
            carrier[name] = value.strip()
    return carrier if carrier.get("traceparent") else {}


@dataclass
class ToolContext:
    """What a handler receives besides its input."""

    user: Any
    context: Any
    signal: CancelSignal
    #: The journal's handle (``guarded_tools.store.OperationHandle``) of a claimed call.
    operation: Any = None
    request: Any = None
    #: The call's definition (``guarded_tools.core.definition.Tool``, which builds on this
    #: module, so it is not named here).
    tool: Any = None


@dataclass
class GuardResult:
    """A successful call: the output and the operation it belongs to."""

    output: Any
    operation: dict[str, Any] | None = None
    replayed: bool = False
    recovered: bool = False
    #: The output as JSON, when the guard already serialized it (for the replay cache).
    output_json: str | None = field(default=None, repr=False, compare=False)
    #: A person decided this result (reconciliation), so ``verify`` does not judge it.
    #: Looked up only for tools that have a verifier: for the others it changes nothing.
    reconciled: bool = False

    def answer(self) -> Any:
        """The output as the agent gets it: as stored, so a call and its replays agree.

        Decoded from the JSON the guard made of it, as replays are: a ``Decimal`` or a
        ``datetime`` reads the same in the first answer as in every replay. An output
        that is not JSON (an object, NaN) was stored with typed placeholders for what
        is not, and is answered so: it could not be sent as it is, and its effect has
        already happened.
        """
        if self.output_json is not None:
            return json.loads(self.output_json)
        if self.replayed:
            return self.output
        return storable_json(self.output)

    def answer_json(self) -> str | None:
        """The answer's JSON text (``JSON_ENCODER``'s, as the agent receives it) when the
        guard already has it: a fresh call's, a replay's (from the replay cache, or made
        once from the database's read for the cache and the answer); None for an output
        that is not JSON and a result read outside the call (a task's poll)."""
        return self.output_json


_UNREAD: Any = object()


class RememberedResult(GuardResult):
    """A result known by its JSON text only (a replay from the replay cache): ``output``
    is decoded when something first reads it, never for the answer."""

    _output: Any

    @classmethod
    def of(cls, text: str, **fields: Any) -> RememberedResult:
        return cls(output=_UNREAD, output_json=text, **fields)

    @property  # type: ignore[override]
    def output(self) -> Any:
        if self._output is _UNREAD:
            self._output = json.loads(self.output_json or "null")
        return self._output

    @output.setter
    def output(self, value: Any) -> None:
        self._output = value


@dataclass(frozen=True)
class GuardEvent:
    """Lifecycle metadata for ``observe``: never inputs, outputs or details."""

    stage: str
    tool: str
    invocation_id: str
    at: Any
    operation_id: str | None = None
    code: str | None = None
    replayed: bool = False
    recovered: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    #: The invocation's transport and trace carrier (see ``Invocation``).
    transport: str = ""
    trace: Mapping[str, str] = field(default_factory=dict)


def user_row(user: Any) -> Any:
    """``user`` when it is a row of the user model (a session's lazy one included), else None.

    Anonymous callers and user objects that are no row (a stateless token's user, which
    has a ``pk`` but no table) are stored without one; their scope keeps their keys apart.
    """
    if getattr(user, "pk", None) is None:
        return None
    return user if isinstance(user, _user_model()) else None


@functools.cache
def _user_model() -> type[Any]:
    """``get_user_model()``, looked up once (again after ``AUTH_USER_MODEL`` changes)."""
    from django.contrib.auth import get_user_model

    return get_user_model()


def _forget_user_model(*, setting: str, **kwargs: Any) -> None:
    if setting == "AUTH_USER_MODEL":
        _user_model.cache_clear()


setting_changed.connect(_forget_user_model)


def principal_scope(user: Any, principal: str | None) -> str | None:
    """Whose keys these are. Keys never cross principals."""
    if principal:
        return f"principal:{principal}"
    if user is not None and getattr(user, "is_authenticated", False):
        cls = user.__class__  # a session's lazy user answers its user's class
        meta = getattr(cls, "_meta", None)  # None: a user object that is no model
        label = meta.label_lower if meta is not None else f"{cls.__module__}.{cls.__qualname__}"
        return f"{label}:{user.pk}"
    return None
