"""The browser tests' one Chromium: its launch, a page at a width, logging in, screenshots.

Importing this module skips the importing test module when ``/usr/bin/chromium`` or
Playwright is missing; the fixtures (``browser``, ``page``, ``staff`` in
``tests/integration/conftest.py``) import it inside their bodies, so that skip reaches
only the modules that use a browser. Set ``GT_CONSOLE_SCREENSHOTS=/some/dir`` to save the
screenshots the tests take (``shoot``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is not installed", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
# Every wait for a condition (an assertion, an action, a navigation) is bounded at 30 s, in
# every browser file (they import this module): a page that renders in a second on a quiet
# machine took more than Playwright's 5 s default beside a second CI run (the docs page's
# Swagger UI, its aria snapshot showing it rendered just after the assertion gave up).
WAIT_MS = 30_000
expect.set_options(timeout=WAIT_MS)

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
CONF_LIST = "/admin/guarded_tools/confirmation/"
OPS_LIST = "/admin/guarded_tools/operation/"
AUDIT_LIST = "/admin/guarded_tools/auditentry/"
SCREENSHOTS = os.environ.get("GT_CONSOLE_SCREENSHOTS")


def launch(playwright: Any) -> Any:
    """Debian's Chromium, headless, from a running (sync) Playwright."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                      args=CHROMIUM_ARGS)


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched Chromium for as long as the block runs, closed after it."""
    # Playwright's sync API keeps an event loop in this thread; Django would refuse ORM
    # calls from the test body (and the database teardown) while it sees that loop.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_api.sync_playwright() as playwright:
            browser = launch(playwright)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def open_page(browser: Any, base_url: str, width: int = 1280, scheme: str = "light") -> Any:
    """A page in a fresh browser context (cookies, storage) at WIDTH px, in SCHEME."""
    context = browser.new_context(base_url=base_url, viewport={"width": width, "height": 900},
                                  color_scheme=scheme)
    context.set_default_timeout(WAIT_MS)
    return context.new_page()


def log_in(page: Any, username: str = "boss") -> None:
    """Sign PAGE's browser context in as USERNAME without a page load.

    The session is the one Django's test client opens with its documented ``force_login``;
    its cookie goes into the context for the live server's host (pytest-django serves on
    ``localhost``). The admin's own log-in form is what ``log_in_with_the_form`` goes
    through: a form log-in costs four requests and two rendered pages, which the 26 log-ins
    of the browser tests would pay in each of three runs.
    """
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get_by_natural_key(username))
    page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "domain": "localhost",
                               "path": "/", "httpOnly": True, "sameSite": "Lax",
                               "value": client.cookies[settings.SESSION_COOKIE_NAME].value}])


def log_in_with_the_form(page: Any, username: str = "boss", password: str = "pw") -> None:
    """Log in as a person does: the admin's log-in page, its form, the index it leads to."""
    page.goto("/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_be_visible()
    expect(page.locator("#user-tools")).to_contain_text(username)


def fits(page: Any, where: str) -> None:
    """The content area holds its content at this width: nothing overflows sideways."""
    widths = page.evaluate("""() => [document.documentElement,
        ...document.querySelectorAll('#content, #content .results, #content table')]
        .map(e => [e.id || e.className || e.tagName, e.scrollWidth, e.clientWidth])""")
    assert all(scroll <= client for _, scroll, client in widths), (where, widths)


def shoot(page: Any, name: str, *, full_page: bool = False) -> None:
    """Save a screenshot as NAME when GT_CONSOLE_SCREENSHOTS names a folder."""
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / name), full_page=full_page)


def label(text: str) -> re.Pattern[str]:
    """A status label as shown, whatever its case (CSS or translations may capitalize)."""
    return re.compile(rf"^\s*{re.escape(text)}\s*$", re.IGNORECASE)


def choose_action(page: Any, action: str) -> None:
    """Run the changelist's ACTION on the rows already ticked."""
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")


def decide_in_the_admin(page: Any, decision: str, requester: str,
                        shows: tuple[str, ...] = ()) -> None:
    """A staff member opens the requester's pending call in the admin, reads it, decides."""
    log_in(page)
    page.goto(CONF_LIST)
    page.locator("#result_list tbody tr", has_text=requester).locator("a").first.click()
    for text in shows:
        expect(page.locator(".gt-detail")).to_contain_text(text)
    if decision == "approve":
        page.get_by_role("button", name="Approve").click()
        expect(page.get_by_test_id("status")).to_have_text(label("consumed"))
    else:
        page.fill("#gt-reason", "Over budget.")
        page.get_by_role("button", name="Decline").click()
        expect(page.get_by_test_id("status")).to_have_text(label("declined"))


def incident(kind: str = "unknown") -> Any:
    """The demo's incident of KIND (``demo_incident``): the operation it leaves."""
    from django.core.management import call_command

    from guarded_tools.models import Operation

    call_command("demo_incident", kind, stdout=StringIO())
    return Operation.objects.order_by("-created_at").first()
