"""The MCP endpoint writes each JSON-RPC body directly (``protocol.compose``): the bytes
must be what the splicing encoder, and so ``json.dumps`` of the decoded values, writes,
for every payload an answer may hold, and a payload it does not walk (a key that is not
a string, a container nested deeper than it walks, a cycle) falls back to the encoder."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.utils.functional import lazy
from hypothesis import given, settings
from hypothesis import strategies as st

from guarded_tools.core.jsonvalues import JSON_ENCODER, Spliced
from guarded_tools.transports.mcp import protocol

scalars = (st.none() | st.booleans() | st.integers() | st.text()
           | st.floats(allow_nan=False) | st.decimals(allow_nan=False, allow_infinity=False))
finite = (st.none() | st.booleans() | st.integers() | st.text()
          | st.floats(allow_nan=False, allow_infinity=False))
plain = st.recursive(finite, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(), inner, max_size=3), max_leaves=6)
#: An output's text, as the guard spliced it into an answer.
spliced = plain.map(lambda v: Spliced(JSON_ENCODER.encode(v)))
payloads = st.recursive(
    scalars | spliced,
    lambda inner: (st.lists(inner, max_size=4) | st.tuples(inner, inner)
                   | st.dictionaries(st.text(), inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(payloads)
def test_compose_writes_what_the_splicing_encoder_writes(payload: Any) -> None:
    assert protocol.compose(payload) == protocol.SplicingEncoder().encode(payload)


def test_values_the_encoder_converts_are_written_as_it_writes_them() -> None:
    text = lazy(lambda: "lazy \u2028 text", str)()
    payload = {"when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "id": uuid.UUID(int=7),
               "amount": Decimal("1.50"), "text": text, "float": 1e300, "nan": float("nan"),
               "true": True, "zero": 0, "big": 10**30, "tuple": (1, "a"), "empty": {},
               "none": [], "unicode": "é\u2029\"\\", "out": Spliced('{"a":[1,2]}')}
    body = protocol.compose(payload)
    assert body == protocol.SplicingEncoder().encode(payload)
    assert json.loads(body)["out"] == {"a": [1, 2]}


@pytest.mark.parametrize("payload", [
    {1: "an int key"}, {"a": {None: 1}}, {"deep": json.loads("[" * 80 + "]" * 80)},
], ids=["int-key", "none-key", "deep"])
def test_a_payload_it_does_not_walk_is_left_to_the_encoder(payload: Any) -> None:
    assert protocol.compose(payload) == protocol.SplicingEncoder().encode(payload)


def test_a_cycle_is_refused_as_the_encoder_refuses_it() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        protocol.compose({"c": cycle})
