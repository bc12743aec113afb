"""The admin of allowances: granted from a request's page or anew by people who may approve
the calls, by as many as the bounds need; the list says what is used, left and who granted."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from guarded_tools.models import Allowance, AllowanceStatus, AuditEntry, Confirmation
from tests.conftest import Effects
from tests.pipeline.allowance_support import SCHEMA, allowing, payment, people
from tests.pipeline.policy_support import call

pytestmark = pytest.mark.django_db

LIST = "/admin/guarded_tools/allowance/"


def browser(person: Any) -> Client:
    client = Client()
    client.force_login(person)
    return client


def form_values(page: str) -> dict[str, str]:
    """The add form's initial values, as a browser would post them back."""
    values = {}
    for name in ("tool", "user", "count", "window", "sum_field", "per_call", "constraints",
                 "confirmation", "expires_at_0", "expires_at_1"):
        found = re.search(rf'name="{name}"[^>]*value="([^"]*)"', page) or re.search(
            rf'<select name="{name}"[^>]*>.*?<option value="([^"]*)" selected', page, re.S) or \
            re.search(rf'<textarea name="{name}"[^>]*>\s*([^<]*)</textarea>', page)
        values[name] = found.group(1) if found else ""
    import html

    return {k: html.unescape(v) for k, v in values.items()}


@pytest.fixture
def granters(user_factory: Any) -> list[Any]:
    return people(user_factory, "approver", "approver2")


def test_granted_from_a_request_page_runs_the_next_calls(make_tool: Any, client_for: Any,
                                                         alice: Any,
                                                         granters: list[Any]) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=allowing(), input_schema=SCHEMA)
    agent = client_for(alice)
    body = payment(250)
    assert call(agent, definition.name, body).status_code == 202
    request = Confirmation.objects.get()
    approver = browser(granters[0])
    page = approver.get(f"/admin/guarded_tools/confirmation/{request.pk}/change/").content.decode()
    link = re.search(r'href="([^"]+)" data-testid="allow-link"', page)
    assert link is not None, "the request page offers an allowance"
    form = approver.get(link.group(1).replace("&amp;", "&")).content.decode()
    values = form_values(form)
    assert values["tool"] == definition.name and values["sum_field"] == "amount"
    assert values["per_call"] == "250" and '"receiverId": ["r-17"]' in values["constraints"]
    done = approver.post(link.group(1).replace("&amp;", "&"), {**values, "note": "rent"})
    assert done.status_code == 302, done.content.decode()[:3000]
    allowance = Allowance.objects.get()
    assert allowance.status == AllowanceStatus.ACTIVE and allowance.approvals_required == 1
    assert allowance.confirmation_id == request.pk
    request.refresh_from_db()
    assert request.status == "approved"  # the request it was granted from, too
    assert call(agent, definition.name, body).status_code == 200
    assert call(agent, definition.name, payment(200)).status_code == 200
    assert call(agent, definition.name, payment(251)).status_code == 202  # past 250 a call
    listing = approver.get(LIST).content.decode()
    assert "user alice" in listing and "3 calls left today" in listing, listing
    assert "approver" in listing and "at most 250.00 a call" in listing
    assert AuditEntry.objects.filter(action="allowance_grant", actor=granters[0]).exists()


def test_a_bound_in_the_two_approver_tier_needs_a_second_granter(
        make_tool: Any, client_for: Any, alice: Any, granters: list[Any],
        user_factory: Any) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm=allowing(), input_schema=SCHEMA)
    one, two = (browser(p) for p in granters)
    form = one.get(LIST + "add/").content.decode()
    values = {**form_values(form), "tool": definition.name, "user": str(alice.pk),
              "count": "2", "limit": "5000", "sum_field": "amount", "window": "day",
              "constraints": '{"receiverId": ["r-17"]}'}
    assert one.post(LIST + "add/", values).status_code == 302
    allowance = Allowance.objects.get()
    assert allowance.status == AllowanceStatus.PENDING and allowance.approvals_required == 2
    assert "waiting for more granters (1 of 2)" in one.get(LIST).content.decode()
    assert call(client_for(alice), definition.name, payment(2000)).status_code == 202
    # The same person cannot give the second grant.
    one.post(LIST, {"action": "grant_selected", "_selected_action": [allowance.pk]})
    allowance.refresh_from_db()
    assert allowance.status == AllowanceStatus.PENDING
    two.post(LIST, {"action": "grant_selected", "_selected_action": [allowance.pk]})
    allowance.refresh_from_db()
    assert allowance.status == AllowanceStatus.ACTIVE
    assert "approver and approver2" in two.get(LIST).content.decode()
    shown = two.get(f"{LIST}{allowance.pk}/change/")
    assert shown.status_code == 200 and "2 (rule &quot;huge&quot;)" in shown.content.decode()
    ran = call(client_for(alice), definition.name, payment(2000))
    assert ran.status_code == 200 and handler.count == 1
    # The operation's timeline says under which allowance it ran, and who granted it.
    staff = people(user_factory, "operator")[0]
    from django.contrib.auth.models import Permission

    staff.user_permissions.add(Permission.objects.get(codename="view_operation"))
    page = browser(staff).get(
        f"/admin/guarded_tools/operation/{ran.json()['operation']['id']}/change/")
    assert f"ran under allowance #{allowance.pk}, granted by approver and approver2" in \
        page.content.decode()
    # Revoked in the list: the next call waits for people.
    two.post(LIST, {"action": "revoke_selected", "_selected_action": [allowance.pk]})
    assert call(client_for(alice), definition.name, payment(2000)).status_code == 202
    assert handler.count == 1


def test_nobody_without_the_approve_permission_grants(make_tool: Any, alice: Any,
                                                      user_factory: Any) -> None:
    from django.contrib.auth.models import Permission

    make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    viewer = user_factory("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_allowance"))
    client = browser(viewer)
    assert client.get(LIST).status_code == 200
    assert client.get(LIST + "add/").status_code == 403


def test_the_form_says_why_a_bound_cannot_be_granted(make_tool: Any, alice: Any,
                                                     granters: list[Any]) -> None:
    from tests.pipeline.policy_support import payments

    allowed = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    make_tool(Effects(), confirm=payments(), input_schema=SCHEMA)
    client = browser(granters[0])
    values = {**form_values(client.get(LIST + "add/").content.decode()),
              "tool": allowed.name, "user": str(alice.pk), "count": "2", "sum_field": "amount",
              "per_call": "30", "window": "day", "constraints": "{}"}
    page = client.post(LIST + "add/", values).content.decode()
    assert "need nobody&#x27;s approval" in page and not Allowance.objects.exists()


def test_mark_not_executed_gives_the_use_back_once(make_tool: Any, client_for: Any,
                                                   alice: Any, granters: list[Any],
                                                   user_factory: Any) -> None:
    """An outcome a person proves never happened gives its allowance use back; the same
    decision posted again gives nothing back twice."""
    from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

    from guarded_tools.confirmations import allowances
    from guarded_tools.models import AllowanceUse, Operation, OperationState
    from tests.pipeline.allowance_support import bounds

    runs: list[str] = []

    def handler(input: Any, ctx: Any) -> Any:
        runs.append(input["operationId"])
        if len(runs) == 1:  # sent, then the line dropped: the outcome is unknown
            ctx.operation.write({"upstream_request": "req-1"})
            raise ConnectionError("upstream unreachable")
        return {"paid": len(runs)}

    definition = make_tool(handler, confirm=allowing(), input_schema=SCHEMA)
    allowances.propose(bounds(definition.name, alice, count=2), granters[0])
    agent = client_for(alice)
    body = payment(100)
    assert call(agent, definition.name, body).json()["error"]["code"] == "outcome_unknown"
    operation = Operation.objects.get(tool=definition.name)
    assert AllowanceUse.objects.filter(operation_id=operation.pk).count() == 1
    person = user_factory("operator", is_staff=True, perms=(
        "guarded_tools.view_operation", "guarded_tools.reconcile_operation"))
    client = Client(enforce_csrf_checks=True)
    client.force_login(person)
    ops = "/admin/guarded_tools/operation/"
    assert client.get(ops).status_code == 200
    form = {"action": "mark_not_executed", ACTION_CHECKBOX_NAME: [operation.pk],
            f"fence-{operation.pk}": operation.fence, "note": "no record of req-1",
            "csrfmiddlewaretoken": client.cookies["csrftoken"].value}
    client.post(ops, form)
    operation.refresh_from_db()
    assert operation.state == OperationState.RELEASED
    assert not AllowanceUse.objects.exists()
    assert call(agent, definition.name, body).status_code == 200  # the retry uses it again
    client.post(ops, form)  # posted twice: refused, nothing given back
    assert AllowanceUse.objects.count() == 1
    assert call(agent, definition.name, payment(100)).status_code == 200
    assert call(agent, definition.name, payment(100)).status_code == 202  # 2 of 2 used
    assert AuditEntry.objects.filter(action="allowance_return").count() == 1


def test_the_list_shows_one_bound_a_line_and_the_end_to_the_second(
        make_tool: Any, alice: Any, granters: list[Any]) -> None:
    from guarded_tools.confirmations import allowances
    from tests.pipeline.allowance_support import bounds

    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    allowance = allowances.propose(bounds(definition.name, alice), granters[0])
    page = browser(granters[1]).get(LIST).content.decode()
    assert 'href="/static/guarded_tools/admin.css"' in page
    cell = re.search(r'<td class="field-bounds">(.*?)</td>', page)
    assert cell is not None and re.findall(r'<span class="gt-bound">([^<]*)</span>',
                                           cell.group(1)) == [
        "up to 3 calls and 900.00 per day", "at most 300.00 a call", "receiverId in r-17"]
    end = re.search(r'<td class="field-until">([^<]*)</td>', page)
    assert end is not None and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", end.group(1))
    detail = browser(granters[1]).get(f"{LIST}{allowance.pk}/change/").content.decode()
    assert detail.count('<span class="gt-bound">') == 3


def test_an_operation_run_under_an_allowance_heads_its_page_once(
        make_tool: Any, client_for: Any, alice: Any, user_factory: Any,
        granters: list[Any]) -> None:
    from django.utils.html import escape

    from guarded_tools.confirmations import allowances
    from guarded_tools.models import Operation
    from tests.pipeline.allowance_support import bounds

    definition = make_tool(Effects(), confirm=allowing(), input_schema=SCHEMA)
    allowances.propose(bounds(definition.name, alice), granters[0])
    assert call(client_for(alice), definition.name, payment(200)).status_code == 200
    operation = Operation.objects.get()
    staff = browser(user_factory("root", is_staff=True, is_superuser=True))
    body = staff.get(f"/admin/guarded_tools/operation/{operation.pk}/change/").content.decode(
        ).split("<body")[1]
    assert re.search(r'<h1 class="gt-subject" data-testid="summary">[^<]*amount 200', body)
    assert body.count("<h1") == 1 and "View operation" not in body
    assert body.count(escape(str(operation))) == 1  # the breadcrumbs name the row
    assert f'data-testid="key">{operation.key}<' in body
