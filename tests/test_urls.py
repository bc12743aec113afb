"""The agent's addresses: both spellings served, every other path under the prefix JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import key
from tests.test_transport_fixes import CHUNK, run_asgi

pytestmark = pytest.mark.django_db

PING = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
MCP_HEADERS = {"MCP-Protocol-Version": "2025-11-25"}


@pytest.fixture(params=[True, False], ids=["debug", "no-debug"])
def debug(request: pytest.FixtureRequest, settings: Any) -> bool:
    """``APPEND_SLASH`` on (Django's default), with and without ``DEBUG``."""
    settings.APPEND_SLASH = True
    settings.DEBUG = request.param
    assert "django.middleware.common.CommonMiddleware" in settings.MIDDLEWARE
    return bool(request.param)


def json_error(response: Any, status: int = 404) -> dict[str, Any]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json", response.content[:300]
    return dict(response.json()["error"])


@pytest.mark.parametrize("slash", ["", "/"], ids=["no-slash", "slash"])
def test_every_endpoint_is_served_with_and_without_its_slash(
        debug: bool, make_tool: Any, alice: Any, client_for: Any, slash: str) -> None:
    definition = make_tool()
    client = client_for(alice)
    mcp = client.post(f"/agent/mcp{slash}", PING, content_type="application/json",
                      headers=MCP_HEADERS)
    assert mcp.status_code == 200, mcp.content[:300]
    assert mcp.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    called = client.post(f"/agent/tools/{definition.name}{slash}", {"operationId": key()},
                         format="json")
    assert called.status_code == 200, called.content[:300]
    assert called.json()["output"] == {"ok": True}
    operation = called.json()["operation"]["id"]
    for path in (f"/agent/tools{slash}", f"/agent/operations/{operation}{slash}",
                 f"/agent/operations/not-an-id{slash}"):
        response = client.get(path)
        assert response["Content-Type"] == "application/json", path
        assert response.status_code in (200, 404), path
    assert client.get(f"/agent/tools{slash}").json()["tools"]
    assert client.get(f"/agent/operations/{operation}{slash}").json()["id"] == operation
    page = client.get(f"/agent/errors{slash}")
    assert page.status_code == 200 and b'id="tool_not_found"' in page.content
    # Its links hold whichever spelling it was reached by.
    assert b'href="/agent/errors.json"' in page.content
    assert b'href="/agent/llms.txt"' in page.content


@pytest.mark.parametrize("method", ["get", "post", "put", "delete"])
@pytest.mark.parametrize("path", ["/agent/", "/agent/nothing", "/agent/nothing/here/",
                                  "/agent/tools/a/b", "/agent/mcp/extra",
                                  "/agent/operations/x/y/", "/agent/%0A"])
def test_other_paths_under_the_prefix_answer_the_json_error(
        debug: bool, alice: Any, client_for: Any, method: str, path: str) -> None:
    client = client_for(alice)
    if method == "get":
        response = client.get(path)
    else:
        response = getattr(client, method)(path, "{}", content_type="application/json")
    error = json_error(response)
    assert error["code"] == "tool_not_found"
    assert "Nothing is served at this address" in error["message"]


def test_the_site_mounted_at_its_root(debug: bool, settings: Any, make_tool: Any, alice: Any,
                                      client_for: Any) -> None:
    settings.ROOT_URLCONF = "tests.urls_agent_at_root"
    definition = make_tool()
    client = client_for(alice)
    assert client.post("/mcp", PING, content_type="application/json",
                       headers=MCP_HEADERS).json()["result"] == {}
    called = client.post(f"/tools/{definition.name}", {"operationId": key()}, format="json")
    assert called.status_code == 200 and called.json()["output"] == {"ok": True}
    assert json_error(client.post("/nothing", "{}", content_type="application/json"))
    assert json_error(client.get("/nothing/"))["code"] == "tool_not_found"
    # The site's own page keeps APPEND_SLASH's redirect; a POST to it is not the agent's.
    redirected = client.get("/upload?x=1")
    assert redirected.status_code == 301 and redirected["Location"] == "/upload/?x=1"


def test_a_body_over_the_limit_without_the_slash_is_refused_before_it_is_read() -> None:
    """The ASGI wrapper bounds ``mcp`` and ``tools/<name>`` as it bounds their slashed
    spellings: Django would otherwise read (and spool) the whole body first."""
    for path in ("/agent/mcp", "/agent/tools/list_orders"):
        sent, read = run_asgi(path, len(CHUNK) * 400, 400)
        assert sent[0]["status"] == 413, path
        assert read == [0], path
