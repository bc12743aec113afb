"""Provides repair actions and plans, and the bounded text an agent reads for them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

Action = Literal[
    "change_input",
    "call_tool",
    "refresh_state",
    "retry_same_operation",
    "ask_user",
    "reconcile",
    "stop",
]
ACTIONS: tuple[str, ...] = get_args(Action)
RetryPolicy = Literal["never", "as_is", "after_repair"]
RETRY_POLICIES: tuple[str, ...] = get_args(RetryPolicy)

#: A portable plan: what every agent host is expected to carry intact.
MAX_STEPS = 5
MAX_FIELDS = 8
MAX_INSTRUCTION_CHARS = 240
MAX_NAME_CHARS = 64

_WS = re.compile(r"\s+")
_NAME = re.compile(r"[^A-Za-z0-9_.\-/]")


def normalize(text: Any, limit: int) -> str:
    """Collapse whitespace (control characters included) and bound the length."""
    if limit <= 0:
        return ""
    value = _WS.sub(" ", "".join(ch if ch.isprintable() else " " for ch in str(text))).strip()
    if len(value) > limit:
        value = value[: max(limit - 1, 0)].rstrip() + "…"
    return value


def safe_name(text: Any) -> str:
    """A tool or field name reduced to identifier characters, bounded."""
    return _NAME.sub("", str(text))[:MAX_NAME_CHARS] or "?"


def _name_tuple(value: Any) -> tuple[str, ...]:
    """Field names as a tuple; one bare string is one name, not its characters."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


@dataclass(frozen=True, kw_only=True)
class Repair:
    """One concrete next action an agent should take before retrying."""

    action: Action
    instruction: str = ""
    tool: str | None = None
    fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(
                f"Unknown repair action {self.action!r}; use one of {', '.join(ACTIONS)}."
            )
        if self.action in ("call_tool",) and not self.tool:
            raise ValueError("A call_tool repair must name the tool to call.")
        if self.instruction is None:
            object.__setattr__(self, "instruction", "")
        object.__setattr__(self, "fields", _name_tuple(self.fields))

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"action": self.action}
        if self.tool:
            data["tool"] = self.tool
        if self.instruction:
            data["instruction"] = self.instruction
        if self.fields:
            data["fields"] = list(self.fields)
        return data

    def sentence(self, instruction_limit: int = MAX_INSTRUCTION_CHARS, *,
                 keyed: bool = True) -> str:
        """The bounded, portable sentence for this action.

        ``keyed``: whether the call has an idempotency key to talk of (see :class:`Audience`).
        """
        tool = safe_name(self.tool) if self.tool else ""
        lead = {
            "change_input": "change the input",
            "call_tool": f"call the tool '{tool}' and wait for its result before continuing",
            "refresh_state": "refresh the state you rely on",
            "retry_same_operation": (
                f"retry the same operation{' with ' + repr(tool) if tool else ''}"
                + (", keeping its idempotency key" if keyed else "")
            ),
            "ask_user": "ask the user",
            "reconcile": "have a person reconcile this operation; "
            + ("do not retry it with a new key" if keyed else "do not call it again"),
            "stop": "stop; do not call this tool again for this request",
        }[self.action]
        if self.fields:
            lead += f" (fields: {_names(self.fields)})"
        instruction = normalize(self.instruction, min(instruction_limit, MAX_INSTRUCTION_CHARS))
        return f"{lead}. {instruction}" if instruction else f"{lead}."


@dataclass(frozen=True, kw_only=True)
class RepairPlan:
    """An ordered plan of dependent repair steps.

    ``preserve`` names input fields whose original values must survive the repair;
    ``update`` names fields to replace from the repair's output. Values are never
    copied into the message.
    """

    steps: tuple[Repair, ...]
    preserve: tuple[str, ...] = ()
    update: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        steps = tuple(coerce_step(s) for s in self.steps)
        if not steps:
            raise ValueError("A repair plan needs at least one step.")
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "preserve", _name_tuple(self.preserve))
        object.__setattr__(self, "update", _name_tuple(self.update))

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"steps": [s.as_dict() for s in self.steps]}
        if self.preserve:
            data["preserve"] = list(self.preserve)
        if self.update:
            data["update"] = list(self.update)
        return data

    def sentence(self, instruction_limit: int = MAX_INSTRUCTION_CHARS, *,
                 keyed: bool = True) -> str:
        shown = self.steps[:MAX_STEPS]
        count = len(self.steps)
        steps = f"these {count} steps" if count != 1 else "this 1 step"
        parts = [f"run {steps} in order, one at a time, not in parallel:"]
        for number, step in enumerate(shown, start=1):
            parts.append(f"{number}. {step.sentence(instruction_limit, keyed=keyed)}")
        if len(self.steps) > len(shown):
            hidden = len(self.steps) - len(shown)
            parts.append(f"({hidden} more steps are in the structured repair.)")
        if self.preserve:
            parts.append("Keep the original values of: " + _names(self.preserve) + ".")
        if self.update:
            parts.append("Replace from the repair's results: " + _names(self.update) + ".")
        return " ".join(parts)


def _names(values: Sequence[str]) -> str:
    names = ", ".join(safe_name(v) for v in values[:MAX_FIELDS])
    if len(values) > MAX_FIELDS:
        names += f" and {len(values) - MAX_FIELDS} more"
    return names


def coerce_step(value: Repair | Mapping[str, Any]) -> Repair:
    if isinstance(value, Repair):
        return value
    if not isinstance(value, Mapping):
        raise TypeError("A repair step is a Repair or a mapping with an 'action'.")
    data = dict(value)
    return Repair(
        action=data.get("action"),  # type: ignore[arg-type]
        instruction=data.get("instruction") or "",
        tool=data.get("tool"),
        fields=_name_tuple(data.get("fields")),
    )


def coerce_repair(
    value: Repair | RepairPlan | Mapping[str, Any] | Iterable[Any] | None,
) -> Repair | RepairPlan | None:
    """Accept a ``Repair``, a ``RepairPlan``, or the equivalent plain dict."""
    if value is None or isinstance(value, (Repair, RepairPlan)):
        return value
    if isinstance(value, Mapping):
        if "steps" in value:
            return RepairPlan(
                steps=tuple(coerce_step(s) for s in value["steps"]),
                preserve=_name_tuple(value.get("preserve")),
                update=_name_tuple(value.get("update")),
            )
        return coerce_step(value)
    if isinstance(value, str):
        raise TypeError("A repair is a Repair, a RepairPlan, a mapping or a list of steps.")
    steps: Iterable[Any] = value
    return RepairPlan(steps=tuple(coerce_step(s) for s in steps))


RETRY_WORDS = {
    "never": "Do not retry this call.",
    "as_is": "You may retry the same call unchanged.",
    "after_repair": "Retry only after the repair below, with the same idempotency key.",
}
#: ``after_repair`` with no structured repair: there is nothing "below" to point at.
RETRY_AFTER_FIX = "Retry only after fixing the cause, with the same idempotency key."

Transport = Literal["rest", "mcp"]


@dataclass(frozen=True, kw_only=True)
class Audience:
    """Where an error is read: over which transport, and about what.

    ``transport``: ``rest`` or ``mcp``, or None where the text serves both (the
    catalog's exports, plain Python). ``tool``: whether a tool call is involved (not so
    for the tool list, ``initialize``, ``ping``, an operation's status or the catalog).
    ``keyed``: whether that tool takes an idempotency key. Text for an audience names
    the transport's own way to list tools, and talks of keeping or replacing an
    idempotency key only where the call has one.
    """

    transport: Transport | None = None
    tool: bool = True
    keyed: bool = True

    @property
    def has_key(self) -> bool:
        """Whether the call this error is about has an idempotency key to talk of."""
        return self.tool and self.keyed

    @property
    def tool_list(self) -> str:
        """How a caller on this transport lists the tools it may call."""
        return {
            "rest": "GET tools/",
            "mcp": "the tools/list method",
        }.get(self.transport or "", "GET tools/ (over MCP, the tools/list method)")


#: Where no audience is given: either transport, a keyed tool (the catalog's own wording).
ANY_AUDIENCE = Audience()

KeyAdvice = Literal["same", "new", "unused"]
"""What an ``after_repair`` retry does with its idempotency key.

``same``: keep it (the usual case: the repaired call is the same operation). ``new``:
the key cannot be kept (it is missing or invalid, or the repair splits the work into
several calls), so each call made takes a new key of its own. ``unused``: nothing was
claimed, so the key stays unless the repair changes the field that holds it.
"""
#: The ``after_repair`` words per key advice: with a repair below, and without one.
AFTER_REPAIR_WORDS: dict[str, tuple[str, str]] = {
    "same": (RETRY_WORDS["after_repair"], RETRY_AFTER_FIX),
    "new": (
        "Retry only after the repair below, with a new idempotency key per call"
        " (keep each call's key for its own retries).",
        "Retry only after fixing the cause, with a new idempotency key per call"
        " (keep each call's key for its own retries).",
    ),
    "unused": (
        "Retry only after the repair below; nothing ran, so keep your idempotency key"
        " unless the repair changes its field.",
        "Retry only after fixing the cause; nothing ran, so keep your idempotency key"
        " unless the fix changes it.",
    ),
}

MESSAGE_MAX_CHARS = 1500
MAX_HEAD_CHARS = 400
#: Instruction bounds tried, longest first, until the ``Next action:`` sentence fits.
_INSTRUCTION_STEPS = (MAX_INSTRUCTION_CHARS, 160, 120, 80, 60, 40, 20, 0)


#: The ``after_repair`` words where the call has no idempotency key: with a repair, without.
AFTER_REPAIR_KEYLESS = (
    "Retry only after the repair below.",
    "Retry only after fixing the cause.",
)


def retry_words(retry: str, has_repair: bool, key: str = "same", *, keyed: bool = True) -> str:
    """The retry policy in words (unknown policies read as ``never``).

    ``key`` (a :data:`KeyAdvice`) says what an ``after_repair`` retry does with its
    idempotency key; the other policies do not change the key. ``keyed`` false: the
    call has no key (a tool without one, or no tool at all), so none is talked of.
    """
    if retry == "after_repair" and not keyed:
        return AFTER_REPAIR_KEYLESS[0] if has_repair else AFTER_REPAIR_KEYLESS[1]
    if retry == "after_repair":
        with_repair, without = AFTER_REPAIR_WORDS.get(key, AFTER_REPAIR_WORDS["same"])
        return with_repair if has_repair else without
    return RETRY_WORDS.get(retry, RETRY_WORDS["never"])


def render_message(
    code: str,
    message: str,
    retry: str,
    repair: Repair | RepairPlan | None,
    *,
    limit: int = MESSAGE_MAX_CHARS,
    key: str = "same",
    keyed: bool = True,
) -> str:
    """The portable message: stands alone when every other field is stripped.

    It reads ``<message> [<code>] <retry policy> Next action: <repair>``. The code
    and the retry policy always fit whole (when ``limit`` leaves room for them at
    all): the human message is shortened first to leave room for them and for the
    start of the ``Next action:`` sentence, whose instructions are then shortened
    until it fits; whatever is still over ``limit`` is cut at the end. ``key`` says
    what the retry does with its idempotency key, and ``keyed`` whether there is one
    (see :func:`retry_words`).
    """
    limit = max(int(limit), 0)
    tag = f"[{safe_name(code)}] {retry_words(retry, repair is not None, key, keyed=keyed)}"
    room = limit - len(tag) - 1  # one space between the head and the tag
    if repair is not None:
        room //= 2  # leave at least as much for the Next action sentence
    head = normalize(message, min(MAX_HEAD_CHARS, room) - 1) or "The call failed."
    if not head.endswith((".", "!", "?", "…")):
        head += "."
    text = f"{head} {tag}" if len(head) <= room else tag
    if repair is not None:
        budget = limit - len(text) - len(" Next action: ")
        for bound in _INSTRUCTION_STEPS:
            sentence = repair.sentence(bound, keyed=keyed)
            if len(sentence) <= budget:
                break
        text += " Next action: " + sentence
    return normalize(text, limit)
