"""Fixtures of the end-to-end tests: a browser, the demo, the site under uvicorn, a worker.

The browser fixtures import ``tests.integration.browser`` inside their bodies: its
module-level skip (no Chromium, no Playwright) then reaches only the tests that use them.
"""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest


# -- the browser -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium per module."""
    from tests.integration.browser import chromium

    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    """A page at 1280 px in a fresh browser context on the live server."""
    from tests.integration.browser import open_page

    page = open_page(browser, live_server.url)
    try:
        yield page
    finally:
        page.context.close()


@pytest.fixture
def staff(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("boss", password="pw")


# -- the demo ----------------------------------------------------------------------------------
@pytest.fixture
def demo(django_user_model: Any) -> dict[str, Any]:
    """The demo's users and accounts (``demo_seed``): agent, staff and approver."""
    from django.core.management import call_command

    from project.demo.models import Account

    call_command("demo_seed", stdout=StringIO())
    agent = django_user_model.objects.get(username="agent")
    source, receiver = Account.objects.filter(owner=agent).order_by("pk")
    return {"agent": agent, "source": source, "receiver": receiver}


@pytest.fixture
def agent() -> Any:
    """The seeded demo (``demo_seed``) and its agent's client, with the agent's token."""
    from django.core.management import call_command
    from rest_framework.test import APIClient

    from project.demo.management.commands.demo_seed import AGENT_TOKEN

    call_command("demo_seed", stdout=StringIO())
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AGENT_TOKEN}")
    return client


# -- the site under uvicorn --------------------------------------------------------------------
def database_url() -> str:
    """The test database as a ``DATABASE_URL`` that a process of the site reads."""
    from django.db import connection

    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    return (f"postgres://{settings['USER']}:{settings.get('PASSWORD') or ''}@{settings['HOST']}:"
            f"{settings['PORT']}/{settings['NAME']}")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The site (with ``tests.integration.asgi_app``'s tools) under uvicorn on a free port,
    on the test database: its ``port``, and the folder its tools leave ``markers`` in."""
    import os
    import subprocess
    import sys

    from tests import forkserver
    from tests.conftest import REPO_ROOT, free_port, wait_for_port

    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url(), "GT_TEST_MARKERS": str(tmp_path),
           "GT_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "project.settings"}
    process = forkserver.popen(
        [sys.executable, "-m", "uvicorn", "tests.integration.asgi_app:application",
         "--host", "127.0.0.1",
         "--port", str(port), "--lifespan", "off", "--log-level", "warning"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, process, timeout=90)  # a loaded CI machine starts uvicorn slowly
        yield {"port": port, "markers": tmp_path}
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def token(django_user_model: Any) -> str:
    """A DRF token of a new user, for calls to ``server``."""
    from rest_framework.authtoken.models import Token

    user = django_user_model.objects.create_user("asgi-agent", password="pw")
    return Token.objects.create(user=user).key


# -- a Celery worker ---------------------------------------------------------------------------
@pytest.fixture
def worker(subprocess_env: dict[str, str], tmp_path: Path) -> Iterator[Any]:
    """A real Celery worker process on the test database (``tests.integration.workers``)."""
    from tests.integration.workers import running_worker

    with running_worker(subprocess_env, tmp_path) as running:
        yield running
