"""DRF serializers as a tool's input and output: derived schema, validation, errors, MCP."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core import checks
from django.db import connection
from django.test.utils import CaptureQueriesContext
from jsonschema import Draft202012Validator
from rest_framework import serializers

from guarded_tools import confirmations, registry
from guarded_tools.checks import check_derived_schemas
from guarded_tools.models import Confirmation, Operation
from guarded_tools.serializers import spectacular_components
from project.demo.api import OrderNoteInput, OrderNoteSerializer
from project.demo.models import Order, OrderNote
from tests.conftest import key
from tests.tools.samples import order_of


class Line(serializers.Serializer):
    sku = serializers.CharField(max_length=8, label="SKU", help_text="The article number.")
    qty = serializers.IntegerField(min_value=1, max_value=9)


class Shipment(serializers.Serializer):
    operationId = serializers.CharField(max_length=64)
    speed = serializers.ChoiceField(choices=["slow", "fast"], help_text="How fast.")
    note = serializers.CharField(allow_null=True, required=False)
    lines = Line(many=True)
    order = serializers.PrimaryKeyRelatedField(queryset=Order.objects.all())

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        if data["speed"] == "fast" and len(data["lines"]) > 1:
            raise serializers.ValidationError("secret-object-text", code="too_many_for_fast")
        return data


class Unmappable(serializers.Serializer):
    operationId = serializers.CharField()
    anything = serializers.Field()


@pytest.fixture
def shipment_tool(make_tool: Any) -> Any:
    runs: list[dict[str, Any]] = []

    def handler(data: dict[str, Any], ctx: Any) -> dict[str, Any]:
        runs.append(dict(data))
        return {"order": data["order"].pk, "lines": len(data["lines"])}

    definition = make_tool(handler, input=Shipment, input_schema={"type": "object"})
    return definition, runs


def test_schema_is_derived_from_the_serializer(shipment_tool: Any) -> None:
    definition, _ = shipment_tool
    schema = definition.input_schema
    Draft202012Validator.check_schema(schema)
    props = schema["properties"]
    assert props["speed"]["enum"] == ["slow", "fast"]
    assert props["speed"]["description"].startswith("How fast.")
    assert props["note"]["type"] == ["string", "null"]  # 2020-12, not OpenAPI's nullable
    assert props["order"]["type"] == "integer"  # a related field as its key's type
    assert props["lines"]["type"] == "array" and props["lines"]["title"] == "Lines"
    line = props["lines"]["items"]  # inlined: the schema means the same inside openapi.json
    assert "$defs" not in schema
    assert line["properties"]["sku"]["title"] == "SKU"
    assert line["properties"]["sku"]["maxLength"] == 8
    assert line["properties"]["qty"]["minimum"] == 1 and line["properties"]["qty"]["maximum"] == 9
    assert sorted(schema["required"]) == ["lines", "operationId", "order", "speed"]
    assert schema["additionalProperties"] is False and line["additionalProperties"] is False


@pytest.mark.django_db
def test_call_gets_validated_data_and_a_replay_skips_validation(
    shipment_tool: Any, alice: Any, client_for: Any
) -> None:
    definition, runs = shipment_tool
    order = order_of(alice)
    body = {"operationId": key(), "speed": "slow", "order": order.pk,
            "lines": [{"sku": "X1", "qty": 2}]}
    first = client_for(alice).post(f"/agent/tools/{definition.name}/", body, format="json")
    assert first.status_code == 200, first.json()
    assert first.json()["output"] == {"order": order.pk, "lines": 1}
    assert runs[0]["order"] == order and runs[0]["lines"] == [{"sku": "X1", "qty": 2}]
    order.delete()  # the related object is gone: a replay must not re-validate
    again = client_for(alice).post(f"/agent/tools/{definition.name}/", body, format="json")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert len(runs) == 1


@pytest.mark.django_db
def test_schema_rejection_issues_no_sql(shipment_tool: Any, alice: Any, client_for: Any) -> None:
    definition, runs = shipment_tool
    client = client_for(alice)
    body = {"operationId": key(), "speed": "warp", "order": 1, "lines": []}
    with CaptureQueriesContext(connection) as queries:
        response = client.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert response.status_code == 422
    assert response.json()["error"]["issues"][0]["path"] == ["speed"]
    assert queries.captured_queries == []
    assert runs == []


@pytest.mark.django_db
def test_serializer_errors_become_issues_without_values_and_release_the_key(
    shipment_tool: Any, alice: Any, client_for: Any
) -> None:
    definition, runs = shipment_tool
    client = client_for(alice)
    k = key()
    bad = {"operationId": k, "speed": "fast", "order": 987654,
           "lines": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 1}]}
    response = client.post(f"/agent/tools/{definition.name}/", bad, format="json")
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert error["issues"] == [{"path": ["order"], "keyword": "does_not_exist",
                                "message": "names an object that does not exist or that you"
                                " cannot use"}]
    assert error["repair"]["action"] == "change_input"
    assert error["repair"]["fields"] == ["order"]
    assert "987654" not in json.dumps(error)
    order = order_of(alice)
    both = client.post(f"/agent/tools/{definition.name}/", {**bad, "order": order.pk},
                       format="json")  # object-level validator: the root's path
    assert both.status_code == 422
    assert both.json()["error"]["issues"][0]["path"] == []
    assert both.json()["error"]["issues"][0]["keyword"] == "too_many_for_fast"
    assert "secret-object-text" not in json.dumps(both.json())
    fixed = client.post(f"/agent/tools/{definition.name}/",
                        {**bad, "order": order.pk, "speed": "slow"}, format="json")
    assert fixed.status_code == 200, fixed.json()  # the same key, repaired: it runs
    assert len(runs) == 1
    assert Operation.objects.get(key=k).state == "succeeded"


@pytest.mark.django_db
def test_output_serializer_shapes_the_answer(alice: Any, client_for: Any) -> None:
    order = order_of(alice)
    k = key()
    response = client_for(alice).post(
        "/agent/tools/note_order/", {"operationId": k, "order": order.pk, "text": "ring twice"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    note = OrderNote.objects.get(reference=k)
    output = response.json()["output"]
    assert output["id"] == note.pk and output["order"] == order.pk
    assert output["text"] == "ring twice" and output["reference"] == k
    Draft202012Validator(
        client_for(alice).get("/agent/tools/").json()["tools"][
            [t["name"] for t in client_for(alice).get("/agent/tools/").json()["tools"]].index(
                "note_order")]["outputSchema"]
    ).validate(output)


@pytest.mark.django_db
def test_the_serializers_own_validator_hides_other_users_orders(
    alice: Any, bob: Any, client_for: Any
) -> None:
    theirs = order_of(bob, "B-1")
    response = client_for(alice).post(
        "/agent/tools/note_order/", {"operationId": key(), "order": theirs.pk, "text": "hi"},
        format="json",
    )
    assert response.status_code == 422
    assert response.json()["error"]["issues"][0]["keyword"] == "does_not_exist"
    assert not OrderNote.objects.exists()


def test_an_unmappable_field_is_a_check_error(make_tool: Any) -> None:
    definition = make_tool(input=Unmappable, input_schema={"type": "object"})
    errors = [m for m in check_derived_schemas() if definition.name in m.msg]
    assert [m.id for m in errors] == ["guarded_tools.E011"]
    assert errors[0].level == checks.ERROR and "Field()" in errors[0].msg
    assert "extend_schema_field" in (errors[0].hint or "")


def test_drf_spectacular_warnings_are_still_readable() -> None:
    """Warnings are heard at ``GENERATOR_STATS.emit`` and still counted there: if
    drf-spectacular stopped reporting through it, unmappable fields would stop being
    reported; this fails first."""
    from drf_spectacular.drainage import GENERATOR_STATS

    GENERATOR_STATS.reset()
    root, components, warnings = spectacular_components(Unmappable, "request")
    assert root == "UnmappableRequest"
    assert components[root]["properties"]["anything"]["type"] == "string"  # the fallback
    assert any("could not resolve serializer field" in w for w in warnings)
    again = spectacular_components(Unmappable, "request")[2]
    assert again == warnings  # reported on every derivation, not only the first
    assert GENERATOR_STATS  # its own count goes on, as --fail-on-warn reads it
    assert "emit" not in vars(GENERATOR_STATS)  # the listener is gone after


@pytest.mark.django_db
def test_openapi_and_tools_list_show_the_same_schema(alice: Any, client_for: Any) -> None:
    client = client_for(alice)
    listed = {t["name"]: t for t in client.get("/agent/tools/").json()["tools"]}
    document = client.get("/agent/openapi.json").json()
    body = document["paths"]["/agent/tools/note_order/"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    assert schema == listed["note_order"]["inputSchema"]
    mcp = client.post("/agent/mcp/", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                      format="json", HTTP_MCP_PROTOCOL_VERSION="2025-06-18",
                      HTTP_ACCEPT="application/json, text/event-stream")
    tools = {t["name"]: t for t in mcp.json()["result"]["tools"]}
    assert tools["note_order"]["inputSchema"] == listed["note_order"]["inputSchema"]


DEMO_DERIVED = ("note_order", "count_orders", "order_list", "order_retrieve", "order_create",
                "order_destroy")


#: Composition keywords OpenAI's strict mode documents as unsupported.
UNSUPPORTED = ("allOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
               "patternProperties")


def strict_problems(schema: Any, path: str = "") -> list[str]:
    """OpenAI's strict function-calling rules that its converters do not enforce, written
    from its documentation: every object closed, every property described by a title or
    a description, no unsupported composition keyword. The converters themselves run in
    ``test_every_demo_tool_passes_langchains_and_openais_strict_conversion``."""
    found: list[str] = []
    if isinstance(schema, dict):
        found += [f"{path}: {word} is not supported" for word in UNSUPPORTED if word in schema]
        if schema.get("type") == "object" and "properties" in schema:
            if schema.get("additionalProperties") is not False:
                found.append(f"{path}: additionalProperties is not false")
            for name, sub in schema["properties"].items():
                if isinstance(sub, dict) and not (sub.get("title") or sub.get("description")):
                    found.append(f"{path}/{name}: not described")
        for name, sub in schema.items():
            found += strict_problems(sub, f"{path}/{name}")
    elif isinstance(schema, list):
        for index, sub in enumerate(schema):
            found += strict_problems(sub, f"{path}/{index}")
    return found


@pytest.mark.django_db
def test_every_demo_tool_schema_is_2020_12_and_strict_convertible(
    alice: Any, client_for: Any
) -> None:
    tools = {t["name"]: t for t in client_for(alice).get("/agent/tools/").json()["tools"]}
    assert set(DEMO_DERIVED) <= {definition.name for definition in registry}
    for name, entry in tools.items():
        Draft202012Validator.check_schema(entry["inputSchema"])
        assert entry["inputSchema"]["type"] == "object", name
        if "outputSchema" in entry:
            Draft202012Validator.check_schema(entry["outputSchema"])
    for definition in registry:  # the demo's tools, hand-written and derived alike
        assert strict_problems(definition.input_schema) == [], definition.name


def strict_conversions(name: str, schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``schema`` as LangChain's and OpenAI's own strict conversions send it.

    LangChain: ``convert_to_openai_tool(..., strict=True)``, for a tool in OpenAI's
    function format. OpenAI: the package has no public strict helper that takes a JSON
    Schema (``pydantic_function_tool`` takes a model), so this calls the function it runs
    on the model's schema, ``openai.lib._pydantic._ensure_strict_json_schema``, on ours.
    Both raise on what they cannot convert (a sub-schema that is not an object, a
    ``$ref`` that is not local) and rewrite the rest.
    """
    import copy

    from langchain_core.utils.function_calling import convert_to_openai_tool
    from openai.lib._pydantic import _ensure_strict_json_schema

    tool = {"name": name, "description": "", "parameters": copy.deepcopy(schema)}
    langchain = convert_to_openai_tool(tool, strict=True)
    assert langchain["function"]["strict"] is True
    mine = copy.deepcopy(schema)
    return {"langchain": langchain["function"]["parameters"],
            "openai": _ensure_strict_json_schema(mine, path=(), root=mine)}


def rewritten(schema: Any) -> Any:
    """``schema`` without what strict mode rewrites whatever the schema says: every
    property required (an optional one must then be sent, as null where null is allowed),
    ``"default": null`` dropped (null is then what is sent)."""
    if isinstance(schema, list):
        return [rewritten(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: rewritten(v) for k, v in schema.items()
            if k != "required" and not (k == "default" and v is None)}


@pytest.mark.django_db
def test_every_demo_tool_passes_langchains_and_openais_strict_conversion(
    client_for: Any, django_user_model: Any
) -> None:
    """Each input schema an agent gets from ``GET tools/`` converts, and neither converter
    has to change its meaning: no object to close, no ``allOf`` or ``$ref`` to inline."""
    pytest.importorskip("langchain_core")
    pytest.importorskip("openai")
    everyone = django_user_model.objects.create_superuser("strict", password="pw")
    tools = client_for(everyone).get("/agent/tools/").json()["tools"]
    assert {t["name"] for t in tools} == {definition.name for definition in registry}
    for entry in tools:
        for converter, sent in strict_conversions(entry["name"], entry["inputSchema"]).items():
            Draft202012Validator.check_schema(sent)
            assert rewritten(sent) == rewritten(entry["inputSchema"]), (converter, entry["name"])
            assert strict_problems(sent) == [], (converter, entry["name"])


def test_the_strict_converters_refuse_or_rewrite_a_schema_strict_mode_cannot_take() -> None:
    """What makes the test above able to fail: an open nested object is closed by both
    converters (its meaning changes), and a property that is no schema object is refused."""
    pytest.importorskip("langchain_core")
    pytest.importorskip("openai")
    open_object = {"type": "object", "additionalProperties": False, "properties": {
        "tags": {"type": "object", "description": "Anything.", "properties": {}}}}
    for sent in strict_conversions("loose", open_object).values():
        assert rewritten(sent) != rewritten(open_object)
        assert sent["properties"]["tags"]["additionalProperties"] is False
    with pytest.raises(TypeError):
        strict_conversions("broken", {"type": "object", "properties": {"a": True}})


def test_input_and_input_schema_together_are_refused(make_tool: Any) -> None:
    with pytest.raises(ValueError, match="not both"):
        make_tool(input=Shipment, input_schema={"type": "object", "properties": {}})


@pytest.mark.django_db
def test_openapi_references_all_resolve(alice: Any, client_for: Any, shipment_tool: Any) -> None:
    """A schema shown inside openapi.json refers to nothing that only exists in the tool's."""
    document = client_for(alice).get("/agent/openapi.json").json()
    refs: list[str] = []
    stack: list[Any] = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    assert refs
    for ref in refs:
        target: Any = document
        for part in ref.removeprefix("#/").split("/"):
            target = target[part]  # KeyError: a dangling reference


@pytest.mark.django_db(transaction=True)
def test_an_async_handler_gets_validated_data_and_its_output_serialized(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    order = order_of(alice)

    async def handler(data: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"id": 1, "order": data["order"], "reference": data["operationId"],
                "text": data["text"], "created_at": "2026-01-01T00:00:00Z"}

    definition = make_tool(handler, input=OrderNoteInput, output=OrderNoteSerializer,
                           input_schema={"type": "object"})
    body = {"operationId": key(), "order": order.pk, "text": "async"}
    response = client_for(alice).post(f"/agent/tools/{definition.name}/", body, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["output"]["order"] == order.pk
    assert response.json()["output"]["text"] == "async"
    theirs = client_for(alice).post(f"/agent/tools/{definition.name}/",
                                    {**body, "operationId": key(), "order": order.pk + 99},
                                    format="json")
    assert theirs.status_code == 422


@pytest.mark.django_db
def test_an_effect_only_call_the_serializer_refuses_asks_nobody(
    make_tool: Any, alice: Any, client_for: Any, django_user_model: Any
) -> None:
    """The serializer validates before the confirmation: the approver never sees a call
    that cannot succeed; a good one waits, and once approved runs with validated_data."""
    order = order_of(alice)
    seen: list[Any] = []

    def handler(data: Any, ctx: Any) -> dict[str, Any]:
        seen.append(data)
        return {"order": data["order"].pk, "text": data["text"]}

    definition = make_tool(handler, input=OrderNoteInput, confirm="effect-only",
                           input_schema={"type": "object"})
    url = f"/agent/tools/{definition.name}/"
    client = client_for(alice)
    bad = client.post(url, {"operationId": key(), "order": order.pk + 99, "text": "x"},
                      format="json")
    assert bad.status_code == 422, bad.json()
    assert bad.json()["error"]["code"] == "invalid_input"
    assert [(i["path"], i["keyword"]) for i in bad.json()["error"]["issues"]] == [
        (["order"], "does_not_exist")]
    assert not Confirmation.objects.exists()  # nobody was asked
    body = {"operationId": key(), "order": order.pk, "text": "fine"}
    pending = client.post(url, body, format="json")
    assert pending.status_code == 202, pending.json()
    boss = django_user_model.objects.create_superuser("boss", password="pw")
    confirmations.approve(Confirmation.objects.get(), boss)
    done = client.post(url, body, format="json")
    assert done.status_code == 200, done.json()
    assert done.json()["output"] == {"order": order.pk, "text": "fine"}
    assert len(seen) == 1 and seen[0]["order"] == order  # validated_data: the object itself


@pytest.mark.django_db
def test_derived_titles_are_humanised_as_a_hand_written_tools_read(
    shipment_tool: Any, make_tool: Any, alice: Any, client_for: Any
) -> None:
    """``operationId`` reads "Operation id" (as the demo's hand-written schemas say it),
    whether the schema comes from a serializer, a Pydantic model or type hints; a
    ``label=`` or a model's own title is kept."""
    from pydantic import BaseModel, Field

    class Move(BaseModel):
        operationId: str
        sourceAccountId: int = Field(title="From account")
        order_id: int

    def hinted(operationId: str, orderId: int, *, ctx: Any) -> dict[str, Any]:
        return {}

    serialized, _ = shipment_tool
    modelled = make_tool(input=Move, input_schema={"type": "object"})
    typed = make_tool(hinted, input_schema={"type": "object"})
    listed = client_for(alice).get("/agent/tools/").json()["tools"]
    titles = {t["name"]: {name: spec.get("title") for name, spec in
                          t["inputSchema"]["properties"].items()} for t in listed}
    assert titles[serialized.name]["operationId"] == "Operation id"
    assert titles[serialized.name]["speed"] == "Speed"
    assert titles[modelled.name] == {"operationId": "Operation id",
                                     "sourceAccountId": "From account", "order_id": "Order id"}
    assert titles[typed.name] == {"operationId": "Operation id", "orderId": "Order id"}
    assert serialized.input_schema["properties"]["lines"]["items"]["properties"]["sku"][
        "title"] == "SKU"  # a label= is the author's
    assert titles["order_retrieve"]["pk"] == "Id"
