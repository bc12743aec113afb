"""End to end: the official MCP client's OAuth provider connects to the live demo.

The client discovers the Protected Resource Metadata from the 401, then the
authorization server's metadata, registers (Client ID Metadata Document, or Dynamic
Client Registration), sends the user to the authorization endpoint (Playwright in
headless Chromium logs in and consents on the demo's pages), exchanges the code with
PKCE, lists and calls tools; then the user revokes the connection and the token
answers 401. The CIMD document is served by a test fetcher: DOT fetches only public
https URLs, and the live server is on loopback http.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest

pytest.importorskip("oauth2_provider", reason="django-oauth-toolkit (guarded-tools[oauth])")
if not __import__("importlib.metadata").metadata.version("mcp").startswith("2"):
    pytest.skip("the OAuth flow is tested with the mcp 2.x client", allow_module_level=True)
pytest.importorskip("playwright.async_api")

import anyio
import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata, OAuthToken
from oauth2_provider.models import get_access_token_model, get_application_model
from playwright import async_api

from guarded_tools import Tool
from tests.conftest import Effects, Lines, key
from tests.integration.browser import CHROMIUM, CHROMIUM_ARGS, launch

# Django 5.2's environment has the mcp 1.x client, which the module-level skip above leaves
# out: its Django 6 runs are its only ones, on both databases (django6_only).
pytestmark = [pytest.mark.browser, pytest.mark.django6_only,
              pytest.mark.django_db(transaction=True)]

REDIRECT = "http://127.0.0.1:47613/callback"  # never listened on: the browser's request is routed
CIMD_URL = "https://host.example/mcp/client.json"


class DocumentFetcher:
    """``CIMD_METADATA_FETCHER`` for the test: the client's document, as its URL serves it."""

    documents: ClassVar[dict[str, dict[str, Any]]] = {}

    def fetch(self, client_id: str) -> tuple[dict[str, Any], int]:
        from oauth2_provider.cimd import CIMDError

        if client_id not in self.documents:
            raise CIMDError("no such document")
        return self.documents[client_id], 300


class MemoryStorage:
    """The host's token storage (``mcp.client.auth.TokenStorage``), in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: Any = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client

    async def set_client_info(self, client_info: Any) -> None:
        self.client = client_info


@pytest.fixture
def demo(live_server: Any, settings: Any, user_factory: Callable[..., Any]) -> dict[str, Any]:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "OAUTH_PROTECTS": ["mcp", "rest"]}
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER,
                                "CIMD_METADATA_FETCHER": f"{__name__}.DocumentFetcher"}
    DocumentFetcher.documents = {CIMD_URL: {
        "client_id": CIMD_URL, "client_name": "E2E host (CIMD)", "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }}
    user = user_factory("oauth-user")
    return {"url": f"{live_server.url}/agent/mcp", "base": live_server.url, "user": user}


async def _consent(context: Any, authorization_url: str, seen: dict[str, Any]) -> None:
    """What the user does in the browser: log in on the demo's page, then authorize."""
    page = await context.new_page()
    redirected = anyio.Event()

    async def callback(route: Any) -> None:
        seen["callback"] = route.request.url
        await route.fulfill(status=200, body="You can close this window.")
        redirected.set()

    await page.route(f"{REDIRECT}**", callback)
    await page.goto(authorization_url)
    await page.wait_for_selector("#authorizationForm, #id_username")
    if await page.locator("#id_username").count():  # a step-up finds the user logged in
        await page.fill("#id_username", "oauth-user")
        await page.fill("#id_password", "pw")
        await page.click("button[type=submit]")
        await page.wait_for_selector("#authorizationForm")
    seen["consent_text"] = await page.inner_text("main")
    await page.click("input[name=allow]")
    with anyio.fail_after(30):
        await redirected.wait()  # the browser followed the redirect to the host's loopback
    await page.close()


async def _revoke_in_browser(context: Any, base: str) -> None:
    """The user sees the connection on the authorized-tokens page and revokes it."""
    page = await context.new_page()
    await page.goto(f"{base}/o/authorized_tokens/")
    await page.click("text=revoke")
    await page.click("input[type=submit]")
    await page.wait_for_url(f"{base}/o/authorized_tokens/")
    await page.close()


def _connect(demo: dict[str, Any], tool: Tool, *, cimd: bool, list_first: bool = True,
             revoke: bool = True) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with async_api.async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
            context = await browser.new_context()
            storage = MemoryStorage()

            async def redirect_handler(url: str) -> None:
                seen.setdefault("authorization_urls", []).append(url)
                await _consent(context, url, seen)

            async def callback_handler() -> AuthorizationCodeResult:
                query = parse_qs(urlsplit(seen["callback"]).query)
                return AuthorizationCodeResult(code=query["code"][0],
                                               state=query.get("state", [None])[0],
                                               iss=query.get("iss", [None])[0])

            provider = OAuthClientProvider(
                server_url=demo["url"],
                client_metadata=OAuthClientMetadata(
                    client_name="E2E host (DCR)", redirect_uris=[REDIRECT],
                    grant_types=["authorization_code", "refresh_token"],
                    response_types=["code"], token_endpoint_auth_method="none",
                ),
                storage=storage,
                redirect_handler=redirect_handler,
                callback_handler=callback_handler,
                client_metadata_url=CIMD_URL if cimd else None,
            )
            http = httpx2.AsyncClient(auth=provider, timeout=30)
            async with Client(streamable_http_client(demo["url"], http_client=http)) as client:
                if list_first:
                    seen["tools"] = {t.name for t in (await client.list_tools()).tools}
                operation_id = key()
                seen["call"] = await client.call_tool(tool.name, {"operationId": operation_id})
                seen["operation_id"] = operation_id
            assert storage.tokens is not None
            seen["access_token"] = storage.tokens.access_token
            seen["client_id"] = storage.client.client_id
            seen["scope"] = storage.tokens.scope
            if not revoke:
                await browser.close()
                return
            await _revoke_in_browser(context, demo["base"])
            # The same call with the revoked token, a replay of a succeeded operation.
            async with httpx2.AsyncClient(timeout=30) as raw:
                seen["after_revoke"] = await raw.post(
                    demo["url"], headers={"Authorization": f"Bearer {seen['access_token']}",
                                          "MCP-Protocol-Version": "2025-11-25",
                                          "Accept": "application/json, text/event-stream"},
                    json={"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
                        "name": tool.name, "arguments": {"operationId": operation_id}}})
            await browser.close()

    anyio.run(main)
    return seen


def _check(seen: dict[str, Any], demo: dict[str, Any], tool: Tool) -> None:
    assert len(seen["authorization_urls"]) == 1
    authorization = seen["authorization_urls"][0]
    assert authorization.startswith(f"{demo['base']}/o/authorize/?")
    assert "code_challenge_method=S256" in authorization
    assert parse_qs(urlsplit(seen["callback"]).query)["iss"] == [f"{demo['base']}/o"]  # RFC 9207
    assert "See your orders" in seen["consent_text"]  # the scopes, described for the user
    assert tool.name in seen["tools"] and "list_orders" in seen["tools"]
    assert seen["call"].is_error is False
    assert tool.handler.count == 1  # type: ignore[attr-defined]
    token = get_access_token_model().objects.filter(user=demo["user"])
    assert not token.exists()  # revoked
    response = seen["after_revoke"]
    assert response.status_code == 401
    assert "resource_metadata=" in response.headers["WWW-Authenticate"]
    assert response.json()["error"]["data"]["code"] == "not_authenticated"


@pytest.mark.slow
def test_official_client_with_a_client_id_metadata_document(
    demo: dict[str, Any], make_tool: Callable[..., Tool]
) -> None:
    tool = make_tool(Effects(), scopes=["demo:write"], name=f"e2e_{uuid.uuid4().hex[:6]}")
    seen = _connect(demo, tool, cimd=True)
    _check(seen, demo, tool)
    assert seen["client_id"] == CIMD_URL
    application = get_application_model().objects.get(client_id=CIMD_URL)
    assert application.registration_source == "cimd"


@pytest.mark.slow
def test_official_client_with_dynamic_client_registration(
    demo: dict[str, Any], make_tool: Callable[..., Tool]
) -> None:
    tool = make_tool(Effects(), scopes=["demo:write"], name=f"e2e_{uuid.uuid4().hex[:6]}")
    seen = _connect(demo, tool, cimd=False)
    _check(seen, demo, tool)
    application = get_application_model().objects.get(client_id=seen["client_id"])
    assert application.name == "E2E host (DCR)" and application.client_type == "public"


@pytest.mark.slow
def test_official_client_steps_up_on_insufficient_scope(
    demo: dict[str, Any], settings: Any, make_tool: Callable[..., Tool]
) -> None:
    """The 401 asks for demo:read only; the write tool's 403 makes the host ask for more."""
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "OAUTH_CHALLENGE_SCOPES": ["demo:read"]}
    tool = make_tool(Effects(), scopes=["demo:write"], name=f"e2e_{uuid.uuid4().hex[:6]}")
    seen = _connect(demo, tool, cimd=True, list_first=False, revoke=False)
    first, second = seen["authorization_urls"]
    assert parse_qs(urlsplit(first).query)["scope"] == ["demo:read"]
    assert set(parse_qs(urlsplit(second).query)["scope"][0].split()) == {"demo:read",
                                                                         "demo:write"}
    assert seen["call"].is_error is False and set(seen["scope"].split()) == {"demo:read",
                                                                             "demo:write"}
    assert tool.handler.count == 1  # type: ignore[attr-defined]


# -- the TypeScript SDK's client -------------------------------------------------------------------
@pytest.fixture(scope="module")
def node_client(typescript_sdk: Path) -> Path:
    """``tests/integration/js/oauth_client.mjs``, with the TypeScript SDK installed (``npm ci``)."""
    return typescript_sdk / "oauth_client.mjs"


@pytest.mark.slow
def test_typescript_sdk_client_with_dynamic_client_registration(
    demo: dict[str, Any], make_tool: Callable[..., Tool], node_client: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tool = make_tool(Effects(), scopes=["demo:write"], name=f"e2e_{uuid.uuid4().hex[:6]}")
    from tests.integration.browser import sync_api
    process = subprocess.Popen(["node", str(node_client), demo["url"], REDIRECT, tool.name],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    lines = Lines(process)
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # sync Playwright's loop
    try:
        with sync_api.sync_playwright() as playwright:
            browser = launch(playwright)
            page = browser.new_context().new_page()
            redirected: list[str] = []
            page.route(f"{REDIRECT}**", lambda route: (redirected.append(route.request.url),
                                                       route.fulfill(status=200, body="ok")))
            authorization = lines.next()["authorize"]
            page.goto(authorization)
            page.fill("#id_username", "oauth-user")
            page.fill("#id_password", "pw")
            page.click("button[type=submit]")
            page.click("input[name=allow]")
            page.wait_for_event("requestfinished", lambda r: r.url.startswith(REDIRECT))
            lines.send(parse_qs(urlsplit(redirected[0]).query)["code"][0])
            listed = lines.next()["listed"]
            called = lines.next()
            page.goto(f"{demo['base']}/o/authorized_tokens/")
            page.click("text=revoke")
            page.click("input[type=submit]")
            page.wait_for_url(f"{demo['base']}/o/authorized_tokens/")
            lines.send("revoked")
            after = lines.next()
            browser.close()
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert "code_challenge_method=S256" in authorization and "resource=" in authorization
    assert tool.name in listed and "list_orders" in listed
    assert called["called"] == {"isError": False}
    assert tool.handler.count == 1  # type: ignore[attr-defined]
    assert after["afterRevoke"] in ("InvalidGrantError", "UnauthorizedError"), after
    assert after["status"] == 401
    assert after["challenge"].startswith("Bearer ") and "resource_metadata=" in after["challenge"]
    application = get_application_model().objects.get(client_id=called["clientId"])
    assert application.name == "E2E host (TypeScript SDK)"
    assert not get_access_token_model().objects.filter(user=demo["user"]).exists()
