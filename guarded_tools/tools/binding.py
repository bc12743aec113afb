"""Provides the hand-off from a derived JSON Schema to a serializer's or a model's own validation.

A tool declared with ``input=`` (a DRF serializer or a Pydantic model) or with type
hints gets its JSON Schema derived once, at registration. The guard validates that
schema first, as for every tool (no SQL for a malformed call); the serializer's or
model's own validation runs right before the handler, on fresh claims only, so a
replay never re-validates (a uniqueness validator would refuse the replay of the very
call that created the object). Its refusal is :class:`InputRejected`: ``invalid_input``
with JSON paths and a repair, the claim released so that the repaired retry with the
same key runs. No value the caller sent is ever echoed: messages come from error codes.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from django.utils.module_loading import import_string
from django.utils.text import capfirst

from guarded_tools.core.codes import BUILTIN
from guarded_tools.core.errors import ToolError, issue_fields
from guarded_tools.core.repair import Repair
from guarded_tools.core.schema.validation import safe_path, schema_names

_CODE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
#: Where a camelCase name starts a word: ``operationId``, ``HTTPStatus``.
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def field_title(name: str) -> str:
    """A field's title from its name, as Django's verbose names read: words split at
    ``_`` and at camelCase humps, lowercase, the first letter capitalised, so that
    ``operationId`` and ``operation_id`` both read "Operation id" (DRF's own default,
    ``name.replace("_", " ").capitalize()``, gives "Operationid")."""
    words = _HUMP.sub(" ", name).replace("_", " ").split()
    return str(capfirst(" ".join(words).lower())) or name

#: What a validation error code says, written here (trusted), never taken from the
#: error's own text (DRF's and Pydantic's messages quote the value that was sent).
CODE_MESSAGES = {
    "required": "is required",
    "missing": "is required",
    "null": "may not be null",
    "blank": "may not be blank",
    "empty": "may not be empty",
    "invalid": "is not valid",
    "does_not_exist": "names an object that does not exist or that you cannot use",
    "incorrect_type": "has the wrong type",
    "unique": "must be unique: an object with this value already exists",
    "max_length": "is too long",
    "min_length": "is too short",
    "max_value": "is too large",
    "min_value": "is too small",
    "max_digits": "has too many digits",
    "max_decimal_places": "has too many decimal places",
    "max_whole_digits": "has too many digits before the decimal point",
    "invalid_choice": "is not one of the allowed choices",
    "not_a_list": "must be a list",
    "not_a_dict": "must be an object",
    "date": "must be a date",
    "datetime": "must be a date and time",
    "max_string_length": "is too long",
    "string_too_long": "is too long",
    "string_too_short": "is too short",
    "too_long": "has too many items",
    "too_short": "has too few items",
    "greater_than": "is too small",
    "greater_than_equal": "is too small",
    "less_than": "is too large",
    "less_than_equal": "is too large",
    "literal_error": "is not one of the allowed values",
    "enum": "is not one of the allowed values",
    "int_parsing": "must be an integer",
    "int_type": "must be an integer",
    "string_type": "must be a string",
    "bool_type": "must be a boolean",
    "bool_parsing": "must be a boolean",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "extra_forbidden": "is not allowed",
    "value_error": "was refused by the model's validation",
    "assertion_error": "was refused by the model's validation",
}


class InputRejected(ToolError):
    """``invalid_input`` from a serializer's, a model's or a view's own validation.

    It comes after the claim, before any effect: the claim is released (a ``ToolError``
    with an empty journal), so the repaired retry with the same key runs. It carries the
    catalog's ``invalid_input`` entry (why, fix, link, their keyless wording), as the
    guard's own schema refusal does: an agent reads one ``invalid_input``, whoever wrote
    the tool's validation.
    """

    error_type = "validation_error"

    def __init__(self, issues: list[dict[str, Any]], message: str | None = None) -> None:
        entry = BUILTIN["invalid_input"]
        super().__init__(
            entry.code,
            message or _summary(issues),
            retry="after_repair",
            repair=Repair(action="change_input", fields=issue_fields(issues)),
            status=entry.status,
            why=entry.why,
            fix=entry.fix,
            link=entry.link,
        )
        self.issues = issues
        self.extra["issues"] = issues


def issue(path: Iterable[Any], code: Any, known: frozenset[str]) -> dict[str, Any]:
    """One agent-safe issue: declared names only in the path, the message from the code."""
    code_text = str(code) if isinstance(code, str) and _CODE.match(str(code)) else "invalid"
    return {
        "path": safe_path(path, known),
        "keyword": code_text,
        "message": CODE_MESSAGES.get(code_text, "was refused by the input's own validation"),
    }


def _summary(issues: list[dict[str, Any]]) -> str:
    def pointer(path: list[Any]) -> str:
        return "/" + "/".join(str(p) for p in path) if path else "the input"

    first = "; ".join(f"{pointer(i['path'])} {i['message']}" for i in issues[:3])
    more = f" (and {len(issues) - 3} more issues)" if len(issues) > 3 else ""
    return f"The input is invalid: {first}{more}."


def inline_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each ``#/$defs/...`` reference replaced by its definition.

    Embedded elsewhere (a request body in ``openapi.json``), ``#/$defs`` would resolve
    against that document's root, not this schema: inlined, the schema means the same
    wherever it is shown. A recursive definition cannot be inlined: then the schema is
    returned as it is.
    """
    defs = schema.get("$defs")
    if not isinstance(defs, dict) or not defs:
        return schema

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [resolve(item, seen) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref[len("#/$defs/"):]
            if name in seen or name not in defs:
                raise RecursionError(name)
            siblings = {k: resolve(v, seen) for k, v in node.items() if k != "$ref"}
            return {**resolve(defs[name], (*seen, name)), **siblings}
        return {k: resolve(v, seen) for k, v in node.items() if k != "$defs"}

    try:
        return dict(resolve(schema, ()))
    except RecursionError:
        return schema


class Binding(Protocol):
    """A serializer, a model or a signature as a tool's input (or output)."""

    schema: dict[str, Any]
    problems: tuple[str, ...]

    def bind(self, input: Mapping[str, Any], ctx: Any, known: frozenset[str]) -> Any: ...

    def call(self, handler: Callable[..., Any], value: Any, ctx: Any) -> Any: ...


class OutputBinding(Protocol):
    """A serializer or a model that turns what the handler returns into the output."""

    schema: dict[str, Any]
    problems: tuple[str, ...]

    def dump(self, value: Any, ctx: Any) -> Any: ...


#: Where a class given as ``input=`` or ``output=`` may come from, tried in order: each
#: names a ``binding_for(spec, direction)`` that returns the class's binding, or None when
#: the class is not of its kind. Named by dotted path, as settings name classes: the
#: sources build on this module, so it never imports them.
CLASS_SOURCES = (
    "guarded_tools.tools.sources.serializers.binding_for",
    "guarded_tools.tools.sources.pydantic.binding_for",
)
#: The binding of a handler written with type hints (``def f(order_id: int, *, ctx)``).
SIGNATURE_SOURCE = "guarded_tools.tools.sources.typehints.SignatureBinding"


def bound_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with the schemas derived from ``input``/``output`` or the handler's type
    hints, the handler behind its bindings and its ``input_check``: what ``Tool.build`` takes.
    """
    values = dict(options)
    handler = values["handler"]
    values.setdefault("module", "")
    if not values["module"]:  # the handler's own, before a wrapper takes its place
        values["module"] = str(getattr(handler, "__module__", "") or "")
    spec, out = values.get("input"), values.get("output")
    hints = spec is None and wants_type_hints(handler)
    if spec is None and out is None and not hints:
        return values
    name = values.get("name")
    inputs = _inputs(values, spec, hints, name)
    outputs: OutputBinding | None = None
    if out is not None:
        if values.get("output_schema") is not None:
            raise ValueError(f"Tool {name!r}: give output= or output_schema=, not both.")
        outputs = output_binding(out)
        values["output_schema"] = outputs.schema
    values["schema_problems"] = tuple(
        p for b in (inputs, outputs) if b is not None for p in b.problems)
    known = schema_names(dict(values.get("input_schema") or {"type": "object"}))
    values["handler"] = bound_handler(handler, inputs, outputs, known)
    if inputs is not None:
        values["input_check"] = input_check(inputs, known)
    return values


def _inputs(values: dict[str, Any], spec: Any, hints: bool, name: Any) -> Binding | None:
    """The input's binding (its schema put in ``values``), or None for a schema given."""
    if spec is None and not hints:
        return None
    if dict(values.get("input_schema") or {"type": "object"}) != {"type": "object"}:
        raise ValueError(f"Tool {name!r}: give input= or input_schema=, not both.")
    if hints:
        inputs: Binding = import_string(SIGNATURE_SOURCE)(values["handler"])
    else:
        inputs = input_binding(spec, values["handler"])
    values["input_schema"] = inputs.schema
    return inputs


def _class_binding(spec: Any, option: str, direction: str) -> Any:
    """A DRF serializer class's or a Pydantic model class's binding, for ``option=``."""
    for source in CLASS_SOURCES:
        binding = import_string(source)(spec, direction)
        if binding is not None:
            return binding
    raise ValueError(
        f"{option}={spec!r} is neither a DRF serializer class nor a Pydantic model class."
    )


def input_binding(spec: Any, handler: Callable[..., Any]) -> Binding:
    """The binding for ``input=``: a DRF serializer class or a Pydantic model class."""
    binding: Binding = _class_binding(spec, "input", "request")
    return binding


def output_binding(spec: Any) -> OutputBinding:
    """The binding for ``output=``: a DRF serializer class or a Pydantic model class."""
    binding: OutputBinding = _class_binding(spec, "output", "response")
    return binding


def input_check(binding: Binding, known: frozenset[str]) -> Callable[[Mapping[str, Any], Any], Any]:
    """The binding's validation alone (``Tool.input_check``): nothing is saved or run."""

    def check(input: Mapping[str, Any], ctx: Any) -> Any:
        return binding.bind(input, ctx, known)

    return check


def wants_type_hints(handler: Callable[..., Any]) -> bool:
    """A handler written ``def f(order_id: int, reason: str = "", *, ctx)``."""
    try:
        parameters = inspect.signature(handler).parameters
    except (TypeError, ValueError):
        return False
    ctx = parameters.get("ctx")
    return ctx is not None and ctx.kind is inspect.Parameter.KEYWORD_ONLY


def bound_handler(
    handler: Callable[..., Any],
    binding: Binding | None,
    output: OutputBinding | None,
    known: frozenset[str],
) -> Callable[..., Any]:
    """``handler`` behind its bindings: validate and convert the input, dump the output."""

    def run(input: Mapping[str, Any], ctx: Any) -> Any:
        if binding is None:
            return handler(input, ctx)
        return binding.call(handler, binding.bind(input, ctx, known), ctx)

    if inspect.iscoroutinefunction(handler):

        async def arun(input: Mapping[str, Any], ctx: Any) -> Any:
            from asgiref.sync import sync_to_async

            value: Any = input
            if binding is not None:  # a serializer's validators may query the database
                value = await sync_to_async(binding.bind)(input, ctx, known)
                result = await binding.call(handler, value, ctx)
            else:
                result = await handler(input, ctx)
            if output is None:
                return result
            return await sync_to_async(output.dump)(result, ctx)

        arun.__name__ = getattr(handler, "__name__", "handler")
        return arun

    def sync(input: Mapping[str, Any], ctx: Any) -> Any:
        result = run(input, ctx)
        return result if output is None else output.dump(result, ctx)

    sync.__name__ = getattr(handler, "__name__", "handler")
    return sync
