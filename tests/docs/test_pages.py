"""The README and the docs' pages: the README fits a screen or two and is safe as PyPI's
long description, its code is the quickstart's own, the tutorial includes every quickstart
file, and no page for users tells history (issue numbers, rounds, review items)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.docs.reference import DOCS, HISTORY

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
QUICKSTART = DOCS / "quickstart"
#: What the package's new-site check applies to a fresh site, and the tutorial includes.
QUICKSTART_FILES = ("settings_snippet.py", "urls.py", "celery.py", "project_init.py", "tools.py",
                    "mcp_client.py")
USER_PAGES = [REPO_ROOT / "README.md", REPO_ROOT / "CONTRIBUTING.md",
              *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]


def test_the_readme_fits_a_screen_or_two() -> None:
    assert len(README.splitlines()) <= 150


def test_the_readme_has_no_relative_link_or_image() -> None:
    """PyPI shows the README with no repository beside it: a relative target is broken."""
    targets = re.findall(r"\]\(([^)]+)\)", README) + re.findall(r'(?:src|href)="([^"]+)"', README)
    assert [t for t in targets if not t.startswith("https://")] == []


def test_the_readme_says_the_two_commands_and_where_the_docs_are() -> None:
    assert "make demo" in README and "make test" in README
    for path in ("docs/tutorial.md", "docs/howto/", "docs/reference/", "docs/explanation/"):
        assert path in README


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_every_python_block_of_the_readme_is_the_quickstarts_own() -> None:
    files = [(QUICKSTART / name).read_text(encoding="utf-8") for name in QUICKSTART_FILES]
    blocks = python_blocks(README)
    assert len(blocks) >= 3
    for block in blocks:
        assert any(block.strip() in text for text in files), block[:80]


def test_the_tutorial_includes_every_quickstart_file() -> None:
    tutorial = (DOCS / "tutorial.md").read_text(encoding="utf-8")
    included = set(re.findall(r"```\{literalinclude\} quickstart/(\S+)", tutorial))
    on_disk = {p.name for p in QUICKSTART.glob("*.py")}
    assert included == set(QUICKSTART_FILES) == on_disk




@pytest.mark.parametrize("path", USER_PAGES, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_no_user_page_tells_history(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert HISTORY.findall(text) == []


def test_the_history_check_can_fail() -> None:
    assert HISTORY.search("as issue 26 asked") and HISTORY.search("Round 8: faster")
    assert not HISTORY.search("the issues listed")
