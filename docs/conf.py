"""Sphinx configuration of the guarded_tools docs (``make docs``); builds with no network."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "docs" / "_ext")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import django  # noqa: E402

django.setup()

from guarded_tools.core.version import VERSION  # noqa: E402

project = "guarded_tools"
author = "guarded_tools contributors"
copyright = "guarded_tools contributors"
release = version = VERSION

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "gt_reference",
]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "quickstart", "console", "README.md"]
root_doc = "index"

# Warnings are errors (make docs: -W -n): every internal reference must resolve. Names of
# other projects cannot (no intersphinx: the build fetches nothing), so they are not checked.
nitpicky = True
nitpick_ignore_regex = [
    # Python objects in signatures and docstrings: Django's, DRF's and the standard
    # library's would need intersphinx (a download); the app's own are named as written in
    # their docstrings, short or dotted. Pages, labels and anchors stay checked.
    (r"py:.*", r".*"),
]

autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
# A code block whose example elides with "…" is shown as text, unhighlighted.
suppress_warnings = ["misc.highlighting_failure"]

html_theme = "furo"
html_title = f"guarded_tools {VERSION}"
html_static_path: list[str] = []
html_show_sourcelink = False
html_copy_source = False
html_theme_options = {"navigation_with_keys": True}
# Furo loads no web font; Sphinx's search runs from searchindex.js in the built files.



def _on_source_read(app: object, docname: str, source: list[str]) -> None:
    """A page's link to the repository's CHANGELOG.md is a link to the changelog page
    (which includes that file, its own links to ``docs/…`` made the site's)."""
    source[0] = source[0].replace("](../CHANGELOG.md)", "](changelog.md)")


def setup(app: object) -> None:
    app.connect("source-read", _on_source_read)  # type: ignore[attr-defined]
