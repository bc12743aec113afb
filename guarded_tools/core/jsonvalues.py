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


class _Placeholders(DjangoJSONEncoder):
    def default(self, o: Any) -> Any:
        try:
            return super().default(o)
        except TypeError:
            return {"__unserializable__": type(o).__name__}


def storable_json(value: Any, serialized: str | None = None) -> Any:
    """Outputs are stored as JSON; anything that is not becomes a typed placeholder.

    ``serialized``: the value's JSON, when the caller already made it (then it is JSON).
    """
    if serialized is not None:
        return value
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
