"""The demo's `approver` (issue 25 item 18): staff with only an approver's permissions.

The pages are walked as that person, logged in through the admin's login form with CSRF
enforced, for requests the demo agent made over HTTP as the docs' demo tour does.
"""

from __future__ import annotations

import re
import uuid
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from guarded_tools.models import Confirmation
from project.demo.management.commands.demo_seed import APPROVER_PERMISSIONS
from tests.integration.demo import call, csrf

pytestmark = pytest.mark.django_db

CONF_LIST = "/admin/guarded_tools/confirmation/"


def ask_payment(agent: APIClient, amount: str) -> tuple[dict[str, Any], Confirmation]:
    """The demo tour's walk: the accounts, an authorization, the payment (answered 202)."""
    source, receiver = call(agent, "list_payment_accounts", {}).json()["output"]["accounts"]
    authorization = call(agent, "prepare_payment_authorization", {
        "requestId": str(uuid.uuid4()), "sourceId": source["id"]}).json()["output"]
    body = {"operationId": str(uuid.uuid4()), "sourceId": source["id"],
            "receiverId": receiver["id"], "amount": amount, **authorization}
    response = call(agent, "send_payment", body)
    assert response.status_code == 202, response.json()
    return body, Confirmation.objects.get(key=body["operationId"])


def log_in_as_approver() -> Client:
    client = Client(enforce_csrf_checks=True)
    login = client.post("/admin/login/?next=/admin/", {
        "username": "approver", "password": "approver",
        "csrfmiddlewaretoken": csrf(client, "/admin/login/")})
    assert login.status_code == 302 and login["Location"] == "/admin/"
    return client


def test_the_demo_approver_is_staff_with_exactly_the_approvers_permissions(agent: Any) -> None:
    from django.contrib.auth import get_user_model

    approver = get_user_model().objects.get(username="approver")
    assert approver.is_staff and not approver.is_superuser
    assert approver.get_all_permissions() == set(APPROVER_PERMISSIONS)
    staff = get_user_model().objects.get(username="staff")
    assert staff.is_staff and staff.is_superuser  # the operator
    call_command("demo_seed", stdout=StringIO())  # seeding again changes nothing
    approver.refresh_from_db()
    assert not approver.is_superuser
    assert approver.get_all_permissions() == set(APPROVER_PERMISSIONS)


def test_the_demo_approver_sees_the_queue_and_the_request_and_decides_it(agent: Any) -> None:
    body, first = ask_payment(agent, "500.00")
    _, second = ask_payment(agent, "700.00")
    client = log_in_as_approver()

    queue = client.get(CONF_LIST)
    assert queue.status_code == 200
    assert "Pay 500.00 EUR from agent&#x27;s Checking" in queue.content.decode()
    url = f"{CONF_LIST}{first.pk}/change/"
    page = client.get(url).content.decode()
    assert 'data-testid="summary"' in page and "Approve" in page and "Decline" in page
    # Every admin link on the request page opens for this person: no dead ends (403).
    links = set(re.findall(r'href="(/admin/[^"#]*)"', page)) - {"/admin/logout/"}
    assert f"/admin/demo/account/{body['sourceId']}/change/" in links
    for link in sorted(links):
        assert client.get(link).status_code == 200, link

    decided = client.post(f"{CONF_LIST}{first.pk}/decide/", {
        "decision": "approve", "reason": "Rent, as agreed.",
        "csrfmiddlewaretoken": csrf(client, url)}, follow=True)
    assert "Approved. The agent&#x27;s retry will run it once." in decided.content.decode()
    first.refresh_from_db()
    assert first.status == "approved" and first.decided_by.username == "approver"
    done = call(agent, "send_payment", body)
    assert done.status_code == 200, done.json()

    other = f"{CONF_LIST}{second.pk}/change/"
    client.post(f"{CONF_LIST}{second.pk}/decide/", {
        "decision": "decline", "reason": "Not this month.",
        "csrfmiddlewaretoken": csrf(client, other)})
    second.refresh_from_db()
    assert second.status == "declined" and second.reason == "Not this month."
    # A decision without the CSRF token is refused.
    assert client.post(f"{CONF_LIST}{second.pk}/decide/", {"decision": "approve"}
                       ).status_code == 403


def test_the_demo_approver_cannot_reconcile_or_manage_users(agent: Any) -> None:
    call_command("demo_incident", "unknown", stdout=StringIO())
    from guarded_tools.models import Operation

    operation = Operation.objects.get(state="outcome_unknown")
    client = log_in_as_approver()
    page = client.get(f"/admin/guarded_tools/operation/{operation.pk}/change/")
    assert page.status_code == 200  # the request page links to calls: it may read them
    assert 'data-testid="mark_succeeded"' not in page.content.decode()
    assert client.get("/admin/auth/user/").status_code == 403
    index = client.get("/admin/").content.decode()
    assert "/admin/auth/user/" not in index


def test_the_demo_policy_runs_small_payments_and_asks_two_for_large(
        agent: APIClient) -> None:
    """The demo's rules as the demo tour walks them: 12.50 runs at once, 500.00 asks one
    approver, above 1,000.00 asks two, and approver and approver2 give them."""
    from django.contrib.auth import get_user_model

    from guarded_tools import confirmations
    from project.demo.models import Account

    source, receiver = call(agent, "list_payment_accounts", {}).json()["output"]["accounts"]
    Account.objects.filter(pk=source["id"]).update(balance="5000.00")

    def pay(amount: str) -> Any:
        authorization = call(agent, "prepare_payment_authorization", {
            "requestId": str(uuid.uuid4()), "sourceId": source["id"]}).json()["output"]
        body = {"operationId": str(uuid.uuid4()), "sourceId": source["id"],
                "receiverId": receiver["id"], "amount": amount, **authorization}
        return body, call(agent, "send_payment", body)

    assert pay("12.50")[1].status_code == 200
    _, one = pay("500.00")
    assert one.status_code == 202
    assert "0 of 1 approvals given" in one.json()["error"]["message"]
    body, two = pay("1500.00")
    assert two.status_code == 202
    assert two.json()["error"]["confirmation"]["approvals"] == {"given": 0, "required": 2}
    people = get_user_model().objects
    pending = Confirmation.objects.get(key=body["operationId"])
    confirmations.approve(pending, people.get(username="approver"))
    assert "1 of 2 approvals given" in call(agent, "send_payment", body).json()["error"][
        "message"]
    confirmations.approve(pending, people.get(username="approver2"))
    assert call(agent, "send_payment", body).status_code == 200


def test_the_login_page_and_the_home_page_name_every_demo_user(agent: Any) -> None:
    """Both approvers the walk-through needs, not only agent and staff; each logs in with
    the password shown."""
    for url in ("/accounts/login/", "/"):
        page = Client().get(url)
        assert page.status_code == 200
        text = page.content.decode()
        for name in ("agent", "staff", "approver", "approver2"):
            assert f"<code>{name}</code> / <code>{name}</code>" in text, (url, name)
    for name in ("approver", "approver2"):
        assert Client().login(username=name, password=name)


@pytest.mark.parametrize("kind", ["unknown", "abandoned"])
def test_demo_incident_prints_a_link_that_opens_the_operation(agent: Any, kind: str) -> None:
    from urllib.parse import urlsplit

    from guarded_tools.models import Operation

    out = StringIO()
    call_command("demo_incident", kind, stdout=out)
    operation = Operation.objects.get(tool="send_payment", key__startswith="incident-")
    link = f"http://127.0.0.1:8000/admin/guarded_tools/operation/{operation.pk}/change/"
    printed = out.getvalue().strip()
    assert printed.endswith(f" {link}"), printed  # the demo's address, not a bare path
    staff = Client()
    staff.force_login(__import__("django.contrib.auth", fromlist=["get_user_model"])
                      .get_user_model().objects.get(username="staff"))
    assert staff.get(urlsplit(link).path).status_code == 200
