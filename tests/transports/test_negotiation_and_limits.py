"""Transport defects: Accept mismatches, unrenderable outputs, malformed ids, declared sizes."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

import pytest
from rest_framework.test import APIClient

from guarded_tools.models import Operation
from guarded_tools.store.replays import replays
from tests.conftest import key
from tests.transports.asgi_calls import CHUNK, run_asgi

URL = "/agent/tools/{}/"


class Receipt:
    """Something a handler returns by mistake (a model instance, say): not JSON."""


# -- an Accept header the endpoint cannot satisfy -------------------------------------------
MISMATCHES = [
    {"HTTP_ACCEPT": "text/html"},
    {"HTTP_ACCEPT": "text/plain"},
    {"HTTP_ACCEPT": "application/xml"},
    {"QUERY_STRING": "format=xml"},
]


@pytest.mark.django_db
@pytest.mark.parametrize("extra", MISMATCHES)
def test_agent_endpoints_answer_in_their_own_format(make_tool: Any, alice: Any,
                                                   client_for: Any, extra: dict[str, str]) -> None:
    definition = make_tool()
    client = client_for(alice)
    body = json.dumps({"operationId": key()})
    called = client.post(URL.format(definition.name), body,
                         content_type="application/json", **extra)
    assert called.status_code == 200, called.content[:300]
    assert called["Content-Type"] == "application/json"
    operation_id = called.json()["operation"]["id"]
    replayed = client.post(URL.format(definition.name), body,
                           content_type="application/json", **extra)
    assert replayed.status_code == 200
    assert replayed["Idempotent-Replayed"] == "true"
    json_endpoints = ["/agent/tools/", f"/agent/operations/{operation_id}/",
                      "/agent/errors.json"]
    for path in json_endpoints:
        response = client.get(path, **extra)
        assert response.status_code == 200, (path, response.content[:300])
        assert response["Content-Type"] == "application/json", path
        response.json()
    llms = APIClient().get("/agent/llms.txt", **extra)
    assert llms.status_code == 200
    assert llms["Content-Type"].startswith("text/plain")


@pytest.mark.django_db
@pytest.mark.parametrize("extra", MISMATCHES)
def test_openapi_document_ignores_accept(alice: Any, client_for: Any,
                                         extra: dict[str, str]) -> None:
    pytest.importorskip("drf_spectacular")
    response = client_for(alice).get("/agent/openapi.json", **extra)
    assert response.status_code == 200, response.content[:300]
    assert response.json()["openapi"] == "3.1.0"


@pytest.mark.django_db
@pytest.mark.parametrize("extra", MISMATCHES)
def test_errors_keep_their_json_under_any_accept(make_tool: Any, client_for: Any,
                                                 alice: Any, extra: dict[str, str]) -> None:
    response = client_for(alice).post(URL.format("no_such_tool"), "{}",
                                      content_type="application/json", **extra)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "tool_not_found"


@pytest.mark.django_db
def test_matching_accept_is_still_honoured(make_tool: Any, alice: Any, client_for: Any) -> None:
    response = client_for(alice).get("/agent/tools/", HTTP_ACCEPT="application/json; indent=2")
    assert response.status_code == 200
    assert b'\n  "tools"' in response.content  # DRF's indent parameter was accepted


# -- output DRF cannot render ---------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("atomic", [False, True])
def test_unrenderable_output_answers_what_a_replay_answers(make_tool: Any, alice: Any,
                                                           client_for: Any, atomic: bool) -> None:
    definition = make_tool(lambda input, ctx: {"receipt": Receipt(), "n": 1}, atomic=atomic)
    client = client_for(alice)
    client.raise_request_exception = False
    k = key()
    fresh = client.post(URL.format(definition.name), {"operationId": k}, format="json")
    assert Operation.objects.get(tool=definition.name).state == "succeeded"
    assert fresh.status_code == 200, fresh.content[:300]
    assert fresh["Content-Type"] == "application/json"
    replay = client.post(URL.format(definition.name), {"operationId": k}, format="json")
    assert replay["Idempotent-Replayed"] == "true"
    assert fresh.json()["output"] == replay.json()["output"]
    assert fresh.json()["output"] == {"receipt": {"__unserializable__": "Receipt"}, "n": 1}
    assert fresh.json()["operation"]["replayed"] is False


@pytest.mark.django_db
def test_unrenderable_output_of_an_unclaimed_call_has_placeholders(
        make_tool: Any, alice: Any, client_for: Any) -> None:
    definition = make_tool(lambda input, ctx: {"receipt": Receipt(), "n": 1}, read_only=True)
    client = client_for(alice)
    client.raise_request_exception = False
    response = client.post(URL.format(definition.name), {}, format="json")
    assert response.status_code == 200, response.content[:300]
    assert response.json()["output"] == {"receipt": {"__unserializable__": "Receipt"}, "n": 1}


@pytest.mark.django_db
@pytest.mark.parametrize("read_only", [False, True])
def test_nan_and_infinity_are_placeholders_stored_and_answered(
        make_tool: Any, alice: Any, client_for: Any, read_only: bool) -> None:
    """No strict JSON answer may carry them, and no database's JSON column takes them:
    the completion would fail after the effect ran."""
    output = {"ratio": float("nan"), "limit": float("inf"), "floor": float("-inf"), "n": 1}
    definition = make_tool(lambda input, ctx: output, read_only=read_only)
    client = client_for(alice)
    client.raise_request_exception = False
    body = {} if read_only else {"operationId": key()}
    response = client.post(URL.format(definition.name), body, format="json")
    assert response.status_code == 200, response.content[:300]
    expected = {"ratio": {"__unserializable__": "NaN"}, "limit": {"__unserializable__": "Infinity"},
                "floor": {"__unserializable__": "-Infinity"}, "n": 1}
    assert response.json()["output"] == expected
    if not read_only:
        assert Operation.objects.get(tool=definition.name).output == expected
        replays.clear()  # from the database, as another process would
        replay = client.post(URL.format(definition.name), body, format="json")
        assert replay["Idempotent-Replayed"] == "true" and replay.json()["output"] == expected


@pytest.mark.django_db
def test_a_response_the_renderer_refuses_is_a_json_internal_error(rf: Any, caplog: Any) -> None:
    """The view base renders before Django would, where a failure is still the agent's
    JSON error with a correlation id rather than Django's HTML page."""
    from rest_framework.response import Response

    from guarded_tools.transports.rest.views import GuardedAPIView

    class Broken(GuardedAPIView):
        permission_classes: list[Any] = []

        def get(self, request: Any) -> Response:
            return Response({"x": object()})

    response = Broken.as_view()(rf.get("/agent/broken/")).render()  # as Django's handler does
    assert response.status_code == 500
    error = json.loads(response.content)["error"]
    assert error["code"] == "internal_error" and error["correlation_id"] in caplog.text


# -- a malformed operation id ---------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("pk", ["not-a-uuid", "1234", "00000000-0000-0000-0000-00000000000g"])
def test_malformed_operation_id_answers_json_not_found(alice: Any, client_for: Any,
                                                       pk: str) -> None:
    response = client_for(alice).get(f"/agent/operations/{pk}/")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "operation_not_found"


@pytest.mark.django_db
def test_malformed_operation_id_still_needs_a_caller() -> None:
    response = APIClient().get("/agent/operations/not-a-uuid/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


@pytest.mark.django_db
def test_operation_id_in_upper_case_finds_the_operation(make_tool: Any, alice: Any,
                                                        client_for: Any) -> None:
    definition = make_tool()
    client = client_for(alice)
    called = client.post(URL.format(definition.name), {"operationId": key()}, format="json")
    operation_id = called.json()["operation"]["id"]
    response = client.get(f"/agent/operations/{operation_id.upper()}/")
    assert response.status_code == 200
    assert response.json()["id"] == operation_id


# -- a declared Content-Length over MAX_BODY_BYTES, under the ASGI wrapper ------------------
LIMIT = 256 * 1024  # the default MAX_BODY_BYTES
@pytest.mark.django_db
def test_declared_oversized_body_is_refused_before_it_is_read() -> None:
    sent, read = run_asgi("/agent/tools/list_orders/", len(CHUNK) * 400, 400)
    assert sent[0]["status"] == 413
    assert read == [0]
    assert json.loads(sent[1]["body"])["error"]["code"] == "request_too_large"


@pytest.mark.django_db
def test_declared_body_a_little_over_the_limit_is_drained_before_the_413() -> None:
    """All of it is read, so that a server closing the connection does not reset it."""
    sent, read = run_asgi("/agent/tools/list_orders/", len(CHUNK) * 6, 6)
    assert sent[0]["status"] == 413
    assert read == [6]


@pytest.mark.django_db
def test_a_client_awaiting_100_continue_is_refused_before_it_sends() -> None:
    sent, read = run_asgi("/agent/mcp/", len(CHUNK) * 6, 6,
                          headers=[(b"expect", b"100-continue")])
    assert sent[0]["status"] == 413
    assert read == [0]


@pytest.mark.django_db
def test_declared_bodies_elsewhere_or_within_the_limit_reach_django() -> None:
    sent, _ = run_asgi("/agent/tools/no_such_tool/", len(CHUNK) * 2, 2)
    assert sent[0]["status"] == 404  # read and routed by Django: under the limit
    assert LIMIT > len(CHUNK) * 2
    sent, _ = run_asgi("/admin/", len(CHUNK) * 8, 8)
    assert sent[0]["status"] != 413  # not a tool endpoint: the site's own business


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/upload/", "/errors.json"])
def test_a_site_mounting_the_agent_at_its_root_keeps_its_own_large_bodies(
        settings: Any, path: str) -> None:
    """Only tool calls and MCP are the agent's: a prefix of "/" is every path."""
    settings.ROOT_URLCONF = "tests.transports.urls_agent_at_root"
    sent, _ = run_asgi(path, len(CHUNK) * 8, 8)
    assert sent[0]["status"] != 413
    sent, read = run_asgi("/tools/list_orders/", len(CHUNK) * 400, 400)
    assert sent[0]["status"] == 413 and read == [0]


@pytest.mark.django_db
@pytest.mark.parametrize("transport", ["rest", "mcp"])
def test_the_first_answer_reads_as_its_replays(make_tool: Any, alice: Any, client_for: Any,
                                               transport: str) -> None:
    """DRF renders a Decimal as a number and a datetime its own way; the store keeps the
    guard's JSON of them. The first answer is that JSON too."""
    from datetime import datetime
    from decimal import Decimal

    output = {"amount": Decimal("1.10"), "at": datetime(2026, 11, 30, 1, 2, 3, 456789, UTC),
              (1, 2): "a tuple key"}
    definition = make_tool(lambda input, ctx: output if input.get("odd") else
                           {k: v for k, v in output.items() if isinstance(k, str)})
    client = client_for(alice)

    def call(body: dict[str, Any]) -> Any:
        if transport == "rest":
            return client.post(URL.format(definition.name), body, format="json").json()["output"]
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": definition.name, "arguments": body}}
        response = client.post("/agent/mcp/", json.dumps(message), content_type="application/json",
                               headers={"MCP-Protocol-Version": "2025-11-25"})
        return response.json()["result"]["structuredContent"]

    body = {"operationId": key()}
    first = call(body)
    assert first == {"amount": "1.10", "at": "2026-11-30T01:02:03.456Z"}
    replays.clear()
    assert call(body) == first  # from the database
    assert call(body) == first  # from this process's replay cache
    odd = call({"operationId": key(), "odd": True})  # keys JSON cannot have: a placeholder
    assert odd == {"__unserializable__": "dict"}
