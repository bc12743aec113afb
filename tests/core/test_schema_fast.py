"""The fast acceptance check never says "valid" where the tool's validator finds an issue."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from guarded_tools.core.schema.fast import compile_fast_check
from guarded_tools.core.schema.validation import compile_schema

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"],
     "additionalProperties": False},
    {"type": "object", "properties": {
        "operationId": {"type": "string", "minLength": 8, "maxLength": 12,
                        "pattern": "^[A-Za-z0-9_.:-]+$"},
        "value": {"type": "integer", "minimum": 0, "maximum": 10}},
     "required": ["operationId", "value"], "additionalProperties": False},
    {"type": "object", "properties": {"n": {"type": "number", "exclusiveMinimum": 0,
                                            "exclusiveMaximum": 1.5},
                                      "flag": {"type": "boolean"},
                                      "code": {"type": "string", "pattern": "^\\d+$"}}},
]
VALUES: list[Any] = [0, 1, -1, 10, 11, 1.0, 0.5, 1.5, 2.5, True, False, None, "", "abc",
                     "abcdefgh", "abc def gh", "abcdefghijklm", "١٢٣", "123", "123\n", [], {}]
NAMES = ["value", "operationId", "n", "flag", "code", "other"]


def instances() -> list[Any]:
    found: list[Any] = [None, [], "x", 3]
    for a, b in itertools.product(NAMES, NAMES):
        for va, vb in itertools.product(VALUES, repeat=2):
            found.append({a: va, b: vb})
    found.extend({name: value} for name in NAMES for value in VALUES)
    found.append({})
    return found


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_check_accepts_only_what_the_validator_accepts(schema: dict[str, Any]) -> None:
    check = compile_fast_check(schema)
    assert check is not None
    validator = compile_schema(dict(schema), name="t")
    accepted = 0
    for instance in instances():
        if check(instance):
            accepted += 1
            assert not list(validator.iter_errors(instance)), instance
    assert accepted  # the check does say "valid" for valid inputs


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"v": {"type": "integer", "enum": [1]}}},
    {"type": "object", "properties": {"v": {"type": ["integer", "null"]}}},
    {"type": "object", "properties": {"v": {"type": "string", "format": "email"}}},
    {"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
    {"type": "object", "additionalProperties": {"type": "integer"}},
    {"type": "object", "properties": {"v": {"$ref": "#/$defs/x"}}, "$defs": {"x": {}}},
    {"type": "array"},
    {"properties": {"v": {"type": "integer"}}},
])
def test_other_schemas_have_no_fast_check(schema: dict[str, Any]) -> None:
    assert compile_fast_check(schema) is None
