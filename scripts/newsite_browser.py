"""The new site's admin in Chromium, as a staff member uses it (scripts/newsite.sh).

Run by the repository's environment (Playwright, Debian's /usr/bin/chromium), not the
site's. Arguments: the site's base URL, the staff member's username and password, the id
of a request waiting for approval, and a folder for the 1280 px screenshots. Signs in,
opens every page the app's admin index links to (each must answer 200), the queue and the
request's page, approves it with the page's button, and checks the admin's message.
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

BASE, USER, PASSWORD, CONFIRMATION, SHOTS = sys.argv[1:6]
shots = Path(SHOTS)
shots.mkdir(parents=True, exist_ok=True)


def main() -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(30_000)
        page.goto(f"{BASE}/admin/login/?next=/admin/")
        page.fill("#id_username", USER)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        expect(page.locator("#user-tools")).to_be_visible()
        # Every page the app's admin index links to.
        response = page.goto(f"{BASE}/admin/guarded_tools/")
        assert response is not None and response.status == 200, response
        links = sorted({href for href in page.locator("#content-main a").evaluate_all(
            "links => links.map(a => a.getAttribute('href'))")
            if href and href.startswith("/admin/guarded_tools/") and "/add/" not in href})
        assert len(links) >= 2, links
        for href in links:
            response = page.goto(f"{BASE}{href}")
            assert response is not None and response.status == 200, (href, response)
            print(f"newsite: chromium 200 {href}", flush=True)
        page.goto(f"{BASE}/admin/guarded_tools/confirmation/")
        page.screenshot(path=shots / "queue-1280.png", full_page=True)
        response = page.goto(f"{BASE}/admin/guarded_tools/confirmation/{CONFIRMATION}/change/")
        assert response is not None and response.status == 200, response
        page.screenshot(path=shots / "request-1280.png", full_page=True)
        page.locator("[data-testid=approve]:visible").first.click()
        expect(page.locator("ul.messagelist")).to_contain_text("Approved")
        page.screenshot(path=shots / "approved-1280.png", full_page=True)
        page.goto(f"{BASE}/admin/guarded_tools/operation/")
        page.screenshot(path=shots / "operations-1280.png", full_page=True)
        print(f"newsite: approved in Chromium; screenshots in {shots}", flush=True)
        browser.close()


main()
