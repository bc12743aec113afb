"""A real Celery worker process runs the sweep and the approvers' email against the test database.

The database is PostgreSQL, or SQLite's file test database. The worker uses the
embedded filesystem broker under a private ``GT_VAR_DIR``; this process publishes
to the same folders. The worker registers the test tools of
``tests.integration.tools_for_processes`` (``-I``), whose ``recover`` writes one row per call, so
recover calls made in the worker can be counted here.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from guarded_tools import tasks
from guarded_tools.models import Operation, OperationState
from guarded_tools.store import fingerprint
from project.celery import app
from tests import forkserver
from tests.conftest import REPO_ROOT, reset_publisher, wait_until
from tests.integration.tools_for_processes import RECOVERABLE_TOOL, recover_rows

# Runs on PostgreSQL and on SQLite's file test database (project/settings.py names it);
# an in-memory SQLite test database is invisible to the worker, so that is skipped.
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: The worker runs on this run's Python, hence its Django (5.2 in the Django 5.2 runs).
CELERY = [sys.executable, "-m", "celery"]
DONE = re.compile(r"Task guarded_tools\.tasks\.sweep\[[0-9a-f-]+\] succeeded")


def broker_options(var_dir: Path) -> dict[str, Any]:
    """The folders project/settings.py (and project/celery.py) derive from GT_VAR_DIR."""
    return {
        "data_folder_in": str(var_dir / "broker"),
        "data_folder_out": str(var_dir / "broker"),
        "processed_folder": str(var_dir / "broker-processed"),
        "store_processed": False,
        "control_folder": str(var_dir / "broker-control"),
    }


class Worker:
    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def sweeps_done(self) -> int:
        return len(DONE.findall(self.text()))


@pytest.fixture
def worker(subprocess_env: dict[str, str], tmp_path: Path) -> Iterator[Worker]:
    var_dir = Path(subprocess_env["GT_VAR_DIR"])
    options = broker_options(var_dir)
    for folder in ("data_folder_in", "processed_folder", "control_folder"):
        Path(options[folder]).mkdir(parents=True, exist_ok=True)
    env = {**subprocess_env, "GT_REGISTER_TEST_TOOLS": "1"}
    if connection.vendor == "sqlite":
        if connection.is_in_memory_db():
            pytest.skip("the worker process cannot see an in-memory SQLite test database")
        env["GT_SQLITE_PATH"] = str(connection.settings_dict["NAME"])
    log = tmp_path / "worker.log"
    with log.open("wb") as sink:
        process = forkserver.popen(
            [*CELERY, "-A", "project", "worker", "--pool=solo", "--concurrency=1",
             "-Q", "celery", "--loglevel=INFO", "-I", "tests.integration.tools_for_processes",
             "--without-gossip", "--without-mingle", "--without-heartbeat",
             "-n", f"gt-test-{uuid.uuid4().hex[:8]}@%h"],
            cwd=REPO_ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )
    running = Worker(process, log)
    # Publish from this process into the worker's private broker folders.
    saved = (app.conf.broker_url, app.conf.broker_transport_options, app.conf.task_always_eager)
    app.conf.broker_url = "filesystem://"
    app.conf.broker_transport_options = options
    app.conf.task_always_eager = False
    reset_publisher()
    try:
        wait_until(lambda: " ready." in running.text() or process.poll() is not None,
                   timeout=180, step=0.1)
        assert process.poll() is None, running.text()
        yield running
    finally:
        app.conf.broker_url, app.conf.broker_transport_options, app.conf.task_always_eager = (
            saved)
        reset_publisher()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # warm shutdown
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()


def abandoned(count: int) -> list[Operation]:
    rows = []
    for _ in range(count):
        body = {"operationId": uuid.uuid4().hex}
        rows.append(Operation(
            tool=RECOVERABLE_TOOL, scope="principal:svc", key=body["operationId"],
            fingerprint=fingerprint(body), input=body, owner="dead-owner",
            state=OperationState.IN_FLIGHT,
        ))
    Operation.objects.bulk_create(rows)
    past = ExpressionWrapper(Now() - Value(timedelta(seconds=5)), output_field=DateTimeField())
    Operation.objects.filter(pk__in=[r.pk for r in rows]).update(lease_expires_at=past)
    return rows


def recovered(rows: list[Operation]) -> bool:
    return Operation.objects.filter(
        pk__in=[r.pk for r in rows], state=OperationState.SUCCEEDED, recovered=True
    ).count() == len(rows)


def test_worker_sweeps_abandoned_operations_once(worker: Worker) -> None:
    [first] = abandoned(1)
    tasks.sweep.delay()
    wait_until(lambda: recovered([first]) or worker.process.poll() is not None,
               timeout=30, step=0.1)
    assert worker.process.poll() is None, worker.text()
    wait_until(lambda: worker.sweeps_done() == 1, timeout=30, step=0.1)
    first.refresh_from_db()
    assert first.output == {"recoveredBy": worker.process.pid, "key": first.key}
    assert first.fence == 2 and recover_rows(str(first.pk)).count() == 1

    # The same task delivered twice, and a second sweep: every operation recovers once.
    more = abandoned(20)
    task_id = str(uuid.uuid4())
    tasks.sweep.apply_async(task_id=task_id)
    tasks.sweep.apply_async(task_id=task_id)
    tasks.sweep.delay()
    wait_until(lambda: worker.sweeps_done() == 4 or worker.process.poll() is not None,
               timeout=30, step=0.1)
    assert worker.process.poll() is None, worker.text()
    assert recovered([first, *more])
    for row in [first, *more]:
        assert recover_rows(str(row.pk)).count() == 1
    assert set(Operation.objects.values_list("fence", flat=True)) == {2}
    assert "Traceback" not in worker.text(), worker.text()


def test_worker_emails_the_approvers_of_a_new_request(
        worker: Worker, user_factory: Any, make_tool: Any, alice: Any, client_for: Any,
        mailoutbox: Any) -> None:
    """The agent's call commits the request and sends the task; the worker sends the mail
    (the demo's console backend prints it to the worker's log)."""
    user_factory("approver", perms=("guarded_tools.approve_confirmation",),
                 email="approver@example.com")
    definition = make_tool(confirm="always")
    answer = client_for(alice).post(f"/agent/tools/{definition.name}/",
                                    {"operationId": uuid.uuid4().hex}, format="json")
    assert answer.status_code == 202
    confirmation_id = answer.json()["error"]["confirmation"]["id"]
    sent = re.compile(r"Task guarded_tools\.tasks\.notify_approvers\[[0-9a-f-]+\] succeeded"
                      r" in [0-9.]+s: (\d+)")
    wait_until(lambda: sent.search(worker.text()) is not None
               or worker.process.poll() is not None, timeout=30, step=0.1)
    log = worker.text()
    assert worker.process.poll() is None, log
    assert sent.findall(log) == ["1"]  # one email, sent once
    printed = log.replace("=\n", "")  # the body's quoted-printable soft line breaks
    assert "To: approver@example.com" in printed and "Approval requested:" in printed
    # Absolute, on the host the demo names (CONSOLE_BASE_URL), as a mail reader opens it.
    assert (f"Decide on its page: http://127.0.0.1:8000/admin/guarded_tools/confirmation/"
            f"{confirmation_id}/change/") in printed
    assert mailoutbox == []  # not sent by this (the agent's) process
    assert "Traceback" not in log, log
