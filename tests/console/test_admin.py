"""The admin screens and actions, through Django's test client (browsers: test_browser.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client

from guarded_tools.models import AuditEntry, Confirmation, Operation, OperationState
from guarded_tools.store import fingerprint
from tests.conftest import key

pytestmark = pytest.mark.django_db

CONF_LIST = "/admin/guarded_tools/confirmation/"
OPS_LIST = "/admin/guarded_tools/operation/"


@pytest.fixture
def requester(user_factory: Any) -> Any:
    return user_factory("requester")


@pytest.fixture
def pending(make_tool: Any, requester: Any, client_for: Any) -> Confirmation:
    definition = make_tool(confirm="always", description="Refund a customer.",
                           input_schema={"type": "object", "properties": {
                               "operationId": {"type": "string"},
                               "amount": {"type": "string", "title": "Refund amount"}}})
    client_for(requester).post(f"/agent/tools/{definition.name}/",
                               {"operationId": key(), "amount": "<b>12.00</b>"}, format="json")
    return Confirmation.objects.get()


def staff_client(user_factory: Any, *perms: str, name: str = "staffer") -> Client:
    user = user_factory(name, is_staff=True, perms=perms)
    client = Client()
    client.force_login(user)
    return client


VIEW_CONF = ("guarded_tools.view_confirmation",)
APPROVER = (*VIEW_CONF, "guarded_tools.approve_confirmation")


def test_detail_page_shows_input_with_titles_escaped(user_factory: Any,
                                                     pending: Confirmation) -> None:
    client = staff_client(user_factory, *APPROVER)
    page = client.get(f"{CONF_LIST}{pending.pk}/change/").content.decode()
    assert "Refund a customer." in page and "Refund amount" in page
    assert "requester" in page
    assert "&lt;b&gt;12.00&lt;/b&gt;" in page and "<b>12.00</b>" not in page
    assert 'value="approve"' in page and 'value="decline"' in page


def test_actions_are_invisible_without_permission(user_factory: Any,
                                                  pending: Confirmation) -> None:
    viewer = staff_client(user_factory, *VIEW_CONF)
    page = viewer.get(CONF_LIST).content.decode()
    assert "approve_selected" not in page
    detail = viewer.get(f"{CONF_LIST}{pending.pk}/change/").content.decode()
    assert 'value="approve"' not in detail
    # Crafted POSTs are refused too: the action and the button endpoint.
    viewer.post(CONF_LIST, {"action": "approve_selected", ACTION_CHECKBOX_NAME: [pending.pk]})
    denied = viewer.post(f"{CONF_LIST}{pending.pk}/decide/", {"decision": "approve"})
    assert denied.status_code == 403
    pending.refresh_from_db()
    assert pending.status == "pending" and not AuditEntry.objects.exists()


def test_approve_action_reports_counts_and_audits(user_factory: Any,
                                                  pending: Confirmation) -> None:
    client = staff_client(user_factory, *APPROVER)
    response = client.post(CONF_LIST, {"action": "approve_selected", "post": "yes",
                                       ACTION_CHECKBOX_NAME: [pending.pk]}, follow=True)
    assert "1 confirmation approved." in response.content.decode()
    pending.refresh_from_db()
    assert pending.status == "approved" and pending.decided_by.username == "staffer"
    again = client.post(CONF_LIST, {"action": "approve_selected", "post": "yes",
                                    ACTION_CHECKBOX_NAME: [pending.pk]}, follow=True)
    assert "0 confirmations approved." in again.content.decode()
    assert AuditEntry.objects.filter(action="approve").count() == 1


def test_decline_action_asks_for_a_reason(user_factory: Any, pending: Confirmation) -> None:
    client = staff_client(user_factory, *APPROVER)
    form = client.post(CONF_LIST, {"action": "decline_selected",
                                   ACTION_CHECKBOX_NAME: [pending.pk]})
    assert form.status_code == 200 and 'name="reason"' in form.content.decode()
    client.post(CONF_LIST, {"action": "decline_selected", ACTION_CHECKBOX_NAME: [pending.pk],
                            "reason": "Amount too high"}, follow=True)
    pending.refresh_from_db()
    assert pending.status == "declined" and pending.reason == "Amount too high"
    assert AuditEntry.objects.get().note == "Amount too high"


def test_buttons_on_the_detail_page(user_factory: Any, pending: Confirmation) -> None:
    client = staff_client(user_factory, *APPROVER)
    response = client.post(f"{CONF_LIST}{pending.pk}/decide/", {"decision": "decline",
                                                               "reason": ""}, follow=True)
    assert "A reason is required" in response.content.decode()
    client.post(f"{CONF_LIST}{pending.pk}/decide/", {"decision": "approve"})
    pending.refresh_from_db()
    assert pending.status == "approved"


def test_four_eyes_in_the_admin(user_factory: Any, make_tool: Any, client_for: Any) -> None:
    me = user_factory("me", is_staff=True, perms=APPROVER)
    definition = make_tool(confirm="always")
    client_for(me).post(f"/agent/tools/{definition.name}/", {"operationId": key()},
                        format="json")
    client = Client()
    client.force_login(me)
    confirmation = Confirmation.objects.get()
    page = client.get(f"{CONF_LIST}{confirmation.pk}/change/").content.decode()
    assert "four-eyes" in page
    client.post(f"{CONF_LIST}{confirmation.pk}/decide/", {"decision": "approve"})
    confirmation.refresh_from_db()
    assert confirmation.status == "pending"


def test_changelist_filters_search_and_panel(user_factory: Any, pending: Confirmation) -> None:
    client = staff_client(user_factory, *APPROVER)
    page = client.get(CONF_LIST + "?status__exact=pending&q=requester").content.decode()
    row = f'value="{pending.pk}"'
    assert row in page and 'data-testid="pending-count">1<' in page
    assert row not in client.get(CONF_LIST + "?q=nobody").content.decode()
    assert row not in client.get(CONF_LIST + "?status__exact=declined").content.decode()
    index = client.get("/admin/").content.decode()
    assert 'data-testid="pending-count">1<' in index


# -- reconciliation --------------------------------------------------------------------------
@pytest.fixture
def unknown(make_tool: Any, requester: Any) -> Operation:
    definition = make_tool(output_schema={"type": "object", "required": ["paid"],
                                          "properties": {"paid": {"type": "boolean"}}})
    k = key()
    return Operation.objects.create(
        tool=definition.name, scope=f"auth.user:{requester.pk}", key=k, user=requester,
        fingerprint=fingerprint({"operationId": k}), input={"operationId": k},
        state=OperationState.OUTCOME_UNKNOWN,
    )


RECONCILER = ("guarded_tools.view_operation", "guarded_tools.reconcile_operation")


def test_unknown_outcomes_are_listed_first_with_dashboard(user_factory: Any,
                                                          unknown: Operation) -> None:
    Operation.objects.create(tool="x", scope="s", key="newer", fingerprint="f",
                             state=OperationState.SUCCEEDED)
    client = staff_client(user_factory, *RECONCILER)
    page = client.get(OPS_LIST).content.decode()
    assert page.index(unknown.key[:20]) < page.index("newer")
    assert 'data-testid="unknown-count">1<' in page


def test_mark_succeeded_validates_output_then_replays_it(user_factory: Any, unknown: Operation,
                                                         requester: Any, client_for: Any) -> None:
    client = staff_client(user_factory, *RECONCILER)
    data = {"action": "mark_succeeded", ACTION_CHECKBOX_NAME: [unknown.pk],
            f"fence-{unknown.pk}": unknown.fence}
    form = client.post(OPS_LIST, data)
    assert 'name="output"' in form.content.decode()
    bad = client.post(OPS_LIST, {**data, "note": "checked bank", "output": '{"paid": "yes"}'})
    assert "output schema" in bad.content.decode()
    client.post(OPS_LIST, {**data, "note": "checked bank", "output": '{"paid": true}'})
    unknown.refresh_from_db()
    assert unknown.state == "succeeded" and unknown.output == {"paid": True}
    audit = AuditEntry.objects.get()
    assert audit.action == "mark_succeeded" and audit.note == "checked bank"
    replay = client_for(requester).post(f"/agent/tools/{unknown.tool}/",
                                        unknown.input, format="json")
    assert replay.status_code == 200 and replay.json()["output"] == {"paid": True}


def test_mark_not_executed_releases_the_key(user_factory: Any, unknown: Operation,
                                            requester: Any, client_for: Any) -> None:
    client = staff_client(user_factory, *RECONCILER)
    client.post(OPS_LIST, {"action": "mark_not_executed", ACTION_CHECKBOX_NAME: [unknown.pk],
                           f"fence-{unknown.pk}": unknown.fence, "note": "bank has no record"})
    unknown.refresh_from_db()
    assert unknown.state == "released"
    retry = client_for(requester).post(f"/agent/tools/{unknown.tool}/", unknown.input,
                                       format="json")
    assert retry.status_code == 200 and retry.json()["operation"]["replayed"] is False


def test_mark_not_executed_starts_the_next_attempt_with_an_empty_journal(
        user_factory: Any, make_tool: Any, requester: Any, client_for: Any) -> None:
    """The first attempt's journal must not count against the retry the person allowed:
    a retry that fails before its effect is released with its own error, not unknown."""
    attempts: list[Any] = []

    def handler(input: Any, ctx: Any) -> Any:
        attempts.append(ctx.operation.read())
        if len(attempts) == 1:
            ctx.operation.write({"upstream_request": "req-1"})
        raise ConnectionError("upstream unreachable")

    definition = make_tool(handler)
    body = {"operationId": key()}
    agent = client_for(requester)
    first = agent.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert first.json()["error"]["code"] == "outcome_unknown"
    operation = Operation.objects.get()
    client = staff_client(user_factory, *RECONCILER)
    client.post(OPS_LIST, {"action": "mark_not_executed", ACTION_CHECKBOX_NAME: [operation.pk],
                           f"fence-{operation.pk}": operation.fence,
                           "note": "upstream has no record of req-1"})
    retry = agent.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert attempts == [None, None]  # the retry read an empty journal
    assert retry.json()["error"]["code"] == "internal_error"  # its own failure, released
    operation.refresh_from_db()
    assert operation.state == "released"
    kept = operation.journal.get()
    assert kept.data == {"upstream_request": "req-1"} and kept.removed  # kept for the record


def test_mark_failed_is_what_replays_get(user_factory: Any, unknown: Operation,
                                         requester: Any, client_for: Any) -> None:
    client = staff_client(user_factory, *RECONCILER)
    client.post(OPS_LIST, {"action": "mark_failed", ACTION_CHECKBOX_NAME: [unknown.pk],
                           f"fence-{unknown.pk}": unknown.fence,
                           "note": "bounced", "code": "payment_bounced",
                           "message": "The bank bounced it."})
    replay = client_for(requester).post(f"/agent/tools/{unknown.tool}/", unknown.input,
                                        format="json")
    assert replay.status_code == 409
    error = replay.json()["error"]
    assert error["code"] == "payment_bounced" and error["retry"] == "never"


def test_reconcile_needs_its_permission(user_factory: Any, unknown: Operation) -> None:
    viewer = staff_client(user_factory, "guarded_tools.view_operation")
    assert "mark_failed" not in viewer.get(OPS_LIST).content.decode()
    viewer.post(OPS_LIST, {"action": "mark_not_executed", ACTION_CHECKBOX_NAME: [unknown.pk],
                           f"fence-{unknown.pk}": unknown.fence, "note": "sneaky"})
    unknown.refresh_from_db()
    assert unknown.state == "outcome_unknown" and not AuditEntry.objects.exists()


def test_only_unknown_operations_can_be_reconciled(user_factory: Any, unknown: Operation) -> None:
    Operation.objects.filter(pk=unknown.pk).update(state=OperationState.SUCCEEDED)
    client = staff_client(user_factory, *RECONCILER)
    response = client.post(OPS_LIST, {"action": "mark_not_executed",
                                      ACTION_CHECKBOX_NAME: [unknown.pk], "note": "x"},
                           follow=True)
    assert "nothing to reconcile" in response.content.decode()
    unknown.refresh_from_db()
    assert unknown.state == "succeeded"


def test_operation_detail_shows_journal_and_late_results(user_factory: Any,
                                                         unknown: Operation) -> None:
    from guarded_tools.store import Claim, OperationStore

    unknown.journal.create(data={"upstream": "req-42"}, fence=1)  # the live journal
    # A late result as the store keeps it (issue 28: with its event, which the timeline
    # reads; the timeline no longer rebuilds itself from journal rows).
    OperationStore().record_late_result(Claim("fresh", unknown, fence=1), {"output": {"late": 1}})
    client = staff_client(user_factory, *RECONCILER)
    page = client.get(f"{OPS_LIST}{unknown.pk}/change/").content.decode()
    assert "req-42" in page and "late result" in page


def test_journal_entries_have_a_read_only_admin(user_factory: Any, unknown: Operation) -> None:
    entry = unknown.journal.create(data={"upstream": "req-77"}, fence=1)
    client = staff_client(user_factory, "guarded_tools.view_journalentry")
    assert "req-77" in client.get(f"/admin/guarded_tools/journalentry/{entry.pk}/change/")\
        .content.decode()
    assert client.get("/admin/guarded_tools/journalentry/add/").status_code == 403
    client.post(f"/admin/guarded_tools/journalentry/{entry.pk}/delete/", {"post": "yes"})
    assert unknown.journal.filter(pk=entry.pk).exists()


@pytest.mark.parametrize("page", [OPS_LIST, CONF_LIST], ids=["operations", "confirmations"])
def test_the_tool_filter_lists_registered_tools_and_filters(
        user_factory: Any, make_tool: Any, page: str) -> None:
    """The sidebar offers the registry's tools that can have rows on that page (tools
    that make operations; tools that ask for confirmation), not a DISTINCT scan of the
    table; a tool no longer registered is still reachable by its URL parameter."""
    model = Operation if page == OPS_LIST else Confirmation
    registered = make_tool(confirm="always" if model is Confirmation else None).name
    never_here = (make_tool(read_only=True) if model is Operation else make_tool()).name
    for i, name in enumerate([registered, registered, "retired_tool"]):
        fields = {"tool": name, "scope": "s", "key": f"k{i}", "fingerprint": "f" * 64}
        if model is Operation:
            model.objects.create(**fields, state=OperationState.SUCCEEDED)
        else:
            model.objects.create(**fields, input={})
    client = staff_client(user_factory, "guarded_tools.view_operation",
                          "guarded_tools.view_confirmation")
    sidebar = client.get(page).content.decode()
    assert f"?tool={registered}" in sidebar and "?tool=retired_tool" not in sidebar
    assert f"?tool={never_here}" not in sidebar
    listed = client.get(page, {"tool": registered}).context["cl"].result_list
    assert [row.tool for row in listed] == [registered, registered]
    listed = client.get(page, {"tool": "retired_tool"}).context["cl"].result_list
    assert [row.tool for row in listed] == ["retired_tool"]


# -- the approver's page is bounded ----------------------------------------------------------
def _input_of_about(size: int, shape: str) -> dict[str, Any]:
    """A tool input of about ``size`` bytes of JSON, shaped to amplify a naive page."""
    if shape == "records":
        value: Any = [{"sku": f"s{i}", "qty": i, "gift": False} for i in range(size // 40)]
    elif shape == "numbers":
        value = [1] * (size // 2)
    elif shape == "markup":
        value = "<&>" * (size // 3)
    else:  # many small top-level fields
        return {"operationId": "marker-once", **{f"f{i}": 1 for i in range(size // 10)}}
    return {"operationId": "marker-once", "amount": "12.00", "items": value}


@pytest.mark.parametrize("shape", ["records", "numbers", "markup", "fields"])
def test_the_approvers_page_renders_a_large_input_once_and_bounded(
        user_factory: Any, make_tool: Any, shape: str) -> None:
    """A 120 KB input made the page 18 MB: every field highlighted, then the whole input
    again. It is rendered once, within a bound, with the whole input as a download."""
    definition = make_tool(confirm="always")
    data = _input_of_about(120 * 1024, shape)
    assert len(json.dumps(data)) > 100 * 1024
    confirmation = Confirmation.objects.create(
        tool=definition.name, scope="s", key="k", fingerprint=fingerprint(data), input=data)
    client = staff_client(user_factory, *APPROVER)
    page = client.get(f"{CONF_LIST}{confirmation.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    empty = Confirmation.objects.create(tool=definition.name, scope="s", key="k2",
                                        fingerprint="f", input={})
    small = client.get(f"{CONF_LIST}{empty.pk}/change/")
    assert len(html) - len(small.content) <= 80 * 1024  # the input's share of the page
    assert html.count("marker-once") == 1  # once, not in a table and again as JSON
    assert "not shown" in html and 'value="approve"' in html
    download = client.get(f"{CONF_LIST}{confirmation.pk}/input.json")
    assert download.status_code == 200 and json.loads(download.content) == data
    assert "attachment" in download["Content-Disposition"]


def test_the_input_download_needs_view_permission(user_factory: Any,
                                                  pending: Confirmation) -> None:
    outsider = staff_client(user_factory, "guarded_tools.view_operation", name="outsider")
    assert outsider.get(f"{CONF_LIST}{pending.pk}/input.json").status_code == 403
    nowhere = "00000000-0000-0000-0000-000000000000"
    assert outsider.get(f"{CONF_LIST}{nowhere}/input.json").status_code == 403  # no oracle
    anonymous = Client().get(f"{CONF_LIST}{pending.pk}/input.json")
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]


# -- changelists survive any filter or search value ------------------------------------------
JOURNAL_LIST = "/admin/guarded_tools/journalentry/"
AUDIT_LIST = "/admin/guarded_tools/auditentry/"
LOOKUPS = [
    (OPS_LIST, "state__exact"), (OPS_LIST, "tool"), (OPS_LIST, "recovered__exact"),
    (OPS_LIST, "state"), (OPS_LIST, "state__in"), (OPS_LIST, "tool__exact"), (OPS_LIST, "q"),
    (CONF_LIST, "status__exact"), (CONF_LIST, "waiting"), (CONF_LIST, "tool"),
    (CONF_LIST, "q"),
    (JOURNAL_LIST, "kind__exact"), (JOURNAL_LIST, "removed__exact"), (JOURNAL_LIST, "q"),
    (AUDIT_LIST, "action__exact"), (AUDIT_LIST, "q"),
]
HOSTILE = {"nul": "\x00", "nul-inside": "succeeded\x00", "oversized": "x" * 20_000,
           "many-words": "a " * 5_000}


@pytest.mark.parametrize("page, param", LOOKUPS, ids=[f"{p.split('/')[-2]}-{n}"
                                                       for p, n in LOOKUPS])
def test_every_changelist_filter_and_search_survives_hostile_values(
        user_factory: Any, unknown: Operation, page: str, param: str) -> None:
    """PostgreSQL refuses a NUL in text, and an endless search is an endless query: no
    row can match either, so the list answers with none (on every database)."""
    unknown.journal.create(data={"upstream": "req-1"}, fence=1)
    AuditEntry.objects.create(action="mark_failed", operation=unknown, note="n")
    Confirmation.objects.create(tool=unknown.tool, scope="s", key="k", fingerprint="f",
                                input={})
    client = staff_client(user_factory, "guarded_tools.view_operation",
                          "guarded_tools.view_confirmation", "guarded_tools.view_journalentry",
                          "guarded_tools.view_auditentry")
    assert client.get(page).context["cl"].result_count == 1  # the row the values miss
    for name, value in HOSTILE.items():
        for facets in ({}, {"_facets": "1"}):
            response = client.get(page, {param: value, **facets})
            if response.status_code == 302:  # Django's answer to a value of the wrong type
                assert "e=1" in response["Location"], name
                assert client.get(response["Location"]).status_code == 200, name
                continue
            assert response.status_code == 200, name
            assert list(response.context["cl"].result_list) == [], name
            assert "Nothing matches" in response.content.decode(), name


def test_the_operation_page_bounds_each_value_and_offers_it_whole(user_factory: Any,
                                                                  unknown: Operation) -> None:
    data = _input_of_about(120 * 1024, "numbers")
    Operation.objects.filter(pk=unknown.pk).update(input=data, output=data)
    client = staff_client(user_factory, *RECONCILER)
    html = client.get(f"{OPS_LIST}{unknown.pk}/change/").content.decode()
    assert len(html) < 3 * 80 * 1024  # input and output, each within its bound
    assert html.count("not shown") == 2 and f"{unknown.pk}/output.json" in html
    for part in ("input", "output"):
        download = client.get(f"{OPS_LIST}{unknown.pk}/{part}.json")
        assert download.status_code == 200 and json.loads(download.content) == data
    assert client.get(f"{OPS_LIST}{unknown.pk}/fence.json").status_code == 404
    outsider = staff_client(user_factory, *VIEW_CONF, name="outsider")
    assert outsider.get(f"{OPS_LIST}{unknown.pk}/input.json").status_code == 403


@pytest.mark.parametrize("page, action", [(OPS_LIST, "mark_not_executed"),
                                          (OPS_LIST, "mark_succeeded"),
                                          (CONF_LIST, "approve_selected"),
                                          (CONF_LIST, "decline_selected")])
def test_an_action_on_a_crafted_selection_does_nothing(user_factory: Any, unknown: Operation,
                                                       pending: Confirmation, page: str,
                                                       action: str) -> None:
    client = staff_client(user_factory, *RECONCILER, *APPROVER)
    for value in ("\x00", "not-a-uuid", "x" * 5000):
        response = client.post(page, {"action": action, "note": "n", "reason": "r",
                                      ACTION_CHECKBOX_NAME: [value, unknown.pk, pending.pk]},
                               follow=True)
        assert response.status_code == 200
        assert "cannot exist: nothing was done" in response.content.decode()
    unknown.refresh_from_db()
    pending.refresh_from_db()
    assert unknown.state == "outcome_unknown" and pending.status == "pending"
    assert not AuditEntry.objects.exists()


def test_view_only_staff_see_no_operations_on_the_request_page(
    user_factory: Any, make_tool: Any, requester: Any, client_for: Any
) -> None:
    """Issue 25, item 9: a staff user with only view_confirmation gets 403 on the operations
    list, so the request page shows them no operation's key, state or link either."""
    definition = make_tool(confirm="effect-only", description="Refund a customer.")
    earlier_key, asked_key = key(), key()
    for operation_id in (earlier_key, asked_key):
        response = client_for(requester).post(f"/agent/tools/{definition.name}/",
                                              {"operationId": operation_id}, format="json")
        assert response.status_code == 202, response.content
    confirmation = Confirmation.objects.get(key=asked_key)
    operation = Operation.objects.get(tool=definition.name, key=earlier_key)
    viewer = staff_client(user_factory, *VIEW_CONF, name="viewer")
    assert viewer.get(OPS_LIST).status_code == 403
    page = viewer.get(f"{CONF_LIST}{confirmation.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="recent-calls-hidden"' in html
    assert 'data-testid="recent-calls"' not in html
    assert earlier_key not in html and OPS_LIST not in html  # the other call's key, links
    assert str(operation.pk) not in html
    operator = staff_client(user_factory, *VIEW_CONF, "guarded_tools.view_operation",
                            name="operator")
    shown = operator.get(f"{CONF_LIST}{confirmation.pk}/change/").content.decode()
    assert 'data-testid="recent-calls"' in shown and f"{OPS_LIST}{operation.pk}/" in shown
    assert earlier_key[:20] in shown
    assert 'data-testid="recent-calls-hidden"' not in shown
