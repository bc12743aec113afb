"""Concurrency on PostgreSQL: real threads (one connection each) and real processes.

Every test here commits (``transaction=True``) so that other connections see its rows,
starts its callers together on a barrier, and is bounded by join timeouts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now
from django.utils import timezone
from rest_framework.test import APIClient

from guarded_tools import confirmations
from guarded_tools.core.errors import OperationInFlight, OutcomeUnknownError
from guarded_tools.models import (
    AuditEntry,
    Confirmation,
    ConfirmationStatus,
    JournalEntry,
    Operation,
    OperationState,
)
from guarded_tools.pipeline.recovery import sweep
from guarded_tools.store import OperationStore, fingerprint
from tests import forkserver
from tests.conftest import REPO_ROOT, in_threads, key, key_lock_free, one_transaction, wait_until
from tests.integration.races import (
    SCHEMA,
    URL,
    CountingHandler,
    one_key_eight_processes,
    one_key_many_threads_over_rest,
)
from tests.integration.tools_for_processes import ATOMIC_TOOL, EFFECT_TOOL, effect_rows

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

def expire_lease(queryset: Any, seconds: int = 5) -> None:
    """Put the lease ``seconds`` in the past by the database clock."""
    past = ExpressionWrapper(Now() - Value(timedelta(seconds=seconds)),
                             output_field=DateTimeField())
    queryset.update(lease_expires_at=past)


def paused_owner(definition: Any, body: dict[str, Any], user: Any, entered: threading.Event,
                 resume: threading.Event, takeover: Callable[[], bool]) -> tuple[Any, Any]:
    """Call ``definition`` in a thread whose handler pauses (``entered``/``resume``) until
    its lease has expired and ``takeover()`` (which must return True) has run; return the
    operation and what the paused owner finally got (a result or an exception)."""
    outcome: list[Any] = []

    def owner() -> None:
        try:
            outcome.append(definition(body, user=user))
        except BaseException as exc:
            outcome.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=owner, daemon=True)
    thread.start()
    try:
        assert entered.wait(10)
        operation = Operation.objects.get(tool=definition.name)
        wait_until(lambda: Operation.objects.abandoned().filter(pk=operation.pk).exists())
        assert takeover()
    finally:
        resume.set()
        thread.join(20)
    assert not thread.is_alive()
    [result] = outcome
    return operation, result


# -- one key, many callers -----------------------------------------------------------------
@pytest.mark.parametrize(("callers", "atomic"), [(50, False), (64, False), (50, True)],
                         ids=["50", "64", "50-atomic-one-transaction"])
def test_one_key_many_threads_over_rest_executes_once(callers: int, atomic: bool,
                                                      make_tool: Any, alice: Any) -> None:
    one_key_many_threads_over_rest(callers, atomic, make_tool, alice)


@pytest.mark.slow
@pytest.mark.parametrize("tool_name", [EFFECT_TOOL, ATOMIC_TOOL])
def test_one_key_eight_processes_executes_once(tool_name: str, subprocess_env: dict[str, str],
                                               tmp_path: Path) -> None:
    """Separate interpreters, separate connections: the unique constraint (or, for an
    atomic tool, the key's lock in the effect's transaction) decides."""
    one_key_eight_processes(tool_name, subprocess_env, tmp_path)


CALL_ONCE = (
    "import json, sys\n"
    "import django\n"
    "django.setup()\n"
    "from guarded_tools.core.errors import GuardError\n"
    "from tests.integration.tools_for_processes import register\n"
    "definition = register()[sys.argv[1]]\n"
    "try:\n"
    "    r = definition(json.loads(sys.argv[2]), principal='svc')\n"
    "    out = {'kind': 'replayed' if r.replayed else 'executed', 'output': r.output}\n"
    "except GuardError as e:\n"
    "    out = {'kind': e.code}\n"
    "print(json.dumps(out), flush=True)\n"
)


def call_in_child(env: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    done = forkserver.run([sys.executable, "-c", CALL_ONCE, ATOMIC_TOOL, json.dumps(body)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
                          check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_atomic_call_killed_after_its_effect_leaves_nothing(subprocess_env: dict[str, str]
                                                            ) -> None:
    """SIGKILL inside an atomic tool's transaction, after its INSERT: the database rolls
    the effect back with the key's lock. While it runs, a duplicate is told it is in
    flight; after the kill there is no operation to recover, and the retry runs once."""
    k = key()
    victim = forkserver.popen(
        [sys.executable, "-c", CALL_ONCE, ATOMIC_TOOL,
         json.dumps({"operationId": k, "sleepAfter": 60})],
        cwd=REPO_ROOT, env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert victim.stdout is not None
        assert victim.stdout.readline().strip() == "EFFECT WRITTEN"
        assert call_in_child(subprocess_env, {"operationId": k})["kind"] == "operation_in_flight"
        assert effect_rows(k).count() == 0  # written, never committed
        assert not Operation.objects.filter(key=k).exists()
    finally:
        victim.kill()
        victim.wait(20)
    assert victim.returncode == -signal.SIGKILL
    # Its session (and the key's lock) ends when the server notices the process is gone.
    wait_until(lambda: key_lock_free(ATOMIC_TOOL, "principal:svc", k), timeout=30)
    assert effect_rows(k).count() == 0 and not Operation.objects.filter(key=k).exists()
    assert sweep().taken == 0  # nothing was abandoned: there is nothing to decide
    assert call_in_child(subprocess_env, {"operationId": k})["kind"] == "executed"
    assert call_in_child(subprocess_env, {"operationId": k})["kind"] == "replayed"
    assert effect_rows(k).count() == 1
    operation = Operation.objects.get(key=k)
    assert (operation.tool, operation.state, operation.fence) == (ATOMIC_TOOL, "succeeded", 1)


def test_five_hundred_distinct_keys_concurrently_none_lost(make_tool: Any) -> None:
    handler = CountingHandler(sleep=0)
    definition = make_tool(handler, input_schema=SCHEMA)
    keys = [key() for _ in range(500)]
    lock = threading.Lock()
    pending = list(keys)
    results: dict[str, Any] = {}

    def drain(_i: int) -> None:
        while True:
            with lock:
                if not pending:
                    return
                k = pending.pop()
            result = definition({"operationId": k, "n": 1}, principal="svc")
            with lock:
                results[k] = result

    in_threads(16, drain, timeout=80)
    assert sorted(handler.keys) == sorted(keys)
    assert len(results) == 500 and not any(r.replayed for r in results.values())
    done = Operation.objects.filter(tool=definition.name, state=OperationState.SUCCEEDED)
    assert done.count() == 500
    assert set(done.values_list("key", flat=True)) == set(keys)
    assert Operation.objects.filter(tool=definition.name).exclude(fence=1).count() == 0


# -- people deciding at once ---------------------------------------------------------------
@pytest.mark.parametrize("decisions", [("approve", "decline"), ("approve", "approve"),
                                       ("decline", "decline")])
def test_two_admins_deciding_at_once_make_one_decision(decisions: tuple[str, str],
                                                       django_user_model: Any) -> None:
    admins = [django_user_model.objects.create_superuser(f"admin{i}", password="pw")
              for i in range(2)]
    rounds = 10
    items = []
    for _ in range(rounds):
        body = {"operationId": key()}
        items.append(Confirmation.objects.create(
            tool="pay", scope="principal:svc", key=body["operationId"],
            fingerprint=fingerprint(body), input=body,
        ))
    for confirmation in items:
        outcomes: list[Any] = [None, None]

        def decide(i: int, confirmation: Confirmation = confirmation,
                   outcomes: list[Any] = outcomes) -> None:
            try:
                if decisions[i] == "approve":
                    confirmations.approve(confirmation, admins[i], "ok")
                else:
                    confirmations.decline(confirmation, admins[i], "no")
                outcomes[i] = "won"
            except confirmations.DecisionRefused:
                outcomes[i] = "refused"

        in_threads(2, decide)
        assert sorted(outcomes) == ["refused", "won"], outcomes
        winner = outcomes.index("won")
        confirmation.refresh_from_db()
        expected = (ConfirmationStatus.APPROVED if decisions[winner] == "approve"
                    else ConfirmationStatus.DECLINED)
        assert confirmation.status == expected
        assert confirmation.decided_by_id == admins[winner].pk
        audit = AuditEntry.objects.filter(confirmation_id=confirmation.pk)
        assert audit.count() == 1
        assert audit.get().actor_id == admins[winner].pk


# -- recovery ------------------------------------------------------------------------------
class CountingRecover:
    def __init__(self, recovered: bool = True) -> None:
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.recovered = recovered

    def __call__(self, *, input: dict[str, Any], operation: Any, **_: Any) -> Any:
        with self.lock:
            self.calls[operation.id] += 1
        if not self.recovered:
            return {"recovered": False}
        return {"recovered": True, "output": {"recovered": operation.id}}


def abandoned_operations(tool_name: str, count: int) -> list[Operation]:
    """Half abandoned, half in flight with a lease already past by the database clock."""
    rows = []
    for i in range(count):
        body = {"operationId": f"k{i}"}
        rows.append(Operation(
            tool=tool_name, scope="principal:svc", key=body["operationId"],
            fingerprint=fingerprint(body), input=body, owner="" if i % 2 else "dead-owner",
            state=OperationState.ABANDONED if i % 2 else OperationState.IN_FLIGHT,
        ))
    Operation.objects.bulk_create(rows, batch_size=500)
    expire_lease(Operation.objects.filter(tool=tool_name, state=OperationState.IN_FLIGHT))
    return rows


@pytest.mark.slow
def test_two_sweepers_recover_each_operation_exactly_once(make_tool: Any) -> None:
    recover = CountingRecover()
    handler = CountingHandler()
    definition = make_tool(handler, input_schema=SCHEMA, recover=recover)
    abandoned_operations(definition.name, 1000)
    reports: list[list[Any]] = [[], []]

    def sweeper(i: int) -> None:
        while True:
            report = sweep(batch_size=100)
            reports[i].append(report)
            assert not report.errors, report.errors
            if report.taken == 0:
                return

    in_threads(2, sweeper, timeout=80)
    assert handler.keys == []  # takeover never runs the handler
    operations = Operation.objects.filter(tool=definition.name)
    assert len(recover.calls) == 1000
    assert set(recover.calls.values()) == {1}
    assert sum(r.taken for rs in reports for r in rs) == 1000
    assert sum(r.completed for rs in reports for r in rs) == 1000
    assert operations.filter(state=OperationState.SUCCEEDED, recovered=True).count() == 1000
    assert operations.exclude(fence=2).count() == 0
    assert all(reports), "both sweepers ran"


def test_retries_racing_on_an_abandoned_operation_recover_it_once(make_tool: Any) -> None:
    recover = CountingRecover()
    handler = CountingHandler()
    definition = make_tool(handler, input_schema=SCHEMA, recover=recover)
    [operation] = abandoned_operations(definition.name, 1)

    def retry(_i: int) -> Any:
        try:
            return definition({"operationId": operation.key}, principal="svc")
        except OperationInFlight as exc:
            return exc

    results = in_threads(12, retry)
    assert handler.keys == []
    assert list(recover.calls.values()) == [1]
    stored = Operation.objects.get(pk=operation.pk)
    assert (stored.state, stored.recovered, stored.fence) == ("succeeded", True, 2)
    for result in results:
        if not isinstance(result, OperationInFlight):
            assert result.output == {"recovered": str(operation.pk)}


@pytest.mark.parametrize("variant", ["returns", "writes_journal", "unknown"])
def test_owner_paused_past_its_lease_cannot_complete(variant: str, make_tool: Any,
                                                     alice: Any) -> None:
    entered, resume = threading.Event(), threading.Event()
    executions: list[int] = []

    def handler(input: dict[str, Any], ctx: Any) -> Any:
        executions.append(1)
        if variant == "unknown":
            ctx.operation.write({"phase": "before effect"})
        entered.set()
        assert resume.wait(20)
        if variant == "writes_journal":
            ctx.operation.write({"phase": "after effect"})  # fenced: raises LeaseLost
        return {"by": "handler"}

    recover = CountingRecover(recovered=variant != "unknown")
    definition = make_tool(handler, input_schema=SCHEMA, recover=recover, lease_seconds=1)
    body = {"operationId": key()}
    operation, result = paused_owner(definition, body, alice, entered, resume,
                                     takeover=lambda: sweep().taken == 1)
    assert executions == [1]
    assert list(recover.calls.values()) == [1]
    operation.refresh_from_db()
    late = JournalEntry.objects.filter(operation=operation, kind=JournalEntry.Kind.LATE_RESULT)
    if variant == "unknown":
        assert operation.state == OperationState.OUTCOME_UNKNOWN
        assert isinstance(result, OutcomeUnknownError)
    else:
        assert (operation.state, operation.recovered) == ("succeeded", True)
        assert operation.output == {"recovered": str(operation.pk)}
        if isinstance(result, BaseException):
            assert isinstance(result, OutcomeUnknownError), repr(result)
        else:
            assert result.output == operation.output and result.replayed
    expected_late = ({"journal_write": {"phase": "after effect"}} if variant == "writes_journal"
                     else {"output": {"by": "handler"}})
    assert list(late.values_list("data", "fence")) == [(expected_late, 1)]
    assert operation.fence == 2
    # A later call with the same key never runs the handler again.
    try:
        again = definition(body, user=alice)
        assert again.replayed and again.output == operation.output
    except OutcomeUnknownError:
        assert variant == "unknown"
    assert executions == [1]


def test_atomic_owner_paused_past_its_lease_rolls_its_effect_back(make_tool: Any,
                                                                   alice: Any,
                                                                   settings: Any) -> None:
    """atomic=True with the claim committed first: effect and completion commit together,
    so a stale owner's effect is rolled back when its completion finds 0 rows; the retry
    then runs it exactly once."""
    from project.demo.models import Slot

    one_transaction(settings, False)

    entered, resume = threading.Event(), threading.Event()
    executions: list[int] = []

    def handler(input: dict[str, Any], ctx: Any) -> Any:
        executions.append(1)
        Slot.objects.create(resource=f"effect:{input['operationId']}",
                            starts_at=timezone.now())
        if len(executions) == 1:
            entered.set()
            assert resume.wait(20)
        return {"run": len(executions)}

    definition = make_tool(handler, input_schema=SCHEMA, atomic=True, lease_seconds=1)
    body = {"operationId": key()}
    # Nothing of an atomic handler is committed yet, so the sweep releases the key.
    _operation, result = paused_owner(definition, body, alice, entered, resume,
                                      takeover=lambda: sweep().released == 1)
    # The sweep released the key: the stale owner is told to retry the same call.
    assert isinstance(result, OperationInFlight), repr(result)
    assert effect_rows(body["operationId"]).count() == 0  # the stale effect rolled back
    retry = definition(body, user=alice)
    assert not retry.replayed and retry.output == {"run": 2}
    assert effect_rows(body["operationId"]).count() == 1
    assert definition(body, user=alice).replayed
    assert effect_rows(body["operationId"]).count() == 1


@pytest.mark.parametrize("mode", ["effect-only", "always"])
def test_one_key_many_threads_with_a_confirmation_runs_once(mode: str, make_tool: Any,
                                                            alice: Any,
                                                            django_user_model: Any) -> None:
    handler = CountingHandler(sleep=0.05)
    definition = make_tool(handler, input_schema=SCHEMA, confirm=mode)
    approver = django_user_model.objects.create_superuser("approver", password="pw")
    body = {"operationId": key(), "n": 1}

    def call(_i: int) -> tuple[int, dict[str, Any]]:
        client = APIClient()
        client.force_authenticate(alice)
        response = client.post(URL.format(definition.name), body, format="json")
        return response.status_code, response.json()

    asked = in_threads(16, call)
    assert {status for status, _ in asked} <= {202, 409}, asked
    pending = Confirmation.objects.get()  # one request, however many asked at once
    assert pending.status == ConfirmationStatus.PENDING
    assert {data["error"]["confirmation"]["id"] for status, data in asked if status == 202} == {
        str(pending.pk)}
    assert handler.keys == []
    confirmations.approve(pending, approver)

    ran = in_threads(16, call)
    statuses = Counter(status for status, _ in ran)
    assert set(statuses) <= {200, 202, 409}, ran
    assert 500 not in statuses
    assert len(handler.keys) == 1
    assert Confirmation.objects.filter(status=ConfirmationStatus.CONSUMED).count() == 1
    if mode == "effect-only":  # a replay never asks again
        assert statuses[202] == 0
        assert Confirmation.objects.count() == 1
    assert Operation.objects.get(tool=definition.name).state == OperationState.SUCCEEDED


@pytest.mark.parametrize("skew", [timedelta(hours=1), -timedelta(hours=1)],
                         ids=["app-clock-ahead", "app-clock-behind"])
def test_clock_skew_does_not_take_over_a_live_lease(skew: timedelta, make_tool: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    recover = CountingRecover()
    handler = CountingHandler()
    definition = make_tool(handler, input_schema=SCHEMA, recover=recover, lease_seconds=60)
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + skew)
    store = OperationStore()
    live_body, dead_body = {"operationId": key()}, {"operationId": key()}
    claims = [
        store.claim(tool=definition.name, scope="principal:svc", key=b["operationId"],
                    fp=fingerprint(b), input=b, user=None, lease_seconds=60)
        for b in (live_body, dead_body)
    ]
    live, dead = (c.operation for c in claims)
    expire_lease(Operation.objects.filter(pk=dead.pk), seconds=1)

    report = sweep()
    assert report.taken == 1  # only the one whose lease the database says has expired
    assert list(recover.calls) == [str(dead.pk)]
    live.refresh_from_db()
    assert (live.state, live.owner, live.fence) == ("in_flight", claims[0].owner, 1)
    with pytest.raises(OperationInFlight):
        definition(live_body, principal="svc")
    assert handler.keys == []
    # The owner still holds its lease: it completes normally.
    assert store.complete(claims[0], {"ok": True})
    dead.refresh_from_db()
    assert (dead.state, dead.recovered) == ("succeeded", True)


def test_a_held_key_lock_refuses_fresh_calls_but_never_replays(make_tool: Any) -> None:
    """A caller holding the atomic path's key lock (another process between its lock and
    its commit) makes a duplicate of a fresh call wait, never a replay of one that
    completed: a key's row decides by itself, whoever holds the lock."""
    from django.db import connections

    from guarded_tools.store import LOCK_CLASS, key_hash
    from guarded_tools.store.replays import replays

    handler = CountingHandler(sleep=0)
    definition = make_tool(handler, input_schema=SCHEMA, atomic=True)
    done, fresh = {"operationId": key()}, {"operationId": key()}
    definition(done, principal="svc")
    replays.clear()  # as a process that never saw it
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            for body in (done, fresh):
                cursor.execute("SELECT pg_advisory_lock(%s, %s)",
                               [LOCK_CLASS, key_hash(definition.name, "principal:svc",
                                                      body["operationId"])])
        assert definition(done, principal="svc").replayed
        with pytest.raises(OperationInFlight):
            definition(fresh, principal="svc")
    finally:
        other.close()  # the session's locks go with it, once the server has ended it
    wait_until(lambda: key_lock_free(definition.name, "principal:svc", fresh["operationId"]))
    assert not definition(fresh, principal="svc").replayed
    assert len(handler.keys) == 2


@pytest.mark.parametrize("atomic", [True, False], ids=["atomic", "claim-first"])
def test_a_call_does_not_wait_for_a_transaction_holding_its_users_row(
    atomic: bool, make_tool: Any, alice: Any, client_for: Any
) -> None:
    """Operations keep their user without a foreign key constraint: with one, every
    call's commit would lock the caller's user row (FOR KEY SHARE), so calls of one
    principal would contend on that row and wait behind any transaction updating it."""
    from django.db import connections

    handler = CountingHandler(sleep=0)
    definition = make_tool(handler, input_schema=SCHEMA, atomic=atomic)
    other = connections.create_connection("default")
    try:
        other.set_autocommit(False)
        with other.cursor() as cursor:  # a transaction that updates alice, left open
            cursor.execute("SELECT id FROM auth_user WHERE id = %s FOR UPDATE", [alice.pk])
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '3s'")  # a wait fails the call, not the run
        response = client_for(alice).post(URL.format(definition.name),
                                          {"operationId": key()}, format="json")
        assert response.status_code == 200, response.content
    finally:
        other.rollback()
        other.close()
        connection.close()  # drops the session's lock_timeout
    operation = Operation.objects.get(tool=definition.name)
    assert (operation.state, operation.user_id) == ("succeeded", alice.pk)
    alice.delete()  # Django still nulls the reference: on_delete=SET_NULL
    operation.refresh_from_db()
    assert operation.user_id is None
