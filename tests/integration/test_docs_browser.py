"""The Swagger UI page in headless Chromium: packaged assets only, every tool rendered.

Set ``GT_CONSOLE_SCREENSHOTS=/some/dir`` to save a screenshot of the page there.
"""

from __future__ import annotations

from typing import Any

import pytest

from guarded_tools import registry
from tests.integration.browser import expect, log_in, shoot

pytest.importorskip("drf_spectacular_sidecar")  # in requirements; docs/ needs it

# One xdist worker runs this file's tests, in order: its module-scoped fixtures start once.
# Swagger UI and the app's own page, not Django's admin: under Django 6 only (one_django).
pytestmark = [pytest.mark.browser, pytest.mark.one_django,
              pytest.mark.django_db(transaction=True), pytest.mark.xdist_group("docs_browser")]


def test_docs_render_every_tool_from_packaged_assets(page: Any, staff: Any,
                                                     live_server: Any) -> None:
    """No request leaves the site (the machine has no network anyway: a CDN asset would
    leave the page blank), and the operations of the tools this caller may call show."""
    elsewhere: list[str] = []

    def only_the_site(route: Any) -> None:
        url = route.request.url
        if url.startswith(live_server.url):
            route.continue_()
        else:
            elsewhere.append(url)
            route.abort()

    page.route("**/*", only_the_site)
    log_in(page)  # openapi.json lists the tools of the session's user
    page.goto("/agent/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("OAS 3.1")
    for definition in registry:
        block = page.locator(f"#operations-tools-call_{definition.name}")
        expect(block).to_be_visible()
        expect(block).to_contain_text(f"/agent/tools/{definition.name}/")
    shoot(page, "docs.png", full_page=True)
    first = next(iter(registry))
    page.locator(f"#operations-tools-call_{first.name} .opblock-summary").first.click()
    expect(page.locator(f"#operations-tools-call_{first.name} .opblock-body")).to_be_visible()
    assert elsewhere == []


def test_docs_tell_an_anonymous_caller_why_no_tool_shows_and_how_to_see_theirs(
    page: Any, user_factory: Any, live_server: Any
) -> None:
    """Anonymous, the page lists no tool and says the list depends on who calls, with a
    way to sign in; its link logs in and comes back to a page listing that user's tools."""
    user_factory("dora")
    page.goto("/agent/docs/")
    note = page.locator(".swagger-ui .info .description")
    expect(note).to_contain_text("No tools are listed: you are not signed in.")
    expect(note).to_contain_text("This list depends on who calls")
    expect(page.locator("[id^=operations-tools-call_]")).to_have_count(0)
    shoot(page, "docs-anonymous.png", full_page=True)
    link = note.get_by_role("link", name="log in")  # Swagger UI opens it in a new tab
    assert link.get_attribute("href") == "/accounts/login/?next=%2Fagent%2Fdocs%2F"
    page.goto(link.get_attribute("href"))
    page.fill("#id_username", "dora")
    page.fill("#id_password", "pw")
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{live_server.url}/agent/docs/")
    expect(note).to_contain_text("Signed in as dora: this list shows the")
    expect(page.locator("[id^=operations-tools-call_]").first).to_be_visible()
    shoot(page, "docs-signed-in.png", full_page=True)
