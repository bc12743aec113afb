"""Reconciliation is final and names its attempt: the admin forms and the Python API."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client

from guarded_tools.models import AuditEntry, Operation, OperationState
from guarded_tools.pipeline import reconciliation
from guarded_tools.store.replays import replays
from tests.conftest import key

pytestmark = pytest.mark.django_db

OPS_LIST = "/admin/guarded_tools/operation/"
RECONCILER = ("guarded_tools.view_operation", "guarded_tools.reconcile_operation")
PAID = {"type": "object", "required": ["paid"], "properties": {"paid": {"type": "boolean"}}}


class _Form(HTMLParser):
    """The fields of the page's reconcile form, as a browser would submit them."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[tuple[str, str]] = []
        self.textareas: dict[str, str] = {}
        self._in_form = False
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form" and a.get("method") == "post":
            self._in_form = True
        elif self._in_form and tag == "input" and a.get("type") in ("hidden", "text"):
            self.fields.append((str(a["name"]), a.get("value") or ""))
        elif self._in_form and tag == "textarea":
            self._textarea = str(a["name"])
            self.textareas[self._textarea] = ""

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self.textareas[self._textarea] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self._textarea = None
        elif tag == "form":
            self._in_form = False


class Operator:
    """A person in the admin: opens a reconcile form from the list, submits it later."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def open(self, action: str, operation: Operation) -> str:
        page = self.client.post(OPS_LIST, {"action": action,
                                           ACTION_CHECKBOX_NAME: [operation.pk]})
        assert page.status_code == 200 and 'name="note"' in page.content.decode()
        return page.content.decode()

    def submit(self, form_page: str, **typed: str) -> str:
        form = _Form()
        form.feed(form_page)
        data: dict[str, list[str]] = {}
        for name, value in form.fields:
            if name != "csrfmiddlewaretoken":
                data.setdefault(name, []).append(value)
        for name, value in {**form.textareas, **typed}.items():
            data[name] = [value]
        response = self.client.post(OPS_LIST, data, follow=True)
        assert response.status_code == 200
        return response.content.decode()


@pytest.fixture
def operator_for(user_factory: Any) -> Any:
    def make(name: str) -> Operator:
        client = Client()
        client.force_login(user_factory(name, is_staff=True, perms=RECONCILER))
        return Operator(client)

    return make


def lost_response(runs: list[int]) -> Any:
    """A handler whose answer is lost after its effect: every attempt ends unknown."""

    def handler(input: Any, ctx: Any) -> Any:
        runs.append(1)
        ctx.operation.write({"attempt": len(runs)})
        raise ConnectionError("the bank hung up after the request was sent")

    return handler


# -- a person's decision is final ------------------------------------------------------------
def test_replays_of_a_reconciled_success_answer_what_the_person_decided(
        make_tool: Any, operator_for: Any, alice: Any, client_for: Any) -> None:
    """The verifier cannot see the effect (that is why the outcome was unknown); the
    person established it. Every replay answers their output, from the database and
    from the replay cache, and the verifier never judges it."""
    runs: list[int] = []
    judged: list[Any] = []
    definition = make_tool(lost_response(runs), journal=True, output_schema=PAID,
                           verify=lambda **kw: judged.append(kw["output"]) and False)
    body = {"operationId": key()}
    agent = client_for(alice)
    assert agent.post(f"/agent/tools/{definition.name}/", body,
                      format="json").json()["error"]["code"] == "outcome_unknown"
    operation = Operation.objects.get()
    operator = operator_for("ops")
    done = operator.submit(operator.open("mark_succeeded", operation),
                           output='{"paid": true}', note="The bank statement shows it.")
    assert "1 operation reconciled." in done
    for _ in range(3):  # the first from the database, then from this process's cache
        replay = agent.post(f"/agent/tools/{definition.name}/", body, format="json")
        assert replay.status_code == 200, replay.json()
        assert replay.json()["output"] == {"paid": True}
        assert replay.json()["operation"]["replayed"] is True
    replays.clear()  # as another process would: from the database again
    assert agent.post(f"/agent/tools/{definition.name}/", body, format="json").status_code == 200
    assert judged == [] and runs == [1]


def test_replays_of_a_recovered_result_are_still_verified(make_tool: Any, alice: Any) -> None:
    """What the machine produced (the handler's or recover's output) is judged on every
    replay; only a person's decision is not."""
    flags: list[tuple[bool, bool]] = []

    def verify(**kw: Any) -> bool:
        flags.append((kw["replayed"], kw["recovered"]))
        return len(flags) == 1  # true when recovered, false on the replay

    def handler(input: Any, ctx: Any) -> Any:
        ctx.operation.write({"sent": True})
        raise ConnectionError("lost")

    definition = make_tool(handler, journal=True,
                           recover=lambda **kw: {"recovered": True, "output": {"paid": True}},
                           verify=verify)
    body = {"operationId": key()}
    assert definition(body, user=alice).recovered
    from guarded_tools.core.errors import VerificationError

    with pytest.raises(VerificationError):
        definition(body, user=alice)
    assert flags == [(False, True), (True, True)]


# -- a decision names its attempt ------------------------------------------------------------
@pytest.mark.parametrize("action, typed", [
    ("mark_not_executed", {}),
    ("mark_succeeded", {"output": '{"paid": true}'}),
    ("mark_failed", {}),
], ids=["not-executed", "succeeded", "failed"])
def test_a_stale_reconcile_form_never_acts_on_a_later_attempt(
        make_tool: Any, operator_for: Any, alice: Any, client_for: Any, action: str,
        typed: dict[str, str]) -> None:
    """Operator 1 opens a form on attempt 1; operator 2 releases attempt 1; attempt 2 runs
    and ends unknown; operator 1's submission is refused and attempt 2 stays unknown,
    so the handler never runs a third time."""
    runs: list[int] = []
    definition = make_tool(lost_response(runs), journal=True, output_schema=PAID)
    body = {"operationId": key()}
    agent = client_for(alice)
    url = f"/agent/tools/{definition.name}/"
    assert agent.post(url, body, format="json").json()["error"]["code"] == "outcome_unknown"
    operation = Operation.objects.get()
    first, second = operator_for("first"), operator_for("second")
    stale = first.open(action, operation)
    assert "fence 1" in stale

    second.submit(second.open("mark_not_executed", operation), note="No record at the bank.")
    assert agent.post(url, body, format="json").json()["error"]["code"] == "outcome_unknown"
    operation.refresh_from_db()
    assert runs == [1, 1] and operation.state == OperationState.OUTCOME_UNKNOWN
    assert operation.fence == 2

    answer = first.submit(stale, note="Decided on what I saw of attempt 1.", **typed)
    operation.refresh_from_db()
    assert operation.state == OperationState.OUTCOME_UNKNOWN and operation.fence == 2
    assert AuditEntry.objects.filter(operation=operation).count() == 1  # operator 2's only
    assert "moved on" in answer and "nothing was changed" in answer
    assert agent.post(url, body, format="json").json()["error"]["code"] == "outcome_unknown"
    assert runs == [1, 1]
    # A form opened now is for attempt 2, and acts on it.
    done = first.submit(first.open(action, operation), note="Checked attempt 2.", **typed)
    assert "1 operation reconciled." in done
    operation.refresh_from_db()
    assert operation.state != OperationState.OUTCOME_UNKNOWN
    assert AuditEntry.objects.filter(operation=operation).first().data["fence"] == 2


def test_a_form_without_its_fence_is_refused(make_tool: Any, operator_for: Any,
                                             requester_unknown: Operation) -> None:
    operator = operator_for("ops")
    answer = operator.client.post(OPS_LIST, {
        "action": "mark_not_executed", ACTION_CHECKBOX_NAME: [requester_unknown.pk],
        "note": "crafted"}, follow=True).content.decode()
    assert "which attempt" in answer
    requester_unknown.refresh_from_db()
    assert requester_unknown.state == OperationState.OUTCOME_UNKNOWN


@pytest.fixture
def requester_unknown(make_tool: Any, alice: Any) -> Operation:
    definition = make_tool(output_schema=PAID)
    k = key()
    return Operation.objects.create(
        tool=definition.name, scope=f"auth.user:{alice.pk}", key=k, user=alice,
        fingerprint="f" * 64, input={"operationId": k}, state=OperationState.OUTCOME_UNKNOWN,
        fence=3,
    )


@pytest.mark.parametrize("decide", [
    lambda op, user, fence: reconciliation.mark_succeeded(op, user, {"paid": True}, "n",
                                                          fence=fence),
    lambda op, user, fence: reconciliation.mark_not_executed(op, user, "n", fence=fence),
    lambda op, user, fence: reconciliation.mark_failed(op, user, "n", fence=fence),
], ids=["succeeded", "not-executed", "failed"])
def test_the_python_api_refuses_a_decision_on_another_attempt(
        user_factory: Any, requester_unknown: Operation, decide: Any) -> None:
    person = user_factory("ops", perms=("guarded_tools.reconcile_operation",))
    with pytest.raises(reconciliation.ReconcileRefused, match="moved on"):
        decide(requester_unknown, person, 2)
    requester_unknown.refresh_from_db()
    assert requester_unknown.state == OperationState.OUTCOME_UNKNOWN
    assert not AuditEntry.objects.exists()
    decide(requester_unknown, person, 3)
    requester_unknown.refresh_from_db()
    assert requester_unknown.state != OperationState.OUTCOME_UNKNOWN
    with pytest.raises(reconciliation.ReconcileRefused, match="not waiting"):
        decide(requester_unknown, person, 3)


# -- the output a person enters is strict JSON -----------------------------------------------
@pytest.mark.parametrize("typed, why", [
    ('{"paid": NaN}', "NaN, Infinity and numbers beyond"),
    ('{"paid": true, "amount": Infinity}', "NaN, Infinity and numbers beyond"),
    ('{"paid": true, "amount": 1e999}', "NaN, Infinity and numbers beyond"),
    ('{"paid": true, "paid": false}', "repeats a key"),
    ('{"paid": true, "note": "a\\u0000b"}', "NUL"),
    ("[" * 5000 + "]" * 5000, "nests"),
    ('{"paid": true', "line 1, column 14"),
], ids=["nan", "infinity", "overflow", "duplicate-key", "nul", "deep", "truncated"])
def test_mark_succeeded_takes_only_strict_json(operator_for: Any, requester_unknown: Operation,
                                               typed: str, why: str) -> None:
    operator = operator_for("ops")
    answer = operator.submit(operator.open("mark_succeeded", requester_unknown),
                             output=typed, note="checked")
    assert why in answer
    assert typed[:200].replace('"', "&quot;") in answer  # the typed text is shown back
    requester_unknown.refresh_from_db()
    assert requester_unknown.state == OperationState.OUTCOME_UNKNOWN
    assert not AuditEntry.objects.exists()


def test_the_python_api_refuses_an_output_that_is_not_json(
        user_factory: Any, requester_unknown: Operation) -> None:
    person = user_factory("ops", perms=("guarded_tools.reconcile_operation",))
    deep: list[Any] = []
    for _ in range(100):
        deep = [deep]
    for output in ({"paid": float("nan")}, {"paid": True, "n": float("inf")},
                   {"paid": True, "deep": deep}, {"paid": True, "x": object()}):
        with pytest.raises(reconciliation.ReconcileRefused):
            reconciliation.mark_succeeded(requester_unknown, person, output, "n", fence=3)
    requester_unknown.refresh_from_db()
    assert requester_unknown.state == OperationState.OUTCOME_UNKNOWN


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_people_deciding_at_once_make_exactly_one_decision(
        user_factory: Any, requester_unknown: Operation) -> None:
    """Four decisions on the same attempt, each on its own connection: one wins, the
    others are told it is no longer waiting, and one audit row says who decided."""
    from tests.conftest import in_threads

    people = [user_factory(f"ops{i}", perms=("guarded_tools.reconcile_operation",))
              for i in range(4)]

    def decide(i: int) -> str:
        try:
            if i % 2:
                reconciliation.mark_not_executed(requester_unknown, people[i], "n", fence=3)
            else:
                reconciliation.mark_succeeded(requester_unknown, people[i], {"paid": True},
                                              "n", fence=3)
        except reconciliation.ReconcileRefused as exc:
            return str(exc)
        return "decided"

    outcomes = in_threads(4, decide)
    assert outcomes.count("decided") == 1, outcomes
    assert all("not waiting" in o for o in outcomes if o != "decided")
    audit = AuditEntry.objects.get(operation=requester_unknown)
    requester_unknown.refresh_from_db()
    winner = outcomes.index("decided")
    assert audit.actor == people[winner]
    assert requester_unknown.state == ("released" if winner % 2 else "succeeded")
