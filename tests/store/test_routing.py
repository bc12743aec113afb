"""Sites with a read replica: every read a guard decision rests on goes to the primary.

The router below sends the app's reads to a database that does not exist, so any such
read fails the test outright (on a real replica it would read stale rows: a journal not
yet replicated, and the key released for a second run of the effect).
"""

from __future__ import annotations

from typing import Any

import pytest

from guarded_tools import confirmations
from guarded_tools.core.errors import OutcomeUnknownError
from guarded_tools.models import Confirmation, Operation, OperationState
from guarded_tools.pipeline import reconciliation
from guarded_tools.pipeline.recovery import sweep
from guarded_tools.store.replays import replays
from tests.conftest import key
from tests.pipeline.recovering import Recorder, abandoned, never

pytestmark = pytest.mark.django_db


class ReplicaRouter:
    """Reads of the app's models to a replica (here: nowhere), writes to the default."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "replica" if model._meta.app_label == "guarded_tools" else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return None


@pytest.fixture(autouse=True)
def _replica(settings: Any) -> None:
    settings.DATABASE_ROUTERS = [f"{__name__}.ReplicaRouter"]


def primary() -> Any:
    return Operation.objects.using("default")


def test_a_journaled_failure_is_decided_on_the_primary(make_tool: Any, alice: Any) -> None:
    reads: list[Any] = []

    def handler(input: Any, ctx: Any) -> Any:
        ctx.operation.write({"upstream_request": "r-1"})
        reads.append(ctx.operation.read())
        raise TimeoutError("upstream did not answer")

    definition = make_tool(handler, journal=True)
    with pytest.raises(OutcomeUnknownError):  # the journal is not empty: never released
        definition({"operationId": key()}, user=alice)
    assert reads == [{"upstream_request": "r-1"}]
    assert primary().get().state == OperationState.OUTCOME_UNKNOWN


def test_a_replay_is_read_from_the_primary(make_tool: Any, alice: Any) -> None:
    runs: list[Any] = []
    definition = make_tool(lambda input, ctx: runs.append(1) or {"n": len(runs)})
    body = {"operationId": key()}
    definition(body, user=alice)
    replays.clear()  # as another process would: from the database
    again = definition(body, user=alice)
    assert again.replayed and again.output == {"n": 1} and runs == [1]


def test_the_sweep_and_a_person_decide_on_the_primary(make_tool: Any,
                                                      user_factory: Any) -> None:
    definition = make_tool(never, recover=Recorder({"recovered": False, "outcome": "unknown"}))
    abandoned(definition, journal={"sent": True})
    assert sweep().unknown == 1
    operation = primary().get()
    staff = user_factory("ops", is_staff=True, perms=("guarded_tools.reconcile_operation",))
    reconciliation.mark_not_executed(operation, staff, "the bank has no record",
                                     fence=operation.fence)
    assert primary().get().state == OperationState.RELEASED


def test_a_confirmation_is_asked_and_consumed_on_the_primary(make_tool: Any, alice: Any,
                                                             django_user_model: Any) -> None:
    from guarded_tools.core.errors import ConfirmationRequired

    boss = django_user_model.objects.create_superuser("boss", password="pw")
    definition = make_tool(confirm="effect-only")
    body = {"operationId": key()}
    with pytest.raises(ConfirmationRequired):
        definition(body, user=alice)
    confirmations.approve(Confirmation.objects.using("default").get(), boss)
    assert not definition(body, user=alice).replayed
    assert Confirmation.objects.using("default").get().status == "consumed"
