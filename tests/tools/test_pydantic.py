"""Pydantic models and plain type hints as a tool's input: schema, validation, REST and MCP."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import Field

from guarded_tools.models import Operation
from project.demo.models import Order
from tests.conftest import key
from tests.tools.samples import Refund, make_refund_tool


@pytest.fixture
def refund_tool(make_tool: Any) -> Any:
    return make_refund_tool(make_tool)


def test_schema_is_the_models(refund_tool: Any) -> None:
    definition, _ = refund_tool
    schema = definition.input_schema
    Draft202012Validator.check_schema(schema)
    assert schema["properties"]["amount"]["exclusiveMinimum"] == 0
    assert schema["properties"]["amount"]["maximum"] == 500
    assert schema["additionalProperties"] is False
    assert definition.output_schema["required"] == ["refunded", "reason"]


@pytest.mark.django_db
def test_handler_gets_the_instance_and_errors_hide_values(
    refund_tool: Any, alice: Any, client_for: Any
) -> None:
    definition, seen = refund_tool
    client = client_for(alice)
    k = key()
    odd = client.post(f"/agent/tools/{definition.name}/",
                      {"operationId": k, "amount": 377}, format="json")
    assert odd.status_code == 422
    error = odd.json()["error"]
    assert error["code"] == "invalid_input"
    assert error["issues"] == [{"path": ["amount"], "keyword": "value_error",
                                "message": "was refused by the model's validation"}]
    assert "377" not in json.dumps(error)
    assert Operation.objects.get(key=k).state == "released"
    ok = client.post(f"/agent/tools/{definition.name}/",
                     {"operationId": k, "amount": 378, "reason": "late"}, format="json")
    assert ok.status_code == 200, ok.json()
    assert ok.json()["output"] == {"refunded": 378, "reason": "late"}
    assert isinstance(seen[0], Refund) and seen[0].reason == "late"


@pytest.mark.django_db
def test_schema_rejects_before_the_model(refund_tool: Any, alice: Any, client_for: Any) -> None:
    definition, seen = refund_tool
    response = client_for(alice).post(f"/agent/tools/{definition.name}/",
                                      {"operationId": key(), "amount": 900}, format="json")
    assert response.status_code == 422
    assert response.json()["error"]["issues"][0]["keyword"] == "maximum"
    assert seen == []


@pytest.mark.django_db
def test_type_hints_are_enough(make_tool: Any, alice: Any, client_for: Any) -> None:
    def cancel_order(
        order_id: Annotated[int, Field(ge=1, description="The order.")], reason: str = "",
        *, ctx: Any,
    ) -> dict[str, Any]:
        return {"order": order_id, "reason": reason, "user": ctx.user.username}

    definition = make_tool(cancel_order, name="hinted_cancel", input_schema={"type": "object"},
                           idempotency_key=None, read_only=True)
    schema = definition.input_schema
    assert schema["required"] == ["order_id"]
    assert schema["properties"]["order_id"]["minimum"] == 1
    assert schema["properties"]["reason"]["default"] == ""
    client = client_for(alice)
    ok = client.post("/agent/tools/hinted_cancel/", {"order_id": 4}, format="json")
    assert ok.status_code == 200, ok.json()
    assert ok.json()["output"] == {"order": 4, "reason": "", "user": "alice"}
    extra = client.post("/agent/tools/hinted_cancel/", {"order_id": 4, "x": 1}, format="json")
    assert extra.status_code == 422


@pytest.mark.django_db
def test_demo_type_hint_tool(alice: Any, client_for: Any) -> None:
    Order.objects.create(number="P-1", customer=alice, total="1.00")
    Order.objects.create(number="P-2", customer=alice, total="1.00", status="shipped")
    client = client_for(alice)
    assert client.post("/agent/tools/count_orders/", {}, format="json").json()["output"] == {
        "count": 2}
    shipped = client.post("/agent/tools/count_orders/", {"status": "shipped"}, format="json")
    assert shipped.json()["output"] == {"count": 1}
    wrong = client.post("/agent/tools/count_orders/", {"status": "lost"}, format="json")
    assert wrong.status_code == 422
