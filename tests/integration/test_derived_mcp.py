"""The official ``mcp`` client against tools made from serializers, models, hints and views."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

if not __import__("importlib.metadata").metadata.version("mcp").startswith("2"):
    pytest.skip("the official client's 2.x API (the 1.x line is tested in test_mcp_v1.py)",
                allow_module_level=True)

import anyio
import httpx2
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from rest_framework import serializers
from rest_framework.authtoken.models import Token

from project.demo.models import Order, OrderNote
from tests.conftest import key
from tests.tools.samples import PERMS, Flaky, make_refund_tool, order_of, publish, publish_atomic


@pytest.fixture
def refund_tool(make_tool: Any) -> Any:
    return make_refund_tool(make_tool)


@pytest.fixture
def published() -> Iterator[None]:
    yield from publish()


@pytest.mark.django_db(transaction=True)
def test_official_mcp_client_calls_a_serializer_tool(live_server: Any, user_factory: Any) -> None:
    user = user_factory("mcp-noter")
    token = Token.objects.create(user=user)
    order = order_of(user, "M-1")
    seen: dict[str, Any] = {}
    k = key()

    async def main() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Token {token.key}"}, timeout=30)
        transport = streamable_http_client(f"{live_server.url}/agent/mcp/", http_client=http)
        async with Client(transport) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            seen["schema"] = listed["note_order"].input_schema
            seen["ok"] = await client.call_tool(
                "note_order", {"operationId": k, "order": order.pk, "text": "hello"})
            seen["bad"] = await client.call_tool(
                "note_order", {"operationId": key(), "order": order.pk + 1000, "text": "x"})

    anyio.run(main)
    assert seen["schema"]["properties"]["text"]["maxLength"] == 500
    assert seen["ok"].is_error is False
    assert seen["ok"].structured_content["reference"] == k
    assert seen["bad"].is_error is True
    text = seen["bad"].content[0].text
    assert "invalid_input" in text and str(order.pk + 1000) not in text
    assert OrderNote.objects.filter(reference=k).count() == 1


@pytest.mark.django_db(transaction=True)
def test_official_mcp_client_calls_a_pydantic_tool(live_server: Any, user_factory: Any,
                                                   refund_tool: Any) -> None:
    definition, _ = refund_tool
    user = user_factory("mcp-refunder")
    Order.objects.create(number="Q-1", customer=user, total="1.00")
    token = Token.objects.create(user=user)
    seen: dict[str, Any] = {}

    async def main() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Token {token.key}"}, timeout=30)
        transport = streamable_http_client(f"{live_server.url}/agent/mcp/", http_client=http)
        async with Client(transport) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            seen["schema"] = listed[definition.name].input_schema
            seen["count"] = await client.call_tool("count_orders", {"status": "open"})
            seen["refund"] = await client.call_tool(
                definition.name, {"operationId": key(), "amount": 10})
            seen["odd"] = await client.call_tool(
                definition.name, {"operationId": key(), "amount": 11})

    anyio.run(main)
    assert seen["schema"] == definition.input_schema
    assert seen["count"].structured_content == {"count": 1}
    assert seen["refund"].structured_content == {"refunded": 10, "reason": None}
    assert seen["odd"].is_error is True and "invalid_input" in seen["odd"].content[0].text


@pytest.mark.django_db(transaction=True)
def test_official_mcp_client_calls_the_published_viewset(live_server: Any, user_factory: Any,
                                                        published: None) -> None:
    user = user_factory("mcp-orders", perms=PERMS)
    token = Token.objects.create(user=user)
    seen: dict[str, Any] = {}
    k = key()

    async def main() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Token {token.key}"}, timeout=30)
        transport = streamable_http_client(f"{live_server.url}/agent/mcp/", http_client=http)
        async with Client(transport) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            seen["tools"] = listed
            body = {"operationId": k, "number": "M-7", "total": "2.00"}
            seen["created"] = await client.call_tool("order_create", body)
            seen["replay"] = await client.call_tool("order_create", body)
            seen["listed"] = await client.call_tool("order_list", {})
            seen["invalid"] = await client.call_tool(
                "order_create", {"operationId": key(), "number": "M-7", "total": "2.00"})
            order_id = seen["created"].structured_content["id"]
            seen["renamed"] = await client.call_tool(
                "rename_order", {"operationId": key(), "pk": order_id, "number": "M-8"})

    anyio.run(main)
    tools = seen["tools"]
    assert tools["order_list"].annotations.read_only_hint is True
    assert tools["order_create"].input_schema["required"] == ["number", "total", "operationId"]
    assert seen["created"].is_error is False
    assert seen["created"].structured_content["number"] == "M-7"
    assert seen["replay"].structured_content == seen["created"].structured_content
    assert [o["number"] for o in seen["listed"].structured_content["results"]] == ["M-7"]
    assert seen["invalid"].is_error is True and "invalid_input" in seen["invalid"].content[0].text
    assert seen["renamed"].structured_content == {"id": seen["created"].structured_content["id"],
                                                  "number": "M-8"}
    assert Order.objects.filter(number="M-8").count() == 1


class Address(serializers.Serializer):
    street = serializers.CharField(help_text="Street and number.")
    city = serializers.CharField(help_text="City.")


class Person(serializers.Serializer):
    name = serializers.CharField(help_text="Full name.")
    address = Address(help_text="Where they live.")


@pytest.mark.django_db(transaction=True)
def test_a_nested_serializer_schema_survives_tools_list(
    live_server: Any, user_factory: Any, make_tool: Any
) -> None:
    """A nested serializer's schema reaches the official client whole (the conformance
    suite's own ``json-schema-2020-12`` scenario runs in tests/integration/test_conformance.py)."""
    derived = make_tool(input=Person, input_schema={"type": "object"}, read_only=True,
                        idempotency_key=None)
    token = Token.objects.create(user=user_factory("mcp-schemas"))
    listed: dict[str, Any] = {}

    async def main() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Token {token.key}"}, timeout=30)
        transport = streamable_http_client(f"{live_server.url}/agent/mcp/", http_client=http)
        async with Client(transport) as client:
            listed.update({t.name: t.input_schema for t in (await client.list_tools()).tools})

    anyio.run(main)
    mine = listed[derived.name]
    Draft202012Validator.check_schema(mine)
    address = mine["properties"]["address"]  # a nested serializer, inlined
    assert address["description"] == "Where they live."
    assert address["properties"]["city"]["description"] == "City."
    assert address["additionalProperties"] is False
    assert mine["additionalProperties"] is False
    assert mine == derived.input_schema


@pytest.fixture
def flaky(atomic_path: str) -> Iterator[Flaky]:
    yield from publish_atomic()


@pytest.mark.django_db(transaction=True)
def test_official_mcp_client_retries_an_atomic_view_that_failed(
    live_server: Any, user_factory: Any, flaky: Flaky
) -> None:
    """atomic=True over MCP: the failed run left nothing, so its retry runs it, once."""
    flaky.failures = 1
    token = Token.objects.create(user=user_factory("mcp-atomic", perms=PERMS))
    body = {"operationId": key(), "number": "M-A", "total": "2.00"}
    seen: dict[str, Any] = {}

    async def main() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Token {token.key}"}, timeout=30)
        transport = streamable_http_client(f"{live_server.url}/agent/mcp/", http_client=http)
        async with Client(transport) as client:
            seen["failed"] = await client.call_tool("atomic_create", body)
            seen["orders_after_failure"] = await client.call_tool("order_list", {})
            seen["retry"] = await client.call_tool("atomic_create", body)
            seen["replay"] = await client.call_tool("atomic_create", body)

    anyio.run(main)
    assert seen["failed"].is_error is True
    assert "internal_error" in seen["failed"].content[0].text
    assert "secret-host" not in seen["failed"].content[0].text
    assert seen["orders_after_failure"].structured_content == {"results": []}
    assert seen["retry"].is_error is False, seen["retry"].content
    assert seen["replay"].structured_content == seen["retry"].structured_content
    assert flaky.runs == 2 and Order.objects.filter(number="M-A").count() == 1
