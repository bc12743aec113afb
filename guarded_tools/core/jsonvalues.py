"""Provides outputs as stored JSON: strict, with a typed placeholder for what is not JSON.

Below the store and the call's result (``GuardResult.answer``), which both read it;
``guarded_tools.store`` re-exports both names.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder


class OutputEncoder(DjangoJSONEncoder):
    """``DjangoJSONEncoder`` writing the text DRF's ``JSONRenderer`` makes with DRF's
    defaults (``COMPACT_JSON``, ``UNICODE_JSON``, ``STRICT_JSON``) of the decoded value:
    no spaces, characters as they are, U+2028 and U+2029 escaped."""

    def encode(self, o: Any) -> str:
        return js_safe(super().encode(o))


def js_safe(text: str) -> str:
    """JSON ``text`` with U+2028 and U+2029 escaped, as DRF's ``JSONRenderer`` writes them
    (JSON allows them raw; JavaScript string literals did not)."""
    if "\u2028" in text or "\u2029" in text:
        text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return text


#: Outputs: strict JSON, so NaN and Infinity (which no database's JSON takes) are not;
#: written once per call as the agent receives it (see ``OutputEncoder``).
JSON_ENCODER = OutputEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


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


class Spliced:
    """JSON text a renderer puts into its body as it is, where the value would be encoded.

    ``text`` is a JSON value's text as the body's encoder would write it (for an output,
    ``JSON_ENCODER``'s); ``value()`` decodes it, for a reader that wants the value.
    """

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def value(self) -> Any:
        """The value the text stands for (decoded each time it is asked for)."""
        return json.loads(self.text)

    def __repr__(self) -> str:
        return f"Spliced({self.text[:40]!r})"
