"""A real broker: approvals while it is down, and the checks on the Celery settings."""

from __future__ import annotations

import io
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.test import Client

from guarded_tools.models import Confirmation, ConfirmationStatus
from project.celery import app
from tests.conftest import Effects, key, reset_publisher

OURS = ("guarded_tools.W010", "guarded_tools.W011", "guarded_tools.W012")


@pytest.fixture
def broker_down() -> Iterator[None]:
    """Celery publishes to a broker address where nothing listens (a port just freed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    saved = (app.conf.broker_url, app.conf.task_always_eager)
    app.conf.broker_url = f"amqp://guest:guest@127.0.0.1:{port}//"
    app.conf.task_always_eager = False
    reset_publisher()
    yield
    app.conf.broker_url, app.conf.task_always_eager = saved
    reset_publisher()


@pytest.mark.django_db(transaction=True)  # the approval's on_commit runs inside the request
def test_an_approval_while_the_broker_is_down_is_kept_and_the_retry_runs_it(
        settings: Any, make_tool: Any, alice: Any, user_factory: Any, client_for: Any,
        broker_down: None, caplog: Any) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "EXECUTE_ON_APPROVAL": True}
    handler = Effects()
    definition = make_tool(handler, confirm="effect-only")
    body = {"operationId": key()}
    agent = client_for(alice)
    assert agent.post(f"/agent/tools/{definition.name}/", body,
                      format="json").status_code == 202
    confirmation = Confirmation.objects.get()
    staff = Client(raise_request_exception=False)
    staff.force_login(user_factory("staffer", is_staff=True, perms=(
        "guarded_tools.view_confirmation", "guarded_tools.approve_confirmation")))
    with caplog.at_level(logging.WARNING, logger="guarded_tools.tasks"):
        answer = staff.post(f"/admin/guarded_tools/confirmation/{confirmation.pk}/decide/",
                            {"decision": "approve"})
    assert answer.status_code == 302, answer.status_code  # not the approver's 500 page
    confirmation.refresh_from_db()
    assert confirmation.status == ConfirmationStatus.APPROVED
    assert str(confirmation.pk) in caplog.text and "agent's retry runs it" in caplog.text
    assert handler.count == 0  # the task never reached a worker
    retry = agent.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert retry.status_code == 200 and handler.count == 1
    assert agent.post(f"/agent/tools/{definition.name}/", body,
                      format="json").headers["Idempotent-Replayed"] == "true"
    assert handler.count == 1


@pytest.mark.django_db(transaction=True)  # the request commits: its email is sent on
def test_a_request_while_the_broker_is_down_answers_202_and_logs_the_unsent_email(
        user_factory: Any, make_tool: Any, alice: Any, client_for: Any, broker_down: None,
        mailoutbox: Any, caplog: Any) -> None:
    user_factory("approver", perms=("guarded_tools.approve_confirmation",),
                 email="approver@example.com")
    definition = make_tool(Effects(), confirm="always")
    with caplog.at_level(logging.WARNING, logger="guarded_tools.tasks"):
        answer = client_for(alice).post(f"/agent/tools/{definition.name}/",
                                        {"operationId": key()}, format="json")
    assert answer.status_code == 202, answer.content
    confirmation = Confirmation.objects.get()
    assert confirmation.status == ConfirmationStatus.PENDING
    assert f"approvers' email of confirmation {confirmation.pk}" in caplog.text
    assert "nobody is emailed" in caplog.text
    assert "127.0.0.1" not in answer.content.decode()  # the broker's address stays in the log
    assert mailoutbox == []


def found(**kwargs: Any) -> list[str]:
    return [m.id for m in checks.run_checks(**kwargs) if m.id in OURS]


def test_the_demo_settings_pass() -> None:
    assert found() == []


def test_a_visibility_timeout_shorter_than_the_longest_lease(settings: Any,
                                                             make_tool: Any) -> None:
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 600}
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "LEASE_SECONDS": 300}
    assert found() == []
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "LEASE_SECONDS": 900}
    assert found() == ["guarded_tools.W010"]
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "LEASE_SECONDS": 300}
    make_tool(lease_seconds=1200)  # one tool's own lease counts too
    [message] = [m for m in checks.run_checks() if m.id == "guarded_tools.W010"]
    assert "lease_seconds" in message.msg and "visibility_timeout" in message.hint
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}  # kombu's default for Redis: 3600 s
    assert found() == []
    settings.CELERY_BROKER_URL = "sqs://"  # and for SQS: 1800 s
    make_tool(lease_seconds=2400)
    assert found() == ["guarded_tools.W010"]
    settings.CELERY_BROKER_URL = "amqp://guest@127.0.0.1//"  # RabbitMQ has no such timeout
    assert found() == []


def test_execute_on_approval_with_tasks_acknowledged_before_they_run(settings: Any) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "EXECUTE_ON_APPROVAL": True}
    assert found() == ["guarded_tools.W011"]
    settings.CELERY_TASK_ACKS_LATE = True
    assert found() == []
    settings.CELERY_TASK_ACKS_LATE = False
    settings.CELERY_TASK_ANNOTATIONS = {
        "guarded_tools.tasks.execute_approved": {"acks_late": True}}
    assert found() == []
    settings.CELERY_TASK_ANNOTATIONS = {"*": {"acks_late": False}}
    settings.CELERY_TASK_ACKS_LATE = True
    assert found() == ["guarded_tools.W011"]
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "EXECUTE_ON_APPROVAL": False}
    assert found() == []


def test_no_beat_schedule_for_the_sweep(settings: Any) -> None:
    def check() -> str:
        out = io.StringIO()
        call_command("check", stdout=out, stderr=out)
        return out.getvalue()

    assert "W012" not in check()
    settings.CELERY_BEAT_SCHEDULE = {"other": {"task": "project.other", "schedule": 5.0}}
    output = check()
    assert "guarded_tools.W012" in output and "guarded_tools_sweep --loop" in output
    # A database scheduler (django-celery-beat) keeps its entries where checks do not look.
    settings.CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
    assert "W012" not in check()
    del settings.CELERY_BEAT_SCHEDULER
    settings.SILENCED_SYSTEM_CHECKS = ["guarded_tools.W012"]
    assert "W012" not in check()
