"""Provides the guarded tools the benchmarks call (B, C, D and the realistic one).

Each handler does what its unguarded view in :mod:`bench.views` does.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from bench import stub
from bench.models import Item
from bench.views import insert
from guarded_tools import tool

KEYED = {
    "type": "object",
    "properties": {"operationId": {"type": "string"}, "value": {"type": "integer"}},
}

STRICT = {
    "type": "object",
    "properties": {
        "operationId": {"type": "string", "minLength": 8, "maxLength": 100,
                        "pattern": "^[A-Za-z0-9_.:-]+$"},
        "value": {"type": "integer", "minimum": 0, "maximum": 1_000_000_000},
    },
    "required": ["operationId", "value"],
    "additionalProperties": False,
}

OUTPUT = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "value": {"type": "integer"}},
    "required": ["id", "value"],
}


@tool("bench_insert", input_schema=KEYED, idempotency_key="operationId", atomic=True)
def bench_insert(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """B and C: the INSERT, guarded (effect and completion commit together)."""
    return insert(input)


def _verify(*, input: Any, output: Any, **_: Any) -> bool:
    return bool(output) and output.get("value") == input["value"]


@tool(
    "bench_insert_full",
    input_schema=STRICT,
    output_schema=OUTPUT,
    idempotency_key="operationId",
    atomic=True,
    permissions=("bench.add_item",),
    verify=_verify,
)
def bench_insert_full(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """D: validation, a Django permission, a journal entry and verify, all on."""
    ctx.operation.write({"step": "insert"})
    return insert(input)


def recover_remote(*, operation: Any, **_: Any) -> dict[str, Any]:
    """Read the authoritative state (the row) by the operation's key."""
    row = Item.objects.filter(key=operation.key).values("pk", "value").first()
    if row is None:
        return {"recovered": False}
    return {"recovered": True, "output": {"id": row["pk"], "value": row["value"]}}


@tool("bench_remote", input_schema=KEYED, idempotency_key="operationId",
      recover=recover_remote)
def bench_remote(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """The realistic handler, guarded: a 5 ms remote call, then the INSERT."""
    ref = stub.call(settings.BENCH_STUB_URL, input["operationId"])
    return insert(input, ref)


# -- the peer table (bench/peer.py): the same echo(value: int) tool FastMCP serves ---------
VALUE = {
    "type": "object",
    "properties": {"value": {"type": "integer"}},
    "required": ["value"],
    "additionalProperties": False,
}

#: What FastMCP derives from ``-> Echo`` (bench/fastmcp_app.py): an object with an integer.
ECHOED = {
    "type": "object",
    "properties": {"value": {"type": "integer"}},
    "required": ["value"],
}


@tool("echo", input_schema=VALUE, output_schema=ECHOED, read_only=True,
      allow_anonymous=True)
def echo(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """The peer's tool, read-only (anonymous callers allowed): its output is validated."""
    return {"value": input["value"]}


@tool("echo_raw", input_schema=VALUE, read_only=True, allow_anonymous=True)
def echo_raw(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """The same without an output schema (FastMCP's ``output_schema=None``)."""
    return {"value": input["value"]}


@tool("echo_keyed", input_schema=KEYED | {"required": ["operationId", "value"]},
      output_schema=ECHOED, idempotency_key="operationId")
def echo_keyed(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """The same behind a fresh key per call: claim and completion are the guard's cost."""
    return {"value": input["value"]}
