"""Every release of a claim gives its budget reservations back, exactly once.

A call whose claim is released without its effect reserves nothing any more, whoever
released it: the call itself, a person's "Mark not executed" in the admin, the sweep, or
a person's "Recover now". A release that finds the claim no longer its own (someone took
it over, released it, and a retry reserved again) gives nothing back: the retry's
reservation stays. Over REST with a token and with a session, with ``Budget(count=2)``:
after one effect, the next new call still runs, and the third is refused.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db import connection
from django.test import Client

from guarded_tools.models import Operation, OperationState, Reservation
from guarded_tools.pipeline.recovery import sweep
from tests.conftest import key, wait_until
from tests.pipeline.policy_support import SCHEMA, URL, budgeted

OPS_LIST = "/admin/guarded_tools/operation/"
RECONCILER = ("guarded_tools.view_operation", "guarded_tools.reconcile_operation")


def pay(agent: Any, name: str, operation_id: str | None = None) -> Any:
    return agent.post(URL.format(name), {"operationId": operation_id or key(), "amount": 10},
                      format="json")


def reserved(operation: Operation | None = None) -> int:
    rows = Reservation.objects.all()
    return (rows if operation is None else rows.filter(operation_id=operation.pk)).count()


def operator(user_factory: Any) -> Client:
    """A person with the reconcile permission, in the admin with CSRF enforced."""
    person = user_factory("operator", is_staff=True, perms=RECONCILER)
    client = Client(enforce_csrf_checks=True)
    client.force_login(person)
    return client


def csrf(client: Client, page: str) -> str:
    """The CSRF token the page's form carries, as a browser sends it back."""
    assert client.get(page).status_code == 200
    return client.cookies["csrftoken"].value


@pytest.mark.django_db
def test_mark_not_executed_gives_the_reservation_back(make_tool: Any, agent: Any,
                                                      user_factory: Any) -> None:
    runs: list[str] = []

    def handler(input: Any, ctx: Any) -> Any:
        runs.append(input["operationId"])
        if len(runs) == 1:  # the first attempt: sent, then the line dropped
            ctx.operation.write({"upstream_request": "req-1"})
            raise ConnectionError("upstream unreachable")
        return {"paid": len(runs)}

    definition = make_tool(handler, confirm=budgeted(count=2), input_schema=SCHEMA)
    first_key = key()
    first = pay(agent, definition.name, first_key)
    assert first.json()["error"]["code"] == "outcome_unknown", first.content
    operation = Operation.objects.get(tool=definition.name)
    assert reserved(operation) == 1  # the effect may have happened: it still counts

    person = operator(user_factory)
    token = csrf(person, OPS_LIST)
    done = person.post(OPS_LIST, {
        "action": "mark_not_executed", ACTION_CHECKBOX_NAME: [operation.pk],
        f"fence-{operation.pk}": operation.fence, "note": "upstream has no record of req-1",
        "csrfmiddlewaretoken": token}, follow=True)
    assert done.status_code == 200
    operation.refresh_from_db()
    assert operation.state == OperationState.RELEASED
    assert reserved(operation) == 0  # proved not run: nothing of it counts

    retry = pay(agent, definition.name, first_key)
    assert retry.status_code == 200, retry.content
    assert reserved() == 1  # the one effect, once
    assert pay(agent, definition.name).status_code == 200  # the second effect of two
    refused = pay(agent, definition.name)
    assert refused.status_code == 429, refused.content
    assert refused.json()["error"]["code"] == "rate_limited"
    assert runs == [first_key, first_key, runs[2]]


@pytest.mark.django_db
def test_a_second_mark_not_executed_gives_nothing_back_twice(make_tool: Any, agent: Any,
                                                             user_factory: Any) -> None:
    """The same decision posted twice (a double click, two people): the second is refused
    and the retry's reservation stays."""
    runs: list[int] = []

    def handler(input: Any, ctx: Any) -> Any:
        runs.append(1)
        if len(runs) == 1:
            ctx.operation.write({"sent": True})
            raise ConnectionError("upstream unreachable")
        return {"paid": True}

    definition = make_tool(handler, confirm=budgeted(count=2), input_schema=SCHEMA)
    first_key = key()
    assert pay(agent, definition.name, first_key).json()["error"]["code"] == "outcome_unknown"
    operation = Operation.objects.get(tool=definition.name)
    person = operator(user_factory)
    form = {"action": "mark_not_executed", ACTION_CHECKBOX_NAME: [operation.pk],
            f"fence-{operation.pk}": operation.fence, "note": "no record upstream",
            "csrfmiddlewaretoken": csrf(person, OPS_LIST)}
    person.post(OPS_LIST, form)
    assert pay(agent, definition.name, first_key).status_code == 200
    assert reserved(operation) == 1
    again = person.post(OPS_LIST, form, follow=True)
    assert again.status_code == 200
    assert reserved(operation) == 1  # the retry's reservation, still counted
    assert pay(agent, definition.name).status_code == 200
    assert pay(agent, definition.name).status_code == 429


def recover_by_sweep(_operation: Operation, _user_factory: Any) -> str:
    report = sweep()
    assert (report.taken, report.released) == (1, 1), report
    return "released"


def recover_now(operation: Operation, user_factory: Any) -> str:
    person = operator(user_factory)
    page = f"{OPS_LIST}{operation.pk}/change/"
    token = csrf(person, page)
    done = person.post(f"{OPS_LIST}{operation.pk}/recover/", {"csrfmiddlewaretoken": token},
                       follow=True)
    assert done.status_code == 200 and "Recovery ran:" in done.content.decode()
    return "released"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("recovery", [recover_by_sweep, recover_now],
                         ids=["sweep", "recover-now"])
def test_recovery_gives_the_reservation_back_once(recovery: Any, make_tool: Any, agent: Any,
                                                  alice: Any, client_for: Any,
                                                  user_factory: Any) -> None:
    """A handler blocked in a thread past its lease: recovery takes it over and, its
    journal empty, releases it; the reservation comes back. The retry reserves again and
    runs. When the blocked handler then fails, its own release finds the claim taken over
    and gives nothing back: the retry's reservation still counts."""
    entered, resume = threading.Event(), threading.Event()
    runs: list[str] = []

    def handler(input: Any, ctx: Any) -> Any:
        runs.append(input["operationId"])
        if len(runs) == 1:
            entered.set()
            assert resume.wait(20)
            raise ConnectionError("the upstream never answered")  # before any effect
        return {"paid": len(runs)}

    definition = make_tool(handler, confirm=budgeted(count=2), input_schema=SCHEMA,
                           lease_seconds=1)
    first_key = key()
    blocked: list[Any] = []

    def first_call() -> None:
        try:
            blocked.append(pay(client_for(alice), definition.name, first_key))
        finally:
            connection.close()

    thread = threading.Thread(target=first_call, daemon=True)
    thread.start()
    try:
        assert entered.wait(10)
        operation = Operation.objects.get(tool=definition.name)
        assert reserved(operation) == 1
        wait_until(lambda: Operation.objects.abandoned().filter(pk=operation.pk).exists())
        assert recovery(operation, user_factory) == "released"
        operation.refresh_from_db()
        assert operation.state == OperationState.RELEASED and operation.fence == 2
        assert reserved(operation) == 0  # given back by the recovery's release

        retry = pay(agent, definition.name, first_key)
        assert retry.status_code == 200, retry.content
        assert reserved(operation) == 1  # the retry's own
    finally:
        resume.set()
        thread.join(20)
    assert not thread.is_alive()
    [stale] = blocked
    assert stale.status_code >= 400  # its failure, reported; its release found no claim
    assert reserved(operation) == 1  # the retry's reservation was not given back again
    assert pay(agent, definition.name).status_code == 200  # two effects of two
    refused = pay(agent, definition.name)
    assert refused.status_code == 429, refused.content
    assert runs == [first_key, first_key, runs[2]]
