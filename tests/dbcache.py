"""A migrated test database, made once and copied for every later test process that needs the same.

``make test`` runs pytest four times, each with a worker per core, and ``make matrix`` seventeen
times more: each process used to create its test database and apply every migration (about
7 s of CPU each, 25 times a CI run; django-oauth-toolkit's own migrations are about 40 % of
it). With ``GT_TEST_DB_CACHE=DIR`` (set by scripts/test.sh, scripts/matrix.sh and .ci/run),
the first process to need a database *migrates it as always* and keeps a copy in the cache
(SQLite: a file written with sqlite3's backup API; PostgreSQL: a template database made with
``CREATE DATABASE … TEMPLATE``); a later process whose migrations are the same copies it
(SQLite: the backup API again; PostgreSQL: ``CREATE DATABASE … TEMPLATE``) and pytest-django
reuses the copy (its ``django_db_keepdb``), where Django's ``migrate`` finds nothing to apply.

What is "the same" is the cache's key: the database's engine, server and driver, Django's
version, the user model, and every migration file of the installed apps (their contents).
Two processes of one run reach the key at the same moment: the first takes a lock
(``fcntl.flock`` on a file per key) for as long as it migrates, the others wait for it, then
copy. A process that finds no cache, or a settings module that says
``GT_TEST_FRESH_MIGRATIONS = True`` (the matrix's rows whose deployment could change what a
migration does: PgBouncer, server-side binding), migrates as before. A copy is never needed
for a result to be right, only for its cost: anything that fails here falls back to
migrating.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: Where each process tells what it did (one JSON line each), for tests/integration/test_dbcache.py.
REPORT_ENV = "GT_TEST_DB_CACHE_REPORT"


def cache_dir() -> Path | None:
    value = os.environ.get("GT_TEST_DB_CACHE", "")
    return Path(value) if value else None


def migration_files(app_config: Any, modules: dict[str, Any]) -> list[Path] | None:
    """The migration files of ``app_config`` (MIGRATION_MODULES honoured), or None for an
    app with models and no migrations (its tables would come from its models: not cached)."""
    name = modules.get(app_config.label, f"{app_config.name}.migrations")
    if name is None:
        return None if list(app_config.get_models()) else []
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None if list(app_config.get_models()) else []
    return sorted(p for location in spec.submodule_search_locations
                  for p in Path(location).glob("*.py"))


def key(alias: str = "default") -> str | None:
    """What a migrated database of ``alias`` depends on, as a digest; None when it cannot be
    cached (an app without migrations, more than one database, the row's settings say so)."""
    import django
    from django.apps import apps
    from django.conf import settings
    from django.db import connections

    if getattr(settings, "GT_TEST_FRESH_MIGRATIONS", False) or set(settings.DATABASES) != {alias}:
        return None
    db = settings.DATABASES[alias]
    if connections[alias].vendor not in ("sqlite", "postgresql"):
        return None
    digest = hashlib.sha256()
    head = {
        "django": django.get_version(),
        "engine": db["ENGINE"],
        "driver": [f"{name} {importlib.import_module(name).__version__}"
                   for name in ("psycopg", "psycopg2")
                   if importlib.util.find_spec(name) is not None][:1],  # as Django picks
        "server": [db.get("HOST", ""), str(db.get("PORT", "")), db.get("USER", "")],
        # The user model and every other swappable model a migration may point at.
        "swappable": sorted((name, str(getattr(settings, name))) for name in dir(settings)
                            if name.isupper() and name.endswith("_MODEL")),
    }
    digest.update(json.dumps(head, sort_keys=True).encode())
    modules = getattr(settings, "MIGRATION_MODULES", {}) or {}
    for app_config in apps.get_app_configs():
        files = migration_files(app_config, modules)
        if files is None:
            return None
        digest.update(f"\0app {app_config.label}\0".encode())
        for path in files:
            digest.update(f"\0{path.name}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def report(**what: Any) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), **what}) + "\n")


class Cache:
    """This process's use of the cache for the ``default`` database (one per process)."""

    def __init__(self, directory: Path, digest: str) -> None:
        self.directory = directory
        self.digest = digest
        self.lock_file: Any = None
        self.copied_to: str | None = None

    @property
    def template_name(self) -> str:
        """A PostgreSQL template's name: the key, and the cache's directory (two caches on one
        server, a run's and a test's, never share or drop each other's)."""
        where = hashlib.sha256(str(self.directory.resolve()).encode()).hexdigest()[:8]
        return f"gt_cache_{self.digest}_{where}"

    @property
    def ready(self) -> Path:
        return self.directory / f"{self.digest}.ready"

    def restore(self) -> bool:
        """Copy the cached database to this process's test database, when there is one.

        True: copied (pytest-django then keeps it: nothing to migrate). False: this process
        migrates, holding the key's lock until ``publish`` (or its exit) lets the others on.
        """
        from django.conf import settings

        self.directory.mkdir(parents=True, exist_ok=True)
        self.lock_file = open(self.directory / f"{self.digest}.lock", "a+")
        fcntl.flock(self.lock_file, fcntl.LOCK_EX)  # held by a process migrating this key
        if not self.ready.exists():
            report(action="migrate", key=self.digest)
            return False  # keep the lock: the others wait for this migration
        try:
            source = self.ready.read_text().strip()
            db = settings.DATABASES["default"]
            target = test_name(db)
            copy_database(db, source, target)
        except Exception:
            logger.warning("test database cache: could not copy %s; migrating", self.digest,
                           exc_info=True)
            report(action="migrate", key=self.digest, after="copy failed")
            self.unlock()
            return False
        self.copied_to = target
        report(action="copy", key=self.digest)
        self.unlock()
        return True

    def publish(self) -> None:
        """After this process migrated: keep its database for the others, let them on."""
        from django.conf import settings
        from django.db import connections

        if self.lock_file is None or self.copied_to is not None:
            return
        try:
            db = settings.DATABASES["default"]
            source = db["NAME"]  # the test database, migrated (Django's creation set NAME)
            kept = (str(self.directory / f"{self.digest}.sqlite3")
                    if db["ENGINE"].endswith("sqlite3") else self.template_name)
            for each in connections.all():
                each.close()
            copy_database(db, source, kept)
            self.ready.write_text(kept + "\n")
            report(action="publish", key=self.digest)
        except Exception:
            logger.warning("test database cache: could not keep %s", self.digest, exc_info=True)
        finally:
            self.unlock()

    def discard_copy(self) -> None:
        """At the end: the copy pytest-django kept (its keepdb) goes, as its own would."""
        from django.conf import settings
        from django.db import connections

        if self.copied_to is None:
            return
        for each in connections.all():
            each.close()
        try:
            drop_database(settings.DATABASES["default"], self.copied_to)
        except Exception:
            logger.warning("test database cache: could not drop %s", self.copied_to,
                           exc_info=True)

    def unlock(self) -> None:
        if self.lock_file is not None:
            fcntl.flock(self.lock_file, fcntl.LOCK_UN)
            self.lock_file.close()
            self.lock_file = None


def test_name(db: dict[str, Any]) -> str:
    """The test database's name for these settings, as Django's test database creation names
    it (``TEST["NAME"]``, else ``test_`` and the name)."""
    return db.get("TEST", {}).get("NAME") or f"test_{db['NAME']}"


def _pg_admin(db: dict[str, Any]) -> Any:
    """An autocommit connection to the server's maintenance database, with the driver Django
    uses (psycopg 3, else psycopg2), as pytest-django's template recipe does."""
    try:
        import psycopg as driver  # type: ignore[import-not-found]
    except ImportError:
        import psycopg2 as driver  # type: ignore[import-not-found,no-redef]
    options = db.get("OPTIONS") or {}
    admin = driver.connect(dbname="postgres", host=db.get("HOST") or None,
                           port=db.get("PORT") or None, user=db.get("USER") or None,
                           password=db.get("PASSWORD") or None,
                           sslmode=options.get("sslmode"))
    admin.autocommit = True
    return admin


def _drop(cursor: Any, name: str) -> None:
    # WITH (FORCE) (PostgreSQL 13 and later): a thread's connection left open to a copy at the
    # session's end (a live server's) must not keep it.
    cursor.execute("SHOW server_version_num")
    force = " WITH (FORCE)" if int(cursor.fetchone()[0]) >= 130000 else ""
    cursor.execute(f"DROP DATABASE IF EXISTS {_quote(name)}{force}")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def copy_database(db: dict[str, Any], source: str, target: str) -> None:
    if db["ENGINE"].endswith("sqlite3"):
        drop_database(db, target)
        with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
            src.backup(dst)
        src.close()
        dst.close()
        return
    admin = _pg_admin(db)
    try:
        with admin.cursor() as cursor:
            _drop(cursor, target)
            cursor.execute(f"CREATE DATABASE {_quote(target)} TEMPLATE {_quote(source)}")
    finally:
        admin.close()


def drop_database(db: dict[str, Any], name: str) -> None:
    if db["ENGINE"].endswith("sqlite3"):
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(name + suffix).unlink(missing_ok=True)
        return
    admin = _pg_admin(db)
    try:
        with admin.cursor() as cursor:
            _drop(cursor, name)
    finally:
        admin.close()


def clean(directory: Path, database_url: str | None) -> None:
    """Remove a cache: its PostgreSQL databases on ``database_url``'s server, then its files
    (``python -m tests.dbcache clean DIR``, from the scripts that made it)."""
    names = []
    for ready in directory.glob("*.ready"):
        name = ready.read_text().strip()
        if not name.endswith(".sqlite3"):
            names.append(name)
    if names and database_url:
        import dj_database_url

        admin = _pg_admin(dict(dj_database_url.parse(database_url)))
        try:
            with admin.cursor() as cursor:
                for name in names:
                    _drop(cursor, name)
        finally:
            admin.close()
    for path in directory.glob("*"):
        path.unlink(missing_ok=True)
    directory.rmdir()


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "clean":
        sys.exit("usage: python -m tests.dbcache clean DIR   (DATABASE_URL: its server)")
    if Path(sys.argv[2]).is_dir():
        clean(Path(sys.argv[2]), os.environ.get("DATABASE_URL"))
