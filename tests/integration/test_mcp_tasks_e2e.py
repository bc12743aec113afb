"""End to end with the official Tasks client: ``@modelcontextprotocol/ext-tasks`` on the
TypeScript SDK's 2026-07-28 ``Client`` (``tests/integration/js/tasks_client.mjs``), against a live
server.

A person decides in the admin or on the consent page (headless Chromium); the client polls
``tasks/get`` at the server's interval, cancels, resumes a handed-off task after the web
process restarted, and answers the URL elicitation of ``confirm="owner"`` by its retry.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from rest_framework.authtoken.models import Token

from guarded_tools.models import AuditEntry, Confirmation, ConfirmationStatus, Operation
from guarded_tools.transports.mcp.protocol import (
    INVALID_PARAMS,
    OPERATION_META,
    TASK_CALL_FAILED,
    TASK_NOT_CANCELLABLE,
)
from guarded_tools.transports.mcp.task_methods import poll_interval_ms
from tests.conftest import Effects, Lines
from tests.integration.browser import decide_in_the_admin, expect, log_in
from tests.transports.mcp_calls import ITEM, URL

# What these add to the admin's browser tests (which run under both Django versions)
# is the MCP Tasks client's flow and the app's consent page, whatever Django's version:
# under Django 6 only (one_django).
pytestmark = [pytest.mark.browser, pytest.mark.one_django,
              pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def brisk_polls(settings: Any) -> None:
    """The client polls at the server's pace for a person (30 s by default): 1 s here."""
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "CONFIRMATION_RETRY_AFTER_SECONDS": 1}


class TasksClient:
    """One run of ``tasks_client.mjs``: a scenario, its lines, and its exit."""

    def __init__(self, js: Path, url: str, user: Any, scenario: str, *args: str) -> None:
        token = Token.objects.get_or_create(user=user)[0].key
        self.process = subprocess.Popen(
            ["node", str(js / "tasks_client.mjs"), url, token, scenario, *args],
            cwd=js, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lines = Lines(self.process)
        connected = self.lines.next()["connected"]
        # The client negotiated 2026-07-28 and found the extension in server/discover.
        assert connected["era"] == "modern", connected
        assert connected["capabilities"]["execution"] is True, connected

    def next(self, key: str, timeout: float = 60) -> Any:
        message = self.lines.next(timeout)
        assert key in message, message
        return message

    def finish(self) -> None:
        try:
            assert self.process.wait(timeout=30) == 0
        finally:
            if self.process.poll() is None:
                self.process.kill()


@pytest.fixture
def run(typescript_sdk: Path, live_server: Any) -> Any:
    started: list[TasksClient] = []

    def start(user: Any, scenario: str, *args: str, url: str | None = None) -> TasksClient:
        client = TasksClient(typescript_sdk, url or f"{live_server.url}{URL}", user, scenario,
                             *args)
        started.append(client)
        return client

    yield start
    for client in started:
        if client.process.poll() is None:
            client.process.kill()


def arguments(qty: int = 4) -> str:
    return json.dumps({"operationId": uuid.uuid4().hex, "qty": qty})


# -- a person approves or declines in the admin; the client's poll returns it --------------------
@pytest.mark.parametrize("decision", ["approve", "decline"])
def test_the_tasks_client_settles_with_the_decision_made_in_the_admin(
        decision: str, run: Any, page: Any, staff: Any, user_factory: Any,
        make_tool: Any, eager_celery: None) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm="effect-only", input_schema=ITEM,
                           description="Orders stock from the supplier.")
    client = run(user_factory("buyer"), "call", definition.name, arguments())
    created = client.next("created")["created"]
    assert created["kind"] == "task" and created["reference"]["generation"] == "v2"
    assert Confirmation.objects.get().task is True and handler.count == 0

    decide_in_the_admin(page, decision, "buyer", shows=("Orders stock from the supplier.",))

    settled = client.next("outcome")
    client.finish()
    outcome = settled["outcome"]
    if decision == "approve":
        assert outcome["status"] == "completed" and handler.count == 1, outcome
        assert outcome["result"]["isError"] is False
        assert outcome["result"]["structuredContent"] == {"done": 1}
        operation = Operation.objects.get()
        assert outcome["result"]["_meta"][OPERATION_META]["id"] == str(operation.pk)
    else:
        assert outcome["status"] == "failed" and handler.count == 0
        error = outcome["error"]
        assert error["code"] == TASK_CALL_FAILED
        assert error["data"]["code"] == "confirmation_declined"
        assert "declined" in error["message"]
    # The client waited the server's pollIntervalMs between its polls (never faster).
    polls = settled["polls"]
    assert len(polls) >= 1
    interval = poll_interval_ms()
    assert all(b - a >= interval * 0.9 for a, b in itertools.pairwise(polls))


def test_the_tasks_client_cancels_before_anyone_decides(run: Any, user_factory: Any,
                                                        make_tool: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm="effect-only", input_schema=ITEM)
    buyer = user_factory("buyer")
    client = run(buyer, "cancel", definition.name, arguments())
    assert client.next("created")["created"]["kind"] == "task"
    assert client.next("outcome")["outcome"] == {"status": "cancelled"}
    client.finish()
    withdrawn = Confirmation.objects.get()
    assert withdrawn.status == ConfirmationStatus.WITHDRAWN and handler.count == 0
    audit = AuditEntry.objects.get(confirmation=withdrawn)
    assert audit.action == AuditEntry.Action.WITHDRAW and audit.actor == buyer


def test_the_tasks_client_is_told_why_a_started_call_is_not_cancelled_and_gets_its_result(
        run: Any, user_factory: Any, make_tool: Any, staff: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ext-tasks ends an execution locally on a cancel's acknowledgement: were a started
    call acknowledged, the client would drop the result of an effect that still ran. The
    refusal keeps it polling, and it settles with the result."""
    import threading

    from django.db import connection

    from guarded_tools import confirmations, tasks

    started, release = threading.Event(), threading.Event()

    def handler(input: Any, ctx: Any) -> Any:
        started.set()
        assert release.wait(30)
        return {"ran": True}

    definition = make_tool(handler, confirm="effect-only", input_schema=ITEM)
    client = run(user_factory("buyer"), "cancel-later", definition.name, arguments())
    assert client.next("created")["created"]["kind"] == "task"
    workers: list[threading.Thread] = []

    def worker(pk: str) -> None:  # the approval's Celery task, on a worker of its own
        try:
            tasks.execute_approved(pk)
        finally:
            connection.close()

    monkeypatch.setattr(tasks, "enqueue_execute_approved", lambda pk: (
        workers.append(threading.Thread(target=worker, args=(pk,))), workers[-1].start()))
    confirmations.approve(Confirmation.objects.get(), staff)
    try:
        assert started.wait(30)
        client.lines.send("cancel")
        refused = client.next("cancel")["cancel"]
    finally:
        release.set()
        for thread in workers:
            thread.join(30)
    assert refused["code"] == TASK_NOT_CANCELLABLE and "started" in refused["message"]
    outcome = client.next("outcome")["outcome"]
    client.finish()
    assert outcome["status"] == "completed" and outcome["result"]["structuredContent"] == {
        "ran": True}
    assert Confirmation.objects.get().status == ConfirmationStatus.CONSUMED


def test_another_principals_snapshot_reads_as_an_unknown_task(run: Any, user_factory: Any,
                                                              make_tool: Any) -> None:
    definition = make_tool(confirm="effect-only", input_schema=ITEM)
    owner, other = user_factory("buyer"), user_factory("other")
    first = run(owner, "handoff", definition.name, arguments())
    task_id = first.next("created")["created"]["taskId"]
    first.finish()
    seen = {}
    for name, user, tid in (("theirs", other, task_id), ("unknown", other, task_id[:-4] + "AAAA"),
                            ("own", owner, task_id)):
        client = run(user, "snapshot", tid)
        seen[name] = client.lines.next()
        client.finish()
    assert seen["own"] == {"snapshot": {"status": "working", "statusMessage": seen["own"][
        "snapshot"]["statusMessage"]}}
    assert "error" in seen["theirs"] and seen["theirs"] == seen["unknown"]
    assert seen["theirs"]["error"]["code"] == INVALID_PARAMS
    assert Confirmation.objects.get().status == ConfirmationStatus.PENDING


# -- the web process restarts between the task's creation and the client's polling ---------------
def test_a_handed_off_task_resumes_after_the_web_process_restarted(
        run: Any, tmp_path: Any, test_database_url: str, alice: Any, staff: Any,
        make_tool: Any, eager_celery: None) -> None:
    from guarded_tools import confirmations
    from tests.transports.mcp_calls import start_web

    arguments = json.dumps({"operationId": uuid.uuid4().hex})
    web, port = start_web(tmp_path, test_database_url)
    try:
        first = run(alice, "handoff", "tasks_after_restart", arguments,
                    url=f"http://127.0.0.1:{port}{URL}")
        reference = first.next("created")["created"]["reference"]
        first.finish()  # the client process is gone too: only the serialized reference is left
    finally:
        web.terminate()
        web.wait(10)
    # A person approves while no web process runs (this process runs the call, as a
    # worker would, with the same tool).
    make_tool(lambda input, ctx: {"ran": input["operationId"]}, name="tasks_after_restart",
              input_schema={"type": "object", "properties": {"operationId": {"type": "string"}},
                            "required": ["operationId"]}, confirm="effect-only")
    confirmations.approve(Confirmation.objects.get(), staff)
    web, port = start_web(tmp_path, test_database_url)
    try:
        resumed = run(alice, "resume", json.dumps(reference), url=f"http://127.0.0.1:{port}{URL}")
        assert resumed.next("resumed")["resumed"]["taskId"] == reference["taskId"]
        outcome = resumed.next("outcome")["outcome"]
        resumed.finish()
    finally:
        web.terminate()
        web.wait(10)
    assert outcome["status"] == "completed", outcome
    assert outcome["result"]["structuredContent"] == {"ran": json.loads(arguments)["operationId"]}
    assert Operation.objects.get().state == "succeeded"


# -- consent by the user themself: the URL elicitation, the page, the client's retry -------------
@pytest.mark.parametrize(("scenario", "answer"), [
    ("consent", "accept"), ("consent", "decline"), ("consent-sdk", "accept")])
def test_the_client_opens_the_consent_url_and_its_retry_runs_the_call(
        scenario: str, answer: str, run: Any, page: Any, live_server: Any,
        user_factory: Any, make_tool: Any) -> None:
    """ext-tasks' loop (``consent``), and the SDK Client's own auto-fulfilment through its
    ``elicitation/create`` handler (``consent-sdk``)."""
    handler = Effects()
    definition = make_tool(handler, confirm="owner", input_schema=ITEM,
                           description="Orders stock from the supplier.")
    buyer = user_factory("buyer")
    client = run(buyer, scenario, definition.name, arguments(3))
    elicit = client.next("elicit")["elicit"]
    confirmation = Confirmation.objects.get()
    assert elicit["mode"] == "url"
    assert elicit["delivery"] == ("request-retry" if scenario == "consent" else "sdk-auto-fulfil")
    assert elicit["url"] == f"{live_server.url}/agent/confirmations/{confirmation.pk}/consent/"
    if answer == "accept":
        # The host opens the URL in the user's browser, where they are signed in.
        log_in(page, "buyer")
        page.goto(elicit["url"])
        expect(page.locator("body")).to_contain_text("Orders stock from the supplier.")
        page.get_by_test_id("step-up").fill("pw")  # the user types their password
        page.get_by_role("button", name="Approve").click()
        expect(page.get_by_test_id("status")).to_contain_text("You approved this request")
    client.lines.send(answer)  # the user tells the client they are done (or declines there)
    assert client.next("created")["created"] == {"kind": "immediate"}  # the retry's answer
    outcome = client.next("outcome")["outcome"]
    client.finish()
    assert outcome["status"] == "completed"
    confirmation.refresh_from_db()
    if answer == "accept":
        assert outcome["result"]["isError"] is False, outcome
        assert outcome["result"]["structuredContent"] == {"done": 1} and handler.count == 1
        audit = AuditEntry.objects.get(confirmation=confirmation)
        assert audit.action == AuditEntry.Action.APPROVE and audit.actor == buyer
        assert confirmation.status == ConfirmationStatus.CONSUMED
    else:
        assert outcome["result"]["isError"] is True and handler.count == 0
        assert confirmation.status == ConfirmationStatus.WITHDRAWN
