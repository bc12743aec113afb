"""Provides the JSON Schema keywords evaluated to the specification, not to Python's habits.

Two of jsonschema's defaults differ from what JSON Schema asks, and both are reachable
by any caller:

- Patterns are ECMA-262 regular expressions (with the ``u`` flag), not Python ``re``:
  ``\\d`` is ``[0-9]`` (Python also takes Arabic-Indic, full-width or Thai digits) and
  ``$`` is the end of the string (Python also matches before a final newline). Every
  keyword that applies a pattern (``pattern``, ``patternProperties`` and the keywords
  that depend on it, ``format: regex``) goes through :mod:`guarded_tools.core.schema.patterns`.
- ``uniqueItems`` compares every pair of items once the items are objects: quadratic in
  the request. Here each item is reduced to a hashable canonical form in one pass.
"""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema import ValidationError as SchemaError

from guarded_tools.core.schema.patterns import FORMAT_CHECKER, ecma_search

# -- keywords that apply patterns ---------------------------------------------------------------


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[SchemaError]:
    if not validator.is_type(instance, "string"):
        return
    limit = schema.get("maxLength")
    if isinstance(limit, int) and len(instance) > limit:
        # maxLength already refuses the string; matching it would only buy a backtracking
        # engine's work on a string longer than the schema allows.
        return
    if not ecma_search(pattern, instance):
        yield SchemaError(f"does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[SchemaError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            if ecma_search(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """The names neither ``properties`` nor ``patternProperties`` cover, in order."""
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [
        name
        for name in instance
        if name not in properties and not any(ecma_search(p, name) for p in patterns)
    ]


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[SchemaError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(additional, "object"):
        for name in extras:
            yield from validator.descend(instance[name], additional, path=name)
    elif additional is False and extras:
        yield SchemaError(f"{len(extras)} properties are not allowed by the schema")


def _is_valid(validator: Any, instance: Any, schema: Any) -> bool:
    return next(validator.descend(instance, schema), None) is None


def _evaluated(validator: Any, instance: Mapping[str, Any], schema: Any) -> set[str]:
    """The property names that ``schema`` evaluates successfully (for unevaluatedProperties).

    The same walk as jsonschema's, with patterns matched as ECMA-262.
    """
    if not isinstance(schema, Mapping):
        return set()
    found: set[str] = set()
    for keyword in ("$ref", "$dynamicRef"):
        reference = schema.get(keyword)
        if isinstance(reference, str):
            resolved = validator._resolver.lookup(reference)
            found |= _evaluated(
                validator.evolve(schema=resolved.contents, _resolver=resolved.resolver),
                instance,
                resolved.contents,
            )
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        found.update(name for name in instance if name in properties)
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if (subschema := schema.get(keyword)) is not None:
            found.update(n for n, v in instance.items() if _is_valid(validator, v, subschema))
    patterns = schema.get("patternProperties")
    if isinstance(patterns, Mapping):
        found.update(n for n in instance if any(ecma_search(p, n) for p in patterns))
    dependent = schema.get("dependentSchemas")
    if isinstance(dependent, Mapping):
        for name, subschema in dependent.items():
            if name in instance:
                found |= _evaluated(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, ()):
            if _is_valid(validator, instance, subschema):
                found |= _evaluated(validator, instance, subschema)
    if "if" in schema:
        if _is_valid(validator, instance, schema["if"]):
            found |= _evaluated(validator, instance, schema["if"])
            found |= _evaluated(validator, instance, schema.get("then"))
        else:
            found |= _evaluated(validator, instance, schema.get("else"))
    return found


def _unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[SchemaError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated(validator, instance, schema)
    failing = [
        name
        for name, value in instance.items()
        if name not in evaluated and not _is_valid(validator, value, unevaluated)
    ]
    if failing:
        yield SchemaError(f"{len(failing)} unevaluated properties are not allowed by the schema")


# -- uniqueItems in one pass --------------------------------------------------------------------


def canonical(value: Any) -> Hashable:
    """A hashable form of ``value`` under JSON Schema's equality.

    Numbers are equal by value (``1`` and ``1.0``), booleans are not numbers (``true``
    and ``1`` differ), objects are equal whatever their key order, arrays item by item.
    """
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, str):
        return ("str", value)
    if value is None:
        return ("null",)
    if isinstance(value, numbers.Number):
        return ("num", value)  # Python's == and hash already agree across int and float
    if isinstance(value, Mapping):
        return ("obj", frozenset((k, canonical(v)) for k, v in value.items()))
    if isinstance(value, Sequence):
        return ("arr", tuple(canonical(v) for v in value))
    try:
        hash(value)
    except TypeError:
        return ("other", id(value))  # not JSON: only equal to itself
    return ("other", value)


def has_duplicates(items: Sequence[Any]) -> bool:
    """Whether two of ``items`` are equal as JSON values: linear in their total size."""
    seen: set[Hashable] = set()
    for count, item in enumerate(items, 1):
        seen.add(canonical(item))
        if len(seen) < count:
            return True
    return False


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[SchemaError]:
    if unique and validator.is_type(instance, "array") and has_duplicates(instance):
        yield SchemaError("has non-unique elements")


ToolSchemaValidator = validators.extend(
    Draft202012Validator,
    validators={
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "unevaluatedProperties": _unevaluated_properties,
        "uniqueItems": _unique_items,
    },
    format_checker=FORMAT_CHECKER,
)
"""Draft 2020-12, with ECMA-262 patterns and a linear ``uniqueItems``."""
