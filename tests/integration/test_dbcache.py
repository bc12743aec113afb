"""The migrated test databases a run keeps and copies (tests/dbcache.py), seen from pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import dbcache
from tests.conftest import REPO_ROOT

INNER = "tests/dbcache_inner.py"


def run_inner(cache: Path, report: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """tests/dbcache_inner.py in a pytest of its own, on this run's settings and database."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GT_TEST_", "PYTEST_XDIST", "PYTEST_CURRENT"))}
    env.update(GT_TEST_DB_CACHE=str(cache), GT_TEST_DB_CACHE_REPORT=str(report))
    return subprocess.run(
        [sys.executable, "-m", "pytest", INNER, "-q", "-p", "no:cacheprovider",
         "-p", "no:hypothesispytest", *args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )


def actions(report: Path) -> list[str]:
    return sorted(json.loads(line)["action"] for line in report.read_text().splitlines())


@pytest.mark.once
@pytest.mark.slow
def test_two_workers_on_an_empty_cache_migrate_once_and_the_other_copies(tmp_path: Path) -> None:
    cache, report = tmp_path / "cache", tmp_path / "report.jsonl"
    result = run_inner(cache, report, "-n", "2", "--dist", "loadgroup")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 passed" in result.stdout
    # One worker migrated and kept its database; the other waited for it, then copied it.
    assert actions(report) == ["copy", "migrate", "publish"]
    assert len(list(cache.glob("*.ready"))) == 1  # one database kept, for this one key
    # The copy went at the end, as the databases pytest-django makes go.
    from django.conf import settings

    pids = {json.loads(line)["pid"] for line in report.read_text().splitlines()}
    assert len(pids) == 2
    for pid in pids:
        assert not list(Path(settings.VAR_DIR).glob(f"test-{pid}.sqlite3*"))
    dbcache.clean(cache, os.environ.get("DATABASE_URL"))  # as scripts/test.sh does at its end
    assert not cache.exists()


def test_a_later_process_copies_this_runs_database_and_finds_nothing_to_migrate(
        tmp_path: Path, django_db_setup: None) -> None:
    """Each database run: a process after this run's first finds its database in the cache
    (SQLite: a file; PostgreSQL: a template database) and copies it."""
    cache = dbcache.cache_dir()
    if cache is None:
        pytest.skip("this run keeps no test database (GT_TEST_DB_CACHE is not set)")
    if dbcache.key() is None:
        pytest.skip("this run's settings are not cached")
    report = tmp_path / "report.jsonl"
    result = run_inner(cache, report, "-n", "0", "-k", "test_one")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert actions(report) == ["copy"]


def test_the_key_follows_the_settings_and_the_migration_files(
        settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = dbcache.key()
    assert first is not None and dbcache.key() == first  # the same settings, the same key

    settings.GT_TEST_FRESH_MIGRATIONS = True
    assert dbcache.key() is None
    del settings.GT_TEST_FRESH_MIGRATIONS

    settings.GT_EXAMPLE_MODEL = "demo.Order"  # a swappable model a migration could point at
    assert dbcache.key() not in (None, first)
    del settings.GT_EXAMPLE_MODEL
    assert dbcache.key() == first

    # The demo's migrations, one of them changed: another key.
    package = tmp_path / "changed_migrations"
    package.mkdir()
    source = REPO_ROOT / "project" / "demo" / "migrations"
    for path in source.glob("*.py"):
        (package / path.name).write_text(path.read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.MIGRATION_MODULES = {"demo": "changed_migrations"}
    assert dbcache.key() == first  # the same files under another name
    last = sorted(package.glob("0*.py"))[-1]
    last.write_text(last.read_text() + "\n# changed\n")
    assert dbcache.key() not in (None, first)

    settings.MIGRATION_MODULES = {"demo": None}  # an app whose tables come from its models
    assert dbcache.key() is None
