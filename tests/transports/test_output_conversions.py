"""How many times a call's output is converted to or from JSON on its way to the agent.

Counted through the real REST call (DRF, the pipeline, the store), by watching every
``json`` encoder and decoder for the text of the output: a conversion that comes back
(the store encoding again what the guard already encoded, a decode and re-encode in
between) fails these tests. Runs on SQLite and, with DATABASE_URL, on PostgreSQL.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection

from guarded_tools.models import Operation
from guarded_tools.store.replays import replays
from tests.transports import mcp_calls

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]

SCHEMA = {
    "type": "object",
    "properties": {"operationId": {"type": "string"}},
    "required": ["operationId"],
    "additionalProperties": False,
}
MARK = "output-mark-7c1e"


def handler(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"mark": MARK, "items": list(range(5))}


@dataclass
class Conversions:
    encoded: int = 0
    decoded: int = 0


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> Iterator[Conversions]:
    """Counts each encode whose text holds the output, each decode whose text does.

    Escaping a string (``encode`` of a ``str``: MCP's text content, the output's text
    as a JSON string) is not counted: it converts no value."""
    seen = Conversions()
    encode, decode = json.JSONEncoder.encode, json.JSONDecoder.decode

    def counting_encode(self: json.JSONEncoder, o: Any) -> str:
        text = encode(self, o)
        if MARK in text and not isinstance(o, str):  # a string's escape encodes no value
            seen.encoded += 1
        return text

    def counting_decode(self: json.JSONDecoder, s: str, *args: Any, **kwargs: Any) -> Any:
        if MARK in s:
            seen.decoded += 1
        return decode(self, s, *args, **kwargs)

    monkeypatch.setattr(json.JSONEncoder, "encode", counting_encode)
    monkeypatch.setattr(json.JSONDecoder, "decode", counting_decode)
    yield seen


@pytest.fixture(params=["not-atomic", "atomic"])
def definition(request: pytest.FixtureRequest, make_tool: Any) -> Any:
    return make_tool(handler, input_schema=SCHEMA, atomic=request.param == "atomic")


def post(client: Any, name: str, key: str) -> bytes:
    response = client.post(f"/agent/tools/{name}/", {"operationId": key}, format="json")
    assert response.status_code == 200, response.content
    assert MARK.encode() in response.content
    return bytes(response.content)


def test_a_fresh_call_encodes_its_output_once_and_never_decodes_it(
    definition: Any, client_for: Any, alice: Any, conversions: Conversions,
) -> None:
    """The guard encodes the output once (its size, the store's and the replay cache's
    text, the answer's); the renderer writes that text into the response as it is."""
    post(client_for(alice), definition.name, uuid.uuid4().hex)
    assert (conversions.encoded, conversions.decoded) == (1, 0)


def test_a_replay_from_the_cache_converts_nothing_and_one_from_the_database_once_each(
    definition: Any, client_for: Any, alice: Any, conversions: Conversions,
) -> None:
    client, key = client_for(alice), uuid.uuid4().hex
    first = post(client, definition.name, key)
    replays.clear()  # from the database
    conversions.encoded = conversions.decoded = 0
    stored = post(client, definition.name, key)
    # the database's read, and the text made of it for the cache and the answer
    assert (conversions.encoded, conversions.decoded) == (1, 1)
    conversions.encoded = conversions.decoded = 0
    cached = post(client, definition.name, key)  # from this process's replay cache
    assert (conversions.encoded, conversions.decoded) == (0, 0)
    assert output_of(stored) == output_of(first) == output_of(cached)


def output_of(body: bytes) -> bytes:
    """The output's bytes in a REST answer (``{"output":…,"operation":{…}}``)."""
    assert body.startswith(b'{"output":'), body
    return body[len(b'{"output":'):body.rindex(b',"operation":')]


def typed(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"mark": MARK, "price": Decimal("12.30"), "at": AT, "id": ID, "name": "Zoë"}


AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


@pytest.mark.parametrize("atomic", [False, True])
def test_decimals_datetimes_and_uuids_read_as_stored_in_every_answer(
    atomic: bool, make_tool: Any, client_for: Any, alice: Any,
) -> None:
    """The text saved is DjangoJSONEncoder's: the first answer, a replay from the
    database and one from the cache give the agent the same values and, but for
    jsonb's key order, the same bytes."""
    definition = make_tool(typed, input_schema=SCHEMA, atomic=atomic)
    client, key = client_for(alice), uuid.uuid4().hex
    first = post(client, definition.name, key)
    replays.clear()
    stored = post(client, definition.name, key)
    cached = post(client, definition.name, key)
    expected = json.loads(json.dumps(typed({}, None), cls=DjangoJSONEncoder))
    assert expected["price"] == "12.30" and expected["at"] == "2026-01-02T03:04:05.678Z"
    assert json.loads(first)["output"] == expected
    assert Operation.objects.get(key=key).output == expected
    outputs = [body.split(b'"output":', 1)[1].split(b',"operation"', 1)[0]
               for body in (first, stored, cached)]
    # PostgreSQL's jsonb keeps its own key order: a replay from it (and the cache it
    # filled) has the same values
    assert outputs[1] == outputs[2], outputs
    assert json.loads(outputs[1]) == expected
    if connection.vendor != "postgresql":
        assert outputs[1] == outputs[0], outputs
    assert outputs[0].startswith(b"{") and outputs[0].endswith(b"}"), first


def test_an_mcp_call_encodes_its_output_once_and_never_decodes_it(
    definition: Any, client_for: Any, alice: Any, conversions: Conversions,
) -> None:
    """The guard's encoding (size, store, replay cache), then what MCP sends: that text
    as the text content (escaped as a JSON string) and as the structured content."""
    client, key = client_for(alice), uuid.uuid4().hex
    first = mcp_call(client, definition.name, key)
    assert (conversions.encoded, conversions.decoded) == (1, 0)
    conversions.encoded = conversions.decoded = 0
    cached = mcp_call(client, definition.name, key)
    assert (conversions.encoded, conversions.decoded) == (0, 0)
    assert mcp_output(cached) == mcp_output(first)


def mcp_output(body: bytes) -> tuple[str, Any]:
    """The text content of an MCP tool result, and its structured content's bytes."""
    result = json.loads(body)["result"]
    assert result["isError"] is False, body
    structured = body[body.index(b'"structuredContent": ') + 21:body.index(b', "_meta"')]
    return result["content"][0]["text"], structured


def mcp_call(client: Any, name: str, key: str) -> bytes:
    response = mcp_calls.send(client, "tools/call", {
        "name": name, "arguments": {"operationId": key}})
    assert response.status_code == 200 and MARK.encode() in response.content
    assert b'"isError": false' in response.content, response.content
    return bytes(response.content)
