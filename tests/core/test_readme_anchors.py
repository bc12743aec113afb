"""Every error an agent gets links to its code's anchor: the README has each of them.

A catalog ``link`` is an anchor (``#rate_limited``) appended to ``DOCS_URL``; a site may
point ``DOCS_URL`` at the README, so each anchor of the guard's own codes must exist there
(the HTTP contract's table), once.
"""

from __future__ import annotations

import re

from guarded_tools.core.codes import BUILTIN
from tests.conftest import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def test_each_code_of_the_guard_links_to_an_anchor_of_the_readme() -> None:
    anchors = re.findall(r'<a id="([^"]+)"></a>', README)
    missing = []
    for entry in BUILTIN:
        assert entry.link == f"#{entry.code}", entry.code  # the anchor is the code
        if anchors.count(entry.code) != 1:
            missing.append(entry.code)
    assert missing == []


def test_the_budget_codes_are_documented_where_their_anchor_is() -> None:
    for code in ("rate_limited", "budget_exceeded"):
        row = next(line for line in README.splitlines() if f'<a id="{code}">' in line)
        assert row.startswith("| ") and "| 429 |" in row, row
