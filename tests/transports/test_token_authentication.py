"""``guarded_tools.authentication.TokenAuthentication``: DRF's answers, one query, over REST
and MCP with a real ``Authorization: Token …`` header (the demo site lists the class)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.test import APIClient

from guarded_tools.authentication import TokenAuthentication
from tests.conftest import key

pytestmark = pytest.mark.django_db

MCP_HEADERS = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25"}


def token_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_the_site_lists_it() -> None:
    from rest_framework.settings import api_settings

    assert api_settings.DEFAULT_AUTHENTICATION_CLASSES[0] is TokenAuthentication


def test_a_rest_call_runs_as_the_tokens_user(make_tool: Any, alice: Any) -> None:
    seen: list[Any] = []

    def handler(input: Any, ctx: Any) -> dict[str, bool]:
        seen.append(ctx.user)
        return {"ok": True}

    definition = make_tool(handler)
    token = Token.objects.create(user=alice)
    answer = token_client(token.key).post(f"/agent/tools/{definition.name}/",
                                          {"operationId": key()}, format="json")
    assert answer.status_code == 200, answer.content
    assert seen[0].pk == alice.pk and seen[0].username == alice.username
    assert seen[0].date_joined == alice.date_joined  # read as the ORM reads it (aware)


def test_an_mcp_call_runs_as_the_tokens_user(make_tool: Any, alice: Any) -> None:
    seen: list[Any] = []

    def handler(input: Any, ctx: Any) -> dict[str, bool]:
        seen.append(ctx.user)
        return {"ok": True}

    definition = make_tool(handler)
    token = Token.objects.create(user=alice)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": definition.name, "arguments": {"operationId": key()}}}
    answer = token_client(token.key).post("/agent/mcp/", json.dumps(body),
                                          content_type="application/json",
                                          headers=MCP_HEADERS)
    assert answer.status_code == 200, answer.content
    assert not answer.json()["result"].get("isError"), answer.content
    assert seen[0].pk == alice.pk


@pytest.mark.parametrize("path", ["/agent/tools/", "/agent/mcp/"])
def test_an_unknown_token_is_refused_as_drf_refuses_it(path: str, alice: Any) -> None:
    Token.objects.create(user=alice)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    answer = token_client("not-a-token").post(path, json.dumps(body),
                                              content_type="application/json",
                                              headers=MCP_HEADERS) if "mcp" in path else (
        token_client("not-a-token").get(path))
    assert answer.status_code == 401, answer.content
    assert answer.headers["WWW-Authenticate"] == "Token"
    with pytest.raises(AuthenticationFailed) as refused:  # DRF's own words, in the class
        TokenAuthentication().authenticate_credentials("not-a-token")
    assert str(refused.value.detail) == "Invalid token."


def test_an_inactive_users_token_is_refused(alice: Any) -> None:
    token = Token.objects.create(user=alice)
    alice.is_active = False
    alice.save()
    answer = token_client(token.key).get("/agent/tools/")
    assert answer.status_code == 401, answer.content
    with pytest.raises(AuthenticationFailed) as refused:
        TokenAuthentication().authenticate_credentials(token.key)
    assert str(refused.value.detail) == "User inactive or deleted."


def test_one_query_and_the_same_objects_as_drfs(alice: Any) -> None:
    """The same (user, token) as DRF's own class, in one query, the user attached."""
    token = Token.objects.create(user=alice)
    with CaptureQueriesContext(connection) as queries:
        user, got = TokenAuthentication().authenticate_credentials(token.key)
        assert got.user is user  # attached: reading it sends nothing
    assert len(queries) == 1
    drf_user, drf_token = TokenAuthentication.__mro__[1].authenticate_credentials(  # type: ignore[attr-defined]
        TokenAuthentication(), token.key)
    assert got == drf_token and got.key == drf_token.key and got.created == drf_token.created
    for field in type(user)._meta.concrete_fields:
        assert getattr(user, field.attname) == getattr(drf_user, field.attname), field.name
    assert user._state.db == drf_user._state.db and not user._state.adding


@pytest.mark.parametrize("header", [
    None, "", "Token", "Token {key}", "token {key}", "TOKEN  {key} ", "Token {key} extra",
    "Bearer {key}", "Token\xa0{key}", "Token {key}\xa0", "Token\x1c{key}", "Token k\xe9y",
    "Basic dXNlcjpwYXNz", "Token unknown",
])
def test_every_authorization_header_is_answered_as_drf_answers_it(
    header: str | None, alice: Any,
) -> None:
    """The header read from ``META`` by name: the same answer as DRF's own class, a user,
    nobody (None) or the same refusal, for every form of header."""
    from django.test import RequestFactory
    from rest_framework import authentication
    from rest_framework.request import Request

    token = Token.objects.create(user=alice)
    meta = {} if header is None else {"HTTP_AUTHORIZATION": header.format(key=token.key)}

    def answer(auth: Any) -> Any:
        request = Request(RequestFactory().get("/agent/tools/", **meta))
        try:
            found = auth.authenticate(request)
        except AuthenticationFailed as exc:
            return ("refused", str(exc.detail))
        return None if found is None else (found[0].pk, found[1].key)

    drf = answer(authentication.TokenAuthentication())
    assert answer(TokenAuthentication()) == drf
    if header == "Token {key}":
        assert drf == (alice.pk, token.key)
