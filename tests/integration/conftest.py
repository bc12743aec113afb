"""Fixtures of the end-to-end tests: the browser's, the demo's.

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


# -- a Celery worker ---------------------------------------------------------------------------
@pytest.fixture
def worker(subprocess_env: dict[str, str], tmp_path: Path) -> Iterator[Any]:
    """A real Celery worker process on the test database (``tests.integration.workers``)."""
    from tests.integration.workers import running_worker

    with running_worker(subprocess_env, tmp_path) as running:
        yield running
