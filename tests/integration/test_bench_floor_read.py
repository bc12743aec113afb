"""F-M, the read-only MCP call's floor (``bench.floor.read_mcp_floor_of``), beside the app.

For the same request, anonymous or with a DRF token, F-M answers the very bytes the app's
MCP endpoint answers (what ``bench/mcp.lua`` checks under wrk), and it refuses what the
guard refuses before the handler: a body that repeats a key or holds NaN (the strict
parser), an argument the tool's input schema refuses (its compiled validator).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import include, path
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from bench.floor import read_mcp_floor_of
from guarded_tools import registry, tool

pytestmark = pytest.mark.django_db

#: The bench's ``echo`` (``bench.tools``), under a name of this module's own.
NAME = "floor_read_echo"
VALUE = {"type": "object", "properties": {"value": {"type": "integer"}},
         "required": ["value"], "additionalProperties": False}
ECHOED = {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]}
FLOOR, APP = "/agent/mcp/floor/read/", "/agent/mcp/"

#: F-M under the MCP endpoint's path, as ``bench.urls`` serves it (``@pytest.mark.urls``).
urlpatterns = [path("agent/mcp/floor/read/", read_mcp_floor_of(NAME)),
               path("agent/", include("guarded_tools.urls"))]


@pytest.fixture(scope="module", autouse=True)
def echo() -> Iterator[None]:
    @tool(NAME, input_schema=VALUE, output_schema=ECHOED, read_only=True, allow_anonymous=True)
    def handler(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"value": input["value"]}

    yield
    registry.unregister(NAME)


def post(client: APIClient, where: str, body: bytes) -> Any:
    return client.generic("POST", where, body, content_type="application/json",
                          HTTP_ACCEPT="application/json, text/event-stream",
                          HTTP_MCP_PROTOCOL_VERSION="2025-11-25")


def message(arguments: str, rid: str = "7") -> bytes:
    return (f'{{"jsonrpc": "2.0", "id": {rid}, "method": "tools/call",'
            f' "params": {{"name": "{NAME}", "arguments": {arguments}}}}}').encode()


@pytest.fixture(params=["anonymous", "token"])
def caller(request: Any, alice: Any) -> APIClient:
    client = APIClient()
    if request.param == "token":
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")
    return client


@pytest.mark.urls(__name__)
@pytest.mark.parametrize(("arguments", "rid", "value"), [
    ('{"value": 7}', "7", 7), ('{"value": -123456789012}', '"a-string-id"', -123456789012)])
def test_the_read_floor_answers_the_apps_bytes(caller: APIClient, arguments: str, rid: str,
                                               value: int) -> None:
    body = message(arguments, rid)
    app, floor = post(caller, APP, body), post(caller, FLOOR, body)
    assert (app.status_code, floor.status_code) == (200, 200), (app.content, floor.content)
    assert floor.content == app.content
    assert floor["Content-Type"] == app["Content-Type"] == "application/json"
    answer = json.loads(floor.content)
    assert answer["id"] == json.loads(rid)
    assert answer["result"]["structuredContent"] == {"value": value}
    assert json.loads(answer["result"]["content"][0]["text"]) == {"value": value}
    assert answer["result"]["isError"] is False


@pytest.mark.urls(__name__)
@pytest.mark.parametrize("body", [
    message('{"value": 7, "value": 8}'),  # a key repeated
    message('{"value": NaN}'),
    b'{"jsonrpc": "2.0", "id": 7, "id": 8, "method": "tools/call"}',
    b'{"jsonrpc": "2.0", "id": 7,',  # not JSON
])
def test_the_read_floor_refuses_a_body_the_strict_parser_refuses(caller: APIClient,
                                                                 body: bytes) -> None:
    app, floor = post(caller, APP, body), post(caller, FLOOR, body)
    assert app.status_code == floor.status_code == 400, (app.content, floor.content)
    assert floor.content == app.content
    assert json.loads(floor.content)["error"]["code"] == -32700


@pytest.mark.urls(__name__)
@pytest.mark.parametrize("arguments", ['{"value": "7"}', '{"value": 7.5}', "{}",
                                       '{"value": 7, "other": 1}'])
def test_the_read_floor_refuses_an_argument_the_input_schema_refuses(caller: APIClient,
                                                                     arguments: str) -> None:
    body = message(arguments)
    app, floor = post(caller, APP, body), post(caller, FLOOR, body)
    assert app.status_code == floor.status_code == 200, (app.content, floor.content)
    assert floor.content == app.content
    result = json.loads(floor.content)["result"]
    assert result["isError"] is True and "structuredContent" not in result
    assert result["_meta"]["io.github.guarded-tools/error"]["code"] == "invalid_input"
