"""The Swagger UI page in headless Chromium: packaged assets only, every tool rendered.

Set ``GT_BROWSER_SCREENSHOTS=/some/dir`` to save a screenshot of the page there.
"""

from __future__ import annotations

from typing import Any

import pytest

from guarded_tools.registry import registry
from tests.test_browser import browser, expect, log_in, page, screenshot, staff

__all__ = ["browser", "page", "staff"]  # fixtures, shared with test_browser.py
pytest.importorskip("drf_spectacular_sidecar")  # in requirements; docs/ needs it

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


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
    screenshot(page, "docs.png")
    first = next(iter(registry))
    page.locator(f"#operations-tools-call_{first.name} .opblock-summary").first.click()
    expect(page.locator(f"#operations-tools-call_{first.name} .opblock-body")).to_be_visible()
    assert elsewhere == []
