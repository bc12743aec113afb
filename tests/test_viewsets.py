"""An existing DRF ModelViewSet published as guarded tools: the real view, the guard around it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import pytest
from django.db import connection
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from guarded_tools import confirmations
from guarded_tools.models import Confirmation, Operation
from guarded_tools.registry import registry
from guarded_tools.viewsets import guarded_viewset
from project.demo.api import OrderViewSet
from project.demo.models import Order
from tests.conftest import key

URL = "/agent/tools/{}/"
PERMS = ("demo.add_order", "demo.delete_order")


def token_client(user: Any) -> APIClient:
    """Token authentication, as an agent's: the view's own classes read the header again."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def call(client: APIClient, name: str, body: dict[str, Any]) -> Any:
    return client.post(URL.format(name), body, format="json")


@pytest.fixture
def carol(user_factory: Any) -> Any:
    return user_factory("carol", perms=PERMS)


@pytest.mark.django_db
def test_list_and_retrieve_run_the_views_queryset(carol: Any, bob: Any) -> None:
    mine = Order.objects.create(number="C-1", customer=carol, total="3.50")
    theirs = Order.objects.create(number="B-1", customer=bob, total="9.00")
    client = token_client(carol)
    listed = call(client, "order_list", {})
    assert listed.status_code == 200, listed.json()
    assert listed.json()["output"] == {"results": [
        {"id": mine.pk, "number": "C-1", "status": "open", "total": "3.50"}]}
    got = call(client, "order_retrieve", {"pk": mine.pk})
    assert got.status_code == 200 and got.json()["output"]["number"] == "C-1"
    hidden = call(client, "order_retrieve", {"pk": theirs.pk})  # get_queryset() scoping
    assert hidden.status_code == 404
    assert hidden.json()["error"]["code"] == "object_not_found"


@pytest.mark.django_db
def test_create_is_keyed_replayed_and_validated_by_the_view(carol: Any) -> None:
    client = token_client(carol)
    k = key()
    body = {"operationId": k, "number": "C-9", "total": "12.00"}
    first = call(client, "order_create", body)
    assert first.status_code == 200, first.json()
    output = first.json()["output"]
    assert output["number"] == "C-9" and output["total"] == "12.00"
    order = Order.objects.get(number="C-9")
    assert order.customer == carol  # the view's HiddenField(CurrentUserDefault())
    again = call(client, "order_create", body)  # the view would now refuse: unique number
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["output"] == output
    duplicate = call(client, "order_create", {**body, "operationId": key()})
    assert duplicate.status_code == 422
    error = duplicate.json()["error"]
    assert error["code"] == "invalid_input"
    assert error["issues"] == [{"path": ["number"], "keyword": "unique", "message":
                                "must be unique: an object with this value already exists"}]
    assert "C-9" not in json.dumps(error)
    assert Order.objects.filter(number="C-9").count() == 1


@pytest.mark.django_db
def test_the_views_permission_classes_decide(user_factory: Any) -> None:
    viewer = user_factory("viewer")  # no demo.add_order: DjangoModelPermissions refuses
    k = key()
    response = call(token_client(viewer), "order_create",
                    {"operationId": k, "number": "V-1", "total": "1.00"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "authorization_denied"
    assert not Order.objects.exists()
    assert Operation.objects.get(key=k).state == "released"  # refused: nothing ran


@pytest.mark.django_db
def test_destroy_waits_for_a_person(carol: Any, django_user_model: Any) -> None:
    order = Order.objects.create(number="D-1", customer=carol, total="1.00")
    client = token_client(carol)
    body = {"operationId": key(), "pk": order.pk}
    pending = call(client, "order_destroy", body)
    assert pending.status_code == 202
    assert pending.json()["error"]["code"] == "confirmation_required"
    assert Order.objects.filter(pk=order.pk).exists()
    boss = django_user_model.objects.create_superuser("boss", password="pw")
    confirmations.approve(Confirmation.objects.get(), boss)
    done = call(client, "order_destroy", body)
    assert done.status_code == 200, done.json()
    assert done.json()["output"] == {"deleted": True, "pk": order.pk}
    assert not Order.objects.filter(pk=order.pk).exists()
    replay = call(client, "order_destroy", body)
    assert replay.status_code == 200 and replay["Idempotent-Replayed"] == "true"


# -- the guarantees, with a view of the test's own --------------------------------------

class Gate:
    """Counts the view's runs; holds the first one until the test opens the gate."""

    def __init__(self) -> None:
        self.runs = 0
        self.lock = threading.Lock()
        self.entered = threading.Event()
        self.open = threading.Event()
        self.fail_after_effect = False


GATE = Gate()


class GatedOrderViewSet(OrderViewSet):
    """Orders whose creation counts its runs (and can fail after its effect)."""

    def perform_create(self, serializer: Any) -> None:
        with GATE.lock:
            GATE.runs += 1
        super().perform_create(serializer)
        GATE.entered.set()
        assert GATE.open.wait(30), "the test never opened the gate"
        if GATE.fail_after_effect:
            raise RuntimeError("postgres://secret-host/after-the-effect")


@pytest.fixture
def gated() -> Iterator[Gate]:
    global GATE
    GATE = Gate()
    made = guarded_viewset(GatedOrderViewSet, basename="gated", actions={"create": {}})
    yield GATE
    for definition in made.values():
        registry.unregister(definition.name)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_sixteen_threads_with_one_key_run_the_view_once(gated: Gate, carol: Any) -> None:
    token = Token.objects.create(user=carol).key
    body = {"operationId": key(), "number": "T-1", "total": "5.00"}
    answers: list[int] = []
    done = threading.Semaphore(0)

    def worker() -> None:
        try:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
            answers.append(call(client, "gated_create", body).status_code)
        finally:
            connection.close()
            done.release()

    first = threading.Thread(target=worker, daemon=True)
    first.start()
    assert gated.entered.wait(30)  # the first call is inside the view, its claim committed
    others = [threading.Thread(target=worker, daemon=True) for _ in range(15)]
    for thread in others:
        thread.start()
    for _ in range(15):  # every other caller has its answer while the view still runs
        assert done.acquire(timeout=60)
    assert sorted(answers) == [409] * 15  # operation_in_flight
    gated.open.set()
    assert done.acquire(timeout=60)
    assert sorted(answers) == [200] + [409] * 15
    assert gated.runs == 1 and Order.objects.filter(number="T-1").count() == 1
    replay = APIClient()
    replay.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert call(replay, "gated_create", body)["Idempotent-Replayed"] == "true"
    assert gated.runs == 1


@pytest.mark.django_db(transaction=True)
def test_a_view_that_raises_after_its_effect_ends_outcome_unknown(
    gated: Gate, carol: Any, caplog: Any
) -> None:
    gated.fail_after_effect = True
    gated.open.set()
    client = token_client(carol)
    body = {"operationId": key(), "number": "U-1", "total": "5.00"}
    first = call(client, "gated_create", body)
    assert first.status_code >= 500
    assert first.json()["error"]["code"] == "outcome_unknown"
    assert "secret-host" not in json.dumps(first.json())
    again = call(client, "gated_create", body)
    assert again.json()["error"]["code"] == "outcome_unknown"
    assert gated.runs == 1 and Order.objects.filter(number="U-1").count() == 1
    assert Operation.objects.get(key=body["operationId"]).state == "outcome_unknown"


@pytest.mark.django_db(transaction=True)
def test_official_mcp_client_calls_the_published_viewset(live_server: Any,
                                                        user_factory: Any) -> None:
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

    anyio.run(main)
    tools = seen["tools"]
    assert tools["order_list"].annotations.read_only_hint is True
    assert tools["order_create"].input_schema["required"] == ["number", "total", "operationId"]
    assert seen["created"].is_error is False
    assert seen["created"].structured_content["number"] == "M-7"
    assert seen["replay"].structured_content == seen["created"].structured_content
    assert [o["number"] for o in seen["listed"].structured_content["results"]] == ["M-7"]
    assert seen["invalid"].is_error is True and "invalid_input" in seen["invalid"].content[0].text
    assert Order.objects.filter(number="M-7").count() == 1
