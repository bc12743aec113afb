"""What each of `make test`'s four runs takes (tests/conftest.py, scripts/test.sh).

A PostgreSQL run leaves out only the tests that cannot reach a database; Django 5.2's SQLite
run only those that reach one and are not marked ``sqlite``; the runs after the first leave
out only the tests marked ``once``; Django 6's PostgreSQL run leaves out the browser tests,
which Django 5.2's PostgreSQL run keeps, but those only Django 6's environment can run;
Django 5.2's runs leave out those marked ``one_django``, which Django 6's runs keep;
pytest run by hand takes everything.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest

from tests import forkserver
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.once  # what it checks is pytest's, whichever Django or database

FILES = ["tests/integration/test_layers.py", "tests/integration/test_demo_script.py",
         "tests/integration/test_multinode.py", "tests/store/test_history.py",
         "tests/store/test_sql_counts.py", "tests/integration/test_docs_browser.py",
         "tests/integration/test_oauth_e2e.py", "tests/integration/test_policies_browser.py"]
SELECTORS = ("GT_TEST_DATABASE_ONLY", "GT_TEST_NO_DATABASE", "GT_TEST_ONCE_DONE",
             "GT_TEST_NO_BROWSER", "GT_TEST_DJANGO6_DONE")


def collect(**env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in SELECTORS}
    return forkserver.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-n", "0", *FILES],
        cwd=REPO_ROOT, env={**environ, **env}, capture_output=True, text=True, timeout=300,
    )


@functools.cache  # once per selection and process: each is a pytest start (about 3 s of CPU)
def collected(**env: str) -> frozenset[str]:
    """The files of ``FILES`` whose tests pytest would run with ``env`` set."""
    done = collect(**env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return frozenset(line.split("::")[0] for line in done.stdout.splitlines() if "::" in line)


def test_by_hand_every_test_runs() -> None:
    assert collected() == set(FILES)


def test_a_postgresql_run_leaves_out_only_the_tests_that_reach_no_database() -> None:
    kept = collected(GT_TEST_DATABASE_ONLY="1")
    # test_layers imports modules and reads files; test_demo_script runs the demo on its
    # own SQLite; test_multinode is marked postgres (its processes reach the database).
    assert kept == {"tests/integration/test_multinode.py", "tests/store/test_history.py",
                    "tests/store/test_sql_counts.py", "tests/integration/test_docs_browser.py",
                    "tests/integration/test_oauth_e2e.py",
                    "tests/integration/test_policies_browser.py"}


def test_django52s_sqlite_run_leaves_out_the_database_tests_but_sqlites_own() -> None:
    kept = collected(GT_TEST_NO_DATABASE="1")
    # test_sql_counts reaches the database and is marked sqlite (SQLite's counts are its own).
    assert kept == {"tests/integration/test_layers.py", "tests/integration/test_demo_script.py",
                    "tests/store/test_sql_counts.py"}
    # Between them, the two runs of one Django leave out nothing.
    assert kept | collected(GT_TEST_DATABASE_ONLY="1") == set(FILES)


def test_both_halves_at_once_is_refused() -> None:
    done = collect(GT_TEST_NO_DATABASE="1", GT_TEST_DATABASE_ONLY="1")
    assert done.returncode != 0 and "leave out everything" in done.stdout + done.stderr


def test_the_runs_after_the_first_leave_out_the_tests_marked_once() -> None:
    assert collected(GT_TEST_ONCE_DONE="1") == (
        set(FILES) - {"tests/integration/test_demo_script.py"})


def test_django6s_postgresql_run_leaves_the_browser_tests_to_django52s() -> None:
    django6 = collected(GT_TEST_DATABASE_ONLY="1", GT_TEST_ONCE_DONE="1", GT_TEST_NO_BROWSER="1")
    # test_oauth_e2e stays: Django 5.2's environment has the mcp 1.x client (django6_only).
    assert django6 == {"tests/integration/test_multinode.py", "tests/store/test_history.py",
                       "tests/store/test_sql_counts.py", "tests/integration/test_oauth_e2e.py"}
    # Django 5.2's PostgreSQL run takes those of the admin, and Django 6's SQLite run
    # (everything) all of them.
    assert "tests/integration/test_policies_browser.py" in collected(
        GT_TEST_DATABASE_ONLY="1", GT_TEST_ONCE_DONE="1", GT_TEST_DJANGO6_DONE="1")


def test_django52s_runs_leave_out_what_does_not_depend_on_django() -> None:
    django52 = collected(GT_TEST_DATABASE_ONLY="1", GT_TEST_ONCE_DONE="1",
                         GT_TEST_DJANGO6_DONE="1")
    # test_docs_browser (a page that is not Django's admin) and test_multinode are marked
    # one_django; the admin's browser test (test_policies_browser) stays.
    assert django52 == {"tests/store/test_history.py", "tests/store/test_sql_counts.py",
                        "tests/integration/test_oauth_e2e.py",
                    "tests/integration/test_policies_browser.py"}
    # Django 6's runs keep both: its PostgreSQL run the multi-node run, its SQLite run the docs.
    assert "tests/integration/test_multinode.py" in collected(
        GT_TEST_DATABASE_ONLY="1", GT_TEST_ONCE_DONE="1", GT_TEST_NO_BROWSER="1")
    assert "tests/integration/test_docs_browser.py" in collected()
