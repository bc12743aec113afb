"""The admin changelists issue the same number of queries at any row count.

The operations and confirmations changelists (with their dashboard panels, which run
aggregate queries) must not issue a query per row, whatever the rows hold: users,
deciders, states. Compared at 10 and at 200 rows (two pages' worth). Their time at
1,000,000 rows is measured by ``make bench`` (bench/admin_scale.py), not here.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from guarded_tools.models import (
    Confirmation,
    ConfirmationStatus,
    Operation,
    OperationState,
)

pytestmark = pytest.mark.django_db

PAGES = {
    "operations": "/admin/guarded_tools/operation/",
    "operations, filtered": "/admin/guarded_tools/operation/?state__exact=outcome_unknown",
    "confirmations": "/admin/guarded_tools/confirmation/",
    "confirmations, waiting": "/admin/guarded_tools/confirmation/?waiting=yes",
}
OP_STATES = [OperationState.SUCCEEDED, OperationState.OUTCOME_UNKNOWN, OperationState.IN_FLIGHT,
             OperationState.RELEASED, OperationState.ABANDONED, OperationState.FAILED]
CONF_STATES = [ConfirmationStatus.PENDING, ConfirmationStatus.CONSUMED,
               ConfirmationStatus.DECLINED, ConfirmationStatus.EXPIRED]


def add_rows(n: int, users: list[Any]) -> None:
    """``n`` more operations and confirmations, spread over users, states and tools."""
    now = timezone.now()
    operations, confirmations = [], []
    for i in range(n):
        user = users[i % len(users)]
        key = uuid.uuid4().hex
        operations.append(Operation(
            tool=f"tool_{i % 3}", scope=f"auth.user:{user.pk}", key=key, user=user,
            fingerprint="f" * 64, input={"n": i}, state=OP_STATES[i % len(OP_STATES)],
            output={"ok": True}, recovered=i % 5 == 0,
            lease_expires_at=now + timedelta(seconds=60), completed_at=now,
        ))
        status = CONF_STATES[i % len(CONF_STATES)]
        confirmations.append(Confirmation(
            tool=f"tool_{i % 3}", scope=f"auth.user:{user.pk}", key=key, requested_by=user,
            fingerprint="f" * 64, input={"n": i}, status=status,
            decided_by=users[(i + 1) % len(users)] if status != "pending" else None,
            decided_at=now if status != "pending" else None,
        ))
    Operation.objects.bulk_create(operations)
    Confirmation.objects.bulk_create(confirmations)


def queries(client: Client) -> dict[str, int]:
    counts = {}
    for name, path in PAGES.items():
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(path)
        assert response.status_code == 200, (name, response.status_code)
        counts[name] = len(ctx.captured_queries)
    return counts


@pytest.mark.parametrize("superuser", [True, False], ids=["superuser", "staff-with-view-perms"])
def test_changelists_issue_a_constant_number_of_queries(user_factory: Any,
                                                        superuser: bool) -> None:
    users = [user_factory(f"u{i}") for i in range(7)]
    if superuser:
        admin = user_factory("boss", is_staff=True, is_superuser=True)
    else:
        admin = user_factory("viewer", is_staff=True, perms=(
            "guarded_tools.view_operation", "guarded_tools.view_confirmation"))
    client = Client()
    client.force_login(admin)

    add_rows(10, users)
    assert client.get(PAGES["operations"]).status_code == 200  # warm caches (content types)
    at_10 = queries(client)
    add_rows(190, users)
    at_200 = queries(client)

    assert at_200 == at_10, (at_10, at_200)
    assert Operation.objects.count() == Confirmation.objects.count() == 200
    # A page shows 100 rows: the counts above cover more than one page of users.
    assert max(at_200.values()) < 25, at_200
