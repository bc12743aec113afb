"""Faults: SQLite under concurrency, dropped connections, killed sweepers, two beats."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections
from django.db.models.functions import Now

from guarded_tools.models import JournalEntry, Operation, OperationState
from guarded_tools.pipeline.recovery import sweep
from tests import forkserver
from tests.conftest import REPO_ROOT, key, wait_until
from tests.integration.races import one_key_eight_processes, one_key_many_threads_over_rest
from tests.integration.tools_for_processes import ATOMIC_TOOL, EFFECT_TOOL, recover_rows
from tests.integration.workers import CELERY, Worker, abandoned, recovered

pytestmark = pytest.mark.django_db(transaction=True)


def leases_expired() -> bool:
    """No claim's lease is still running on the database clock, the one sweeps read."""
    return not Operation.objects.filter(state=OperationState.IN_FLIGHT,
                                        lease_expires_at__gte=Now()).exists()


def sqlite_only() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("the PostgreSQL variant is in test_concurrency.py")


# -- SQLite in WAL mode with IMMEDIATE transactions ------------------------------------------
@pytest.mark.sqlite
def test_sqlite_settings_are_the_documented_ones() -> None:
    sqlite_only()
    options = connection.settings_dict["OPTIONS"]
    assert options["transaction_mode"] == "IMMEDIATE"
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"


@pytest.mark.slow
@pytest.mark.sqlite
@pytest.mark.parametrize("atomic", [False, True], ids=["claim-first", "atomic-one-transaction"])
def test_sqlite_one_key_64_threads_executes_once(atomic: bool, make_tool: Any,
                                                 alice: Any) -> None:
    sqlite_only()
    one_key_many_threads_over_rest(64, atomic, make_tool, alice)


@pytest.mark.slow
@pytest.mark.sqlite
@pytest.mark.parametrize("tool_name", [EFFECT_TOOL, ATOMIC_TOOL])
def test_sqlite_one_key_eight_processes_executes_once(tool_name: str,
                                                      subprocess_env: dict[str, str],
                                                      tmp_path: Path) -> None:
    sqlite_only()
    one_key_eight_processes(tool_name, subprocess_env, tmp_path)


# -- the database connection is killed (PostgreSQL) ------------------------------------------
def terminate_own_backend() -> None:
    """Kill this thread's own database session from a second connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        # The server only signals the session: wait until it has ended, so this thread's
        # next statement meets a dead session, never one that still runs it.
        wait_until(lambda: not session_alive(other, pid), timeout=30)
    finally:
        other.close()


def session_alive(conn: Any, pid: int) -> bool:
    with conn.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone() is not None


class Effect:
    """An effect recorded on a separate connection, so a killed session cannot lose it."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def __call__(self, input: dict[str, Any], ctx: Any) -> Any:
        self.keys.append(input["operationId"])
        return {"done": True}


@pytest.mark.postgres
@pytest.mark.parametrize("point", ["claim", "journal", "completion"])
def test_connection_killed_mid_operation_never_runs_twice(point: str, make_tool: Any) -> None:
    effect = Effect()
    fired: list[str] = []

    def fault(at: str) -> None:
        if at == point and not fired:  # once: the retry at the end must go through
            fired.append(at)
            terminate_own_backend()

    def authorize(**kw: Any) -> bool:
        fault("claim")  # the next statement is the claim
        return True

    def handler(input: dict[str, Any], ctx: Any) -> Any:
        fault("journal")
        ctx.operation.write({"phase": "sending"})
        result = effect(input, ctx)
        fault("completion")  # the effect happened; the completion write fails
        return result

    def recover(*, input: dict[str, Any], **kw: Any) -> Any:
        # The effect's own record is the authority (here: the list it appends to).
        if input["operationId"] in effect.keys:
            return {"recovered": True, "output": {"done": True}}
        return {"recovered": False}

    definition = make_tool(handler, authorize=authorize, recover=recover, lease_seconds=1)
    body = {"operationId": key()}
    with pytest.raises(DatabaseError):
        definition(body, principal="svc")
    connection.close()  # what Django does at the end of a request with a broken connection
    wait_until(leases_expired)
    sweep()
    rows = Operation.objects.filter(key=body["operationId"])
    if point == "claim":
        assert not rows.exists()  # nothing was claimed: the retry is a fresh call
    elif point == "journal":
        # The session died before the journal write: nothing of the effect exists, so the
        # operation is released (journal empty) and the retry runs it once.
        assert rows.get().state == OperationState.RELEASED
    else:
        assert rows.get().state == OperationState.SUCCEEDED and rows.get().recovered
    result = definition(body, principal="svc")
    assert result.output == {"done": True}
    assert effect.keys.count(body["operationId"]) == 1


# -- sweepers and beats ------------------------------------------------------------------------
SWEEP = (
    "import django\n"
    "django.setup()\n"
    "from tests.integration.tools_for_processes import register\n"
    "register()\n"
    "from guarded_tools.pipeline.recovery import sweep\n"
    "print(sweep().as_dict(), flush=True)\n"
)


@pytest.mark.slow
def test_a_sweeper_killed_mid_sweep_leaves_nothing_half_done(subprocess_env: dict[str, str],
                                                            tmp_path: Path) -> None:
    rows = abandoned(5)
    env = {**subprocess_env, "GT_RECOVER_SLEEP": "30", "GT_LEASE_SECONDS": "1"}
    stalled = forkserver.popen([sys.executable, "-c", SWEEP], cwd=REPO_ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    try:
        wait_until(lambda: Operation.objects.filter(
            pk__in=[r.pk for r in rows], fence=2).exists(), timeout=30)
    finally:
        os.killpg(stalled.pid, signal.SIGKILL)
        stalled.wait(10)
    assert not recovered(rows)
    wait_until(leases_expired)  # the dead sweeper's takeovers, on the database clock
    env["GT_RECOVER_SLEEP"] = "0"
    done = forkserver.run([sys.executable, "-c", SWEEP], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert recovered(rows)
    for row in rows:
        assert recover_rows(str(row.pk)).count() == 1  # the killed one never got that far
    assert not JournalEntry.objects.filter(operation__in=rows).exists()


@pytest.mark.slow
def test_two_beats_and_a_worker_recover_each_operation_once(worker: Worker,
                                                            subprocess_env: dict[str, str],
                                                            tmp_path: Path) -> None:
    env = {**subprocess_env, "GT_SWEEP_EVERY": "0.5"}
    if connection.vendor == "sqlite":
        env["GT_SQLITE_PATH"] = str(connection.settings_dict["NAME"])
    beats = [
        forkserver.popen([*CELERY, "-A", "project", "beat", "--loglevel=INFO",
                          "-s", str(tmp_path / f"beat{i}")], cwd=REPO_ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(2)
    ]
    try:
        wait_until(lambda: worker.sweeps_done() >= 4, timeout=60)
        rows = abandoned(20)
        wait_until(lambda: recovered(rows), timeout=60)
        before = worker.sweeps_done()
        wait_until(lambda: worker.sweeps_done() >= before + 4, timeout=60)
    finally:
        for beat in beats:
            beat.send_signal(signal.SIGTERM)
        for beat in beats:
            try:
                beat.wait(10)
            except subprocess.TimeoutExpired:
                beat.kill()
    for row in rows:
        assert recover_rows(str(row.pk)).count() == 1
    assert Operation.objects.filter(pk__in=[r.pk for r in rows], fence=2).count() == len(rows)
