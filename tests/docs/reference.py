"""The docs' reference generator (docs/_ext/gt_reference.py), imported for the tests."""

from __future__ import annotations

import importlib
import re
import sys
from types import ModuleType

from tests.conftest import REPO_ROOT

DOCS = REPO_ROOT / "docs"
#: "issue 26", "Round 8", "item 4": history (a validation "issue" is not).
HISTORY = re.compile(r"(?<![-\w])(?:[Ii]ssues? \d|[Rr]ounds? \d|[Ii]tems? \d)")


def generator() -> ModuleType:
    """The module ``make docs`` runs to write the reference pages."""
    path = str(DOCS / "_ext")
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module("gt_reference")


def page(name: str) -> str:
    """A reference page as the build reads it: its markers replaced by what they generate."""
    return generator().render((DOCS / "reference" / f"{name}.md").read_text(encoding="utf-8"))
