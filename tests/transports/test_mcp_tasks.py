"""Approvals native to MCP: tasks (SEP-2663), URL elicitation (SEP-2322) and the user's consent.

Every reply of a tasks method is parsed by models generated from the extension's official
schema (``tests.transports.mcp_tasks_schema``); tool calls by the official SDK's 2026-07-28 models.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client as DjangoClient
from rest_framework.test import APIClient

from guarded_tools.confirmations import queue as confirmations
from guarded_tools.models import AuditEntry, Confirmation, ConfirmationStatus, Operation
from guarded_tools.transports.mcp import tasks as tasks_ext
from guarded_tools.transports.mcp.approvals import CONSENT_REQUEST
from guarded_tools.transports.mcp.protocol import (
    ERROR_META,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_CAPABILITY,
    OPERATION_META,
    TASK_CALL_FAILED,
    TASK_META,
    TASK_NOT_CANCELLABLE,
)
from tests.conftest import Effects, key
from tests.transports import mcp_tasks_schema as ext
from tests.transports.mcp_calls import (
    ITEM,
    MODERN,
    SDK_2026,
    TASKS,
    URL,
    call,
    get_task,
    meta,
    result,
    rpc_error,
    send,
    start_web,
    validate_call_result,
)

pytestmark = pytest.mark.django_db
needs_sdk_2026 = pytest.mark.skipif(not SDK_2026, reason="needs the mcp 2.x client")


@pytest.fixture
def agent(alice: Any, client_for: Callable[[Any], APIClient]) -> APIClient:
    return client_for(alice)


# -- advertisement ------------------------------------------------------------------------
def test_discover_and_tools_list_advertise_the_extension(agent: APIClient,
                                                         make_tool: Any) -> None:
    queued = make_tool(confirm="effect-only", input_schema=ITEM)
    owner = make_tool(confirm="owner", input_schema=ITEM)
    plain = make_tool(input_schema=ITEM)
    discovered = result(send(agent, "server/discover", {}))
    validate_call_result("server/discover", discovered)
    assert discovered["capabilities"]["extensions"] == {TASKS: {}}
    listed = result(send(agent, "tools/list", {}))
    validate_call_result("tools/list", listed)
    flags = {t["name"]: t["_meta"].get(TASK_META) for t in listed["tools"]}
    assert flags[queued.name] is True
    assert flags[owner.name] is None and flags[plain.name] is None


# -- a staff approval as a task --------------------------------------------------------------
@pytest.mark.parametrize("mode", ["effect-only", "always"])
def test_approval_completes_the_task_with_the_calls_result(
        mode: str, agent: APIClient, make_tool: Any, approver: Any, eager: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=mode, input_schema=ITEM)
    arguments = {"operationId": key(), "qty": 2}
    created = call(agent, definition.name, arguments)
    ext.CreateTaskResult.model_validate(created)
    assert created["resultType"] == "task" and created["status"] == "working"
    assert created["pollIntervalMs"] >= 1000 and created["ttlMs"] is None
    task_id = created["taskId"]
    # The same call again, later (a signer's clock moved on), is the same task; nothing
    # ran, one request waits.
    from django.core import signing

    later = signing.b62_encode(int(__import__("time").time()) + 7)
    monkeypatch.setattr(signing.TimestampSigner, "timestamp", lambda self: later)
    assert call(agent, definition.name, arguments)["taskId"] == task_id
    assert get_task(agent, task_id)["status"] == "working" and handler.count == 0
    assert Confirmation.objects.get().task is True
    eager(confirmations.approve, Confirmation.objects.get(), approver)  # EXECUTE_ON_APPROVAL off
    assert handler.count == 1
    done = get_task(agent, task_id)
    assert done["status"] == "completed" and done["taskId"] == task_id
    # The task's result is the CallToolResult as 2026-07-28 frames it (resultType included).
    validate_call_result("tools/call", done["result"])
    assert done["result"]["resultType"] == "complete"
    assert done["result"]["isError"] is False
    assert done["result"]["structuredContent"] == {"done": 1}
    operation = Operation.objects.get()
    assert done["result"]["_meta"][OPERATION_META]["id"] == str(operation.pk)
    assert get_task(agent, task_id)["result"] == done["result"] and handler.count == 1


def test_a_task_waiting_for_a_person_is_polled_at_a_persons_pace(
        agent: APIClient, make_tool: Any, approver: Any) -> None:
    """A person decides in minutes or hours: while the task waits for one, its pollInterval
    is CONFIRMATION_RETRY_AFTER_SECONDS (30 s), not the guard's own poll of Prefer: wait
    (CONFIRMATION_POLL_INTERVAL, 0.5 s: 1 s at least), which paces a call that runs."""
    definition = make_tool(Effects(), confirm="always", input_schema=ITEM)
    created = call(agent, definition.name, {"operationId": key(), "qty": 1})
    assert created["status"] == "working" and created["pollIntervalMs"] == 30_000
    waiting = get_task(agent, created["taskId"])
    assert waiting["status"] == "working" and waiting["pollIntervalMs"] == 30_000
    confirmations.approve(Confirmation.objects.get(), approver)  # no worker has run it yet
    approved = get_task(agent, created["taskId"])
    assert approved["status"] == "working" and approved["pollIntervalMs"] == 1000
    queued = make_tool(Effects(), long_running=True, input_schema=ITEM)  # nobody to wait for
    assert call(agent, queued.name, {"operationId": key(), "qty": 1})["pollIntervalMs"] == 1000


def test_a_poll_is_one_indexed_read_and_a_finished_task_then_the_replay_cache(
        agent: APIClient, make_tool: Any, approver: Any, eager: Any, settings: Any) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from guarded_tools.store.replays import replays

    settings.GUARDED_TOOLS = {**getattr(settings, "GUARDED_TOOLS", {}),
                              "CONFIRMATION_RETRY_AFTER_SECONDS": 3}
    definition = make_tool(Effects(), confirm="effect-only", input_schema=ITEM)
    created = call(agent, definition.name, {"operationId": key(), "qty": 1})
    assert created["pollIntervalMs"] == 3000  # the site's pace, told to every poller
    with CaptureQueriesContext(connection) as pending:
        polled = get_task(agent, created["taskId"])
    assert polled["status"] == "working" and polled["pollIntervalMs"] == 3000
    # Waiting: the confirmation, by its primary key.
    assert [q["sql"].split(" FROM ")[1].split()[0] for q in pending] == [
        '"guarded_tools_confirmation"']
    assert '"guarded_tools_confirmation"."id" = ' in pending[0]["sql"]
    eager(confirmations.approve, Confirmation.objects.get(), approver)
    replays.clear()  # the call ran on a worker: this web process has not seen its result
    with CaptureQueriesContext(connection) as first:
        assert get_task(agent, created["taskId"])["status"] == "completed"
    # Finished: the confirmation by its key, the operation by its unique (tool, scope, key).
    assert [q["sql"].split(" FROM ")[1].split()[0] for q in first] == [
        '"guarded_tools_confirmation"', '"guarded_tools_operation"']
    with CaptureQueriesContext(connection) as later:
        again = get_task(agent, created["taskId"])
    assert again["status"] == "completed" and len(later) == 0  # from memory, as replays are
    assert again["result"]["structuredContent"] == {"done": 1}


def test_without_the_extension_a_pending_call_is_unchanged(agent: APIClient,
                                                           make_tool: Any) -> None:
    definition = make_tool(confirm="effect-only", input_schema=ITEM)
    answer = call(agent, definition.name, {"operationId": key(), "qty": 1}, tasks=False)
    validate_call_result("tools/call", answer)
    assert answer["isError"] is True and answer["resultType"] == "complete"
    assert answer["_meta"][ERROR_META]["code"] == "confirmation_required"
    assert Confirmation.objects.get().task is False


def test_decline_and_expiry_fail_the_task(agent: APIClient, make_tool: Any,
                                          approver: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm="effect-only", input_schema=ITEM)
    declined = call(agent, definition.name, {"operationId": key(), "qty": 1})["taskId"]
    confirmations.decline(Confirmation.objects.get(), approver, "Not this week.")
    failed = get_task(agent, declined)
    assert failed["status"] == "failed" and failed["error"]["code"] == TASK_CALL_FAILED
    assert failed["error"]["data"]["code"] == "confirmation_declined"
    assert "declined" in failed["error"]["message"]
    lapsed = call(agent, definition.name, {"operationId": key(), "qty": 1})["taskId"]
    Confirmation.objects.filter(status="pending").update(
        expires_at=__import__("django.utils.timezone").utils.timezone.now())
    expired = get_task(agent, lapsed)
    assert expired["status"] == "failed"
    assert expired["error"]["data"]["code"] == "confirmation_expired"
    assert handler.count == 0


def test_outcome_unknown_fails_the_task(agent: APIClient, make_tool: Any, approver: Any,
                                        eager: Any) -> None:
    def handler(input: Any, ctx: Any) -> Any:
        ctx.operation.write({"charged": True})
        raise RuntimeError("the upstream hung up: 10.0.0.7")

    definition = make_tool(handler, confirm="effect-only", input_schema=ITEM)
    task_id = call(agent, definition.name, {"operationId": key(), "qty": 1})["taskId"]
    eager(confirmations.approve, Confirmation.objects.get(), approver)
    failed = get_task(agent, task_id)
    assert failed["status"] == "failed" and failed["error"]["data"]["code"] == "outcome_unknown"
    assert "10.0.0.7" not in json.dumps(failed)


def test_an_exception_before_the_effect_fails_the_task_without_its_text(
        agent: APIClient, make_tool: Any, approver: Any, eager: Any) -> None:
    def handler(input: Any, ctx: Any) -> Any:
        raise RuntimeError("password=hunter2 at db.internal")

    definition = make_tool(handler, confirm="effect-only", input_schema=ITEM)
    task_id = call(agent, definition.name, {"operationId": key(), "qty": 1})["taskId"]
    eager(confirmations.approve, Confirmation.objects.get(), approver)
    failed = get_task(agent, task_id)
    assert failed["status"] == "failed" and failed["error"]["data"]["code"] == "internal_error"
    assert "hunter2" not in json.dumps(failed) and "db.internal" not in json.dumps(failed)
    assert Operation.objects.get().state == "released"


def test_a_tool_error_completes_the_task_with_an_error_result(
        agent: APIClient, make_tool: Any, approver: Any, eager: Any) -> None:
    from guarded_tools import ToolError

    def handler(input: Any, ctx: Any) -> Any:
        raise ToolError("out_of_stock", "None left.", retry="never")

    definition = make_tool(handler, confirm="effect-only", input_schema=ITEM)
    task_id = call(agent, definition.name, {"operationId": key(), "qty": 1})["taskId"]
    eager(confirmations.approve, Confirmation.objects.get(), approver)
    done = get_task(agent, task_id)
    assert done["status"] == "completed" and done["result"]["isError"] is True
    validate_call_result("tools/call", done["result"])
    assert done["result"]["_meta"][ERROR_META]["code"] == "out_of_stock"


# -- cancel ------------------------------------------------------------------------------------
def test_cancel_before_the_call_runs_withdraws_it(agent: APIClient, make_tool: Any,
                                                  approver: Any, alice: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm="effect-only", input_schema=ITEM)
    arguments = {"operationId": key(), "qty": 1}
    task_id = call(agent, definition.name, arguments)["taskId"]
    ack = result(send(agent, "tasks/cancel", {"taskId": task_id}))
    ext.CancelTaskResult.model_validate(ack)
    assert get_task(agent, task_id)["status"] == "cancelled"
    withdrawn = Confirmation.objects.get()
    assert withdrawn.status == ConfirmationStatus.WITHDRAWN
    audit = AuditEntry.objects.get(confirmation=withdrawn)
    assert audit.action == AuditEntry.Action.WITHDRAW and audit.actor == alice
    with pytest.raises(confirmations.DecisionRefused):
        confirmations.approve(withdrawn, approver)
    # The key is free again: the same call asks a person anew, as a new task.
    again = call(agent, definition.name, arguments)
    assert again["resultType"] == "task" and again["taskId"] != task_id
    assert Confirmation.objects.filter(status="pending").count() == 1 and handler.count == 0
    # Cancelling what has ended is refused, and says why.
    refused = rpc_error(send(agent, "tasks/cancel", {"taskId": task_id}))
    assert refused["code"] == TASK_NOT_CANCELLABLE and "ended" in refused["message"]


def test_cancel_after_the_call_started_is_refused(agent: APIClient, make_tool: Any,
                                                  approver: Any, eager: Any) -> None:
    seen: dict[str, Any] = {}

    def handler(input: Any, ctx: Any) -> Any:
        # The handler runs (on approval): the agent's cancel arrives now.
        seen["reply"] = send(agent, "tasks/cancel", {"taskId": seen["task"]}).json()
        seen["state"] = get_task(agent, seen["task"])["status"]
        return {"ran": True}

    definition = make_tool(handler, confirm="effect-only", input_schema=ITEM)
    seen["task"] = call(agent, definition.name, {"operationId": key(), "qty": 1})["taskId"]
    eager(confirmations.approve, Confirmation.objects.get(), approver)
    assert seen["reply"]["error"]["code"] == TASK_NOT_CANCELLABLE
    assert "started" in seen["reply"]["error"]["message"] and seen["state"] == "working"
    assert get_task(agent, seen["task"])["status"] == "completed"
    assert Confirmation.objects.get().status == ConfirmationStatus.CONSUMED


def test_update_is_acknowledged_and_ignored(agent: APIClient, make_tool: Any) -> None:
    definition = make_tool(confirm="effect-only", input_schema=ITEM)
    task_id = call(agent, definition.name, {"operationId": key(), "qty": 1})["taskId"]
    ack = result(send(agent, "tasks/update", {"taskId": task_id, "inputResponses": {
        "approve": {"action": "accept", "content": {"ok": True}}}}))
    ext.UpdateTaskResult.model_validate(ack)
    assert get_task(agent, task_id)["status"] == "working"
    assert Confirmation.objects.get().status == ConfirmationStatus.PENDING


# -- who may read a task ---------------------------------------------------------------------
def test_another_principals_task_reads_as_an_unknown_one(
        agent: APIClient, bob: Any, client_for: Any, make_tool: Any) -> None:
    definition = make_tool(confirm="effect-only", input_schema=ITEM)
    task_id = call(agent, definition.name, {"operationId": key(), "qty": 1})["taskId"]
    other = client_for(bob)
    forged = task_id[:-4] + ("AAAA" if not task_id.endswith("AAAA") else "BBBB")
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        extra = {"inputResponses": {}} if method == "tasks/update" else {}
        theirs = send(other, method, {"taskId": task_id, **extra})
        unknown = send(other, method, {"taskId": forged, **extra})
        assert theirs.status_code == unknown.status_code
        assert rpc_error(theirs) == rpc_error(unknown)
        assert rpc_error(theirs)["code"] == INVALID_PARAMS
    assert Confirmation.objects.get().status == ConfirmationStatus.PENDING
    assert get_task(agent, task_id)["status"] == "working"


def test_tasks_methods_need_the_extension(agent: APIClient, make_tool: Any) -> None:
    definition = make_tool(confirm="effect-only", input_schema=ITEM)
    task_id = call(agent, definition.name, {"operationId": key(), "qty": 1})["taskId"]
    error = rpc_error(send(agent, "tasks/get", {"taskId": task_id}, tasks=False))
    assert error["code"] == MISSING_CAPABILITY
    assert error["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
    # The handshake era has no such methods at all.
    legacy = agent.post(URL, data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
                                              "params": {"taskId": task_id}}),
                        content_type="application/json",
                        headers={"MCP-Protocol-Version": "2025-11-25"})
    assert legacy.json()["error"]["code"] == METHOD_NOT_FOUND


# -- consent by the user themself ---------------------------------------------------------------
def _consent_page(url: str) -> str:
    return url.split("testserver", 1)[-1]


def test_owner_consent_over_mrtr_page_and_retry(
        agent: APIClient, alice: Any, bob: Any, approver: Any, make_tool: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm="owner", input_schema=ITEM,
                           description="Orders the items for you.",
                           summary="Order {qty} items from the supplier")
    arguments = {"operationId": key(), "qty": 3}
    asked = call(agent, definition.name, arguments, url_elicitation=True)
    validate_call_result("tools/call", asked)
    assert asked["resultType"] == "input_required"
    request = asked["inputRequests"][CONSENT_REQUEST]
    assert request["method"] == "elicitation/create" and request["params"]["mode"] == "url"
    confirmation = Confirmation.objects.get()
    page = _consent_page(request["params"]["url"])
    assert page == f"/agent/confirmations/{confirmation.pk}/consent/"
    # Staff cannot decide it, nor can another user see it; signed out, the login comes first.
    with pytest.raises(confirmations.DecisionRefused):
        confirmations.approve(confirmation, approver)
    assert DjangoClient().get(page).status_code == 302
    stranger = DjangoClient()
    stranger.force_login(bob)
    assert stranger.get(page).status_code == 404
    # The user's own session: the page shows the request; a POST needs the CSRF token.
    own = DjangoClient(enforce_csrf_checks=True)
    own.force_login(alice)
    shown = own.get(page)
    assert shown.status_code == 200
    text = shown.content.decode()
    assert "Orders the items for you." in text and "Quantity" in text
    assert 'data-testid="field-operationId"' not in text  # the agent's key, not the user's
    # The request reads as the approver's page presents it: the tool's one-line summary.
    assert "Order 3 items from the supplier" in text
    assert own.post(page, {"decision": "approve"}).status_code == 403
    assert handler.count == 0
    token = own.cookies["csrftoken"].value
    decided = own.post(page, {"decision": "approve", "csrfmiddlewaretoken": token,
                              "password": "pw"})  # the user types their password
    assert decided.status_code == 302
    audit = AuditEntry.objects.get(confirmation=confirmation)
    assert audit.action == AuditEntry.Action.APPROVE and audit.actor == alice
    # The client's retry of the same request, with the elicitation's answer, runs it once.
    retry = result(send(agent, "tools/call", {
        "name": definition.name, "arguments": arguments,
        "inputResponses": {CONSENT_REQUEST: {"action": "accept"}}},
        rid=2, url_elicitation=True))
    validate_call_result("tools/call", retry)
    assert retry["isError"] is False and retry["structuredContent"] == {"done": 1}
    replay = call(agent, definition.name, arguments, url_elicitation=True)
    assert replay["isError"] is False and handler.count == 1


def test_owner_consent_declined_in_the_client_withdraws(agent: APIClient, alice: Any,
                                                        make_tool: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm="owner", input_schema=ITEM)
    arguments = {"operationId": key(), "qty": 1}
    call(agent, definition.name, arguments, url_elicitation=True)
    answer = result(send(agent, "tools/call", {
        "name": definition.name, "arguments": arguments,
        "inputResponses": {CONSENT_REQUEST: {"action": "decline"}}},
        url_elicitation=True))
    assert answer["isError"] is True
    assert Confirmation.objects.get().status == ConfirmationStatus.WITHDRAWN
    assert handler.count == 0


def test_owner_consent_url_over_rest_and_older_mcp(agent: APIClient, make_tool: Any) -> None:
    definition = make_tool(confirm="owner", input_schema=ITEM)
    rest = agent.post(f"/agent/tools/{definition.name}/", {"operationId": key(), "qty": 1},
                      format="json")
    assert rest.status_code == 202
    pending = rest.json()["error"]["confirmation"]
    assert pending["url"].endswith(f"/agent/confirmations/{pending['id']}/consent/")
    assert pending["url"] in rest.json()["error"]["message"]
    error = rest.json()["error"]
    advice = " ".join((error["why"], error["fix"], error["repair"]["instruction"]))
    assert "staff" not in advice and "admin" not in advice  # nobody but the user decides
    assert "the user" in error["why"] and "confirmation.url" in error["fix"]
    assert "confirmation.url" in error["repair"]["instruction"]
    # 2026-07-28 without URL elicitation, and the handshake era: the URL in the message.
    modern = call(agent, definition.name, {"operationId": key(), "qty": 1})
    assert modern["isError"] is True and "/consent/" in modern["content"][0]["text"]
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": definition.name, "arguments": {"operationId": key(), "qty": 1}}}
    old = agent.post(URL, data=json.dumps(body), content_type="application/json",
                     headers={"MCP-Protocol-Version": "2025-11-25"}).json()["result"]
    assert old["isError"] is True and "/consent/" in old["content"][0]["text"]


# -- the demo's own confirm="owner" tool: moving money between the user's own accounts ---------
def _approve_on_the_page(user: Any, url: str, expected_summary: str) -> None:
    """The user opens the URL in their own session, reads the request, approves it."""
    own = DjangoClient(enforce_csrf_checks=True)
    own.force_login(user)
    page = own.get(_consent_page(url))
    assert page.status_code == 200
    assert expected_summary in page.content.decode()
    decided = own.post(_consent_page(url), {"decision": "approve", "password": "pw",
                                            "csrfmiddlewaretoken": own.cookies["csrftoken"].value})
    assert decided.status_code == 302


def test_the_demos_move_between_my_accounts_asks_its_owner_over_rest_and_mcp(
        agent: APIClient, alice: Any, bob: Any) -> None:
    from decimal import Decimal

    from project.demo.models import Account, LedgerEntry

    checking = Account.objects.create(owner=alice, name="Checking", balance=Decimal("1000"))
    savings = Account.objects.create(owner=alice, name="Savings", balance=Decimal("250"))
    theirs = Account.objects.create(owner=bob, name="Checking", balance=Decimal("5"))
    name = "move_between_my_accounts"
    body = {"operationId": key(), "sourceId": checking.pk, "receiverId": savings.pk,
            "amount": "50.00"}
    sentence = ("Move 50.00 EUR from your Checking (balance 1,000.00 EUR) to your Savings"
                " (balance 250.00 EUR)")
    # REST: the 202 names the consent page; the retry after the user approved runs it once.
    asked = agent.post(f"/agent/tools/{name}/", body, format="json")
    assert asked.status_code == 202, asked.content
    url = asked.json()["error"]["confirmation"]["url"]
    assert url.endswith("/consent/") and url in asked.json()["error"]["message"]
    _approve_on_the_page(alice, url, sentence)
    done = agent.post(f"/agent/tools/{name}/", body, format="json")
    assert done.status_code == 200, done.content
    assert done.json()["output"]["amount"] == "50.00"
    # MCP 2026-07-28: a URL elicitation to the same kind of page, then the retry.
    arguments = {**body, "operationId": key(), "amount": "25.00"}
    elicited = call(agent, name, arguments, url_elicitation=True)
    assert elicited["resultType"] == "input_required"
    url = elicited["inputRequests"][CONSENT_REQUEST]["params"]["url"]
    _approve_on_the_page(alice, url, "Move 25.00 EUR from your Checking (balance 950.00 EUR)")
    retried = result(send(agent, "tools/call", {
        "name": name, "arguments": arguments,
        "inputResponses": {CONSENT_REQUEST: {"action": "accept"}}}, url_elicitation=True))
    validate_call_result("tools/call", retried)
    assert retried["isError"] is False and retried["structuredContent"]["amount"] == "25.00"
    checking.refresh_from_db()
    savings.refresh_from_db()
    assert (checking.balance, savings.balance) == (Decimal("925"), Decimal("325"))
    assert LedgerEntry.objects.count() == 2
    # Only between the user's own accounts, and nobody is asked for a move that cannot run.
    other = agent.post(f"/agent/tools/{name}/", {**body, "operationId": key(),
                                                 "receiverId": theirs.pk}, format="json")
    assert other.status_code == 403
    broke = agent.post(f"/agent/tools/{name}/", {**body, "operationId": key(),
                                                 "amount": "5000"}, format="json")
    assert broke.json()["error"]["code"] == "insufficient_funds"
    assert Confirmation.objects.count() == 2


@pytest.mark.django_db(transaction=True)  # the agent's retry runs on a thread of its own
def test_an_approval_run_that_finds_the_call_in_flight_leaves_the_task_to_that_call(
        agent: APIClient, alice: Any, client_for: Any, make_tool: Any, approver: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The approval's Celery run and an agent's retry of the same call race: the retry
    took the key first, so the run is refused as in flight. The task must follow the
    call that runs, never end with the run's refusal as its result."""
    import threading

    from django.db import connection

    from guarded_tools import tasks

    started, release = threading.Event(), threading.Event()

    def handler(input: Any, ctx: Any) -> Any:
        started.set()
        assert release.wait(30)
        return {"ordered": input["qty"]}

    definition = make_tool(handler, confirm="effect-only", input_schema=ITEM)
    arguments = {"operationId": key(), "qty": 7}
    task_id = call(agent, definition.name, arguments)["taskId"]
    sent: list[str] = []  # the approval's task, held until the retry is running
    monkeypatch.setattr(tasks, "enqueue_execute_approved", sent.append)
    confirmations.approve(Confirmation.objects.get(), approver)
    answers: list[dict[str, Any]] = []

    def retry() -> None:  # a client without the extension: the plain synchronous call
        try:
            answers.append(call(client_for(alice), definition.name, arguments, tasks=False))
        finally:
            connection.close()

    retrying = threading.Thread(target=retry)
    real_execute = confirmations.execute

    def execute_after_the_retry_took_the_key(confirmation: Any) -> Any:
        # The run read the approval still unused; the retry claims the key meanwhile.
        retrying.start()
        assert started.wait(30)
        return real_execute(confirmation)

    monkeypatch.setattr(confirmations, "execute", execute_after_the_retry_took_the_key)
    try:
        tasks.execute_approved(sent[0])  # the worker's run, refused: the call is in flight
        assert get_task(agent, task_id)["status"] == "working"
    finally:
        release.set()
        if retrying.is_alive():
            retrying.join(30)
    assert answers[0]["isError"] is False and answers[0]["structuredContent"] == {"ordered": 7}
    done = get_task(agent, task_id)
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"] == {"ordered": 7}


# -- exactly once, however many clients poll and retry (PostgreSQL, one connection each) --------
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_sixteen_clients_polling_and_retrying_run_the_effect_once(
        alice: Any, approver: Any, client_for: Any, make_tool: Any) -> None:
    import threading
    import time

    from django.db import connection

    from project.celery import app
    from tests.conftest import in_threads

    lock = threading.Lock()
    runs: list[int] = []

    def handler(input: Any, ctx: Any) -> Any:
        with lock:
            runs.append(1)
        return {"ordered": input["qty"]}

    definition = make_tool(handler, confirm="effect-only", input_schema=ITEM)
    arguments = {"operationId": key(), "qty": 5}
    task_id = call(client_for(alice), definition.name, arguments)["taskId"]
    polled = threading.Semaphore(0)
    app.conf.task_always_eager = True

    def client(i: int) -> dict[str, Any]:
        agent = client_for(alice)
        first = True
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if i % 2:  # half retry the call itself, half poll the task
                answer = call(agent, definition.name, arguments)
                error = answer.get("_meta", {}).get(ERROR_META, {})
                if answer.get("resultType") != "task" and error.get("retry") != "as_is":
                    assert answer["isError"] is False, answer
                    return dict(answer["structuredContent"])
                # A task, or another client's retry holds the key a moment: again, later.
            else:
                state = get_task(agent, task_id)
                if state["status"] == "completed":
                    return dict(state["result"]["structuredContent"])
                assert state["status"] == "working", state
            if first:
                first = False
                polled.release()
            time.sleep(0.02)  # a client's poll cadence, not a wait for an outcome
        raise AssertionError("no result in time")

    def approve_when_all_polled() -> None:
        try:
            for _ in range(16):
                assert polled.acquire(timeout=30)
            confirmations.approve(Confirmation.objects.get(), approver)
        finally:
            connection.close()

    approver_thread = threading.Thread(target=approve_when_all_polled, daemon=True)
    approver_thread.start()
    try:
        answers = in_threads(16, client)
    finally:
        app.conf.task_always_eager = False
        approver_thread.join(30)
    assert answers == [{"ordered": 5}] * 16
    assert len(runs) == 1 and Operation.objects.get().state == "succeeded"


# -- end to end: the official client's URL elicitation, the page in the user's session ----------
@needs_sdk_2026
@pytest.mark.django_db(transaction=True)
def test_official_client_owner_consent_through_the_page(live_server: Any, alice: Any,
                                                        make_tool: Any) -> None:
    import re

    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import ElicitRequestURLParams, ElicitResult
    from rest_framework.authtoken.models import Token

    handler = Effects()
    definition = make_tool(handler, confirm="owner", input_schema=ITEM,
                           description="Orders the items for you.")
    token = Token.objects.create(user=alice).key
    browser = DjangoClient()
    browser.force_login(alice)  # the user's own session on the site, as their browser has it
    cookies = {"sessionid": browser.cookies["sessionid"].value}
    seen: dict[str, Any] = {}

    async def consent(context: Any, params: Any) -> ElicitResult:
        """The host shows the URL; the user opens it, signed in, and approves."""
        assert isinstance(params, ElicitRequestURLParams)
        seen["url"] = params.url
        async with httpx2.AsyncClient(cookies=cookies, timeout=10, follow_redirects=True) as user:
            page = await user.get(params.url)
            assert page.status_code == 200 and "Orders the items for you." in page.text
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
            assert csrf is not None
            decided = await user.post(params.url, data={
                "decision": "approve", "csrfmiddlewaretoken": csrf.group(1),
                "password": "pw"},  # the user types their password
                headers={"Referer": params.url})
            assert decided.status_code == 200, decided.text  # followed to the done page
        return ElicitResult(action="accept")

    async def main() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Token {token}"}, timeout=30)
        transport = streamable_http_client(f"{live_server.url}{URL}", http_client=http)
        async with Client(transport, elicitation_callback=consent) as client:
            seen["version"] = client.protocol_version
            seen["result"] = await client.call_tool(definition.name,
                                                    {"operationId": key(), "qty": 2})

    anyio.run(main)
    assert seen["version"] == MODERN
    assert seen["url"].startswith(live_server.url) and seen["url"].endswith("/consent/")
    assert seen["result"].is_error is False and seen["result"].structured_content == {"done": 1}
    assert handler.count == 1
    audit = AuditEntry.objects.get()
    assert audit.action == AuditEntry.Action.APPROVE and audit.actor == alice


def _post(port: int, token: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    import urllib.request

    params = {**params, "_meta": meta()}
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json",
               "MCP-Protocol-Version": MODERN, "Mcp-Method": method,
               "Mcp-Name": params.get("name") or params.get("taskId")}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    request = urllib.request.Request(f"http://127.0.0.1:{port}{URL}", data=body.encode(),
                                     headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=15) as response:
        reply = json.load(response)
    assert "error" not in reply, reply
    return dict(reply["result"])


@pytest.mark.django_db(transaction=True)
def test_a_task_survives_a_restart_of_the_web_process(
        tmp_path: Any, test_database_url: str, alice: Any, approver: Any,
        make_tool: Any) -> None:
    from rest_framework.authtoken.models import Token

    from project.celery import app

    token = Token.objects.create(user=alice).key
    name, arguments = "tasks_after_restart", {"operationId": key()}
    first, port = start_web(tmp_path, test_database_url)
    try:
        created = _post(port, token, "tools/call", {"name": name, "arguments": arguments})
        ext.CreateTaskResult.model_validate(created)
    finally:
        first.terminate()
        first.wait(10)
    # Nothing of the task was in that process: this one approves (running the call as a
    # worker would, with the same tool), and a new web process answers the poll.
    make_tool(lambda input, ctx: {"ran": input["operationId"]}, name=name,
              input_schema={"type": "object", "properties": {"operationId": {"type": "string"}},
                            "required": ["operationId"]}, confirm="effect-only")
    app.conf.task_always_eager = True
    try:
        confirmations.approve(Confirmation.objects.get(), approver)
    finally:
        app.conf.task_always_eager = False
    second, port = start_web(tmp_path, test_database_url)
    try:
        done = _post(port, token, "tasks/get", {"taskId": created["taskId"]})
    finally:
        second.terminate()
        second.wait(10)
    ext.GetTaskResult.model_validate(done)
    assert done["status"] == "completed" and done["createdAt"] == created["createdAt"]
    assert done["result"]["structuredContent"] == {"ran": arguments["operationId"]}
    assert Operation.objects.get().state == "succeeded"


# -- long-running tools ---------------------------------------------------------------------
def test_a_long_running_tool_answers_a_task_and_runs_on_celery(
        agent: APIClient, make_tool: Any, django_capture_on_commit_callbacks: Any) -> None:
    from project.celery import app

    handler = Effects()
    definition = make_tool(handler, long_running=True, input_schema=ITEM)
    listed = result(send(agent, "tools/list", {}))
    assert [t["_meta"].get(TASK_META) for t in listed["tools"]
            if t["name"] == definition.name] == [True]
    arguments = {"operationId": key(), "qty": 2}
    app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True):
            created = call(agent, definition.name, arguments)
    finally:
        app.conf.task_always_eager = False
    ext.CreateTaskResult.model_validate(created)
    assert created["resultType"] == "task" and handler.count == 1
    done = get_task(agent, created["taskId"])
    assert done["status"] == "completed" and done["result"]["structuredContent"] == {"done": 1}
    # The same call again is a replay, answered at once; without the extension, as always.
    assert call(agent, definition.name, arguments)["structuredContent"] == {"done": 1}
    plain = call(agent, definition.name, {"operationId": key(), "qty": 1}, tasks=False)
    assert plain["structuredContent"] == {"done": 2} and handler.count == 2
    # A refused call is refused now, not in a task.
    invalid = call(agent, definition.name, {"operationId": key(), "qty": 0})
    assert invalid["isError"] is True and invalid.get("resultType") == "complete"
    assert Confirmation.objects.count() == 1


def test_a_long_running_call_cancelled_before_the_worker_takes_it_never_runs(
        agent: APIClient, make_tool: Any) -> None:
    from guarded_tools.tasks import execute_approved

    handler = Effects()
    definition = make_tool(handler, long_running=True, input_schema=ITEM)
    created = call(agent, definition.name, {"operationId": key(), "qty": 2})
    assert get_task(agent, created["taskId"])["status"] == "working"
    result(send(agent, "tasks/cancel", {"taskId": created["taskId"]}))
    execute_approved(str(Confirmation.objects.get().pk))  # the worker's delivery, late
    assert handler.count == 0 and not Operation.objects.exists()
    assert get_task(agent, created["taskId"])["status"] == "cancelled"


# -- issue 25: opaque ids; approved runs and reads authorize as replays do -------------------------
def test_a_task_id_is_opaque_and_a_forged_or_foreign_one_is_unknown(
        agent: APIClient, make_tool: Any, alice: Any, bob: Any,
        client_for: Callable[[Any], APIClient]) -> None:
    import base64
    import zlib

    secret_key = key()
    definition = make_tool(confirm="effect-only", input_schema=ITEM)
    task_id = call(agent, definition.name, {"operationId": secret_key, "qty": 1})["taskId"]
    row = Confirmation.objects.get()
    readable = task_id  # and whatever base64 (compressed or not) would make of it
    part = task_id.split(":")[0].lstrip(".")
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        readable += raw.decode("latin-1")
        readable += zlib.decompress(raw).decode("latin-1")
    except (ValueError, zlib.error):
        pass
    for disclosed in (secret_key, row.fingerprint, row.scope, str(alice.pk) + "]",
                      definition.name):
        assert disclosed not in readable
    assert len(task_id) <= tasks_ext.MAX_TASK_ID
    assert get_task(agent, task_id)["status"] == "working"
    for other, forged in ((agent, task_id[:-2] + ("AA" if task_id[-2:] != "AA" else "BB")),
                          (client_for(bob), task_id)):
        error = rpc_error(send(other, "tasks/get", {"taskId": forged}))
        assert error["message"] == "Failed to retrieve task: Task not found"


@pytest.mark.parametrize("transport", ["token", "session"])
def test_reads_of_a_task_refuse_a_caller_who_lost_the_tools_permission(
        transport: str, make_tool: Any, user_factory: Any, session_client_for: Any) -> None:
    from django.contrib.auth.models import Permission
    from rest_framework.authtoken.models import Token

    user = user_factory(perms=("demo.change_order",))
    client: Any = session_client_for(user) if transport == "session" else DjangoClient(
        headers={"Authorization": f"Token {Token.objects.create(user=user).key}"})
    definition = make_tool(confirm="effect-only", input_schema=ITEM,
                           permissions=["demo.change_order"])
    task_id = call(client, definition.name, {"operationId": key(), "qty": 1})["taskId"]
    assert get_task(client, task_id)["status"] == "working"
    user.user_permissions.remove(Permission.objects.get(codename="change_order"))
    for method in ("tasks/get", "tasks/cancel"):
        refused = send(client, method, {"taskId": task_id})
        assert refused.status_code == 403, method
        assert rpc_error(refused)["data"]["code"] == "authorization_denied"
    assert Confirmation.objects.get().status == ConfirmationStatus.PENDING


@pytest.mark.parametrize("transport", ["token", "session"])
def test_an_approval_runs_nothing_once_the_requesters_credential_is_gone(
        transport: str, make_tool: Any, user_factory: Any, session_client_for: Any,
        approver: Any, eager: Any) -> None:
    from rest_framework.authtoken.models import Token

    user = user_factory()
    token = Token.objects.create(user=user)
    client: Any = session_client_for(user) if transport == "session" else DjangoClient(
        headers={"Authorization": f"Token {token.key}"})
    definition = make_tool(Effects(), confirm="effect-only", input_schema=ITEM)
    call(client, definition.name, {"operationId": key(), "qty": 1})
    if transport == "token":
        token.delete()
    else:
        type(user).objects.filter(pk=user.pk).update(is_active=False)
    eager(confirmations.approve, Confirmation.objects.get(), approver)
    assert definition.handler.count == 0
    row = Confirmation.objects.get()
    assert row.status == ConfirmationStatus.CONSUMED
    assert row.task_error["code"] == "authorization_denied"
    assert not Operation.objects.filter(state="succeeded").exists()
