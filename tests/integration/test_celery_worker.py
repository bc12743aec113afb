"""A real Celery worker process runs the sweep and the approvers' email against the test database.

The database is PostgreSQL, or SQLite's file test database. The worker uses the
embedded filesystem broker under a private ``GT_VAR_DIR``; this process publishes
to the same folders. The worker registers the test tools of
``tests.integration.tools_for_processes`` (``-I``), whose ``recover`` writes one row per call, so
recover calls made in the worker can be counted here.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from guarded_tools import tasks
from guarded_tools.models import Operation
from tests.conftest import wait_until
from tests.integration.tools_for_processes import recover_rows
from tests.integration.workers import Worker, abandoned, recovered

# Runs on PostgreSQL and on SQLite's file test database (project/settings.py names it);
# an in-memory SQLite test database is invisible to the worker, so that is skipped.
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

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
