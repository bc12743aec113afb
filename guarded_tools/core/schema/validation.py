"""Provides strict JSON parsing and JSON Schema validation with agent-safe issues.

Issue messages are written from the *schema* (trusted), never from the instance:
a value or property name an attacker sent is never echoed back to an agent.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from itertools import islice
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema import ValidationError as SchemaError
from jsonschema.exceptions import SchemaError as InvalidSchema

from guarded_tools.core.errors import MalformedRequest, ValidationError
from guarded_tools.core.repair import normalize
from guarded_tools.core.schema.keywords import ToolSchemaValidator
from guarded_tools.core.schema.patterns import FORMAT_CHECKER, SCHEMA_FORMAT_CHECKER, PatternRisk

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")
_SURROGATE = re.compile("[\ud800-\udfff]")
#: How a surrogate can appear in JSON text: an escape from \\uD800 to \\uDFFF.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey("duplicate key")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ValueError("NaN and Infinity are not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 would otherwise become Infinity
        raise ValueError("number out of range")
    return value


#: One decoder for every body (``json.loads`` with hooks would build one per call); like
#: ``json``'s own default decoder, it keeps no state between calls.
_STRICT = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constants,
                           parse_float=_finite_float)


def parse_json(raw: bytes, *, max_depth: int) -> Any:
    """Parse ``raw`` as strict JSON: UTF-8, no duplicate keys, no NaN, bounded depth."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedRequest("The request body is not valid UTF-8.") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        value = _STRICT.decode(text)
    except _DuplicateKey:
        raise MalformedRequest("The request body repeats a key inside one object.") from None
    except RecursionError:
        raise MalformedRequest("The request body nests too deeply.") from None
    except ValueError:
        raise MalformedRequest("The request body is not valid JSON.") from None
    # Walk the value only when the text could hold what the walks refuse: a NUL or a
    # surrogate can only arrive as a \u escape, and nesting deeper than max_depth needs
    # more than max_depth brackets. Typical inputs skip both walks.
    if text.count("{") + text.count("[") > max_depth or "\\u0000" in text:
        check_depth(value, max_depth)
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        _check_strings(value)
    return value


def _check_strings(value: Any) -> None:
    """Refuse lone surrogates (``"\\ud800"``): they cannot be encoded as UTF-8 later."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise MalformedRequest(
                    "The request body has a string with an unpaired surrogate escape."
                )
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def check_depth(value: Any, max_depth: int) -> None:
    """Refuse structures nested deeper than ``max_depth`` (iteratively: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                # Not storable in PostgreSQL's jsonb, and never meaningful in a tool input.
                raise MalformedRequest("The request body contains a NUL character.")
        elif isinstance(item, (dict, list)):
            if depth > max_depth:
                raise MalformedRequest(f"The request body nests deeper than {max_depth} levels.")
            children: Iterable[Any] = item.values() if isinstance(item, dict) else item
            if isinstance(item, dict):
                stack.extend((name, depth) for name in item)
            stack.extend((child, depth + 1) for child in children)


def compile_schema(schema: dict[str, Any], *, name: str) -> Draft202012Validator:
    """Check ``schema`` against Draft 2020-12 and build its validator once.

    Patterns are checked as ECMA-262 (what JSON Schema specifies, and what validates
    the input later): one Python's ``re`` would take but JavaScript would not is refused.
    """
    try:
        Draft202012Validator.check_schema(schema, format_checker=SCHEMA_FORMAT_CHECKER)
    except InvalidSchema as exc:
        if exc.validator == "format" and exc.validator_value == "regex":
            raise ValueError(_pattern_refusal(name, exc)) from exc
        raise ValueError(f"Tool {name!r} has an invalid JSON Schema: {exc.message}") from exc
    prepared = _without_false_subschemas(schema)
    if isinstance(prepared, dict):
        # The schema is validated as 2020-12 whatever it says; a "$schema" left in would
        # make jsonschema swap in its stock validator (Python patterns) on a "$ref": "#".
        prepared.pop("$schema", None)
    validator: Draft202012Validator = ToolSchemaValidator(
        prepared, format_checker=FORMAT_CHECKER
    )
    return validator


def _pattern_refusal(name: str, exc: InvalidSchema) -> str:
    pattern = str(exc.instance)
    where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
    if isinstance(exc.cause, PatternRisk):
        return (
            f"Tool {name!r} has a pattern at {where} that can take exponential time to match:"
            f" {pattern!r}: {exc.cause}. Make each repetition start or end with something"
            " required that the repeated part cannot match (([a-z]+-)* rather than"
            " ([a-z]+-?)*), or bound the outer repetition."
        )
    return (
        f"Tool {name!r} has a pattern that is not an ECMA-262 regular expression at {where}:"
        f" {pattern!r} ({exc.cause or 'not valid'}). JSON Schema patterns are"
        " JavaScript regular expressions (u flag): write named groups as (?<name>...), not"
        " (?P<name>...); end with $, not \\Z; and \\d, \\w mean ASCII only."
    )


_FORBID: dict[str, Any] = {"not": {}}
_SCHEMA_VALUE = ("contains", "propertyNames", "not", "if", "then", "else")
_SCHEMA_OR_FALSE = ("additionalProperties", "unevaluatedProperties", "items", "unevaluatedItems")
_SCHEMA_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")


def _without_false_subschemas(schema: Any) -> Any:
    """A copy of ``schema`` with each ``false`` subschema spelled ``{"not": {}}``.

    jsonschema reports a ``false`` subschema with no keyword and without its path
    segment (``properties: {"x": false}`` fails at the root, not at ``/x``); the
    equivalent ``{"not": {}}`` fails at the right path. ``false`` stays where the
    keyword itself handles it (``additionalProperties: false`` and the like).
    """
    if schema is False:
        return dict(_FORBID)
    if not isinstance(schema, dict):
        return schema
    result = dict(schema)
    for key, value in schema.items():
        if key in _SCHEMA_VALUE or (key in _SCHEMA_OR_FALSE and isinstance(value, dict)):
            result[key] = _without_false_subschemas(value)
        elif key in _SCHEMA_MAP and isinstance(value, dict):
            result[key] = {k: _without_false_subschemas(v) for k, v in value.items()}
        elif key in _SCHEMA_LIST and isinstance(value, list):
            result[key] = [_without_false_subschemas(v) for v in value]
    return result


def schema_names(schema: Any) -> frozenset[str]:
    """Every property name the schema itself declares (trusted path segments)."""
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                names.update(k for k in props if isinstance(k, str))
            required = node.get("required")
            if isinstance(required, list):
                names.update(k for k in required if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(names)


def _value(value: Any, limit: int = 80) -> str:
    """A schema-side value shown in a message (trusted, but still bounded)."""
    try:
        text = json.dumps(value, ensure_ascii=True, sort_keys=True)
    except (TypeError, ValueError):
        text = "?"
    return normalize(text, limit)


def _keyword(error: SchemaError) -> str:
    """The failing keyword; a ``false`` schema has none in jsonschema."""
    return "false" if error.validator is None else str(error.validator)


def _describe(error: SchemaError) -> str:
    kw = _keyword(error)
    v = error.validator_value
    messages = {
        "type": lambda: f"must be of type {_value(v)}",
        "required": lambda: "is missing a required property"
        + (f" {_value(_missing(error))}" if _missing(error) else ""),
        "enum": lambda: f"must be one of {_value(v, 160)}",
        "const": lambda: f"must equal {_value(v)}",
        "minimum": lambda: f"must be >= {_value(v)}",
        "maximum": lambda: f"must be <= {_value(v)}",
        "exclusiveMinimum": lambda: f"must be > {_value(v)}",
        "exclusiveMaximum": lambda: f"must be < {_value(v)}",
        "multipleOf": lambda: f"must be a multiple of {_value(v)}",
        "minLength": lambda: f"must have at least {_value(v)} characters",
        "maxLength": lambda: f"must have at most {_value(v)} characters",
        "pattern": lambda: f"must match the pattern {_value(v)}",
        "format": lambda: f"must be a valid {_value(v)}",
        "minItems": lambda: f"must have at least {_value(v)} items",
        "maxItems": lambda: f"must have at most {_value(v)} items",
        "uniqueItems": lambda: "must not contain duplicate items",
        "minProperties": lambda: f"must have at least {_value(v)} properties",
        "maxProperties": lambda: f"must have at most {_value(v)} properties",
        "additionalProperties": lambda: "has properties the schema does not allow",
        "unevaluatedProperties": lambda: "has properties the schema does not allow",
        "propertyNames": lambda: "has a property name the schema does not allow",
        "additionalItems": lambda: "has more items than the schema allows",
        "items": lambda: "has more items than the schema allows",
        "contains": lambda: "does not contain enough items of the required shape",
        "unevaluatedItems": lambda: "has more items than the schema allows",
        "dependentRequired": lambda: "is missing a property that another property requires",
        "oneOf": lambda: "must match exactly one of the allowed shapes",
        "anyOf": lambda: "must match at least one of the allowed shapes",
        "not": lambda: "is not allowed" if v == {} else "matches a shape the schema forbids",
        "false": lambda: "is not allowed",
    }
    builder = messages.get(kw)
    return builder() if builder else f"does not satisfy the schema keyword {_value(kw)}"


def _missing(error: SchemaError) -> str | None:
    """The name of a missing required property, taken from the schema's list.

    jsonschema yields one error per missing name, and says which only in its own
    message (built from the schema's name, so comparing with it is safe).
    """
    required = error.validator_value if isinstance(error.validator_value, list) else []
    instance = error.instance if isinstance(error.instance, dict) else {}
    missing = [name for name in required if isinstance(name, str) and name not in instance]
    for name in missing:
        if error.message == f"{name!r} is a required property":
            return name
    return missing[0] if missing else None


def safe_path(path: Iterable[Any], known: frozenset[str]) -> list[str | int]:
    """Path segments an agent may see: indexes, and names the schema declares."""
    result: list[str | int] = []
    for part in path:
        if isinstance(part, int):
            result.append(part)
        elif isinstance(part, str) and part in known and _IDENT.match(part):
            result.append(part)
        else:
            result.append("<property>")
    return result


def validate(
    validator: Draft202012Validator,
    instance: Any,
    *,
    known: frozenset[str],
    max_issues: int = 20,
) -> None:
    """Raise :class:`ValidationError` with bounded, value-free issues."""
    max_issues = max(max_issues, 1)
    # Collect a bounded number of errors: an array of 100,000 wrong items must not
    # build 100,000 error objects (nor sort them) to report twenty.
    scan = max(max_issues * 5, 100)
    try:
        found = list(islice(validator.iter_errors(instance), scan + 1))
    except RecursionError:
        raise MalformedRequest("The input nests too deeply.") from None
    if not found:
        return
    exact = len(found) <= scan
    errors = sorted(found[:scan], key=lambda e: _order(e.absolute_path))
    issues: list[dict[str, Any]] = [
        {
            "path": safe_path(error.absolute_path, known),
            "keyword": _keyword(error),
            "message": _describe(error),
        }
        for error in errors[:max_issues]
    ]
    first = "; ".join(f"{_pointer(i['path'])} {i['message']}" for i in issues[:3])
    more = ""
    if not exact:
        more = f" (and over {scan - 3} more issues)"
    elif len(found) > 3:
        more = f" (and {len(found) - 3} more issues)"
    fields = [_field(error, known) for error in errors[:max_issues]]
    raise ValidationError(issues, f"The input is invalid: {first}{more}.",
                          fields=[name for name in fields if name])


def _field(error: SchemaError, known: frozenset[str]) -> str:
    """The input field an issue asks the agent to change: its path up to the first name
    the schema does not declare, and for a missing required property, that property
    (jsonschema reports it at the object that lacks it)."""
    parts: list[str] = []
    for part in safe_path(error.absolute_path, known):
        if part == "<property>":
            return ".".join(parts)
        parts.append(str(part))
    missing = _missing(error) if _keyword(error) == "required" else None
    if missing is not None and missing in known and _IDENT.match(missing):
        parts.append(missing)
    return ".".join(parts)


def _order(path: Iterable[Any]) -> list[tuple[int, int, str]]:
    """A sort key for instance paths that never compares an index with a name."""
    return [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in path]


def _pointer(path: list[str | int]) -> str:
    return "/" + "/".join(str(p) for p in path) if path else "the input"
