"""``EXCEPTION_HANDLER`` and the 401 challenge, as DRF has them, over REST and MCP.

The challenge is the site's first authentication class's (``get_authenticate_header``);
where that class has none (session authentication) a refusal for missing credentials is a
403, as DRF answers; where OAuth protects an endpoint, its ``Bearer … resource_metadata``
challenge. A site's ``EXCEPTION_HANDLER`` makes every error response of both.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core import checks
from django.test import Client as DjangoClient
from rest_framework.authentication import (
    BasicAuthentication,
    SessionAuthentication,
    TokenAuthentication,
)
from rest_framework.response import Response
from rest_framework.test import APIClient

from guarded_tools.transports.rest.base import GuardedAPIView
from guarded_tools.transports.rest.exception_handler import exception_handler
from tests.transports.mcp_rpc import call, rpc

pytestmark = pytest.mark.django_db

PRM = "http://testserver/.well-known/oauth-protected-resource/agent/mcp"


@pytest.fixture
def site_authenticates(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The site's ``DEFAULT_AUTHENTICATION_CLASSES`` (read by DRF when views are defined)."""

    def use(*classes: type) -> None:
        monkeypatch.setattr(GuardedAPIView, "authentication_classes", list(classes))

    return use


def refusals(name: str) -> dict[str, Any]:
    """An anonymous caller's refusals: the REST tool list and call, MCP's list and call."""
    anonymous = DjangoClient()
    return {
        "rest list": anonymous.get("/agent/tools/"),
        "rest call": anonymous.post(f"/agent/tools/{name}/", {"operationId": "k"},
                                    content_type="application/json"),
        "mcp list": rpc(anonymous, "tools/list"),
        "mcp call": call(anonymous, name, {"operationId": "k"}),
    }


def code_of(response: Any) -> str:
    body = response.json()
    return str(body["error"]["data"]["code"] if "jsonrpc" in body else body["error"]["code"])


def test_a_session_only_site_answers_403_without_a_challenge(site_authenticates: Any,
                                                             make_tool: Any) -> None:
    """Session authentication has no scheme to challenge with: DRF's 403, never a 401 naming
    a scheme the site does not use."""
    site_authenticates(SessionAuthentication)
    for where, response in refusals(make_tool().name).items():
        assert response.status_code == 403, (where, response.content)
        assert "WWW-Authenticate" not in response, where
        assert code_of(response) == "not_authenticated", where


@pytest.mark.parametrize(("classes", "scheme"), [
    ((TokenAuthentication,), "Token"),
    ((TokenAuthentication, SessionAuthentication), "Token"),
    ((BasicAuthentication, TokenAuthentication), 'Basic realm="api"'),  # DRF's Basic realm
])
def test_a_401_challenges_with_the_first_authentication_class(
        site_authenticates: Any, make_tool: Any, classes: tuple[type, ...],
        scheme: str) -> None:
    site_authenticates(*classes)
    name = make_tool().name
    for where, response in refusals(name).items():
        assert response.status_code == 401, (where, response.content)
        assert response["WWW-Authenticate"] == scheme, where
        assert code_of(response) == "not_authenticated", where
    wrong = DjangoClient(headers={"Authorization": "Token wrong"})  # AuthenticationFailed
    if classes[0] is TokenAuthentication:
        assert wrong.get("/agent/tools/")["WWW-Authenticate"] == "Token"
        assert rpc(wrong, "tools/list")["WWW-Authenticate"] == "Token"


def test_oauth_on_mcp_challenges_with_bearer_where_the_site_has_only_sessions(
        site_authenticates: Any, make_tool: Any, settings: Any) -> None:
    """An MCP host starts OAuth from a 401 with a Bearer challenge naming the resource's
    metadata (RFC 6750, RFC 9728): OAuth on the MCP endpoint gives it one; REST, which
    OAuth does not protect here, keeps the site's own answer."""
    pytest.importorskip("oauth2_provider", reason="django-oauth-toolkit (guarded-tools[oauth])")
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "OAUTH_PROTECTS": ["mcp"]}
    site_authenticates(SessionAuthentication)
    answers = refusals(make_tool().name)
    for where in ("mcp list", "mcp call"):
        assert answers[where].status_code == 401, where
        assert answers[where]["WWW-Authenticate"] == f'Bearer resource_metadata="{PRM}"'
    for where in ("rest list", "rest call"):
        assert answers[where].status_code == 403 and "WWW-Authenticate" not in answers[where]


def marking(exc: Exception, context: dict[str, Any]) -> Any:
    """A site's handler: the app's answer, marked, with the view's name in the body."""
    response = exception_handler(exc, context)
    response["X-Site-Handler"] = type(context["view"]).__name__
    return response


def replacing(exc: Exception, context: dict[str, Any]) -> Any:
    """A site's handler that answers in its own format."""
    return Response({"problem": type(exc).__name__}, status=418)


def test_a_sites_exception_handler_makes_the_responses(settings: Any, make_tool: Any,
                                                       alice: Any) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS,
                              "EXCEPTION_HANDLER": f"{__name__}.marking"}
    answers = refusals(make_tool().name)
    for where, response in answers.items():
        assert response["X-Site-Handler"] in ("ToolListView", "ToolCallView", "McpView"), where
        assert code_of(response) == "not_authenticated", where  # the app's body, kept
    assert "jsonrpc" in answers["mcp list"].json()  # the MCP endpoint still answers JSON-RPC
    agent = APIClient()
    agent.force_authenticate(alice)
    missing = agent.post("/agent/tools/no_such_tool/", {}, format="json")
    assert missing.status_code == 404 and missing["X-Site-Handler"]

    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS,
                              "EXCEPTION_HANDLER": f"{__name__}.replacing"}
    for where, response in refusals(make_tool().name).items():
        assert response.status_code == 418, where
        assert json.loads(response.content) == {"problem": "NotAuthenticated"}, where


def test_the_check_refuses_an_exception_handler_that_does_not_import(settings: Any) -> None:
    from guarded_tools.checks import check_settings

    def errors() -> list[str]:
        return [m.id or "" for m in check_settings() if m.level >= checks.ERROR]

    assert "guarded_tools.E014" not in errors()
    for path in ("tests.transports.no_such_module.handler", f"{__name__}.no_such_handler",
                 f"{__name__}.PRM"):
        settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "EXCEPTION_HANDLER": path}
        assert "guarded_tools.E014" in errors(), path


def test_the_handler_docs_architecture_shows_works_as_written(settings: Any, make_tool: Any,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    import re
    import types

    from tests.conftest import REPO_ROOT

    text = (REPO_ROOT / "docs" / "explanation" / "architecture.md").read_text()
    code = re.search(r"```python\n(# shop/errors\.py\n.*?)```", text, flags=re.S)
    assert code is not None
    module = types.ModuleType("shop_errors")
    exec(compile(code.group(1), "docs/explanation/architecture.md", "exec"), module.__dict__)
    monkeypatch.setitem(__import__("sys").modules, "shop_errors", module)
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS,
                              "EXCEPTION_HANDLER": "shop_errors.handler"}
    for where, response in refusals(make_tool().name).items():
        assert response["X-Shop-Support"] == "https://shop.example/support", where
        assert code_of(response) == "not_authenticated", where
