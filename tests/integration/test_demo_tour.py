"""The docs' tour of the demo (docs/demo-tour.md), replayed against the seeded demo: each
answer it shows is the demo's, word for word ("…" stands for what differs from run to run).

The calls of the walk's first part (up to the first approval) are read from the page itself,
sent with the demo agent's token as curl sends them, and every answer the page prints (a
``# {...}`` line, or a JSON block after the commands) is compared with the demo's.
"""

from __future__ import annotations

import json
import re
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from project.demo.management.commands.demo_seed import AGENT_TOKEN
from tests.conftest import REPO_ROOT
from tests.integration.demo import matches

TOUR = (REPO_ROOT / "docs" / "demo-tour.md").read_text()
README = (REPO_ROOT / "README.md").read_text()
#: The walk's first part: from its heading to the first approval, which a person gives.
WALK = TOUR[TOUR.index("## A walk through with curl"):TOUR.index("Log into `/admin/`")]
CALL = re.compile(r"curl -si? +\$A/tools/([a-z_]+)/ [^\n]*?-d '([^']*)'")


def steps() -> list[tuple[str, dict[str, Any], str]]:
    """(tool, body, the answer the page shows or "") for each call, in the page's order."""
    found: list[tuple[str, dict[str, Any], str]] = []
    blocks = re.findall(r"```(\w*)\n(.*?)```", WALK, flags=re.S)
    for kind, text in blocks:
        if kind == "json":  # the answer to the block's last call
            tool, body, _ = found[-1]
            found[-1] = (tool, body, text)
            continue
        if kind != "sh":
            continue
        lines = text.replace("\\\n", " ").splitlines()
        for number, line in enumerate(lines):
            called = CALL.search(line)
            if called is None:
                continue
            after = lines[number + 1] if number + 1 < len(lines) else ""
            answer = after[2:] if after.startswith("# {") else ""
            found.append((called.group(1), json.loads(called.group(2)), answer))
    return found


@pytest.mark.django_db(reset_sequences=True)  # the page's ids are a fresh demo's
def test_the_tour_answers_as_the_demo_does() -> None:
    call_command("demo_seed", stdout=StringIO())
    agent = APIClient(HTTP_HOST="127.0.0.1:8000")
    agent.credentials(HTTP_AUTHORIZATION=f"Token {AGENT_TOKEN}")
    walked = steps()
    assert [tool for tool, _, _ in walked] == [
        "cancel_order", "cancel_order", "cancel_order", "book_slot", "book_slot",
        "list_payment_accounts", "prepare_payment_authorization", "send_payment",
        "prepare_payment_authorization", "send_payment"]
    compared = 0
    for tool, body, shown in walked:
        answer = agent.post(f"/agent/tools/{tool}/", body, format="json")
        data = answer.json()
        if '"meta"' not in shown and isinstance(data, dict) and "meta" in data:
            # A budgeted tool's answer carries what is left (meta.budgets): a walk-through
            # that does not show it is compared without it (its RateLimit fields agree).
            assert data.pop("meta")["budgets"], tool
            assert "RateLimit" in answer, tool
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        if shown.startswith("{\"error\": {"):  # a JSON block, laid out to be read
            assert data == json.loads(shown), (tool, text)
            compared += 1
        elif shown:
            assert matches(shown, text), f"{tool}:\npage: {shown}\ndemo: {text}"
            compared += 1
    assert compared == 8


def test_the_docs_say_what_the_demo_does_and_speak_of_no_file_their_readers_lack() -> None:
    commands = TOUR[TOUR.index("## Running the demo"):TOUR.index("## A walk through with curl")]
    assert "`approver2`" in commands  # the second approver the walk-through needs
    assert "pip's progress" not in commands and "uv" in commands  # uv installs, pip else
    assert "exits 0" in commands
    # The README names both commands, and the demo's users and token, as the tour does.
    assert "make demo" in README and "make test" in README and "`approver2`" in README
    # Where the app chose otherwise than a reader might expect is for people who change
    # it (the architecture page), and speaks of no design file users do not have.
    assert "DESIGN.md" not in README and "DESIGN.md" not in TOUR
    architecture = (REPO_ROOT / "docs" / "explanation" / "architecture.md")
    text = architecture.read_text()
    assert "## Decisions that may surprise, and why" in text and "DESIGN" not in text
    assert "`read_only` tools" in text and "ATOMIC_SINGLE_TRANSACTION = False" in text
