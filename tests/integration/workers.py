"""A real Celery worker process on the test database, and the abandoned calls it recovers.

The worker uses the embedded filesystem broker under a private ``GT_VAR_DIR``; this process
publishes to the same folders. It registers the test tools of
``tests.integration.tools_for_processes`` (``-I``). The ``worker`` fixture
(``tests/integration/conftest.py``) runs one per test.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from guarded_tools.models import Operation, OperationState
from guarded_tools.store import fingerprint
from project.celery import app
from tests import forkserver
from tests.conftest import REPO_ROOT, reset_publisher, wait_until
from tests.integration.tools_for_processes import RECOVERABLE_TOOL

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


@contextmanager
def running_worker(subprocess_env: dict[str, str], tmp_path: Path) -> Iterator[Worker]:
    """A Celery worker process on the test database, publishing to it from this process;
    stopped (warm, then killed) after the block."""
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
