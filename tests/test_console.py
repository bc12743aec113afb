"""The approver's and the operator's console (issue 18), through the admin and HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client

from guarded_tools.models import Confirmation
from tests.conftest import key

pytestmark = pytest.mark.django_db

CONF_LIST = "/admin/guarded_tools/confirmation/"
OPS_LIST = "/admin/guarded_tools/operation/"
APPROVER = ("guarded_tools.view_confirmation", "guarded_tools.approve_confirmation")
RECONCILER = ("guarded_tools.view_operation", "guarded_tools.reconcile_operation")


def staff_client(user_factory: Any, *perms: str, name: str = "staffer") -> Client:
    client = Client()
    client.force_login(user_factory(name, is_staff=True, perms=perms))
    return client


@pytest.fixture
def requester(user_factory: Any) -> Any:
    return user_factory("requester")


@pytest.fixture
def refund(make_tool: Any) -> Any:
    return make_tool(confirm="always", input_schema={"type": "object", "properties": {
        "operationId": {"type": "string"}, "amount": {"type": "string", "title": "Amount"}}})


def ask(client_for: Any, user: Any, definition: Any, **input: Any) -> Any:
    return client_for(user).post(f"/agent/tools/{definition.name}/",
                                 {"operationId": key(), **input}, format="json")


def test_bulk_approve_counts_what_it_approved_and_skipped(
        user_factory: Any, requester: Any, client_for: Any, refund: Any) -> None:
    for amount in ("1.00", "2.00", "3.00"):
        ask(client_for, requester, refund, amount=amount)
    first, *others = Confirmation.objects.order_by("created_at")
    Confirmation.objects.filter(pk=first.pk).update(status="declined")
    client = staff_client(user_factory, *APPROVER)
    # From the list of waiting requests: what it approves leaves that list.
    page = client.post(f"{CONF_LIST}?waiting=yes", {"action": "approve_selected",
                                   ACTION_CHECKBOX_NAME: [c.pk for c in (first, *others)]},
                       follow=True).content.decode()
    assert "2 confirmations approved." in page
    assert "skipped" not in page  # the declined one is not in the waiting list at all
    third = ask(client_for, requester, refund, amount="4.00")
    assert third.status_code == 202
    fourth = Confirmation.objects.order_by("-created_at").first()
    assert fourth is not None
    page = client.post(CONF_LIST + "?status__exact=pending", {
        "action": "approve_selected", ACTION_CHECKBOX_NAME: [fourth.pk]},
        follow=True).content.decode()
    assert "1 confirmation approved." in page and "skipped" not in page
