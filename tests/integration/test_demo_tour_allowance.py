"""The docs' tour of the demo, its allowance part (docs/demo-tour.md, "A standing approval
for small payments"), replayed against a freshly seeded demo: each command the part shows
is run as the page runs it, and each answer it prints (the ``# ...`` line after a command)
is the demo's, word for word ("…" stands for what differs from run to run).

The page's ``pay`` shell function and its ``jq`` filters are matched exactly, so that what
the test sends and selects is what a reader's shell does; a command the test does not know
fails the test rather than being skipped.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from guarded_tools.models import Confirmation, Operation
from project.demo.management.commands.demo_seed import AGENT_TOKEN
from tests.conftest import REPO_ROOT
from tests.integration.demo import matches

TOUR = (REPO_ROOT / "docs" / "demo-tour.md").read_text()
HEADING = "## A standing approval for small payments"
PART = TOUR[TOUR.index(HEADING):]
PART = PART[:PART.find("\n## ", 1)] if "\n## " in PART[1:] else PART

#: The page's ``pay KEY AMOUNT``, which :meth:`Demo.pay` below does.
PAY = r'''pay() {   # pay KEY AMOUNT: a new authorization, then the payment from Checking to Savings
  auth=$(curl -s $A/tools/prepare_payment_authorization/ -H "$T" -H "$J" \
    -d "{\"requestId\":\"auth-$1\",\"sourceId\":1}" | jq .output.authorizationId)
  curl -s $A/tools/send_payment/ -H "$T" -H "$J" \
    -d "{\"operationId\":\"$1\",\"sourceId\":1,\"receiverId\":2,''' \
    r'''\"amount\":\"$2\",\"authorizationId\":$auth}"; echo
}'''
TOOLS = ("curl -s $A/tools/ -H \"$T\" | jq -r '.tools[] | select(.name == \"send_payment\")"
         " | .allowances[]'")
RULE = " | jq -r .error.confirmation.rule"
GRANT = re.compile(r"\.venv/bin/python manage\.py demo_allowance( --revoke)?$")
PAY_LINE = re.compile(r"pay (\S+) (\d+\.\d\d)(.*)$")
LOOP = re.compile(r"for i in ([\d ]+); do pay (\S+)\$i (\d+\.\d\d) > /dev/null; done$")


def jq(program: list[str], text: str) -> str | None:
    """What ``jq`` prints for ``text`` (None where jq is not installed)."""
    if shutil.which("jq") is None:
        return None
    done = subprocess.run(["jq", *program], input=text, capture_output=True, text=True,
                          check=True)
    return done.stdout.rstrip("\n")


def agrees_with_jq(command: str, answer: str, selected: str) -> None:
    """The page's jq filter selects from ``answer`` what the test selected."""
    program = command.split("| jq ", 1)[1]
    words = ["-r", program[4:-1]] if program.startswith("-r '") else program.split()
    by_jq = jq(words, answer)
    assert by_jq is None or by_jq == selected, (command, by_jq, selected)


class Demo:
    """The seeded demo, reached as the page's commands reach it."""

    def __init__(self) -> None:
        call_command("demo_seed", stdout=StringIO())
        self.agent = APIClient(HTTP_HOST="127.0.0.1:8000")
        self.agent.credentials(HTTP_AUTHORIZATION=f"Token {AGENT_TOKEN}")

    def pay(self, key: str, amount: str) -> Any:
        auth = self.agent.post("/agent/tools/prepare_payment_authorization/", {
            "requestId": f"auth-{key}", "sourceId": 1}, format="json")
        assert auth.status_code == 200, auth.content
        return self.agent.post("/agent/tools/send_payment/", {
            "operationId": key, "sourceId": 1, "receiverId": 2, "amount": amount,
            "authorizationId": auth.json()["output"]["authorizationId"]}, format="json")

    def run(self, command: str) -> str | None:
        """What ``command`` prints (None: it prints nothing the page shows)."""
        if GRANT.match(command):
            out = StringIO()
            call_command("demo_allowance", *command.split()[3:], stdout=out)
            return out.getvalue().rstrip("\n")
        if command == TOOLS:
            listed = self.agent.get("/agent/tools/")
            tools = listed.json()["tools"]
            selected = "\n".join(next(t for t in tools if t["name"] == "send_payment")
                                 ["allowances"])
            agrees_with_jq(command, listed.content.decode(), selected)
            return selected
        if looped := LOOP.match(command):
            for i in looped.group(1).split():
                answer = self.pay(f"{looped.group(2)}{i}", looped.group(3))
                assert answer.status_code == 200, answer.content
            return None
        paid = PAY_LINE.match(command)
        assert paid is not None and paid.group(3) in ("", RULE), f"unknown command: {command}"
        answer = self.pay(paid.group(1), paid.group(2))
        if paid.group(3) == RULE:
            assert answer.status_code == 202, answer.content
            rule = str(answer.json()["error"]["confirmation"]["rule"])
            agrees_with_jq(command, answer.content.decode(), rule)
            return rule
        assert answer.status_code == 200, answer.content
        return json.dumps(answer.json(), separators=(",", ":"), ensure_ascii=False)


def test_the_pages_pay_sends_what_the_test_sends(tmp_path: Any) -> None:
    if shutil.which("jq") is None or shutil.which("bash") is None:
        pytest.skip("needs bash and jq, as the page does")
    sent = tmp_path / "sent"
    script = PAY + f"""
curl() {{ for a in "$@"; do case $prev in -d) echo "$a" >> {sent};; esac; prev=$a; done
  echo '{{"output":{{"authorizationId":7}}}}'; }}
pay pay-a1 150.00 > /dev/null
"""
    subprocess.run(["bash", "-c", script], check=True)
    bodies = [json.loads(line) for line in sent.read_text().splitlines()]
    assert bodies == [{"requestId": "auth-pay-a1", "sourceId": 1}, {
        "operationId": "pay-a1", "sourceId": 1, "receiverId": 2, "amount": "150.00",
        "authorizationId": 7}]


def commands() -> list[tuple[str, str]]:
    """(command, the answer the page shows after it, or "") in the page's order."""
    found: list[tuple[str, str]] = []
    for text in re.findall(r"```sh\n(.*?)```", PART, flags=re.S):
        assert PAY in text or "pay() {" not in text, "the page's pay() is not the test's"
        lines = text.replace(PAY, "").replace("\\\n", " ").splitlines()
        for number, line in enumerate(lines):
            if not line.strip() or line.startswith("# "):
                continue
            after = lines[number + 1] if number + 1 < len(lines) else ""
            found.append((line, after[2:] if after.startswith("# ") else ""))
    return found


@pytest.mark.django_db(reset_sequences=True)  # the page's ids are a fresh demo's
def test_the_tours_allowance_answers_as_the_demo_does() -> None:
    demo = Demo()
    walked = commands()
    assert len(walked) == 8, walked
    compared = 0
    for command, shown in walked:
        printed = demo.run(command)
        if shown:
            assert printed is not None and matches(shown, printed), \
                f"{command}\npage: {shown}\ndemo: {printed}"
            compared += 1
        else:
            assert printed is None, f"{command}: the page shows no answer, the demo says {printed}"
    assert compared == 7
    # What the page says the admin shows: the operation's timeline, a waiting payment's
    # link to an allowance, and the list's action that revokes one.
    said = re.search(r'operation\'s page in the admin says it "([^"]+)"', PART)
    assert said is not None
    approver = Client()
    approver.force_login(get_user_model().objects.get(username="approver"))
    first = Operation.objects.get(key="pay-a1")
    page = approver.get(f"/admin/guarded_tools/operation/{first.pk}/change/")
    assert page.status_code == 200
    assert said.group(1) in page.content.decode(), said.group(1)
    link = re.search(r"\*\*(Allow \*agent\* calls like this without asking)\*\*", PART)
    assert link is not None
    waiting = Confirmation.objects.get(operation__key="pay-a8")
    page = approver.get(f"/admin/guarded_tools/confirmation/{waiting.pk}/change/")
    assert page.status_code == 200
    assert link.group(1).replace("*", "") in page.content.decode()
    action = re.search(r"the action \*([^*]+)\* on the admin's \*Allowances\* list", PART)
    assert action is not None
    page = approver.get("/admin/guarded_tools/allowance/")
    assert page.status_code == 200 and action.group(1) in page.content.decode()
    assert "issue" not in PART.lower()
