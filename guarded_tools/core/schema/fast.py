"""Provides the fast acceptance of an input: a check compiled once per schema that says
"certainly valid" for the common shapes, so the full validator runs only when it may not be.

It covers a flat object of scalar fields (``type``, ``properties``, ``required``,
``additionalProperties`` as a boolean; per field one scalar ``type`` with its bounds,
lengths and an ECMA-262 ``pattern``, applied as the validator applies it). A schema with
any other keyword has no fast check. The check never refuses: whenever it cannot say
"valid" (a float for an integer, a missing field, a pattern that does not match, ...)
the tool's validator runs and its issues are the answer, exactly as without the check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from guarded_tools.core.schema.patterns import ecma_search

#: Keywords that say nothing about validity.
_NOTES = frozenset({"title", "description", "default", "examples", "$comment", "deprecated",
                    "readOnly", "writeOnly"})
_OBJECT = frozenset({"type", "properties", "required", "additionalProperties"}) | _NOTES
_FIELD = frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                    "minLength", "maxLength", "pattern"}) | _NOTES
#: The Python types a JSON value of each scalar type certainly has (``bool`` is no number;
#: an integral float is left to the validator).
_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,), "number": (int, float), "string": (str,), "boolean": (bool,),
}

Check = Callable[[Any], bool]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _field_check(schema: Any) -> Check | None:
    if not isinstance(schema, Mapping) or not _FIELD.issuperset(schema):
        return None
    kind = schema.get("type")
    types = _TYPES.get(kind) if isinstance(kind, str) else None
    if types is None:
        return None
    bounds = [(k, schema[k]) for k in ("minimum", "maximum", "exclusiveMinimum",
                                       "exclusiveMaximum") if k in schema]
    lengths = [(k, schema[k]) for k in ("minLength", "maxLength") if k in schema]
    pattern = schema.get("pattern")
    if any(not _number(v) for _, v in bounds) or any(
            not isinstance(v, int) or isinstance(v, bool) for _, v in lengths):
        return None
    if pattern is not None and not isinstance(pattern, str):
        return None
    if (bounds and types[0] not in (int, float)) or (
            (lengths or pattern is not None) and types[0] is not str):
        return None  # a keyword that does not apply to the type: left to the validator
    low = schema.get("minimum")
    high = schema.get("maximum")
    xlow = schema.get("exclusiveMinimum")
    xhigh = schema.get("exclusiveMaximum")
    shortest = schema.get("minLength")
    longest = schema.get("maxLength")

    def check(value: Any) -> bool:
        if type(value) not in types:
            return False
        if bounds and ((low is not None and value < low) or (high is not None and value > high)
                       or (xlow is not None and value <= xlow)
                       or (xhigh is not None and value >= xhigh)):
            return False
        if shortest is not None and len(value) < shortest:
            return False
        if longest is not None and len(value) > longest:
            return False
        return pattern is None or ecma_search(pattern, value)

    return check


def compile_fast_check(schema: Any) -> Check | None:
    """A check that answers True only for an input ``schema`` certainly accepts, or None
    when the schema has a keyword the check does not cover."""
    if not isinstance(schema, Mapping) or not _OBJECT.issuperset(schema):
        return None
    if schema.get("type") != "object":
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    additional = schema.get("additionalProperties", True)
    if not isinstance(properties, Mapping) or not isinstance(required, list) or not all(
            isinstance(n, str) for n in required) or additional not in (True, False):
        return None
    fields: dict[str, Check] = {}
    for name, subschema in properties.items():
        field = _field_check(subschema)
        if field is None:
            return None
        fields[name] = field
    needed = tuple(required)
    closed = additional is False

    def check(instance: Any) -> bool:
        if type(instance) is not dict:
            return False
        for name in needed:
            if name not in instance:
                return False
        for name, value in instance.items():
            field = fields.get(name)
            if field is None:
                if closed:
                    return False
            elif not field(value):
                return False
        return True

    return check
