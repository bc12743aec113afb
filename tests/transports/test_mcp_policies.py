"""The site's DRF policies on the MCP endpoint, as DRF's view cycle applies them.

A POST to ``mcp/`` runs DRF's policy methods without DRF's whole view cycle; these pin
the semantics it must keep: throttles (``Retry-After``, the longest wait), permission
classes (403, or 401 with the challenge for a caller with no credentials), session
authentication's CSRF check, the site's ``EXCEPTION_HANDLER`` reading ``request.data``,
and the body parsed once, whoever reads it first.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client as DjangoClient
from rest_framework.permissions import BasePermission
from rest_framework.test import APIClient
from rest_framework.throttling import BaseThrottle

from guarded_tools.transports.mcp.server import McpView
from tests.transports.mcp_rpc import MCP, call, rpc

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(alice: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(alice)
    return client


def code_of(response: Any) -> str:
    return str(response.json()["error"]["data"]["code"])


def test_throttles_answer_429_with_the_longest_wait(agent: APIClient,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    class Open(BaseThrottle):
        def allow_request(self, request: Any, view: Any) -> bool:
            return True

    def closed_for(seconds: float | None) -> type[BaseThrottle]:
        class Closed(BaseThrottle):
            def allow_request(self, request: Any, view: Any) -> bool:
                return False

            def wait(self) -> float | None:
                return seconds

        return Closed

    monkeypatch.setattr(McpView, "throttle_classes", [Open, closed_for(3), closed_for(None),
                                                      closed_for(11)])
    response = rpc(agent, "ping")
    assert response.status_code == 429, response.content
    assert code_of(response) == "rate_limited" and response.json()["error"]["code"] == -31000
    assert response["Retry-After"] == "11"

    monkeypatch.setattr(McpView, "throttle_classes", [Open])
    assert rpc(agent, "ping").status_code == 200


def test_a_permission_class_refuses(agent: APIClient, make_tool: Any,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[Any] = []
    tool = make_tool(lambda input, ctx: ran.append(input) or {}, read_only=True,
                     allow_anonymous=True, idempotency_key=None)

    class NotOnMcp(BasePermission):
        message = "Not over MCP."

        def has_permission(self, request: Any, view: Any) -> bool:
            return False

    monkeypatch.setattr(McpView, "permission_classes", [NotOnMcp])
    refused = call(agent, tool.name, {})
    assert refused.status_code == 403, refused.content
    assert code_of(refused) == "authorization_denied"
    # No credentials at all: DRF's permission_denied asks for them, with the challenge.
    anonymous = call(DjangoClient(), tool.name, {})
    assert anonymous.status_code == 401, anonymous.content
    assert code_of(anonymous) == "not_authenticated"
    assert anonymous["WWW-Authenticate"].startswith("Token")
    assert ran == []


def test_session_authentication_without_the_csrf_token_is_refused(alice: Any,
                                                                   make_tool: Any) -> None:
    tool = make_tool(lambda input, ctx: {"ran": True}, read_only=True, idempotency_key=None)
    browser = DjangoClient(enforce_csrf_checks=True)
    browser.force_login(alice)
    denied = call(browser, tool.name, {})
    assert denied.status_code == 403 and code_of(denied) == "csrf_failed"
    browser.cookies["csrftoken"] = "b" * 32
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool.name, "arguments": {}}}
    allowed = browser.post(MCP, json.dumps(body), content_type="application/json",
                           headers={"MCP-Protocol-Version": "2025-11-25",
                                    "X-CSRFToken": "b" * 32})
    assert allowed.json()["result"]["structuredContent"] == {"ran": True}


def test_a_sites_exception_handler_reads_the_parsed_body(make_tool: Any, agent: APIClient,
                                                         parses: list[bytes],
                                                         handler_reads: list[Any]) -> None:
    closed = make_tool()  # not open to anonymous callers: 401 after the body is read
    response = call(DjangoClient(), closed.name, {"operationId": "k"})
    assert response.status_code == 401 and code_of(response) == "not_authenticated"
    assert handler_reads == [{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": closed.name,
                                         "arguments": {"operationId": "k"}}}]
    assert len(parses) == 1

    # A body that does not parse: the handler reads it as DRF leaves it, empty.
    handler_reads.clear()
    parses.clear()
    broken = agent.post(MCP, '{"jsonrpc": "2.0", "id": 1, "id": 2}',
                        content_type="application/json")
    assert broken.status_code == 400 and broken.json()["error"]["code"] == -32700
    assert len(handler_reads) == 1 and not handler_reads[0]
    assert len(parses) == 1


def test_the_body_is_parsed_once_whoever_reads_it(agent: APIClient, make_tool: Any,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 parses: list[bytes]) -> None:
    read_by_handler: list[Any] = []
    tool = make_tool(lambda input, ctx: read_by_handler.append(ctx.request.data) or {"n": 1},
                     read_only=True, idempotency_key=None)
    answer = call(agent, tool.name, {"n": 1})
    assert answer.json()["result"]["structuredContent"] == {"n": 1}
    assert read_by_handler[0]["params"]["arguments"] == {"n": 1}
    assert len(parses) == 1

    # A permission class that reads the body first: the view answers what it parsed.
    class ReadsTheBody(BasePermission):
        def has_permission(self, request: Any, view: Any) -> bool:
            return bool(request.data.get("method"))

    monkeypatch.setattr(McpView, "permission_classes", [ReadsTheBody])
    parses.clear()
    answer = call(agent, tool.name, {"n": 1})
    assert answer.json()["result"]["structuredContent"] == {"n": 1}
    assert len(parses) == 1


def test_other_methods_keep_drfs_cycle(agent: APIClient) -> None:
    for response in (agent.get(MCP), agent.delete(MCP)):
        assert response.status_code == 405 and "POST" in response["Allow"]
    options = agent.options(MCP)
    assert options.status_code == 200 and "POST" in options["Allow"]
    assert "POST" in rpc(agent, "ping")["Allow"]
