"""The app's own deployment checks (``manage.py check --deploy``): a Celery app, a broker the
site's processes share, and the address approvers' links start with; each silent on the
quickstart's settings (scripts/newsite.sh runs them there) and absent from ``check``."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from django.core.management import call_command

from project.celery import app

pytestmark = pytest.mark.once

DEPLOYED = {
    "CELERY_BROKER_URL": "redis://localhost:6379/0",
    "CELERY_TASK_ALWAYS_EAGER": False,
}


def ours(*args: str) -> list[str]:
    """The guarded_tools ids `manage.py check ARGS` prints, in order."""
    out = io.StringIO()
    call_command("check", *args, stdout=out, stderr=out)
    return re.findall(r"\((guarded_tools\.W01[678])\)", out.getvalue())


@pytest.fixture
def deployed(settings: Any) -> Any:
    for name, value in DEPLOYED.items():
        setattr(settings, name, value)
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS,
                              "CONSOLE_BASE_URL": "https://ops.example.com"}
    return settings


@pytest.fixture
def no_celery_app() -> Iterator[None]:
    """Celery's fallback app is the current one, as in a site without mysite/celery.py."""
    Celery("default", set_as_current=False).set_current()
    yield
    app.set_current()


def test_a_deployment_as_the_quickstart_makes_it_passes(deployed: Any) -> None:
    assert ours("--deploy") == []


def test_no_celery_app_is_warned_of_under_deploy_only(deployed: Any, no_celery_app: None) -> None:
    assert ours("--deploy") == ["guarded_tools.W016"]
    assert ours() == []


@pytest.mark.parametrize("broker", ["", "memory://", "filesystem://", "filesystem:///var/q"])
def test_no_broker_or_one_the_processes_cannot_share(deployed: Any, broker: str) -> None:
    deployed.CELERY_BROKER_URL = broker
    out = io.StringIO()
    call_command("check", "--deploy", stdout=out, stderr=out)
    assert ours("--deploy") == ["guarded_tools.W017"]
    assert "guarded_tools_sweep --loop" in out.getvalue()  # the documented alternative
    assert "approvers' emails" in out.getvalue()  # what waits for a worker
    assert ours() == []


def test_tasks_run_eagerly_is_no_deployment(deployed: Any) -> None:
    deployed.CELERY_TASK_ALWAYS_EAGER = True
    assert ours("--deploy") == ["guarded_tools.W017"]


def test_the_console_address_unset(deployed: Any) -> None:
    deployed.GUARDED_TOOLS = {**deployed.GUARDED_TOOLS, "CONSOLE_BASE_URL": "",
                              "CONFIRMATION_NOTIFY_EMAIL": False}
    assert ours("--deploy") == ["guarded_tools.W018"]
    # With approvers' emails on, W013 says it already, in every check.
    deployed.GUARDED_TOOLS = {**deployed.GUARDED_TOOLS, "CONFIRMATION_NOTIFY_EMAIL": True}
    assert ours("--deploy") == []
