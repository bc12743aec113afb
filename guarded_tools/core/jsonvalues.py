"""Provides outputs as stored JSON: strict, with a typed placeholder for what is not JSON.

Below the store and the call's result (``GuardResult.answer``), which both read it;
``guarded_tools.store`` re-exports both names.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

#: Outputs: strict JSON, so NaN and Infinity (which no database's JSON takes) are not.
JSON_ENCODER = DjangoJSONEncoder(allow_nan=False)


class Serialized:
    """An output with the JSON text the guard already made of it (``JSON_ENCODER``'s).

    Given to the store, which saves the text as it is (``StoredJSONEncoder``): the
    output is encoded once per call, not once more on save.
    """

    __slots__ = ("text", "value")

    def __init__(self, value: Any, text: str) -> None:
        self.value, self.text = value, text

    def __repr__(self) -> str:
        return f"Serialized({self.value!r})"


def unwrapped(value: Any) -> Any:
    """The value itself, whether or not it came with its JSON text."""
    return value.value if isinstance(value, Serialized) else value


class StoredJSONEncoder(DjangoJSONEncoder):
    """``DjangoJSONEncoder``, and a ``Serialized`` value as the text it already has.

    The encoder of ``Operation.output``: Django's ``JSONField`` encodes a value to save
    with ``json.dumps(value, cls=encoder)`` on every database.
    """

    def encode(self, o: Any) -> str:
        if isinstance(o, Serialized):
            return o.text
        return super().encode(o)


class _Placeholders(DjangoJSONEncoder):
    def default(self, o: Any) -> Any:
        try:
            return super().default(o)
        except TypeError:
            return {"__unserializable__": type(o).__name__}


def storable_json(value: Any, serialized: str | None = None) -> Any:
    """Outputs are stored as JSON; anything that is not becomes a typed placeholder.

    ``serialized``: the value's JSON, when the caller already made it (then it is JSON):
    the value comes back as a ``Serialized``, which the store saves as that text.
    """
    if serialized is not None:
        return Serialized(value, serialized)
    try:
        JSON_ENCODER.encode(value)
        return value
    except (TypeError, ValueError):
        pass
    try:
        return json.loads(json.dumps(value, cls=_Placeholders), parse_constant=_placeholder)
    except (TypeError, ValueError):  # keys that are not strings, a structure in itself
        return {"__unserializable__": type(value).__name__}


def _placeholder(name: str) -> dict[str, str]:
    """NaN, Infinity and -Infinity, as the placeholders other values get."""
    return {"__unserializable__": name}
