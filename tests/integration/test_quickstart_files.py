"""docs/quickstart holds the files a new site needs, and the new-site proof
(scripts/newsite.sh, a stage of .ci/run) applies each of them as it is: the docs include
the same files, so what a reader copies is what CI ran. The proof itself installs the built
wheel and takes a minute or two; it runs in .ci/run (and `make newsite`), not here."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.once

QUICKSTART = REPO_ROOT / "docs" / "quickstart"
NEWSITE = (REPO_ROOT / "scripts" / "newsite.sh").read_text()


def test_every_quickstart_file_is_applied_by_the_new_site_proof() -> None:
    files = sorted(p.name for p in QUICKSTART.iterdir() if p.is_file())
    assert files == ["celery.py", "mcp_client.py", "project_init.py", "settings_snippet.py",
                     "tools.py", "urls.py"]
    applied = {"settings_snippet.py": 'cat "$quick/settings_snippet.py" >>mysite/settings.py',
               "urls.py": 'cp "$quick/urls.py" mysite/urls.py',
               "celery.py": 'cp "$quick/celery.py" mysite/celery.py',
               "project_init.py": 'cp "$quick/project_init.py" mysite/__init__.py',
               "tools.py": 'cp "$quick/tools.py" shop/tools.py'}
    for name, line in applied.items():
        assert line in NEWSITE, name
    # The MCP client runs as the agent (scripts/newsite_prove.py, from the same folder).
    assert "mcp_client.py" in (REPO_ROOT / "scripts" / "newsite_prove.py").read_text()


def test_the_files_are_python_a_reader_can_read() -> None:
    for path in QUICKSTART.glob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        assert path.read_text().startswith("# "), path  # says where it goes and what it does
        assert tree.body, path


def test_the_site_installs_guarded_tools_and_token_authentication() -> None:
    snippet = (QUICKSTART / "settings_snippet.py").read_text()
    for needed in ('"guarded_tools"', '"rest_framework"', '"rest_framework.authtoken"',
                   "TokenAuthentication", "CELERY_BROKER_URL", "guarded_tools.tasks.sweep",
                   '"transaction_mode": "IMMEDIATE"', "CONSOLE_BASE_URL"):
        assert needed in snippet, needed
    celery = (QUICKSTART / "celery.py").read_text()
    assert 'config_from_object("django.conf:settings", namespace="CELERY")' in celery
    assert "app.autodiscover_tasks()" in celery


def test_ci_runs_the_proof_on_both_django_lines_and_on_postgresql() -> None:
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "stage newsite make newsite" in ci
    assert ('stage newsite-dj52-pg make newsite'
            ' NEWSITE_ARGS="--django 5.2 --database-url $DATABASE_URL"') in ci
    # After the stage that starts the cluster and exports DATABASE_URL.
    assert ci.index("stage postgres postgres") < ci.index("stage newsite-dj52-pg")
    assert "bash scripts/newsite.sh" in (REPO_ROOT / "Makefile").read_text()
