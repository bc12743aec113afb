"""The docs' reference has an entry for everything the code has: each setting, error code,
system check, management command, permission, lifecycle event and public module; and the
error entries carry the anchors agents' error links point at."""

from __future__ import annotations

import ast
import re

import pytest
from django.apps import apps

from guarded_tools.conf import SETTINGS
from guarded_tools.core.codes import BUILTIN
from tests.conftest import REPO_ROOT
from tests.docs.reference import DOCS, generator, page


def test_the_code_has_nothing_the_reference_cannot_describe() -> None:
    assert generator().missing() == []


def test_every_setting_has_its_entry_with_type_and_default() -> None:
    text = page("settings")
    for setting in SETTINGS:
        entry = text[text.index(f"(setting-{setting.name})="):]
        entry = entry[:entry.index("\n(", 1) if "\n(" in entry[1:] else len(entry)]
        assert f"### `{setting.name}`" in entry and f"**Type** `{setting.type}`" in entry
        assert "**Default** " in entry


def test_each_code_of_the_guard_has_one_entry_with_the_anchor_its_link_names() -> None:
    text = page("errors")
    for entry in BUILTIN:
        assert entry.link == f"#{entry.code}", entry.code  # the anchor is the code
        assert text.count(f'<span id="{entry.code}"></span>') == 1, entry.code
        assert f"## `{entry.code}` ({entry.status})" in text


def test_the_budget_codes_are_documented_as_429() -> None:
    text = page("errors")
    for code in ("rate_limited", "budget_exceeded"):
        assert f"## `{code}` (429)" in text


def test_the_built_error_page_keeps_the_anchors() -> None:
    """The anchors survive the build: the generated span reaches the HTML as an id."""
    built = DOCS / "_build" / "html" / "reference" / "errors.html"
    if not built.exists():
        pytest.skip("make docs has not run in this checkout")
    html = built.read_text(encoding="utf-8")
    for entry in BUILTIN:
        assert f'id="{entry.code}"' in html, entry.code


def test_every_check_id_in_the_source_has_an_entry_with_its_hint() -> None:
    ref = generator()
    found = {check.id for check in ref.checks()}
    assert found == ref.check_ids_in_source()
    assert len(found) >= 20
    text = page("checks")
    for ident in found:
        assert f"## `{ident}` (" in text, ident
    assert "*Hint:*" in text


def test_a_check_made_another_way_is_noticed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The source scan names a check id the reference's parser did not read (it can fail)."""
    ref = generator()
    monkeypatch.setattr(ref, "checks", lambda: [])
    assert any("is made in a way" in problem for problem in ref.missing())


def test_every_command_has_its_usage() -> None:
    text = page("commands")
    for name in generator().commands():
        assert f"## `{name}`" in text and f"usage: manage.py {name}" in text


def test_every_permission_has_a_row() -> None:
    text = page("permissions")
    for model in apps.get_app_config("guarded_tools").get_models():
        for codename, _ in model._meta.permissions:
            assert f"`guarded_tools.{codename}`" in text
        for action in model._meta.default_permissions:
            assert f"`guarded_tools.{action}_{model._meta.model_name}`" in text


def test_every_lifecycle_event_has_a_row() -> None:
    text = page("events")
    events = generator().events()
    assert {"started", "succeeded", "outcome_unknown", "replayed"} <= events
    for name in events:
        assert re.search(rf"^\| `{name}` \| \w", text, flags=re.M), name


def public_modules() -> set[str]:
    """The public modules ``tests/integration/test_public_api.py`` lists (read, not imported)."""
    tree = ast.parse((REPO_ROOT / "tests" / "integration" / "test_public_api.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "PUBLIC":
            assert isinstance(node.value, ast.Dict)
            return {key.value for key in node.value.keys if isinstance(key, ast.Constant)}
    raise AssertionError("PUBLIC not found")


def test_every_public_module_is_in_the_python_api_page() -> None:
    text = (DOCS / "reference" / "api.md").read_text()
    documented = set(re.findall(r"^\.\. automodule:: (\S+)$", text, flags=re.M))
    assert documented == public_modules() | {"guarded_tools.core.errors"}


def test_every_page_is_in_the_navigation() -> None:
    """A page no toctree lists is reachable by search alone (Sphinx warns; this says which).
    A listed page that does not exist is Sphinx's own warning, an error in ``make docs``."""
    pages = {path.relative_to(DOCS).with_suffix("").as_posix()
             for path in DOCS.rglob("*.md") if "_build" not in path.parts}
    listed = {"index"}
    for path in DOCS.rglob("*.md"):
        if "_build" in path.parts:
            continue
        for block in re.findall(r"```\{toctree\}\n(.*?)```", path.read_text(), flags=re.S):
            base = path.parent.relative_to(DOCS)
            for line in block.splitlines():
                if line and not line.startswith(":"):
                    listed.add((base / line.strip()).as_posix())
    assert pages - listed == set()


@pytest.mark.parametrize("name", ["errors", "checks"])
def test_code_spans_in_generated_pages_are_shown_as_written(name: str) -> None:
    """Markdown escapes stay outside code spans: inside one a backslash is shown as is, so
    ``meta.budgets[].sum`` would read ``meta.budgets\\[\\].sum``."""
    spans = re.findall(r"`([^`\n]+)`", page(name))
    assert spans and [span for span in spans if re.search(r"\\[*_<>\\\[\]]", span)] == []
