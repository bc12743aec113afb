"""The agent's addresses: both spellings served, every other path under the prefix JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import key
from tests.transports.asgi_calls import CHUNK, run_asgi

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
    settings.ROOT_URLCONF = "tests.transports.urls_agent_at_root"
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


def _raw_get(live_server: Any, target: str) -> tuple[int, str | None, str]:
    """A GET of ``target`` exactly as written (``//evil.example`` stays a path)."""
    import http.client
    from urllib.parse import urlsplit

    address = urlsplit(live_server.url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        return response.status, response.getheader("Location"), response.read().decode()
    finally:
        connection.close()


@pytest.mark.parametrize("target", ["/%2Fevil.example", "/%2Fevil.example?next=1",
                                    "/%2F%2Fevil.example/x", "/%5C%5Cevil.example",
                                    "//evil.example"])
def test_a_path_that_reads_as_another_host_is_never_redirected_there(
        debug: bool, settings: Any, live_server: Any, client: Any, target: str) -> None:
    """Issue 25, item 11: mounted at the root after a catch-all of the site's pages, a
    path of ``//evil.example`` (what gunicorn or uvicorn hand Django for ``GET
    //evil.example``; Python's own server folds the slashes, ``%2F`` keeps them) answered
    ``301 Location: //evil.example/``, a browser's way to another host. It is the agents'
    JSON not-found error now; the site's own pages still get their slash."""
    settings.ROOT_URLCONF = "tests.transports.urls_agent_at_root_beside_pages"
    status, location, body = _raw_get(live_server, target)
    if target.startswith("/%2F"):
        assert status == 404 and location is None, (status, location)
        assert '"tool_not_found"' in body
    else:  # folded to /evil.example by the server, or escaped: a page of the site
        assert status == 301 and location in ("/evil.example/", "/%5C%5Cevil.example/")
    answer = client.get(target)  # the test client's PATH_INFO keeps the decoded slashes
    assert answer.status_code in (301, 404)
    if answer.status_code == 301:
        assert answer["Location"].startswith("/") and answer["Location"][1] not in "/\\"
    status, location, _ = _raw_get(live_server, "/about?x=1")
    assert status == 301 and location == "/about/?x=1"
    status, _, body = _raw_get(live_server, "/about/")
    assert status == 200 and body == "page about"
