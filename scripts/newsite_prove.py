"""Drive the new site scripts/newsite.sh started, as an agent and a staff member would.

Run by the agent's own virtualenv (stdlib HTTP for REST and the admin, then
docs/quickstart/mcp_client.py with the official MCP client). Arguments: the site's base URL,
the agent's token, the staff member's username and password, the quickstart folder. Prints
each step and, last, one JSON line of timings (epoch seconds) for newsite.sh to report.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

BASE, TOKEN, STAFF, PASSWORD, QUICKSTART = sys.argv[1:6]
AGENT = f"{BASE}/agent"
marks: dict[str, float] = {}


def say(step: str, detail: Any = "") -> None:
    print(f"newsite: {step}{': ' if detail != '' else ''}{detail}", flush=True)


def call(tool: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], Any]:
    """POST a tool call with the agent's token: status, body and headers."""
    request = urllib.request.Request(
        f"{AGENT}/tools/{tool}/", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Token {TOKEN}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers


def expect(condition: bool, what: str, seen: Any) -> None:
    if not condition:
        say("FAILED", f"{what}: {seen}")
        sys.exit(1)


class Staff:
    """A person signed in to the admin with a session and Django's CSRF cookie."""

    def __init__(self) -> None:
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def csrf(self) -> str:
        return next(c.value for c in self.jar if c.name == "csrftoken")

    def get(self, path: str) -> tuple[int, str]:
        try:
            with self.opener.open(f"{BASE}{path}", timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def post(self, path: str, fields: dict[str, str]) -> tuple[int, str]:
        data = urllib.parse.urlencode({**fields, "csrfmiddlewaretoken": self.csrf()}).encode()
        request = urllib.request.Request(f"{BASE}{path}", data=data,
                                         headers={"Referer": f"{BASE}{path}"})
        try:
            with self.opener.open(request, timeout=30) as response:  # follows the redirect
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


def approve(staff: Staff, confirmation: str) -> None:
    """The queue, the request's page and the operations answer 200; then the decision."""
    for path in ("/admin/", "/admin/guarded_tools/confirmation/",
                 f"/admin/guarded_tools/confirmation/{confirmation}/change/",
                 "/admin/guarded_tools/operation/"):
        status, page = staff.get(path)
        expect(status == 200, f"GET {path}", (status, page[-500:]))
        say("admin page 200", path)
    status, page = staff.post(f"/admin/guarded_tools/confirmation/{confirmation}/decide/",
                              {"decision": "approve"})
    messages = re.findall(r'<li class="[a-z]*">([^<]*)', page)
    expect(status == 200 and any("Approved" in m for m in messages), "the approval",
           (status, messages))
    say("approved in the admin", messages)


def mcp(operation_id: str) -> str:
    done = subprocess.run(
        [sys.executable, str(Path(QUICKSTART) / "mcp_client.py"), operation_id],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "GT_TOKEN": TOKEN, "GT_MCP_URL": f"{AGENT}/mcp/"})
    expect(done.returncode == 0, "mcp_client.py", done.stderr[-3000:])
    return done.stdout


def main() -> None:
    # A read-only call: the first guarded call.
    status, body, _ = call("list_users", {})
    marks["first_guarded_call"] = time.time()
    expect(status == 200 and "users" in body["output"], "list_users", (status, body))
    say("REST list_users 200", body["output"])
    # An invalid input: refused before anything runs, with the field's issue.
    status, body, _ = call("deactivate_user", {"operationId": "rest-1"})
    expect(status == 422 and body["error"]["code"] == "invalid_input", "invalid input",
           (status, body))
    say("REST invalid input 422", body["error"]["code"])
    # A fresh keyed call waits for a person.
    payload = {"operationId": "rest-1", "username": "olduser"}
    status, body, _ = call("deactivate_user", payload)
    expect(status == 202 and body["error"]["code"] == "confirmation_required",
           "a call that needs approval", (status, body))
    confirmation = body["error"]["confirmation"]["id"]
    say("REST deactivate_user 202 confirmation_required", confirmation)
    staff = Staff()
    staff.get("/admin/login/")
    status, page = staff.post("/admin/login/?next=/admin/",
                              {"username": STAFF, "password": PASSWORD})
    expect(status == 200 and "logout" in page.lower(), "the staff member's sign-in", status)
    approve(staff, confirmation)
    # The agent's retry runs the approved call once; the same call again is a replay.
    status, body, headers = call("deactivate_user", payload)
    marks["first_approved_call"] = time.time()
    expect(status == 200 and body["output"] == {"username": "olduser", "deactivated": True}
           and body["operation"]["replayed"] is False, "the approved retry", (status, body))
    say("REST approved retry 200", body["output"])
    status, body, headers = call("deactivate_user", payload)
    expect(status == 200 and body["operation"]["replayed"] is True
           and headers.get("Idempotent-Replayed") == "true", "the replay", (status, body))
    say("REST replay 200", "Idempotent-Replayed: true")
    # The same tools over MCP with the official Python client.
    first = mcp("mcp-1")
    say("MCP first run", first.strip())
    expect("deactivate_user: waiting" in first and "list_users:" in first, "MCP asks", first)
    waiting = re.search(r"Request ([0-9a-f-]{36}) waits", first)
    expect(waiting is not None, "the MCP result names its request", first)
    assert waiting is not None
    approve(staff, waiting.group(1))
    second = mcp("mcp-1")
    say("MCP after approval", second.strip())
    expect("deactivate_user: done" in second and "'deactivated': True" in second,
           "MCP approved retry", second)
    browser = os.environ.get("GT_NEWSITE_BROWSER_PYTHON")
    if browser:  # the same approval in Chromium, by the page's own button
        payload = {"operationId": "rest-2", "username": "olduser"}
        status, body, _ = call("deactivate_user", payload)
        expect(status == 202, "a second call that needs approval", (status, body))
        done = subprocess.run(
            [browser, str(Path(__file__).with_name("newsite_browser.py")), BASE, STAFF,
             PASSWORD, body["error"]["confirmation"]["id"], os.environ["GT_NEWSITE_SHOTS"]],
            capture_output=True, text=True, timeout=300)
        print(done.stdout, end="")
        expect(done.returncode == 0, "the approval in Chromium", done.stderr[-3000:])
        status, body, _ = call("deactivate_user", payload)
        expect(status == 200 and body["operation"]["replayed"] is False,
               "the retry approved in Chromium", (status, body))
        say("REST retry approved in Chromium 200", body["output"])
    print(json.dumps(marks))


main()
