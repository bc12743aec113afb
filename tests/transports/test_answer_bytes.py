"""The bytes an agent receives for a call's output: the same in the first answer and in
every replay (from this process's replay cache and from the database), and what DRF's
``JSONRenderer`` makes of the decoded output, whatever the output holds.

Over REST with token and session authentication and over MCP's JSON-RPC endpoint. Runs
on SQLite and, with DATABASE_URL, on PostgreSQL (whose jsonb keeps its own key order:
there a replay from the database is compared by value).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from rest_framework.authtoken.models import Token
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from guarded_tools.store.replays import replays
from tests.transports import mcp_calls

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]

SCHEMA = {
    "type": "object",
    "properties": {"operationId": {"type": "string"}},
    "required": ["operationId"],
    "additionalProperties": False,
}


class Opaque:
    """A value no JSON encoder takes: stored and answered as a typed placeholder."""


#: Each output, and what an agent reads of it (its decoded JSON).
OUTPUTS: dict[str, tuple[Any, Any]] = {
    "non-ascii": ({"name": "Zoë \u2013 日本 🙂", "sep": "a\u2028b\u2029c", "ctl": "t\tq\"\\"},
                  {"name": "Zoë \u2013 日本 🙂", "sep": "a\u2028b\u2029c", "ctl": "t\tq\"\\"}),
    "decimal": ({"price": Decimal("12.30"), "big": Decimal("1E+30"), "n": 1.5},
                {"price": "12.30", "big": "1E+30", "n": 1.5}),
    "datetime": ({"at": datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
                  "day": date(2026, 1, 2), "id": uuid.UUID(int=7)},
                 {"at": "2026-01-02T03:04:05.678Z", "day": "2026-01-02",
                  "id": "00000000-0000-0000-0000-000000000007"}),
    "nested": ({"rows": [[1, 2.5, None], [True, "x", []], [{"a": [{}]}]], "t": (1, 2)},
               {"rows": [[1, 2.5, None], [True, "x", []], [{"a": [{}]}]], "t": [1, 2]}),
    "placeholder": ({"ok": 1, "thing": Opaque()},
                    {"ok": 1, "thing": {"__unserializable__": "Opaque"}}),
}


def drf(value: Any) -> bytes:
    """What DRF's JSONRenderer, with the site's settings, makes of ``value``."""
    return bytes(JSONRenderer().render(value))


def output_of(body: bytes) -> bytes:
    """The output's bytes in a REST answer, which DRF renders as ``{"output":…,…}``."""
    start = body.index(b":") + 1
    assert body[:start].replace(b" ", b"") == b'{"output":', body
    return body[start:body.rindex(b'"operation"')].strip().rstrip(b",")


def tool_returning(make_tool: Any, output: Any, *, atomic: bool = False) -> Any:
    def handler(input: dict[str, Any], ctx: Any) -> Any:
        return output

    return make_tool(handler, input_schema=SCHEMA, atomic=atomic)


@pytest.fixture(params=["token", "session"])
def rest_client(request: pytest.FixtureRequest, alice: Any, session_client_for: Any) -> Any:
    if request.param == "session":
        return session_client_for(alice)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")
    return client


def post(client: Any, name: str, key: str) -> Any:
    response = client.post(f"/agent/tools/{name}/", {"operationId": key}, format="json")
    assert response.status_code == 200, response.content
    return response


@pytest.mark.parametrize("atomic", [False, True], ids=["claim-first", "atomic"])
@pytest.mark.parametrize("kind", list(OUTPUTS))
def test_a_fresh_answer_has_the_bytes_of_its_replays_and_of_drf(
    kind: str, atomic: bool, make_tool: Any, rest_client: Any,
) -> None:
    output, expected = OUTPUTS[kind]
    definition = tool_returning(make_tool, output, atomic=atomic)
    key = uuid.uuid4().hex
    first = post(rest_client, definition.name, key)
    cached = post(rest_client, definition.name, key)
    replays.clear()
    stored = post(rest_client, definition.name, key)
    again = post(rest_client, definition.name, key)  # from the cache the database filled
    assert output_of(first.content) == drf(expected), first.content
    assert output_of(cached.content) == output_of(first.content)
    assert json.loads(stored.content)["output"] == expected
    assert output_of(again.content) == output_of(stored.content)
    if connection.vendor != "postgresql":
        assert output_of(stored.content) == output_of(first.content)
    for response in (first, cached, stored, again):  # the whole body, as DRF renders it
        assert response.content == drf(json.loads(response.content)), response.content


def test_response_data_holds_the_decoded_output_not_its_text(
    make_tool: Any, client_for: Any, alice: Any,
) -> None:
    """What reads ``response.data`` (a test client, the site's middleware) reads JSON
    values, in a fresh answer and in a replay from the cache."""
    output, expected = OUTPUTS["decimal"]
    definition = tool_returning(make_tool, output)
    client, key = client_for(alice), uuid.uuid4().hex
    for response in (post(client, definition.name, key), post(client, definition.name, key)):
        assert response.data["output"] == expected
        assert type(response.data["output"]) is dict
        assert response.json()["output"] == expected


@pytest.mark.parametrize("kind", ["non-ascii", "decimal", "nested"])
def test_a_site_with_spaced_json_gets_drf_rendering(
    kind: str, make_tool: Any, rest_client: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``COMPACT_JSON = False`` (read by DRF when its renderer is imported, so set here
    on the class): the output is rendered by DRF as every other value, spaces and all."""
    monkeypatch.setattr(JSONRenderer, "compact", False)
    output, expected = OUTPUTS[kind]
    definition = tool_returning(make_tool, output)
    key = uuid.uuid4().hex
    first, cached = (post(rest_client, definition.name, key) for _ in range(2))
    for response in (first, cached):
        body = json.loads(response.content)
        assert body["output"] == expected
        assert response.content == drf(body), response.content
    assert b'{"output": ' in first.content
    assert output_of(first.content) == output_of(cached.content) == drf(expected)


def test_an_indented_answer_is_drf_rendering(make_tool: Any, rest_client: Any) -> None:
    """A caller that asks for ``indent`` gets DRF's indented JSON of the output."""
    output, expected = OUTPUTS["nested"]
    definition = tool_returning(make_tool, output)
    response = rest_client.post(f"/agent/tools/{definition.name}/",
                                {"operationId": uuid.uuid4().hex}, format="json",
                                HTTP_ACCEPT="application/json; indent=2")
    assert response.status_code == 200, response.content
    body = json.loads(response.content)
    assert body["output"] == expected
    assert response.content == bytes(JSONRenderer().render(
        body, "application/json; indent=2", {}))


# -- MCP --------------------------------------------------------------------------------
def mcp_call(client: Any, name: str, key: str) -> tuple[bytes, dict[str, Any]]:
    response = mcp_calls.send(client, "tools/call", {
        "name": name, "arguments": {"operationId": key}})
    assert response.status_code == 200, response.content
    result = json.loads(response.content)["result"]
    assert result["isError"] is False, response.content
    return bytes(response.content), result


def structured_bytes(body: bytes) -> bytes | None:
    """The structured content's bytes in an MCP response, None when it has none."""
    if b'"structuredContent": ' not in body:
        return None
    return body[body.index(b'"structuredContent": ') + 21:body.index(b', "_meta"')]


@pytest.mark.parametrize("kind", ["non-ascii", "decimal", "datetime", "placeholder",
                                  "scalar", "list"])
def test_an_mcp_answer_is_the_outputs_json_text_in_every_replay(
    kind: str, make_tool: Any, client_for: Any, alice: Any, rest_client: Any,
) -> None:
    """The text content is the output's JSON text, the very bytes REST answers; the
    structured content (an object's) is that text; replays answer the same."""
    output, expected = {**OUTPUTS, "scalar": ("Zoë 🙂", "Zoë 🙂"),
                        "list": ([Decimal("1.10"), "ü"], ["1.10", "ü"])}[kind]
    definition = tool_returning(make_tool, output)
    client, key = client_for(alice), uuid.uuid4().hex
    answers = [mcp_call(client, definition.name, key)]
    answers.append(mcp_call(client, definition.name, key))
    replays.clear()
    answers.append(mcp_call(client, definition.name, key))
    rest = output_of(post(rest_client, definition.name, key).content)
    text = answers[0][1]["content"][0]["text"]
    assert json.loads(text) == expected
    if connection.vendor != "postgresql" or not isinstance(expected, dict):
        assert text.encode() == rest == drf(expected)
    for body, result in answers:
        assert json.loads(result["content"][0]["text"]) == expected
        if isinstance(expected, dict):
            assert result["structuredContent"] == expected
            assert structured_bytes(body) == result["content"][0]["text"].encode()
        else:
            assert structured_bytes(body) is None
    assert answers[1][1]["content"] == answers[0][1]["content"]
    if connection.vendor != "postgresql":
        assert answers[2][1]["content"] == answers[0][1]["content"]


@pytest.mark.parametrize("where", ["id", "input"])
def test_a_value_that_holds_the_splice_mark_is_not_taken_for_one(
    where: str, make_tool: Any, client_for: Any, alice: Any,
) -> None:
    """The output's text goes into an MCP body where a mark stands; a value of the
    caller's that holds the mark (the request's id, an input the tool echoes) is answered
    as itself, the body still what a plain encoder writes."""
    from guarded_tools.transports.mcp import protocol

    mark = f"{protocol._MARK}-{0 if where == 'id' else 1}"

    def handler(input: dict[str, Any], ctx: Any) -> Any:
        return {"echo": input["operationId"], "n": Decimal("1.50")}

    definition = make_tool(handler, input_schema=SCHEMA)
    key = mark if where == "input" else uuid.uuid4().hex
    rid: Any = mark if where == "id" else 1
    response = mcp_calls.send(client_for(alice), "tools/call", {
        "name": definition.name, "arguments": {"operationId": key}}, rid=rid)  # type: ignore[arg-type]
    assert response.status_code == 200, response.content
    body = json.loads(response.content)
    assert body["id"] == rid
    result = body["result"]
    assert result["isError"] is False, body
    assert json.loads(result["content"][0]["text"]) == {"echo": key, "n": "1.50"}
    assert result["structuredContent"] == {"echo": key, "n": "1.50"}
