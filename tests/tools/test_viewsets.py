"""An existing DRF ModelViewSet published as guarded tools: the real view, the guard around it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.permissions import SAFE_METHODS, BasePermission, IsAuthenticated
from rest_framework.test import APIClient
from rest_framework.throttling import BaseThrottle

from guarded_tools import confirmations, registry
from guarded_tools.models import Confirmation, Operation
from guarded_tools.viewsets import guarded_view, guarded_viewset
from project.demo.api import OrderViewSet
from project.demo.models import Order
from tests.conftest import key
from tests.tools.samples import (
    PERMS,
    RENAME_SCHEMA,
    Flaky,
    publish,
    publish_atomic,
)

URL = "/agent/tools/{}/"
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


class StaffCreates(BasePermission):
    """Anyone reads; only staff create (a rule of the view's, no Django permission)."""

    def has_permission(self, request: Any, view: Any) -> bool:
        return request.method in SAFE_METHODS or bool(request.user.is_staff)


class StaffOrderViewSet(OrderViewSet):
    """Orders only staff create."""

    permission_classes = [IsAuthenticated, StaffCreates]


@pytest.mark.django_db
def test_the_views_permission_classes_decide(carol: Any) -> None:
    made = guarded_viewset(StaffOrderViewSet, basename="staff", actions={"create": {}})
    k = key()
    try:
        response = call(token_client(carol), "staff_create",
                        {"operationId": k, "number": "V-1", "total": "1.00"})
    finally:
        registry.unregister(made["create"].name)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "authorization_denied"
    assert not Order.objects.exists()
    assert Operation.objects.get(key=k).state == "released"  # refused: nothing ran


@pytest.mark.django_db
def test_model_permissions_are_checked_on_replays_too(carol: Any, user_factory: Any) -> None:
    """The view's DjangoModelPermissions become the tool's permissions: a replay, which
    never runs the view, is still refused once the permission is gone."""
    client = token_client(carol)
    body = {"operationId": key(), "number": "P-1", "total": "1.00"}
    assert call(client, "order_create", body).status_code == 200
    carol.user_permissions.remove(Permission.objects.get(codename="add_order"))
    replay = call(client, "order_create", body)  # the token loads the user afresh
    assert replay.status_code == 403
    assert replay.json()["error"]["code"] == "authorization_denied"
    viewer = user_factory("viewer")
    names = {t["name"] for t in token_client(viewer).get("/agent/tools/").json()["tools"]}
    assert "order_list" in names and "order_create" not in names


@pytest.mark.django_db
def test_destroy_waits_for_a_person(carol: Any, bob: Any, django_user_model: Any) -> None:
    order = Order.objects.create(number="D-1", customer=carol, total="1.00")
    theirs = Order.objects.create(number="D-2", customer=bob, total="1.00")
    client = token_client(carol)
    for pk in (theirs.pk, theirs.pk + 1000):  # get_queryset() scopes it; none at all
        hidden = call(client, "order_destroy", {"operationId": key(), "pk": pk})
        assert hidden.status_code == 404, hidden.json()
        assert hidden.json()["error"]["code"] == "object_not_found"
    assert not Confirmation.objects.exists()  # nobody is asked to delete what is not there
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


# -- whose authentication: the view's own classes, and plain Django views ------------------

@pytest.fixture
def published() -> Iterator[None]:
    yield from publish()


@pytest.mark.django_db
def test_the_views_authentication_classes_still_decide(
    published: None, carol: Any, session_client_for: Any
) -> None:
    Order.objects.create(number="S-1", customer=carol, total="1.00")
    by_token = call(token_client(carol), "sessiononly_list", {})  # the guard accepts tokens
    assert by_token.status_code in (401, 403)
    assert by_token.json()["error"]["code"] in ("not_authenticated", "authorization_denied")
    by_session = call(session_client_for(carol), "sessiononly_list", {})
    assert by_session.status_code == 200, by_session.json()
    assert [o["number"] for o in by_session.json()["output"]["results"]] == ["S-1"]


@pytest.mark.django_db
def test_a_plain_django_view_as_a_keyed_tool(published: None, carol: Any, bob: Any) -> None:
    mine = Order.objects.create(number="R-1", customer=carol, total="1.00")
    Order.objects.create(number="TAKEN", customer=bob, total="1.00")
    client = token_client(carol)
    body = {"operationId": key(), "pk": mine.pk, "number": "R-2"}
    done = call(client, "rename_order", body)
    assert done.status_code == 200, done.json()
    assert done.json()["output"] == {"id": mine.pk, "number": "R-2"}
    assert call(client, "rename_order", body)["Idempotent-Replayed"] == "true"
    taken = call(client, "rename_order", {**body, "operationId": key(), "number": "TAKEN"})
    assert taken.status_code == 422
    assert taken.json()["error"]["issues"][0]["path"] == ["number"]
    assert "taken" not in taken.json()["error"]["message"].lower()
    theirs = Order.objects.get(number="TAKEN")
    hidden = call(client, "rename_order", {"operationId": key(), "pk": theirs.pk,
                                           "number": "MINE"})
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "object_not_found"
    assert Order.objects.get(pk=theirs.pk).number == "TAKEN"


class BrokenViewSet(OrderViewSet):
    """Orders whose listing fails."""

    def list(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("postgres://secret-host/list")


@pytest.mark.django_db
def test_a_failing_read_is_an_internal_error_with_its_text_in_the_log(
    carol: Any, caplog: Any
) -> None:
    made = guarded_viewset(BrokenViewSet, basename="broken", actions={"list": {}})
    try:
        response = call(token_client(carol), "broken_list", {})
    finally:
        registry.unregister(made["list"].name)
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert "secret-host" not in response.content.decode()
    assert "secret-host" in caplog.text


@pytest.mark.django_db
def test_a_browser_session_creates_through_the_views_session_authentication(
    carol: Any, session_client_for: Any
) -> None:
    """The view's SessionAuthentication checks CSRF again, with the agent's cookie and header."""
    client = session_client_for(carol)
    done = call(client, "order_create", {"operationId": key(), "number": "W-1", "total": "1.00"})
    assert done.status_code == 200, done.json()
    assert Order.objects.get(number="W-1").customer == carol
    client.cookies.pop("csrftoken")  # the guard's own CSRF check refuses before any view
    refused = client.post(URL.format("order_create"), {"operationId": key(), "number": "W-2",
                                                       "total": "1.00"}, format="json")
    assert refused.status_code == 403 and not Order.objects.filter(number="W-2").exists()


@pytest.mark.django_db
def test_the_demo_api_answers_directly_as_the_tools_do(
    carol: Any, session_client_for: Any
) -> None:
    order = Order.objects.create(number="Z-1", customer=carol, total="4.00")
    direct = session_client_for(carol).get(f"/api/orders/{order.pk}/")  # a person's route
    assert direct.status_code == 200
    tool = call(token_client(carol), "order_retrieve", {"pk": order.pk})
    assert tool.json()["output"] == direct.json()


# -- the viewset's own route: never for agent credentials (issue 25, item 2) --------------

@pytest.mark.django_db
def test_the_agent_token_cannot_delete_through_the_viewsets_own_route(
    carol: Any, session_client_for: Any
) -> None:
    """order_destroy asks a person; the same token on DELETE /api/orders/<id>/ must not
    delete behind the guard's back. The site's own users (sessions) keep their route."""
    order = Order.objects.create(number="G-1", customer=carol, total="1.00")
    agent = token_client(carol)
    for refused in (agent.delete(f"/api/orders/{order.pk}/"), agent.get("/api/orders/"),
                    agent.post("/api/orders/", {"number": "G-2", "total": "1.00"},
                               format="json")):
        assert refused.status_code == 403, refused.content
        assert "agent credentials" in refused.json()["detail"]
    detail = agent.delete(f"/api/orders/{order.pk}/").json()["detail"]
    assert "order_destroy" in detail and "/agent/tools/order_destroy/" in detail
    assert Order.objects.filter(pk=order.pk).exists()
    assert not Order.objects.filter(number="G-2").exists()
    pending = call(agent, "order_destroy", {"operationId": key(), "pk": order.pk})
    assert pending.status_code == 202, pending.json()  # the tool still asks a person
    assert pending.json()["error"]["code"] == "confirmation_required"
    assert Order.objects.filter(pk=order.pk).exists()
    person = session_client_for(carol)
    assert person.get("/api/orders/").json()[0]["number"] == "G-1"
    assert person.delete(f"/api/orders/{order.pk}/").status_code == 204
    assert not Order.objects.filter(pk=order.pk).exists()


class OpenOrderViewSet(OrderViewSet):
    """Orders whose route takes agents' tokens (published with the opt-out)."""

    permission_classes = [IsAuthenticated]


@pytest.fixture
def opened() -> Iterator[dict[str, Any]]:
    made = guarded_viewset(OpenOrderViewSet, basename="open", actions={"list": {}},
                           refuse_agent_credentials=False)
    yield made
    registry.unregister(made["list"].name)


@pytest.mark.django_db
def test_the_opt_out_leaves_the_views_permissions_as_they_are(opened: Any, carol: Any) -> None:
    from guarded_tools.permissions import RefuseAgentCredentials

    assert OpenOrderViewSet.permission_classes == [IsAuthenticated]
    assert RefuseAgentCredentials in OrderViewSet.permission_classes
    Order.objects.create(number="O-1", customer=carol, total="1.00")
    listed = call(token_client(carol), "open_list", {})
    assert listed.status_code == 200 and listed.json()["output"]["results"][0]["number"] == "O-1"


class Closed(BaseThrottle):
    def allow_request(self, request: Any, view: Any) -> bool:
        return False

    def wait(self) -> float:
        return 30


class ThrottledViewSet(OrderViewSet):
    """Orders behind a throttle that is always closed."""

    throttle_classes = [Closed]


@pytest.mark.django_db
def test_the_views_throttle_is_rate_limited_and_releases_the_key(carol: Any) -> None:
    made = guarded_viewset(ThrottledViewSet, basename="throttled", actions={"create": {}})
    k = key()
    try:
        response = call(token_client(carol), "throttled_create",
                        {"operationId": k, "number": "L-1", "total": "1.00"})
    finally:
        registry.unregister(made["create"].name)
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert response["Retry-After"] == "30"
    assert Operation.objects.get(key=k).state == "released"


@pytest.mark.django_db
def test_partial_update_takes_the_lookup_and_only_the_fields_sent(user_factory: Any) -> None:
    carol = user_factory("editor", perms=("demo.change_order",))
    made = guarded_viewset(OrderViewSet, basename="patchable",
                           actions={"partial_update": {}, "update": {}})
    order = Order.objects.create(number="N-1", customer=carol, total="1.00")
    client = token_client(carol)
    try:
        schema = made["partial_update"].input_schema
        assert schema["required"] == ["pk", "operationId"]
        assert sorted(made["update"].input_schema["required"]) == [
            "number", "operationId", "pk", "total"]
        done = call(client, "patchable_partial_update",
                    {"operationId": key(), "pk": order.pk, "status": "shipped"})
    finally:
        for definition in made.values():
            registry.unregister(definition.name)
    assert done.status_code == 200, done.json()
    assert done.json()["output"]["status"] == "shipped"
    order.refresh_from_db()
    assert order.status == "shipped" and order.number == "N-1"


@pytest.mark.django_db
def test_a_call_the_schema_rejects_runs_no_sql(carol: Any, client_for: Any) -> None:
    client = client_for(carol)  # forced authentication: no token query either
    with CaptureQueriesContext(connection) as queries:
        response = call(client, "order_create", {"operationId": key(), "number": "X" * 21,
                                                 "total": "1.00"})
    assert response.status_code == 422
    assert response.json()["error"]["issues"][0]["path"] == ["number"]
    assert queries.captured_queries == []


# -- atomic=True: the view's effect and the operation commit together ------------------------

@pytest.fixture
def flaky(atomic_path: str) -> Iterator[Flaky]:
    yield from publish_atomic()


@pytest.mark.django_db(transaction=True)
def test_an_atomic_view_commits_its_effect_with_the_operation(flaky: Flaky, carol: Any) -> None:
    client = token_client(carol)
    body = {"operationId": key(), "number": "A-1", "total": "2.00"}
    done = call(client, "atomic_create", body)
    assert done.status_code == 200, done.json()
    order = Order.objects.get(number="A-1")
    operation = Operation.objects.get(key=body["operationId"])
    assert operation.state == "succeeded" and operation.output["id"] == order.pk
    assert call(client, "atomic_create", body)["Idempotent-Replayed"] == "true"
    assert flaky.runs == 1 and Order.objects.filter(number="A-1").count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_atomic_view_that_fails_rolls_back_and_its_retry_runs_once(
    flaky: Flaky, carol: Any, caplog: Any
) -> None:
    flaky.failures = 1
    client = token_client(carol)
    body = {"operationId": key(), "number": "A-2", "total": "2.00"}
    failed = call(client, "atomic_create", body)
    assert failed.status_code == 500
    assert failed.json()["error"]["code"] == "internal_error"  # nothing happened: not unknown
    assert "secret-host" not in json.dumps(failed.json()) and "secret-host" in caplog.text
    assert not Order.objects.filter(number="A-2").exists()  # the effect rolled back
    assert not Operation.objects.filter(key=body["operationId"], state__in=(
        "in_flight", "succeeded", "outcome_unknown")).exists()  # the claim released
    retry = call(client, "atomic_create", body)
    assert retry.status_code == 200, retry.json()
    assert flaky.runs == 2 and Order.objects.filter(number="A-2").count() == 1
    assert call(client, "atomic_create", body)["Idempotent-Replayed"] == "true"
    assert flaky.runs == 2


@pytest.mark.django_db(transaction=True)
def test_an_atomic_view_refused_by_its_serializer_releases_the_key(
    flaky: Flaky, carol: Any
) -> None:
    Order.objects.create(number="A-3", customer=carol, total="1.00")
    client = token_client(carol)
    k = key()
    refused = call(client, "atomic_create", {"operationId": k, "number": "A-3", "total": "2.00"})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_input"
    assert refused.json()["error"]["issues"][0]["path"] == ["number"]
    repaired = call(client, "atomic_create", {"operationId": k, "number": "A-4", "total": "2.00"})
    assert repaired.status_code == 200, repaired.json()
    assert Order.objects.filter(number="A-4").count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_atomic_view_whose_verification_fails_keeps_no_effect(
    atomic_path: str, carol: Any
) -> None:
    """Verify runs before the commit: a refusal rolls the view's effect back with it."""
    runs = publish_atomic(verify=lambda **_: False)
    next(runs)
    try:
        failed = call(token_client(carol), "atomic_create",
                      {"operationId": key(), "number": "A-5", "total": "2.00"})
    finally:
        next(runs, None)
    assert failed.json()["error"]["code"] == "verification_failed", failed.json()
    assert not Order.objects.filter(number="A-5").exists()


def rename_then_fail(request: HttpRequest, pk: str) -> JsonResponse:
    """A plain view that renames the order, then answers 500."""
    Order.objects.filter(pk=pk, customer=request.user).update(number="RENAMED")
    return JsonResponse({"detail": "postgres://secret-host/rename"}, status=500)


@pytest.mark.django_db(transaction=True)
def test_an_atomic_plain_view_answering_500_keeps_no_effect(atomic_path: str,
                                                            carol: Any) -> None:
    order = Order.objects.create(number="P-9", customer=carol, total="1.00")
    made = guarded_view(rename_then_fail, name="rename_atomic", input_schema=RENAME_SCHEMA,
                        url_kwargs=("pk",), atomic=True)
    body = {"operationId": key(), "pk": order.pk, "number": "P-10"}
    try:
        failed = call(token_client(carol), "rename_atomic", body)
    finally:
        registry.unregister(made.name)
    assert failed.status_code == 500 and failed.json()["error"]["code"] == "internal_error"
    order.refresh_from_db()
    assert order.number == "P-9"  # the view's update rolled back with the operation
    assert not Operation.objects.filter(key=body["operationId"], state__in=(
        "in_flight", "succeeded", "outcome_unknown")).exists()


@pytest.fixture
def approved_actions() -> Iterator[dict[str, Any]]:
    """The demo viewset's create and partial update, each approved by a person."""
    made = guarded_viewset(OrderViewSet, basename="approved", actions={
        "create": {"confirm": "effect-only"}, "partial_update": {"confirm": "effect-only"}})
    yield made
    for definition in made.values():
        registry.unregister(definition.name)


@pytest.mark.django_db
def test_an_effect_only_view_call_its_serializer_refuses_asks_nobody(
    approved_actions: dict[str, Any], user_factory: Any, bob: Any, django_user_model: Any
) -> None:
    editor = user_factory("editor", perms=("demo.add_order", "demo.change_order"))
    Order.objects.create(number="TAKEN", customer=editor, total="1.00")
    mine = Order.objects.create(number="E-1", customer=editor, total="1.00")
    theirs = Order.objects.create(number="B-2", customer=bob, total="1.00")
    client = token_client(editor)
    duplicate = call(client, "approved_create",
                     {"operationId": key(), "number": "TAKEN", "total": "2.00"})
    assert duplicate.status_code == 422, duplicate.json()
    assert [(i["path"], i["keyword"]) for i in duplicate.json()["error"]["issues"]] == [
        (["number"], "unique")]
    renamed = call(client, "approved_partial_update",
                   {"operationId": key(), "pk": mine.pk, "number": "TAKEN"})
    assert renamed.status_code == 422 and renamed.json()["error"]["issues"][0]["path"] == [
        "number"]
    unchanged = call(client, "approved_partial_update",  # unique among the others only
                     {"operationId": key(), "pk": mine.pk, "number": "E-1"})
    assert unchanged.status_code == 202, unchanged.json()
    hidden = call(client, "approved_partial_update",  # get_queryset() scopes it
                  {"operationId": key(), "pk": theirs.pk, "number": "MINE"})
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "object_not_found"
    assert Confirmation.objects.count() == 1  # the approver sees only the call that can run
    body = {"operationId": key(), "number": "E-2", "total": "3.00"}
    pending = call(client, "approved_create", body)
    assert pending.status_code == 202, pending.json()
    boss = django_user_model.objects.create_superuser("boss", password="pw")
    confirmations.approve(Confirmation.objects.get(tool="approved_create"), boss)
    done = call(client, "approved_create", body)
    assert done.status_code == 200, done.json()
    assert Order.objects.get(number="E-2").customer == editor
    assert not Order.objects.filter(customer=bob).exclude(number="B-2").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("transport", ["rest", "mcp"])
def test_object_not_found_says_one_thing_and_its_repaired_retry_runs(
    published: None, transport: str, carol: Any, bob: Any
) -> None:
    """Its retry policy and its fix agree (find the right object, call again), and the
    call they describe runs: the refusal released the key."""
    from tests.transports.agent_errors import assert_fits, mcp_error, mcp_post

    mine = Order.objects.create(number="N-1", customer=carol, total="1.00")
    theirs = Order.objects.create(number="N-2", customer=bob, total="1.00")
    client = token_client(carol)

    def refused(name: str, body: dict[str, Any]) -> dict[str, Any]:
        if transport == "mcp":
            return mcp_error(mcp_post(client, "tools/call", {"name": name, "arguments": body}))
        response = call(client, name, body)
        assert response.status_code == 404, response.json()
        return dict(response.json()["error"])

    k = key()
    keyed = refused("rename_order", {"operationId": k, "pk": theirs.pk, "number": "MINE"})
    keyless = refused("order_retrieve", {"pk": theirs.pk})
    for error, where in ((keyed, "keyed"), (keyless, "keyless")):
        assert_fits(error, "object_not_found", transport, where)
        assert error["retry"] == "after_repair", error
        assert "Do not retry" not in error["message"], error
        assert error["repair"]["action"] == "change_input"
        assert error["link"].endswith("#object_not_found")
    assert "with the same idempotency key" in keyed["message"]
    done = call(client, "rename_order", {"operationId": k, "pk": mine.pk, "number": "MINE"})
    assert done.status_code == 200, done.json()  # the same key, repaired: it runs
    assert Order.objects.get(pk=mine.pk).number == "MINE"
    assert Order.objects.get(pk=theirs.pk).number == "N-2"
