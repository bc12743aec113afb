"""Recovery of abandoned operations: sweep(), the management command, retention."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from guarded_tools.models import Confirmation, Operation, OperationState
from guarded_tools.pipeline.recovery import recover_operation, sweep
from tests.conftest import key
from tests.pipeline.recovering import Recorder, abandoned, never

pytestmark = pytest.mark.django_db


def test_sweep_completes_what_recover_proves(make_tool: Any) -> None:
    recover = Recorder({"recovered": True, "output": {"paid": True}})
    verified: list[Any] = []
    definition = make_tool(never, recover=recover,
                           verify=lambda **kw: verified.append(kw["recovered"]) or True)
    operation = abandoned(definition, journal={"sent": True})
    report = sweep()
    assert (report.taken, report.completed) == (1, 1)
    operation.refresh_from_db()
    assert operation.state == "succeeded" and operation.recovered
    assert operation.output == {"paid": True} and operation.fence == 2
    assert recover.calls[0]["error"] is None
    assert recover.calls[0]["operation"].read() == {"sent": True}
    assert verified == [True]
    assert sweep().taken == 0  # nothing left; a second sweep is harmless


def test_replay_after_sweep_returns_the_recovered_output(make_tool: Any) -> None:
    definition = make_tool(never, recover=Recorder({"recovered": True, "output": {"n": 1}}))
    operation = abandoned(definition, journal={"x": 1})
    sweep()
    result = definition(operation.input, principal="svc")
    assert result.replayed and result.recovered and result.output == {"n": 1}


def test_sweep_releases_only_with_an_empty_journal(make_tool: Any) -> None:
    definition = make_tool(never)
    empty = abandoned(definition)
    written = abandoned(definition, journal={"sent": True})
    report = sweep()
    assert (report.released, report.unknown) == (1, 1)
    empty.refresh_from_db()
    written.refresh_from_db()
    assert empty.state == "released" and written.state == "outcome_unknown"


def test_recover_not_recovered_or_raising_is_unknown(make_tool: Any) -> None:
    for decision in ({"recovered": False}, ConnectionError("bank down")):
        definition = make_tool(never, recover=Recorder(decision))
        operation = abandoned(definition, journal={"sent": True})
        sweep()
        operation.refresh_from_db()
        assert operation.state == "outcome_unknown"


def test_abandoned_state_is_swept_even_without_a_lease(make_tool: Any) -> None:
    definition = make_tool(never, recover=Recorder({"recovered": True, "output": {}}))
    operation = abandoned(definition, journal={"x": 1}, state="abandoned")
    Operation.objects.filter(pk=operation.pk).update(lease_expires_at=None)
    assert sweep().completed == 1


def test_live_leases_are_left_alone(make_tool: Any, monkeypatch: Any) -> None:
    definition = make_tool(never, recover=Recorder({"recovered": True, "output": {}}))
    operation = abandoned(definition, expired=False)
    # The application server's clock running an hour fast must not cause a takeover:
    # every lease comparison happens on the database clock.
    monkeypatch.setattr(timezone, "now", lambda: timezone.datetime.now(
        tz=timezone.get_current_timezone()) + timedelta(hours=1))
    assert sweep().taken == 0
    operation.refresh_from_db()
    assert operation.state == "in_flight" and operation.fence == 1


def test_unregistered_tool_is_marked_unknown() -> None:
    k = key()
    operation = Operation.objects.create(
        tool="gone", scope="s", key=k, fingerprint="f", owner="dead",
        lease_expires_at=timezone.now() - timedelta(seconds=5))
    assert sweep().unknown == 1
    operation.refresh_from_db()
    assert operation.state == "outcome_unknown"


def test_takeover_is_a_compare_and_set(make_tool: Any) -> None:
    definition = make_tool(never, recover=Recorder({"recovered": True, "output": {}}))
    operation = abandoned(definition, journal={"x": 1})
    stale = Operation.objects.get(pk=operation.pk)
    assert recover_operation(operation) == "completed"
    assert recover_operation(stale) == "skipped"  # same fence read before: 0 rows


def test_sweep_batches_are_bounded(make_tool: Any) -> None:
    definition = make_tool(never)
    for _ in range(5):
        abandoned(definition)
    assert sweep(batch_size=2).taken == 2
    assert sweep(batch_size=10).taken == 3


def test_sweep_expires_confirmations_and_purges_old_operations(make_tool: Any,
                                                               settings: Any) -> None:
    Confirmation.objects.create(tool="t", scope="s", key="k", fingerprint="f", input={},
                                expires_at=timezone.now() - timedelta(seconds=1))
    old = Operation.objects.create(tool="t", scope="s", key="old", fingerprint="f",
                                   state=OperationState.SUCCEEDED)
    Operation.objects.filter(pk=old.pk).update(updated_at=timezone.now() - timedelta(days=40))
    fresh = Operation.objects.create(tool="t", scope="s", key="new", fingerprint="f",
                                     state=OperationState.SUCCEEDED)
    unknown = Operation.objects.create(tool="t", scope="s", key="unk", fingerprint="f",
                                       state=OperationState.OUTCOME_UNKNOWN)
    Operation.objects.filter(pk=unknown.pk).update(updated_at=timezone.now() - timedelta(days=40))
    report = sweep()
    assert report.confirmations_expired == 1 and report.purged == 1
    assert set(Operation.objects.values_list("key", flat=True)) == {"new", "unk"}
    assert Confirmation.objects.get().status == "expired"
    assert fresh.pk


def test_management_command_once(make_tool: Any) -> None:
    definition = make_tool(never)
    abandoned(definition)
    out = StringIO()
    call_command("guarded_tools_sweep", "--once", stdout=out)
    assert "taken=1" in out.getvalue() and "released=1" in out.getvalue()


def test_celery_task_runs_the_sweep(make_tool: Any) -> None:
    from guarded_tools.tasks import sweep as sweep_task

    definition = make_tool(never)
    abandoned(definition)
    result = sweep_task.apply().get()
    assert result["released"] == 1
    assert sweep_task.ignore_result is True


def test_recover_that_clears_the_journal_releases_the_key(make_tool: Any) -> None:
    """recover proved no effect (the effect is fenced) and removed the journal."""
    def recover(*, operation: Any, **kw: Any) -> Any:
        operation.remove()
        return {"recovered": False}

    definition = make_tool(lambda input, ctx: {"ran": True}, recover=recover)
    operation = abandoned(definition, journal={"phase": "about to write"})
    assert sweep().released == 1
    operation.refresh_from_db()
    assert operation.state == "released"
    assert definition(operation.input, principal="svc").output == {"ran": True}


def test_sweep_task_time_limits_are_shorter_than_the_lease(settings: Any) -> None:
    from guarded_tools.tasks import sweep as sweep_task

    for lease in (60, 300):
        settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "LEASE_SECONDS": lease}
        assert 0 < sweep_task.soft_time_limit < sweep_task.time_limit < lease


def test_heartbeat_extends_the_lease_on_the_database_clock(make_tool: Any) -> None:
    leases: list[Any] = []

    def handler(input: Any, ctx: Any) -> Any:
        leases.append(Operation.objects.get(pk=ctx.operation.id).lease_expires_at)
        ctx.operation.heartbeat(600)
        leases.append(Operation.objects.get(pk=ctx.operation.id).lease_expires_at)
        return {}

    definition = make_tool(handler, lease_seconds=5)
    definition({"operationId": key()}, principal="svc")
    assert (leases[1] - leases[0]).total_seconds() > 500


def test_recovery_loads_the_users_with_their_operations(make_tool: Any,
                                                        user_factory: Any) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    seen: list[Any] = []

    def recover(*, input: Any, context: Any, **kw: Any) -> Any:
        return {"recovered": True, "output": {}}

    definition = make_tool(never, recover=recover,
                           context=lambda input, user, **kw: seen.append(user.username))
    people = [user_factory() for _ in range(3)]
    for person in people:
        Operation.objects.filter(pk=abandoned(definition).pk).update(user=person)
    with CaptureQueriesContext(connection) as queries:
        assert sweep().completed == 3
    assert sorted(seen) == sorted(p.username for p in people)  # each recovered as its user
    by_user = [q["sql"] for q in queries.captured_queries
               if 'FROM "auth_user"' in q["sql"] and "guarded_tools_operation" not in q["sql"]]
    assert by_user == [], by_user


def test_recovery_the_context_refuses_goes_to_a_person(make_tool: Any) -> None:
    """Left in flight under the sweeper's lease, it would be counted unknown, hidden from
    the admin's outcomes to reconcile, and taken over again at every lease."""
    from guarded_tools.core.errors import ToolError

    def context(input: Any, **kw: Any) -> Any:
        raise ToolError("customer_gone", "The customer no longer exists.")

    recover = Recorder({"recovered": False})
    definition = make_tool(never, context=context, recover=recover)
    operation = abandoned(definition, journal={"sent": True})
    assert sweep().unknown == 1
    operation.refresh_from_db()
    assert operation.state == OperationState.OUTCOME_UNKNOWN and operation.owner == ""
    assert recover.calls == []
    assert sweep().taken == 0


def test_management_command_reports_failed_recoveries(make_tool: Any, monkeypatch: Any) -> None:
    from django.core.management.base import CommandError
    from django.db import OperationalError

    from guarded_tools.store import OperationStore

    definition = make_tool(never)
    operation = abandoned(definition)

    def broken(self: Any, claim: Any, reason: str = "") -> bool:
        raise OperationalError("the database went away")

    monkeypatch.setattr(OperationStore, "release", broken)
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match="1 operation"):
        call_command("guarded_tools_sweep", "--once", stdout=out, stderr=err)
    assert "taken=1" in out.getvalue() and "errors=1" in out.getvalue()
    assert f"{operation.pk}: OperationalError" in err.getvalue()
    assert "went away" not in err.getvalue()  # the text (and traceback) is in the log only


def test_recovery_waits_out_a_context_that_says_retry_as_is(make_tool: Any) -> None:
    from guarded_tools.core.errors import ToolError

    down = {"now": True}

    def context(input: Any, **kw: Any) -> Any:
        if down["now"]:
            raise ToolError("ledger_down", "The ledger is unavailable.", status=503,
                            retry="as_is")
        return {}

    recover = Recorder({"recovered": True, "output": {"paid": True}})
    definition = make_tool(never, context=context, recover=recover)
    operation = abandoned(definition, journal={"sent": True})
    report = sweep()
    assert (report.taken, report.skipped, report.unknown) == (1, 1, 0)
    operation.refresh_from_db()
    assert operation.state == "abandoned" and recover.calls == []
    down["now"] = False
    assert sweep().completed == 1  # the next sweep, once the ledger is back
    operation.refresh_from_db()
    assert operation.state == "succeeded" and operation.output == {"paid": True}
