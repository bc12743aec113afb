"""OAuth resource server: the challenge, metadata, audience, scopes and revocation, over HTTP."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

pytest.importorskip("oauth2_provider", reason="django-oauth-toolkit (guarded-tools[oauth])")

from django.test import Client as DjangoClient
from django.utils import timezone
from oauth2_provider.models import (
    get_access_token_model,
    get_application_model,
    get_grant_model,
)
from rest_framework.authtoken.models import Token

from guarded_tools import Tool
from project.demo.models import Order
from tests.conftest import Effects, key
from tests.transports.mcp_rpc import MCP, call, rpc

pytestmark = pytest.mark.django_db

RESOURCE = "http://testserver/agent/mcp"
PRM = "http://testserver/.well-known/oauth-protected-resource/agent/mcp"
REDIRECT = "http://127.0.0.1:33418/callback"
ITEM = {"type": "object", "properties": {"operationId": {"type": "string"}},
        "required": ["operationId"]}


@pytest.fixture(autouse=True)
def _oauth_on(settings: Any) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "OAUTH_PROTECTS": ["mcp", "rest"]}


@pytest.fixture
def application() -> Any:
    return get_application_model().objects.create(
        name="Test host", client_type="public", authorization_grant_type="authorization-code",
        redirect_uris=REDIRECT, client_secret="",
    )


@pytest.fixture
def issue(application: Any) -> Callable[..., str]:
    """An access token as DOT issues one: ``issue(user, "a b", resource=[...])``."""

    def make(user: Any, scope: str = "demo:read demo:write", *,
             resource: list[str] | None = None, expires_in: int = 3600) -> str:
        value = secrets.token_urlsafe(24)
        get_access_token_model().objects.create(
            user=user, application=application, token=value, scope=scope,
            expires=timezone.now() + timedelta(seconds=expires_in),
            resource=[RESOURCE] if resource is None else resource,
        )
        return value

    return make


def bearer(token: str, **headers: str) -> DjangoClient:
    return DjangoClient(headers={"Authorization": f"Bearer {token}", **headers})


def listed(client: Any) -> set[str]:
    response = rpc(client, "tools/list")
    assert response.status_code == 200, response.content
    return {t["name"] for t in response.json()["result"]["tools"]}


def challenge(response: Any) -> dict[str, str]:
    """The ``Bearer`` challenge's parameters (DOT renders ``k="v"`` pairs, comma-separated)."""
    header = response["WWW-Authenticate"]
    scheme, _, params = header.partition(" ")
    assert scheme == "Bearer", header
    pairs = [p.split("=", 1) for p in params.split('",') if p]
    return {k.strip(): v.strip().strip('"') for k, v in pairs}


@pytest.fixture
def scoped(make_tool: Callable[..., Tool]) -> Tool:
    return make_tool(Effects(), scopes=["orders:write"], input_schema=ITEM)


# -- discovery: the 401 challenge, then the two metadata documents ------------------------------
def test_unauthenticated_mcp_answers_401_with_the_metadata_challenge() -> None:
    response = rpc(DjangoClient(), "tools/list")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == f'Bearer resource_metadata="{PRM}"'
    assert response.json()["error"]["data"]["code"] == "not_authenticated"


def test_unauthenticated_rest_answers_the_same_challenge() -> None:
    response = DjangoClient().get("/agent/tools/")
    assert response.status_code == 401
    assert challenge(response) == {"resource_metadata": PRM}
    assert response.json()["error"]["code"] == "not_authenticated"


def test_the_challenge_names_the_scopes_to_start_with(settings: Any) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "OAUTH_CHALLENGE_SCOPES": ["demo:read"]}
    response = rpc(DjangoClient(), "tools/list")
    assert challenge(response) == {"scope": "demo:read", "resource_metadata": PRM}


def test_protected_resource_metadata_names_server_scopes_and_bearer_methods() -> None:
    document = DjangoClient().get(urlsplit(PRM).path).json()
    assert document["resource"] == RESOURCE
    assert document["authorization_servers"] == ["http://testserver/o"]
    assert {"demo:read", "demo:write"} <= set(document["scopes_supported"])
    assert document["bearer_methods_supported"] == ["header"]


def test_authorization_server_metadata_offers_s256_only_and_both_registrations() -> None:
    document = DjangoClient().get("/.well-known/oauth-authorization-server/o").json()
    assert document["issuer"] == "http://testserver/o"
    assert document["code_challenge_methods_supported"] == ["S256"]
    assert document["registration_endpoint"] == "http://testserver/o/register/"
    assert document["client_id_metadata_document_supported"] is True
    assert "none" in document["token_endpoint_auth_methods_supported"]  # public clients
    assert not {"implicit", "password"} & set(document["grant_types_supported"])


# -- audience ------------------------------------------------------------------------------------
def test_a_token_for_this_resource_lists_and_calls(alice: Any, issue: Any, scoped: Tool) -> None:
    client = bearer(issue(alice, "orders:write"))
    assert scoped.name in listed(client)
    response = call(client, scoped.name, {"operationId": key()})
    assert response.status_code == 200 and response.json()["result"]["isError"] is False


def test_the_audience_matches_in_any_case_with_or_without_the_slash(
    alice: Any, issue: Any, scoped: Tool
) -> None:
    for resource in ("HTTP://TestServer/agent/mcp", f"{RESOURCE}/"):
        assert scoped.name in listed(bearer(issue(alice, "orders:write", resource=[resource])))


@pytest.mark.parametrize("resource", [["https://other.example/mcp"], [],
                                      ["http://testserver/agent/mcp-other"]])
def test_a_token_for_another_audience_is_not_authenticated(
    alice: Any, issue: Any, scoped: Tool, resource: list[str]
) -> None:
    client = bearer(issue(alice, "orders:write", resource=resource))
    for response in (rpc(client, "tools/list"), call(client, scoped.name, {"operationId": key()})):
        assert response.status_code == 401, response.content
        assert challenge(response)["error"] == "invalid_token"
        assert challenge(response)["resource_metadata"] == PRM
    assert scoped.handler.count == 0  # type: ignore[attr-defined]


def test_a_token_for_another_audience_is_nobody_on_rest_too(alice: Any, issue: Any,
                                                           scoped: Tool) -> None:
    client = bearer(issue(alice, "orders:write", resource=["https://other.example/mcp"]))
    response = client.post(f"/agent/tools/{scoped.name}/", data={"operationId": key()},
                           content_type="application/json")
    assert response.status_code == 401 and challenge(response)["error"] == "invalid_token"
    assert response.json()["error"]["code"] == "not_authenticated"


def test_dots_own_authentication_is_not_left_behind_ours() -> None:
    """After ours it would accept the token ours refused for its audience."""
    from oauth2_provider.contrib.rest_framework import OAuth2Authentication
    from rest_framework.authentication import TokenAuthentication

    from guarded_tools.contrib import oauth

    chain = oauth.authenticators("mcp", [OAuth2Authentication(), TokenAuthentication()])
    assert [type(a) for a in chain] == [oauth.ResourceServerAuthentication, TokenAuthentication]


def test_an_expired_token_is_not_authenticated(alice: Any, issue: Any, scoped: Tool) -> None:
    response = call(bearer(issue(alice, "orders:write", expires_in=-1)), scoped.name,
                    {"operationId": key()})
    assert response.status_code == 401
    assert challenge(response)["error"] == "invalid_token"


# -- bearer tokens only from the Authorization header (issue 25 item 6) ---------------------------
def _mcp_list(client: Any, suffix: str = "", **extra: Any) -> Any:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    return client.post(MCP + suffix, data=body, content_type="application/json",
                       headers={"MCP-Protocol-Version": "2025-11-25"}, **extra)


@pytest.mark.parametrize("surface", ["rest-list", "rest-call", "mcp"])
def test_a_token_in_the_query_string_is_no_token_on_rest_and_mcp(
    alice: Any, issue: Any, scoped: Tool, surface: str
) -> None:
    """RFC 6750's query parameter is refused: the MCP spec and our metadata say header only."""
    value = issue(alice, "orders:write")
    query = f"?access_token={value}"
    if surface == "rest-list":
        response = DjangoClient().get(f"/agent/tools/{query}")
    elif surface == "rest-call":
        response = DjangoClient().post(f"/agent/tools/{scoped.name}/{query}",
                                       data={"operationId": key()},
                                       content_type="application/json")
    else:
        response = _mcp_list(DjangoClient(), query)
    assert response.status_code == 401, response.content
    assert challenge(response) == {"resource_metadata": PRM}  # as if no token came
    assert scoped.handler.count == 0  # type: ignore[attr-defined]
    assert scoped.name in listed(bearer(value))  # the same token, in the header, works


def test_a_token_in_a_form_body_is_no_token_on_rest_and_mcp(
    alice: Any, issue: Any, scoped: Tool
) -> None:
    """RFC 6750's form-encoded body parameter is refused too: the body is not read for a
    token (DOT did, through the JSON-only parsers, and answered 415 from authentication)."""
    value = issue(alice, "orders:write")
    form = {"access_token": value, "operationId": key()}
    for response in (DjangoClient().post(MCP, data=form),  # multipart, as a form posts it
                     DjangoClient().post(MCP, data=f"access_token={value}",
                                         content_type="application/x-www-form-urlencoded"),
                     DjangoClient().generic("GET", "/agent/tools/", f"access_token={value}",
                                            content_type="application/x-www-form-urlencoded")):
        assert response.status_code == 401, response.content
        assert challenge(response) == {"resource_metadata": PRM}
    call = DjangoClient().post(f"/agent/tools/{scoped.name}/", data=form)
    assert call.status_code == 415  # JSON only, whoever sends it
    assert scoped.handler.count == 0  # type: ignore[attr-defined]


def test_a_query_token_does_not_stand_in_for_the_session_or_the_static_token(
    alice: Any, bob: Any, issue: Any, scoped: Tool, session_client_for: Any
) -> None:
    """Alice's session (or her Token header) stays Alice with Bob's token in the URL."""
    other = issue(bob, "demo:read")  # would hide ``scoped``: it needs orders:write
    browser = session_client_for(alice)
    page = browser.get(f"/agent/tools/?access_token={other}")
    assert page.status_code == 200
    assert scoped.name in {t["name"] for t in page.json()["tools"]}  # Alice, no scope filter
    mcp = _mcp_list(browser, f"?access_token={other}")
    assert scoped.name in {t["name"] for t in mcp.json()["result"]["tools"]}
    token = Token.objects.create(user=alice)
    static = DjangoClient(headers={"Authorization": f"Token {token.key}"})
    response = static.get(f"/agent/tools/?access_token={other}")
    assert scoped.name in {t["name"] for t in response.json()["tools"]}


# -- scopes ----------------------------------------------------------------------------------------
def test_a_token_without_the_tools_scope_does_not_list_it(
    alice: Any, issue: Any, scoped: Tool
) -> None:
    assert scoped.name not in listed(bearer(issue(alice, "demo:read")))
    rest = bearer(issue(alice, "demo:read")).get("/agent/tools/").json()["tools"]
    assert scoped.name not in {t["name"] for t in rest}


def test_a_call_without_the_scope_answers_403_insufficient_scope(
    alice: Any, issue: Any, scoped: Tool
) -> None:
    response = call(bearer(issue(alice, "demo:read")), scoped.name, {"operationId": key()})
    assert response.status_code == 403
    params = challenge(response)
    assert params["error"] == "insufficient_scope"
    assert set(params["scope"].split()) == {"demo:read", "orders:write"}  # keeps what it had
    assert params["resource_metadata"] == PRM
    error = response.json()["error"]["data"]
    assert error["code"] == "authorization_denied"
    assert error["repair"]["action"] == "ask_user" and "orders:write" in error["repair"][
        "instruction"]
    assert scoped.handler.count == 0  # type: ignore[attr-defined]


def test_rest_call_without_the_scope_answers_403_insufficient_scope(
    alice: Any, issue: Any, scoped: Tool
) -> None:
    response = bearer(issue(alice, "demo:read")).post(
        f"/agent/tools/{scoped.name}/", data={"operationId": key()},
        content_type="application/json",
    )
    assert response.status_code == 403
    assert challenge(response)["error"] == "insufficient_scope"
    assert response.json()["error"]["code"] == "authorization_denied"


def test_a_replay_checks_the_scope_again(alice: Any, issue: Any, scoped: Tool) -> None:
    operation_id = key()
    first = call(bearer(issue(alice, "orders:write")), scoped.name, {"operationId": operation_id})
    assert first.json()["result"]["isError"] is False
    again = call(bearer(issue(alice, "demo:read")), scoped.name, {"operationId": operation_id})
    assert again.status_code == 403 and challenge(again)["error"] == "insufficient_scope"
    assert scoped.handler.count == 1  # type: ignore[attr-defined]


def test_scope_and_permission_both_apply(alice: Any, issue: Any,
                                         make_tool: Callable[..., Tool]) -> None:
    guarded = make_tool(scopes=["orders:write"], permissions=["demo.change_order"])
    client = bearer(issue(alice, "orders:write"))
    assert guarded.name not in listed(client)
    response = call(client, guarded.name, {"operationId": key()})
    assert response.json()["result"]["structuredContent"]["code"] == "authorization_denied"


def test_scope_per_app_maps_reads_and_writes(settings: Any, user_factory: Any,
                                             issue: Any) -> None:
    customer = user_factory("customer", perms=("demo.view_order", "demo.change_order"))
    assert settings.GUARDED_TOOLS["OAUTH_DEFAULT_SCOPES"] == "guarded_tools.oauth.scope_per_app"
    reader = listed(bearer(issue(customer, "demo:read")))
    writer = listed(bearer(issue(customer, "demo:read demo:write")))
    assert "list_orders" in reader and "cancel_order" not in reader
    assert {"list_orders", "cancel_order"} <= writer


def test_scope_per_app_scopes_derived_tools_by_the_app_that_declares_them(
    user_factory: Any, issue: Any
) -> None:
    """Issue 25 item 5: the demo's serializer, type-hint and viewset tools need ``demo:``.

    They were scoped ``guarded_tools:read/write``, the app of the wrapper that replaced
    their handler, so a ``demo:read`` token could neither list nor call ``count_orders``.
    """
    customer = user_factory("customer", perms=("demo.view_order", "demo.add_order",
                                               "demo.delete_order"))
    order = Order.objects.create(number="S-1", customer=customer, total="1.00")
    reader = bearer(issue(customer, "demo:read"))
    names = listed(reader)
    assert {"count_orders", "order_list", "order_retrieve"} <= names  # type hints, viewset
    assert not {"note_order", "order_create", "order_destroy"} & names  # serializer, viewset
    counted = call(reader, "count_orders", {"status": "open"})
    assert counted.status_code == 200, counted.content
    assert counted.json()["result"]["structuredContent"] == {"count": 1}
    rest = reader.post("/agent/tools/count_orders/", data={}, content_type="application/json")
    assert rest.status_code == 200 and rest.json()["output"] == {"count": 1}, rest.content
    note = {"operationId": key(), "order": order.pk, "text": "Ring twice."}
    refused = call(reader, "note_order", note)
    assert refused.status_code == 403
    assert challenge(refused)["scope"] == "demo:read demo:write"  # not guarded_tools:write
    writer = bearer(issue(customer, "demo:read demo:write"))
    assert {"note_order", "order_create", "order_destroy"} <= listed(writer)
    noted = writer.post("/agent/tools/note_order/", data=note, content_type="application/json")
    assert noted.status_code == 200, noted.content
    assert noted.json()["output"]["text"] == "Ring twice."
    assert "count_orders" not in listed(bearer(issue(customer, "guarded_tools:read")))


def test_scope_per_app_scopes_pydantic_tools_and_plain_views_by_their_module(
    user_factory: Any, issue: Any, make_tool: Callable[..., Tool]
) -> None:
    """A Pydantic input and a published plain view, declared in the demo app's module."""
    from django.http import JsonResponse
    from pydantic import BaseModel

    from guarded_tools import registry
    from guarded_tools.viewsets import guarded_view

    class Lookup(BaseModel):
        number: str

    def find(lookup: Lookup, ctx: Any) -> dict[str, Any]:
        return {"number": lookup.number}

    def peek(request: Any) -> JsonResponse:
        return JsonResponse({"seen": True})

    for function in (find, peek):  # as if written in project/demo/tools.py
        function.__module__ = "project.demo.tools"
    modelled = make_tool(find, input=Lookup, input_schema={"type": "object"}, read_only=True,
                         idempotency_key=None)
    viewed = guarded_view(peek, name="t_peek_view", method="get", input_schema={
        "type": "object", "properties": {}, "additionalProperties": False})
    try:
        customer = user_factory("customer")
        reader = bearer(issue(customer, "demo:read"))
        assert {modelled.name, viewed.name} <= listed(reader)
        response = call(reader, modelled.name, {"number": "S-1"})
        assert response.json()["result"]["structuredContent"] == {"number": "S-1"}
        assert call(reader, viewed.name, {}).json()["result"]["structuredContent"] == {
            "seen": True}
        assert not {modelled.name, viewed.name} & listed(
            bearer(issue(customer, "guarded_tools:read")))
    finally:
        registry.unregister(viewed.name)


def test_static_tokens_and_sessions_still_work(alice: Any, scoped: Tool) -> None:
    token = Token.objects.create(user=alice)
    client = DjangoClient(headers={"Authorization": f"Token {token.key}"})
    assert scoped.name in listed(client)  # no OAuth token, no scope check


# -- revocation ------------------------------------------------------------------------------------
def test_a_revoked_token_stops_working_on_the_next_call_replays_included(
    alice: Any, issue: Any, scoped: Tool, session_client_for: Any
) -> None:
    value = issue(alice, "orders:write")
    client = bearer(value)
    operation_id = key()
    assert call(client, scoped.name, {"operationId": operation_id}).status_code == 200
    # The user revokes the connection on DOT's authorized-tokens page, in their session.
    browser = session_client_for(alice)
    page = browser.get("/o/authorized_tokens/")
    assert page.status_code == 200 and b"Test host" in page.content
    token = get_access_token_model().objects.get(user=alice)
    assert browser.post(f"/o/authorized_tokens/{token.pk}/delete/").status_code == 302
    for response in (call(client, scoped.name, {"operationId": operation_id}),
                     rpc(client, "tools/list")):
        assert response.status_code == 401
        assert challenge(response)["error"] == "invalid_token"
    assert scoped.handler.count == 1  # type: ignore[attr-defined]


def test_origin_rules_apply_to_oauth_calls(alice: Any, issue: Any, scoped: Tool) -> None:
    client = bearer(issue(alice, "orders:write"), Origin="http://evil.example")
    response = rpc(client, "tools/list")
    assert response.status_code == 403
    assert response.json()["error"]["data"]["code"] == "authorization_denied"


def test_without_oauth_protects_a_bearer_token_is_nobody(
    settings: Any, alice: Any, issue: Any
) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "OAUTH_PROTECTS": []}
    response = rpc(bearer(issue(alice)), "tools/list")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Token")


def test_scopes_must_be_a_list(make_tool: Callable[..., Tool]) -> None:
    with pytest.raises(ValueError, match="list of OAuth scope names"):
        make_tool(scopes="orders:write")


# -- the authorization server refuses what it must -------------------------------------------------
def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _authorize(client: Any, application: Any, **params: str) -> Any:
    query = {"response_type": "code", "client_id": application.client_id,
             "redirect_uri": REDIRECT, "scope": "demo:read", "state": "s",
             "resource": RESOURCE, **params}
    return client.get("/o/authorize/", {k: v for k, v in query.items() if v is not None})


def _consent(client: Any, application: Any, **params: str) -> Any:
    """The authorization request, and the user's "Authorize" on the consent form if shown."""
    form = _authorize(client, application, **params)
    if form.status_code != 200 or not form.context or "form" not in form.context:
        return form
    fields = {k: v for k, v in form.context["form"].initial.items() if v is not None}
    return client.post("/o/authorize/", {**fields, "allow": "Authorize"})


def _error_of(response: Any) -> str:
    """The OAuth error a refusal names: in the redirect's query, or on the error page."""
    if response.status_code == 302:
        return parse_qs(urlsplit(response["Location"]).query).get("error", [""])[0]
    return response.context["error"]["error"] if response.context else ""


@pytest.mark.parametrize("pkce", ["none", "plain"])
def test_authorization_without_s256_pkce_is_refused(
    alice: Any, application: Any, session_client_for: Any, pkce: str
) -> None:
    client = session_client_for(alice)
    verifier, _ = _pkce()
    params = {} if pkce == "none" else {"code_challenge": verifier,
                                        "code_challenge_method": "plain"}
    response = _consent(client, application, **params)
    assert _error_of(response) == "invalid_request"
    assert not get_grant_model().objects.exists()


def test_an_unregistered_redirect_uri_is_refused_without_redirecting(
    alice: Any, application: Any, session_client_for: Any
) -> None:
    _, challenge_value = _pkce()
    response = _authorize(session_client_for(alice), application,
                          redirect_uri="http://evil.example/callback",
                          code_challenge=challenge_value, code_challenge_method="S256")
    assert response.status_code == 400  # an error page, never a redirect to that URI
    assert not response.has_header("Location")
    assert type(response.context["error"]).__name__ == "MismatchingRedirectURIError"


def test_code_exchange_binds_the_token_to_the_resource(
    alice: Any, application: Any, session_client_for: Any
) -> None:
    """The whole code flow through DOT, loopback redirect on another port included."""
    browser = session_client_for(alice)
    verifier, challenge_value = _pkce()
    loopback = "http://127.0.0.1:50123/callback"  # any port (RFC 8252, ALLOW_LOCALHOST_LOOPBACK)
    answer = _consent(browser, application, redirect_uri=loopback,
                      code_challenge=challenge_value, code_challenge_method="S256")
    assert answer.status_code == 302 and answer["Location"].startswith(loopback)
    code = parse_qs(urlsplit(answer["Location"]).query)["code"][0]
    token = DjangoClient().post("/o/token/", {
        "grant_type": "authorization_code", "code": code, "redirect_uri": loopback,
        "client_id": application.client_id, "code_verifier": verifier, "resource": RESOURCE,
    }).json()
    assert token["token_type"] == "Bearer" and token["scope"] == "demo:read"
    assert "list_orders" in listed(bearer(token["access_token"]))


# -- issue 25: approved runs and status reads authorize as replays do ----------------------------
def _task_call(client: Any, name: str, arguments: dict[str, Any]) -> Any:
    from tests.transports.mcp_calls import send

    return send(client, "tools/call", {"name": name, "arguments": arguments})


def _task_read(client: Any, method: str, task_id: str) -> Any:
    from tests.transports.mcp_calls import send

    return send(client, method, {"taskId": task_id})


@pytest.fixture
def waiting(make_tool: Callable[..., Tool]) -> Tool:
    return make_tool(Effects(), scopes=["orders:write"], confirm="effect-only",
                     input_schema=ITEM)


@pytest.fixture
def decide(django_capture_on_commit_callbacks: Any) -> Any:
    """A staff decision whose Celery task (eager) runs here, as a worker would run it."""
    from project.celery import app

    app.conf.task_always_eager = True

    def run(fn: Callable[..., Any], *args: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args)

    yield run
    app.conf.task_always_eager = False


def test_a_grant_revoked_while_waiting_ends_the_task_and_nothing_runs(
    alice: Any, issue: Any, waiting: Tool, decide: Any, admin_user: Any,
    session_client_for: Any,
) -> None:
    from guarded_tools import confirmations
    from guarded_tools.models import Confirmation, ConfirmationStatus

    client = bearer(issue(alice, "orders:write"))
    task = _task_call(client, waiting.name, {"operationId": key()}).json()["result"]
    assert task["resultType"] == "task" and task["status"] == "working"
    # The user revokes the connection on DOT's authorized-tokens page while it waits.
    token = get_access_token_model().objects.get(user=alice)
    assert session_client_for(alice).post(
        f"/o/authorized_tokens/{token.pk}/delete/").status_code == 302
    assert _task_read(client, "tasks/get", task["taskId"]).status_code == 401
    decide(confirmations.approve, Confirmation.objects.get(), admin_user)
    assert waiting.handler.count == 0  # type: ignore[attr-defined]
    row = Confirmation.objects.get()
    assert row.status == ConfirmationStatus.CONSUMED  # final: a new credential asks anew
    assert row.task_error["code"] == "authorization_denied"
    polled = _task_read(bearer(issue(alice, "orders:write")), "tasks/get", task["taskId"])
    data = polled.json()["result"]
    assert data["status"] == "failed"
    assert data["error"]["data"]["code"] == "authorization_denied"
    assert "revoked" in data["error"]["message"]


def test_an_approved_run_checks_the_grants_scopes_again(
    alice: Any, issue: Any, waiting: Tool, decide: Any, admin_user: Any,
) -> None:
    from guarded_tools import confirmations
    from guarded_tools.models import Confirmation

    client = bearer(issue(alice, "orders:write"))
    task = _task_call(client, waiting.name, {"operationId": key()}).json()["result"]
    # The grant loses the tool's scope (the site narrows it) before a person approves.
    get_access_token_model().objects.filter(user=alice).update(scope="demo:read")
    decide(confirmations.approve, Confirmation.objects.get(), admin_user)
    assert waiting.handler.count == 0  # type: ignore[attr-defined]
    assert Confirmation.objects.get().task_error["code"] == "authorization_denied"
    data = _task_read(bearer(issue(alice, "orders:write")), "tasks/get",
                      task["taskId"]).json()["result"]
    assert data["status"] == "failed" and "orders:write" in data["error"]["message"]


def test_status_reads_refuse_a_token_without_the_tools_scope(
    alice: Any, issue: Any, scoped: Tool, waiting: Tool,
) -> None:
    from guarded_tools.models import Confirmation, ConfirmationStatus

    writer = bearer(issue(alice, "orders:write"))
    done = writer.post(f"/agent/tools/{scoped.name}/", data={"operationId": key()},
                       content_type="application/json")
    assert done.status_code == 200
    operation = f"/agent/operations/{done.json()['operation']['id']}/"
    assert writer.get(operation).status_code == 200
    reader = bearer(issue(alice, "demo:read"))
    refused = reader.get(operation)
    assert refused.status_code == 403 and challenge(refused)["error"] == "insufficient_scope"
    assert "output" not in refused.json().get("error", {})
    task = _task_call(writer, waiting.name, {"operationId": key()}).json()["result"]
    for method in ("tasks/get", "tasks/cancel"):
        response = _task_read(reader, method, task["taskId"])
        assert response.status_code == 403, method
        assert challenge(response)["error"] == "insufficient_scope"
    assert Confirmation.objects.get().status == ConfirmationStatus.PENDING  # not withdrawn


def test_an_oauth_rest_client_polls_its_confirmation(alice: Any, issue: Any,
                                                     waiting: Tool) -> None:
    client = bearer(issue(alice, "orders:write"))
    asked = client.post(f"/agent/tools/{waiting.name}/", data={"operationId": key()},
                        content_type="application/json")
    assert asked.status_code == 202
    confirmation = asked.json()["error"]["confirmation"]["id"]
    polled = client.get(f"/agent/confirmations/{confirmation}/")
    assert polled.status_code == 200, polled.content
    assert polled.json()["status"] == "pending"
    refused = bearer(issue(alice, "demo:read")).get(f"/agent/confirmations/{confirmation}/")
    assert refused.status_code == 403


# -- a published viewset's own route (issue 25, item 2) ------------------------------------------
@pytest.fixture
def oauth_orders() -> Any:
    """``OAuthOrderViewSet`` published (its destroy asks a person) and routed for the test."""
    from guarded_tools import registry
    from guarded_tools.viewsets import guarded_viewset
    from tests.transports.urls_oauth_orders import OAuthOrderViewSet

    destroy = {"confirm": "effect-only", "scopes": ("demo:write",)}
    made = guarded_viewset(OAuthOrderViewSet, basename="oauthorder", actions={"destroy": destroy})
    yield
    registry.unregister(made["destroy"].name)


@pytest.mark.urls("tests.transports.urls_oauth_orders")
def test_a_token_for_the_mcp_resource_never_opens_the_sites_own_route(
    oauth_orders: None, user_factory: Any, issue: Any
) -> None:
    """A token bound to the MCP resource is an agent's. DOT's resource validator already
    refuses one bound to it alone on other routes (401); one bound to the route as well
    is refused by RefuseAgentCredentials (403, pointing at the tool). The tool still asks
    a person, and a token the site issued for its own API alone keeps working there."""
    from project.demo.models import Order

    carol = user_factory("carol", perms=("demo.delete_order",))
    order = Order.objects.create(number="B-1", customer=carol, total="1.00")
    agent = bearer(issue(carol))
    assert agent.delete(f"/api/oauth-orders/{order.pk}/").status_code == 401
    assert agent.delete(f"/api/orders/{order.pk}/").status_code == 401
    both = bearer(issue(carol, resource=[RESOURCE, "http://testserver/api/oauth-orders/"]))
    refused = both.delete(f"/api/oauth-orders/{order.pk}/")
    assert refused.status_code == 403, refused.content
    assert "oauthorder_destroy" in refused.json()["detail"]
    assert Order.objects.filter(pk=order.pk).exists()
    pending = agent.post("/agent/tools/oauthorder_destroy/", content_type="application/json",
                         data={"operationId": key(), "pk": order.pk})
    assert pending.status_code == 202, pending.content
    assert Order.objects.filter(pk=order.pk).exists()
    own = bearer(issue(carol, resource=["http://testserver/api/oauth-orders/"]))
    assert own.delete(f"/api/oauth-orders/{order.pk}/").status_code == 204
    assert not Order.objects.filter(pk=order.pk).exists()


def test_the_token_model_is_asked_of_dot_once_and_again_after_its_settings_change(
    settings: Any, alice: Any, issue: Callable[..., str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from guarded_tools.contrib import oauth

    asked: list[bool] = []

    def counting() -> Any:
        asked.append(True)
        return get_access_token_model()

    oauth._access_token_model.cache_clear()
    monkeypatch.setattr(oauth, "get_access_token_model", counting)
    token = get_access_token_model().objects.get(token=issue(alice, "demo:read"))
    for _ in range(3):
        assert oauth.token_scopes(SimpleNamespace(auth=token)) == {"demo:read"}
    assert oauth.token_scopes(SimpleNamespace(auth=Token(key="k", user=alice))) is None
    assert len(asked) == 1
    settings.OAUTH2_PROVIDER = {**getattr(settings, "OAUTH2_PROVIDER", {}),
                                "ACCESS_TOKEN_EXPIRE_SECONDS": 60}
    assert oauth.token_scopes(SimpleNamespace(auth=token)) == {"demo:read"}
    assert len(asked) == 2
