"""The README's walk through with curl, replayed against the seeded demo: each answer it
shows is the demo's, word for word ("…" stands for what differs from run to run).

The calls of the walk's first part (up to the first approval) are read from the README
itself, sent with the demo agent's token as curl sends them, and every answer the README
prints (a ``# {...}`` line, or a JSON block after the commands) is compared with the demo's.
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

README = (REPO_ROOT / "README.md").read_text()
#: The walk's first part: from its heading to the first approval, which a person gives.
WALK = README[README.index("## A walk through with curl"):README.index("Log into `/admin/`")]
CALL = re.compile(r"curl -si? +\$A/tools/([a-z_]+)/ [^\n]*?-d '([^']*)'")


def steps() -> list[tuple[str, dict[str, Any], str]]:
    """(tool, body, the answer the README shows or "") for each call, in the README's order."""
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


def matches(shown: str, body: str) -> bool:
    """``body`` is the README's ``shown`` text, "…" standing for any text."""
    pattern = ".*?".join(re.escape(part) for part in shown.split("…"))
    return re.fullmatch(pattern, body, flags=re.S) is not None


@pytest.mark.django_db(reset_sequences=True)  # the README's ids are a fresh demo's
def test_the_readme_walk_through_answers_as_the_demo_does() -> None:
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
            assert matches(shown, text), f"{tool}:\nREADME: {shown}\ndemo:   {text}"
            compared += 1
    assert compared == 8


def test_the_readme_says_what_the_demo_does_and_speaks_of_no_file_its_readers_lack() -> None:
    commands = README[README.index("## The two commands"):README.index("### Deployment matrix")]
    assert "`approver2`" in commands  # the second approver the walk-through needs
    assert "pip's progress" not in commands and "uv" in commands  # uv installs, pip else
    assert "exits 0" in commands
    # Where the app chose otherwise than a reader might expect is for people who change
    # it (docs/architecture.md), and speaks of no design file users do not have.
    assert "DESIGN.md" not in README
    architecture = (REPO_ROOT / "docs" / "architecture.md")
    text = architecture.read_text()
    assert "## Decisions that may surprise, and why" in text and "DESIGN" not in text
    assert "`read_only` tools" in text and "ATOMIC_SINGLE_TRANSACTION = False" in text
