"""An unknown outcome's page and its reconcile form, through the admin (Django's client).

The form has its own address under the operation's admin URLs, for those who may
reconcile; it refuses a decision without a note and a "Mark succeeded" whose output is
the blank placeholder or breaks the output schema, keeping what was typed; what it
records is what the agent's replay answers. The facts the decision rests on come first.
"""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.management import call_command
from django.test import Client
from django.utils.html import escape

from guarded_tools.models import AuditEntry, Operation, OperationState
from guarded_tools.pipeline import reconciliation
from tests.conftest import key

pytestmark = pytest.mark.django_db

OPS_LIST = "/admin/guarded_tools/operation/"
RECONCILER = ("guarded_tools.view_operation", "guarded_tools.reconcile_operation")
#: A payment's output: every blank the old form started from ("" and 0) is valid here.
OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {"paymentId": {"type": "integer"}, "amount": {"type": "string"},
                   "receiverId": {"type": "integer"}},
    "required": ["paymentId", "amount", "receiverId"],
}
PLACEHOLDER = {"amount": "", "paymentId": 0, "receiverId": 0}


def staff(user_factory: Any, *perms: str, name: str = "operator") -> Client:
    client = Client()
    client.force_login(user_factory(name, is_staff=True, perms=perms))
    return client


def reconcile_url(operation: Operation) -> str:
    return f"{OPS_LIST}{operation.pk}/reconcile/"


@pytest.fixture
def paying(make_tool: Any) -> Any:
    """A payment tool whose handler loses the bank's answer after sending: outcome unknown."""
    def handler(input: Any, ctx: Any) -> Any:
        ctx.operation.write({"phase": "sent", "reference": input["operationId"]})
        raise ConnectionError("the bank hung up")

    return make_tool(handler, journal=True, output_schema=OUTPUT_SCHEMA,
                     recover=lambda **_: {"outcome": "unknown"})


@pytest.mark.parametrize("how", ["token", "session"])
def test_mark_succeeded_refuses_the_placeholder_and_the_replay_gets_what_was_entered(
        how: str, paying: Any, alice: Any, client_for: Any, session_client_for: Any,
        user_factory: Any) -> None:
    agent = client_for(alice) if how == "token" else session_client_for(alice)
    body = {"operationId": key()}
    url = f"/agent/tools/{paying.name}/"
    assert agent.post(url, body, format="json").json()["error"]["code"] == "outcome_unknown"
    operation = Operation.objects.get(tool=paying.name)
    operator = staff(user_factory, *RECONCILER)

    # The form starts from the evidence, which holds no output here: empty, the shape
    # only as a placeholder (never sent as a value).
    page = operator.get(f"{OPS_LIST}{operation.pk}/change/")
    form = page.context["decide_form"]
    assert form["output"].value() == ""
    assert 'placeholder="Required: paymentId (integer), amount (string), receiverId' \
        ' (integer)"' in page.content.decode()

    typed = json.dumps(PLACEHOLDER)
    refused = operator.post(reconcile_url(operation), {
        "action": "mark_succeeded", "fence": operation.fence, "output": typed,
        "note": "looked at the bank"})
    assert refused.status_code == 200
    html = refused.content.decode()
    assert 'data-testid="refused"' in html and escape(reconciliation.PLACEHOLDER) in html
    # Nothing lost: the page shows what was typed, and nothing was changed.
    assert refused.context["decide_form"]["output"].value() == typed
    assert "looked at the bank</textarea>" in html
    operation.refresh_from_db()
    assert operation.state == OperationState.OUTCOME_UNKNOWN
    assert not AuditEntry.objects.filter(operation_id=operation.pk).exists()

    # Not the schema's either; and the service refuses both, whoever calls it.
    wrong = operator.post(reconcile_url(operation), {
        "action": "mark_succeeded", "fence": operation.fence, "note": "bank",
        "output": '{"paymentId": "P-1", "amount": "12.00", "receiverId": 2}'})
    assert "does not match the tool&#x27;s output schema" in wrong.content.decode()
    person = type(alice).objects.get(username="operator")
    for output in (PLACEHOLDER, {"paymentId": "P-1", "amount": "1", "receiverId": 2}):
        with pytest.raises(reconciliation.ReconcileRefused):
            reconciliation.mark_succeeded(operation, person, output, "bank",
                                          fence=operation.fence)
    # The list's action refuses it too.
    listed = operator.post(OPS_LIST, {
        "action": "mark_succeeded", ACTION_CHECKBOX_NAME: [operation.pk],
        f"fence-{operation.pk}": operation.fence, "note": "bank", "output": typed})
    assert escape(reconciliation.PLACEHOLDER) in listed.content.decode()
    operation.refresh_from_db()
    assert operation.state == OperationState.OUTCOME_UNKNOWN

    found = {"paymentId": 4711, "amount": "12.00", "receiverId": 2}
    done = operator.post(reconcile_url(operation), {
        "action": "mark_succeeded", "fence": operation.fence, "output": json.dumps(found),
        "note": "The bank statement shows payment 4711."})
    assert done.status_code == 302 and done["Location"] == f"{OPS_LIST}{operation.pk}/change/"
    replay = agent.post(url, body, format="json")
    assert replay.status_code == 200 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json()["output"] == found


def test_a_skeleton_without_blanks_may_be_a_real_result() -> None:
    """A shape with nothing left blank (a boolean, an enum's first value) is no placeholder."""
    flag = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}
    kind = {"type": "object", "required": ["kind", "n"],
            "properties": {"kind": {"enum": ["card", "bank"]}, "n": {"type": "integer"}}}
    assert not reconciliation.is_placeholder(flag, {"ok": False})
    assert reconciliation.is_placeholder(kind, {"kind": "card", "n": 0})
    assert not reconciliation.is_placeholder(kind, {"kind": "card", "n": 3})
    assert reconciliation.is_placeholder(OUTPUT_SCHEMA, PLACEHOLDER)
    assert not reconciliation.is_placeholder(None, PLACEHOLDER)


def test_mark_succeeded_starts_from_a_late_result(make_tool: Any, user_factory: Any) -> None:
    """What an owner that lost its lease had produced is the evidence the form starts from."""
    from guarded_tools.models import JournalEntry

    definition = make_tool(output_schema=OUTPUT_SCHEMA)
    operation = Operation.objects.create(tool=definition.name, scope="s", key=key(),
                                         fingerprint="f", state="outcome_unknown", fence=2)
    late = {"paymentId": 7, "amount": "3.00", "receiverId": 1}
    JournalEntry.objects.create(operation=operation, fence=1, data={"output": late},
                                kind=JournalEntry.Kind.LATE_RESULT)
    page = staff(user_factory, *RECONCILER).get(reconcile_url(operation))
    assert json.loads(page.context["decide_form"]["output"].value()) == late
    assert "Late result of attempt 1:" in page.content.decode()


@pytest.fixture
def incident(settings: Any) -> Operation:
    """The demo's unknown outcome: the journal says "transferred", the ledger has no entry."""
    call_command("demo_seed", stdout=StringIO())
    call_command("demo_incident", "unknown", stdout=StringIO())
    return Operation.objects.get(state="outcome_unknown")


def test_the_deciding_fact_and_the_form_come_first_and_the_form_has_its_own_address(
        incident: Operation, user_factory: Any) -> None:
    operator = staff(user_factory, *RECONCILER)
    html = operator.get(f"{OPS_LIST}{incident.pk}/change/").content.decode()
    fact = html.index('data-testid="fact-evidence">no ledger entry with this reference<')
    form = html.index(f'action="{reconcile_url(incident)}" class="gt-reconcile"')
    assert html.index('data-testid="summary"') < fact < form < html.index(
        'data-testid="timeline"') and form < html.index("<h2>Evidence</h2>")
    assert f'action="{OPS_LIST}"' not in html  # no decision posts to the list any more
    assert 'data-testid="fact-recover">recover raised OperationalError' in html
    assert 'name="fence" value="1"' in html and 'required' in html.split(
        'name="note"')[1].split(">")[0]
    # Its own page too (GET), with the same facts first.
    page = operator.get(reconcile_url(incident)).content.decode()
    assert page.index("no ledger entry with this reference") < page.index(
        'class="gt-reconcile"') < page.index("<h2>Evidence</h2>")


def test_the_reconcile_address_is_for_those_who_may_reconcile_with_a_csrf_token(
        incident: Operation, user_factory: Any) -> None:
    viewer = staff(user_factory, "guarded_tools.view_operation", name="viewer")
    html = viewer.get(f"{OPS_LIST}{incident.pk}/change/").content.decode()
    assert "no ledger entry with this reference" in html  # the facts, for every viewer
    assert 'class="gt-reconcile"' not in html  # the form, only for reconcilers
    assert viewer.get(reconcile_url(incident)).status_code == 403
    assert viewer.post(reconcile_url(incident), {
        "action": "mark_not_executed", "fence": 1, "note": "no entry"}).status_code == 403
    reconciler = user_factory("operator", is_staff=True, perms=RECONCILER)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(reconciler)
    assert strict.post(reconcile_url(incident), {
        "action": "mark_not_executed", "fence": 1, "note": "no entry"}).status_code == 403
    incident.refresh_from_db()
    assert incident.state == OperationState.OUTCOME_UNKNOWN


@pytest.mark.parametrize("note", [None, "", "   "])
def test_a_decision_without_a_note_is_refused_on_the_server_and_nothing_is_lost(
        incident: Operation, user_factory: Any, note: str | None) -> None:
    operator = staff(user_factory, *RECONCILER)
    posted = {"action": "mark_failed", "fence": 1, "code": "payment_reversed",
              "message": "The bank reversed it."}
    if note is not None:
        posted["note"] = note
    refused = operator.post(reconcile_url(incident), posted)
    assert refused.status_code == 200
    html = refused.content.decode()
    assert "A note is required: say how you established the outcome." in html
    assert 'value="payment_reversed"' in html and 'value="The bank reversed it."' in html
    incident.refresh_from_db()
    assert incident.state == OperationState.OUTCOME_UNKNOWN
    assert not AuditEntry.objects.exists()
    done = operator.post(reconcile_url(incident), {**posted, "note": "Bank: reversed."},
                         follow=True)
    assert "1 operation reconciled." in done.content.decode()
    incident.refresh_from_db()
    assert incident.state == OperationState.FAILED
    assert incident.error["code"] == "payment_reversed"
    # Decided: the address says so, and changes nothing more.
    again = operator.post(reconcile_url(incident), {**posted, "note": "again"}, follow=True)
    assert "nothing was changed" in again.content.decode()
    assert AuditEntry.objects.count() == 1


def test_mark_not_executed_from_the_page_reads_proved_not_run(
        incident: Operation, user_factory: Any) -> None:
    operator = staff(user_factory, *RECONCILER)
    operator.post(reconcile_url(incident), {"action": "mark_not_executed", "fence": 1,
                                            "note": "No ledger entry: it never ran."})
    incident.refresh_from_db()
    assert (incident.state, incident.release_reason) == ("released", "not_executed")
    listing = operator.get(OPS_LIST).content.decode()
    assert '<div class="gt-release-reason">proved not run (marked not executed by a person)' \
        '</div>' in listing


def test_recover_now_says_what_recovery_did_in_one_sentence(
        make_tool: Any, user_factory: Any) -> None:
    """Not "Recovered: released: … It is now released."; the attempt row says what the
    fence and the claims count, not "Attempt (fence) 2 · 1 attempt"."""
    definition = make_tool(journal=True)
    k = key()
    operation = Operation.objects.create(tool=definition.name, scope="s", key=k,
                                         fingerprint="f", input={"operationId": k},
                                         state="abandoned")
    operator = staff(user_factory, *RECONCILER)
    page = operator.post(f"{OPS_LIST}{operation.pk}/recover/", follow=True).content.decode()
    said = page.split('class="success"')[1].split("</li>")[0]
    assert said.endswith("Recovery ran: the journal proves the operation never ran, so its"
                         " key is released and the agent&#x27;s next call runs it."), said
    assert "It is now" not in said
    assert 'data-testid="attempts">2 — claimed once, taken over once for recovery<' in page


def test_the_reconcile_page_refuses_framing_without_the_middleware(
        incident: Operation, user_factory: Any, settings: Any) -> None:
    """A decision page, framed by another site, could be clicked through: DENY, as the
    admin's other decision pages, where the site lacks ``XFrameOptionsMiddleware``."""
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if "XFrameOptions" not in m]
    operator = staff(user_factory, *RECONCILER)
    for response in (operator.get(reconcile_url(incident)),
                     operator.post(reconcile_url(incident), {"action": "mark_failed",
                                                             "fence": 1})):
        assert response.status_code == 200 and response["X-Frame-Options"] == "DENY"
