"""Crash recovery on PostgreSQL: the demo payment dies (kill -9) at each point of its life.

The parent asks for the payment (the effect-only confirmation is created), a person
approves it, and a child process runs the approved call with ``GT_CRASH_AT`` set, so that
it dies with ``os._exit(137)`` at that point, or stalls there and gets a real SIGKILL.
Then the lease (1 s) runs out, recovery runs, and the end state and a replay must agree
with what really happened in the ledger.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from decimal import Decimal
from typing import Any

import pytest

from guarded_tools import confirmations, registry
from guarded_tools.core.errors import ConfirmationRequired
from guarded_tools.models import Confirmation, JournalEntry, Operation, OperationState
from guarded_tools.pipeline.recovery import sweep
from project.demo.models import Account, LedgerEntry, PaymentAuthorization
from tests import forkserver
from tests.conftest import REPO_ROOT, key, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHILD = (
    "import json, sys\n"
    "import django\n"
    "django.setup()\n"
    "from django.contrib.auth import get_user_model\n"
    "from guarded_tools import registry\n"
    "user = get_user_model().objects.get(pk=int(sys.argv[1]))\n"
    "result = registry.get('send_payment')(json.loads(sys.argv[2]), user=user)\n"
    "print(json.dumps(result.output))\n"
)


@pytest.fixture
def payment(user_factory: Any, django_user_model: Any) -> dict[str, Any]:
    payer = user_factory("payer", perms=("demo.add_ledgerentry",))
    approver = django_user_model.objects.create_superuser("approver", password="pw")
    source = Account.objects.create(owner=payer, name="checking", balance=Decimal("1000"))
    receiver = Account.objects.create(owner=approver, name="savings", balance=Decimal("0"))
    auth = PaymentAuthorization.objects.create(source=source, source_version=source.version)
    body = {"operationId": key(), "sourceId": source.pk, "receiverId": receiver.pk,
            "amount": "500.00", "authorizationId": auth.pk}
    return {"payer": payer, "approver": approver, "body": body, "source": source,
            "receiver": receiver}


def send(payment: dict[str, Any]) -> Any:
    return registry.get("send_payment")(payment["body"], user=payment["payer"])


def approve_pending(payment: dict[str, Any]) -> None:
    """Ask (the effect-only confirmation is created, nothing runs) and approve it."""
    with pytest.raises(ConfirmationRequired):
        send(payment)
    pending = Confirmation.objects.get(key=payment["body"]["operationId"], status="pending")
    confirmations.approve(pending, payment["approver"], "ok")


def start_child(payment: dict[str, Any], env: dict[str, str], crash_at: str) -> Any:
    env = {**env, "GT_CRASH_AT": crash_at, "GT_LEASE_SECONDS": "1"}
    return forkserver.popen(
        [sys.executable, "-c", CHILD, str(payment["payer"].pk), json.dumps(payment["body"])],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def ledger(payment: dict[str, Any]) -> Any:
    return LedgerEntry.objects.filter(reference=payment["body"]["operationId"])


def journal(operation: Operation) -> list[Any]:
    return list(operation.journal.filter(kind=JournalEntry.Kind.ENTRY, removed=False)
                .values_list("data", flat=True))


# What the child leaves behind at each point, and what recovery must conclude.
POINTS = {
    # claim committed, nothing journaled, no payment: provably not executed
    "after_claim": {"journal": 0, "ledger": 0, "end": OperationState.RELEASED},
    # journal written, no payment; the transfer is fenced, so recover proves "not executed"
    "before_effect": {"journal": 1, "ledger": 0, "end": OperationState.RELEASED},
    # payment committed with its fenced journal write; completion never happened
    "after_effect": {"journal": 2, "ledger": 1, "end": OperationState.SUCCEEDED},
}


def crashed_operation(payment: dict[str, Any], env: dict[str, str], point: str,
                      how: str) -> Operation:
    approve_pending(payment)
    if how == "exit":
        child = start_child(payment, env, point)
        out, err = child.communicate(timeout=60)
        assert child.returncode == 137, (out, err)
    else:  # stall at the point, then a real SIGKILL from here
        child = start_child(payment, env, f"sleep:{point}")
        watchdog = threading.Timer(60, child.kill)  # bounds the blocking reads below
        watchdog.start()
        try:
            for line in child.stderr:  # the child says where it stalls, then sleeps
                if line.startswith(f"GT_CRASH_AT: sleeping at {point}"):
                    break
            else:
                raise AssertionError(f"the child exited early: {child.wait()}")
            os.kill(child.pid, signal.SIGKILL)
            child.communicate(timeout=30)
        finally:
            watchdog.cancel()
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == -signal.SIGKILL
    operation = Operation.objects.get(tool="send_payment", key=payment["body"]["operationId"])
    assert operation.state == OperationState.IN_FLIGHT
    assert len(journal(operation)) == POINTS[point]["journal"]
    assert ledger(payment).count() == POINTS[point]["ledger"]
    assert Confirmation.objects.get(key=operation.key).status == "consumed"
    # Nobody may take it over while the dead owner's lease (1 s, DB clock) runs.
    wait_until(lambda: Operation.objects.abandoned().filter(pk=operation.pk).exists(),
               timeout=20)
    return operation


def assert_end_state(payment: dict[str, Any], operation: Operation, point: str) -> None:
    operation.refresh_from_db()
    expected = POINTS[point]
    assert (operation.state, ledger(payment).count()) == (expected["end"], expected["ledger"]), (
        operation.state, operation.error, journal(operation))
    if expected["end"] == OperationState.SUCCEEDED:
        entry = ledger(payment).get()
        assert operation.recovered
        assert operation.output == {"paymentId": entry.pk, "amount": "500.00",
                                    "receiverId": payment["receiver"].pk}
        # The replay agrees: the recovered output, and still exactly one payment.
        replay = send(payment)
        assert replay.replayed and replay.recovered and replay.output == operation.output
    else:
        # Released: the key is fresh, and the run that died proved it never paid, so the
        # retry of that same operation uses the approval it consumed (send_payment's
        # intent is unchanged: no second request to a person) and pays exactly once.
        result = send(payment)
        assert Confirmation.objects.filter(key=payment["body"]["operationId"]).count() == 1
        assert not result.replayed and result.output["amount"] == "500.00"
        operation.refresh_from_db()
        assert operation.state == OperationState.SUCCEEDED
        assert send(payment).replayed
    assert ledger(payment).count() == 1
    payment["source"].refresh_from_db()
    payment["receiver"].refresh_from_db()
    assert payment["source"].balance == Decimal("500.00")
    assert payment["receiver"].balance == Decimal("500.00")


@pytest.mark.parametrize("how", ["exit", "sigkill"], ids=["crash", "sigkill-while-stalled"])
@pytest.mark.parametrize("point", list(POINTS))
def test_crash_then_sweep(point: str, how: str, payment: dict[str, Any],
                          subprocess_env: dict[str, str]) -> None:
    operation = crashed_operation(payment, subprocess_env, point, how)
    report = sweep()
    assert report.taken == 1 and not report.errors
    assert_end_state(payment, operation, point)


@pytest.mark.parametrize("point", list(POINTS))
def test_crash_then_the_callers_retry_recovers_inline(point: str, payment: dict[str, Any],
                                                      subprocess_env: dict[str, str]) -> None:
    """No sweeper ran: the caller's retry with the same key recovers, never re-executes."""
    operation = crashed_operation(payment, subprocess_env, point, "exit")
    if POINTS[point]["end"] == OperationState.SUCCEEDED:
        result = send(payment)
        assert result.recovered and ledger(payment).count() == 1
        assert_end_state(payment, operation, point)
    else:
        # Released (proven not run), then claimed fresh: it runs once on the approval the
        # dead attempt consumed, with no second request to a person.
        result = send(payment)
        assert not result.replayed and not result.recovered and ledger(payment).count() == 1
        assert Confirmation.objects.filter(key=payment["body"]["operationId"]).count() == 1
        assert send(payment).replayed and ledger(payment).count() == 1


def test_failure_before_the_effect_in_process_keeps_the_error_and_releases(
        payment: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process twin of the before_effect crash: the handler raises, no process dies.

    recover finds no ledger row and clears the journal, so the journal is empty when the
    guard decides: the original error is kept and the key released (no person needed).
    """
    from project.demo import effects

    def network_down(reference: str) -> None:
        raise ConnectionError("upstream unreachable")

    approve_pending(payment)
    monkeypatch.setattr(effects, "before_effect", network_down)
    with pytest.raises(ConnectionError):
        send(payment)
    operation = Operation.objects.get(key=payment["body"]["operationId"])
    assert (operation.state, ledger(payment).count(), journal(operation)) == (
        OperationState.RELEASED, 0, [])
