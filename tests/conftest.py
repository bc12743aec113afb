"""Shared fixtures: users, API clients, and test-only tools registered per test."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connections
from rest_framework.test import APIClient

from guarded_tools import Tool, registry
from guarded_tools import tool as tool_decorator
from guarded_tools.catalog import ErrorCatalog, catalogs

OBJECT = {"type": "object", "properties": {"operationId": {"type": "string"}}}

# -- what each of `make test`'s runs takes (scripts/test.sh) ---------------------------------
#: The fixtures through which a test reaches the run's database (pytest-django's).
DATABASE_FIXTURES = frozenset({
    "db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback",
    "live_server", "django_db_setup",
})


def uses_database(item: pytest.Item) -> bool:
    """Whether ``item`` reaches the run's database: a ``django_db`` or ``postgres`` mark,
    or one of pytest-django's database fixtures among the fixtures it uses (directly or
    through other fixtures). Without them pytest-django refuses every query, so such a test's
    result cannot depend on which database the run has."""
    if item.get_closest_marker("django_db") or item.get_closest_marker("postgres"):
        return True  # a ``postgres`` test may reach it from its own processes
    return not DATABASE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``make test`` runs the suite four times (Django 6 and 5.2, each on SQLite and on
    PostgreSQL), and each test runs on every database it reaches under Django 6 and at least
    once under Django 5.2, but for the browser tests and those marked ``one_django``
    (below). ``GT_TEST_DATABASE_ONLY=1`` (the PostgreSQL runs) leaves out the tests that
    reach no database, which the same Django's SQLite run has just run;
    ``GT_TEST_NO_DATABASE=1`` (Django 5.2's SQLite run) leaves out the tests that reach one,
    which its PostgreSQL run runs, except those marked ``sqlite`` (they check SQLite itself);
    ``GT_TEST_ONCE_DONE=1`` (every run after the first) leaves out the tests marked
    ``once``, whose result depends on neither the run's Django nor its database;
    ``GT_TEST_NO_BROWSER=1`` (Django 6's PostgreSQL run, when Django 5.2's runs follow)
    leaves out the tests marked ``browser``, which then run once per Django version and once
    per database: Django 6 on SQLite, Django 5.2 on PostgreSQL; those marked
    ``django6_only`` as well, which Django 5.2's runs cannot run, stay.
    ``GT_TEST_DJANGO6_DONE=1`` (Django 5.2's runs, after Django 6's) leaves out the tests
    marked ``one_django``, whose result does not depend on Django's version: the browser
    tests of pages that are not Django's admin (the docs, the consent page, the MCP Tasks
    flows; the admin's CSS and scripts differ between 5.2 and 6, so its browser tests keep
    both) and the multi-node run. All are reported as deselected; run pytest without them
    for everything."""
    database_only = os.environ.get("GT_TEST_DATABASE_ONLY") == "1"
    no_database = os.environ.get("GT_TEST_NO_DATABASE") == "1"
    once_done = os.environ.get("GT_TEST_ONCE_DONE") == "1"
    no_browser = os.environ.get("GT_TEST_NO_BROWSER") == "1"
    django6_done = os.environ.get("GT_TEST_DJANGO6_DONE") == "1"
    if database_only and no_database:
        raise pytest.UsageError(
            "GT_TEST_DATABASE_ONLY and GT_TEST_NO_DATABASE leave out everything")
    if not (database_only or no_database or once_done or no_browser or django6_done):
        return
    kept, left = [], []
    for item in items:
        reaches = uses_database(item)
        leave = ((once_done and item.get_closest_marker("once") is not None)
                 or (django6_done and item.get_closest_marker("one_django") is not None)
                 or (no_browser and item.get_closest_marker("browser") is not None
                     and item.get_closest_marker("django6_only") is None)
                 or (database_only and not reaches)
                 or (no_database and reaches and item.get_closest_marker("sqlite") is None))
        (left if leave else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


# -- one migration per kind of test database (tests/dbcache.py) -----------------------------
@pytest.fixture(scope="session")
def _db_cache(request: pytest.FixtureRequest, django_db_modify_db_settings: None,
              django_db_use_migrations: bool, django_db_createdb: bool) -> Any:
    """This process's use of ``GT_TEST_DB_CACHE`` (None without it, with ``--reuse-db``,
    ``--create-db`` or ``--nomigrations``, or when the settings cannot be cached)."""
    from tests import dbcache

    directory = dbcache.cache_dir()
    if (directory is None or request.config.getvalue("reuse_db") or django_db_createdb
            or not django_db_use_migrations):
        return None
    digest = dbcache.key()
    return None if digest is None else dbcache.Cache(directory, digest)


@pytest.fixture(scope="session")
def django_db_keepdb(request: pytest.FixtureRequest, _db_cache: Any) -> bool:
    """pytest-django's (``--reuse-db``), and True for a test database copied from the cache:
    Django's creation then keeps the copy and migrates nothing."""
    if request.config.getvalue("reuse_db"):
        return True
    return _db_cache is not None and _db_cache.restore()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, _db_cache: Any) -> Iterator[None]:
    """pytest-django's, then: a database this process migrated goes to the cache; at the end
    a copy it was given goes, as pytest-django drops the databases it made."""
    if _db_cache is not None:
        _db_cache.publish()
    yield
    if _db_cache is not None:
        _db_cache.discard_copy()


@pytest.fixture
def user_factory(django_user_model: Any) -> Callable[..., Any]:
    def make(username: str | None = None, perms: tuple[str, ...] = (), **extra: Any) -> Any:
        user = django_user_model.objects.create_user(
            username=username or f"u-{uuid.uuid4().hex[:8]}", password="pw", **extra
        )
        for perm in perms:
            app_label, codename = perm.split(".")
            user.user_permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )
        return type(user).objects.get(pk=user.pk)  # drop the permission cache

    return make


@pytest.fixture
def alice(user_factory: Callable[..., Any]) -> Any:
    return user_factory("alice")


@pytest.fixture
def bob(user_factory: Callable[..., Any]) -> Any:
    return user_factory("bob")


@pytest.fixture
def client_for() -> Callable[[Any], APIClient]:
    def make(user: Any) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return make


class SessionClient(APIClient):
    """A browser's session: logged in for real, CSRF enforced, its token sent back.

    Every request carries the CSRF cookie's current value in the CSRF header, as a
    browser agent's page script does; pass the header yourself to send another.
    """

    def request(self, **request: Any) -> Any:
        from django.conf import settings

        cookie = self.cookies.get(settings.CSRF_COOKIE_NAME)
        if cookie is not None:
            request.setdefault(settings.CSRF_HEADER_NAME, cookie.value)
        return super().request(**request)


@pytest.fixture
def session_client_for() -> Callable[[Any], SessionClient]:
    """A client in ``user``'s own session (password ``pw``, as ``user_factory`` sets).

    Staff log in through the admin's login form, everyone else through
    ``Client.login``; then a page with a form hands out the CSRF cookie, as it
    would to a browser. Session authentication is a transport like tokens are.
    """

    def make(user: Any) -> SessionClient:
        from django.conf import settings

        client = SessionClient(enforce_csrf_checks=True)
        if user.is_staff:
            client.get("/admin/login/")  # the form hands out the CSRF cookie
            done = client.post("/admin/login/", {
                "username": user.get_username(), "password": "pw", "next": "/admin/",
            })  # the cookie's token is the form's, sent back by ``request``
            assert done.status_code == 302, "the admin refused the login"
        else:  # the admin's form admits staff only
            assert client.login(username=user.get_username(), password="pw")
            client.get("/admin/login/")  # the CSRF cookie, as a page with a form sets it
        assert settings.SESSION_COOKIE_NAME in client.cookies
        assert settings.CSRF_COOKIE_NAME in client.cookies
        return client

    return make


@pytest.fixture
def make_tool() -> Iterator[Callable[..., Tool]]:
    """Register a tool for one test; it is unregistered afterwards."""
    names: list[str] = []

    def make(handler: Callable[..., Any] | None = None, **options: Any) -> Tool:
        options.setdefault("name", f"t_{uuid.uuid4().hex[:10]}")
        options.setdefault("input_schema", OBJECT)
        options.setdefault("idempotency_key", "operationId")
        fn = handler or (lambda input, ctx: {"ok": True})
        definition = tool_decorator(**options)(fn)
        names.append(definition.name)
        return definition

    yield make
    for name in names:
        if name in registry:
            registry.unregister(name)


@pytest.fixture
def make_catalog() -> Iterator[Callable[..., ErrorCatalog]]:
    """Catalogs defined for one test; they are forgotten afterwards."""
    namespaces: list[str] = []

    def make(entries: dict[str, dict[str, Any]], namespace: str | None = None) -> ErrorCatalog:
        namespace = namespace or f"test_{uuid.uuid4().hex[:8]}"
        namespaces.append(namespace)
        return ErrorCatalog(namespace, entries)

    yield make
    for namespace in namespaces:
        catalogs.remove(namespace)


def key() -> str:
    return uuid.uuid4().hex


class Effects:
    """A handler that counts its runs: the effect must happen exactly once, or never."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, input: Any, ctx: Any) -> Any:
        self.count += 1
        return {"done": self.count}


def wait_until(predicate: Callable[[], bool], timeout: float = 10, step: float = 0.05, *,
               message: str | Callable[[], str] = "condition not met in time") -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout`` seconds.

    ``message`` says what was waited for; a callable is asked only on failure (to read a
    log, say, that is not written yet while the wait runs).
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(message() if callable(message) else message)
        time.sleep(step)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[Any], timeout: float = 30) -> None:
    """Wait until ``process`` accepts connections on ``port``; fail with its output (when
    it was piped) should it exit first, or after ``timeout`` seconds."""

    def listening() -> bool:
        if process.poll() is not None:
            output = process.stdout.read() if process.stdout else b""
            text = output.decode() if isinstance(output, bytes) else output
            raise AssertionError(f"the process exited ({process.returncode}) before it "
                                 f"listened on {port}:\n{text}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            return False

    wait_until(listening, timeout, step=0.1, message=f"nothing listened on {port} in time")


def in_threads(n: int, fn: Callable[[int], Any], *, timeout: float = 60) -> list[Any]:
    """``fn(i)`` in ``n`` threads released together by a barrier, each on (and closing) its
    own database connections; the results in order, or the first errors raised."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = fn(i)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0.1))
    assert not any(t.is_alive() for t in threads), "threads did not finish: deadlock?"
    assert not errors, errors
    return results


def key_lock_free(tool: str, scope: str, key: str) -> bool:
    """Whether the atomic path's lock on a key is free now (PostgreSQL): taken, let go.

    A session's locks outlive its client for a moment: the server ends the session
    when it notices the closed socket or the killed process, on its own time. Wait for
    this with ``wait_until``; never assume it right after ``close()`` or a kill.
    """
    from django.db import connection

    from guarded_tools.store import LOCK_CLASS, key_hash

    lock = [LOCK_CLASS, key_hash(tool, scope, key)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", lock)
        free = bool(cursor.fetchone()[0])
        if free:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", lock)
    return free


def reset_publisher() -> None:
    """Drop this process's broker connections, so the next publish uses the broker
    options in force now (a test that changes them calls this before and after).

    kombu keeps its pools in groups keyed by the broker's URL and options: a pool
    closed here but left in its group would be handed back, closed, the next time the
    same broker is named ("Acquire on closed pool"), so the groups are emptied too.
    """
    from kombu import pools as kombu_pools

    from project.celery import app

    if app._pool is not None:
        app._pool.force_close_all()
        app._pool = None
    app.amqp._producer_pool = None
    kombu_pools.reset()


@pytest.fixture(scope="session", autouse=True)
def _in_memory_broker() -> Iterator[None]:
    """This process publishes to an in-memory broker: what a test sends (an approvers'
    email after a request commits) never waits in var/broker for the demo's worker.
    Tests that need a broker of their own set one (``worker``, ``broker_down``)."""
    from project.celery import app

    saved = app.conf.broker_url, app.conf.broker_transport_options
    app.conf.broker_url, app.conf.broker_transport_options = "memory://", {}
    reset_publisher()
    yield
    app.conf.broker_url, app.conf.broker_transport_options = saved
    reset_publisher()


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """Celery runs each task where it is sent (after commit, for on_commit sends)."""
    from project.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


@pytest.fixture
def approver(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("boss", password="pw")


@pytest.fixture
def eager(django_capture_on_commit_callbacks: Any) -> Iterator[Callable[..., Any]]:
    """Celery eager, on-commit callbacks run: a decision's Celery task runs here, as a worker."""
    from project.celery import app

    app.conf.task_always_eager = True

    def decide(fn: Callable[..., Any], *args: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args)

    yield decide
    app.conf.task_always_eager = False


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def on_the_wire(run: Callable[[], Any]) -> list[str]:
    """The simple queries psycopg really sends while ``run()`` runs (libpq's trace)."""
    import tempfile

    from django.db import connection

    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        try:
            run()
        finally:
            pgconn.untrace()
        trace.seek(0)
        return [line.split("\tQuery\t", 1)[1].strip().strip('"')
                for line in trace if "\tF\t" in line and "\tQuery\t" in line]


def one_transaction(settings: Any, on: bool) -> None:
    """Turn ``ATOMIC_SINGLE_TRANSACTION`` on or off for one test."""
    settings.GUARDED_TOOLS = {**getattr(settings, "GUARDED_TOOLS", {}),
                              "ATOMIC_SINGLE_TRANSACTION": on}


@pytest.fixture(params=["one-transaction", "claim-first"])
def atomic_path(request: pytest.FixtureRequest, settings: Any) -> str:
    """Both ways an ``atomic`` tool runs: key, effect and operation in one transaction
    (the default), or the claim committed first, as for every other tool."""
    one_transaction(settings, request.param == "one-transaction")
    return str(request.param)


@pytest.fixture(autouse=True)
def _empty_replay_cache() -> Any:
    """Every test starts with an empty replay cache (each test's database is new)."""
    from guarded_tools.store.replays import replays

    replays.clear()
    yield
    replays.clear()


# -- fixtures for concurrency, crash and worker tests ---------------------------------------
REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _skip_postgres_marked_tests_elsewhere(request: pytest.FixtureRequest) -> None:
    """Tests marked ``postgres`` run only when the default database is PostgreSQL."""
    if request.node.get_closest_marker("postgres") is not None:
        from django.db import connection

        if connection.vendor != "postgresql":
            pytest.skip("needs PostgreSQL (set DATABASE_URL)")


@pytest.fixture
def test_database_url() -> str:
    """A DATABASE_URL for subprocesses that points at the *test* database."""
    from urllib.parse import quote

    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    auth = quote(s.get("USER") or "", safe="")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"], safe="")
    host = s.get("HOST") or "localhost"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgres://{auth}@{host}{port}/{s['NAME']}"


@pytest.fixture
def subprocess_env(test_database_url: str, tmp_path: Any) -> dict[str, str]:
    """Environment for a child Python process of this project, on the test database."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GT_", "CELERY_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DATABASE_URL=test_database_url,
        GT_VAR_DIR=str(tmp_path / "var"),
        PYTHONPATH=str(REPO_ROOT),
        PYTHONUNBUFFERED="1",
    )
    return env


# -- the TypeScript SDK's clients (tests/integration/js) -------------------------------------------
JS_DIR = REPO_ROOT / "tests" / "integration" / "js"


def unavailable(reason: str) -> None:
    """A tool the test needs is missing: a failure in CI (which installs it), else a skip."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def typescript_sdk() -> Any:
    """``tests/integration/js`` with its packages (the TypeScript SDK, the Tasks client) from the
    lock file."""
    import json
    import shutil
    import subprocess

    if shutil.which("node") is None or shutil.which("npm") is None:
        unavailable("node and npm are needed for the TypeScript SDK's clients")
    wanted = json.loads((JS_DIR / "package.json").read_text())["dependencies"]
    if not all((JS_DIR / "node_modules" / name).is_dir() for name in wanted):
        done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS_DIR,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            unavailable(f"npm ci failed in tests/integration/js (offline?): {done.stderr[-300:]}")
    return JS_DIR


class Lines:
    """A child process's stdout, one JSON object per line, read in a thread."""

    def __init__(self, process: Any) -> None:
        import queue
        import threading

        self.process = process
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        import json

        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self.queue.put(json.loads(line))

    def next(self, timeout: float = 60) -> dict[str, Any]:
        message = self.queue.get(timeout=timeout)
        assert "failed" not in message, message["failed"]
        return message

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()


class StatelessUser:
    """What a stateless token authenticates: a ``pk`` and answers, no table, no ``_meta``."""

    is_authenticated = True
    is_active = True
    is_anonymous = False

    def __init__(self, pk: int, granted: bool) -> None:
        self.pk = self.id = pk
        self.granted = granted

    def has_perms(self, perms: Any, obj: Any = None) -> bool:
        return self.granted

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return self.granted
