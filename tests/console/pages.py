"""The admin's pages as the console tests reach them: lists, a staff member's client, incidents."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client
from django.utils import timezone

from guarded_tools.models import (
    AuditEntry,
    Confirmation,
    ConfirmationStatus,
    Operation,
    OperationState,
)

OPS_LIST = "/admin/guarded_tools/operation/"
RECONCILER = ("guarded_tools.view_operation", "guarded_tools.reconcile_operation")


def staff_client(user_factory: Any, *perms: str, name: str = "staffer") -> Client:
    """A test client logged in as a new staff member NAME with PERMS."""
    client = Client()
    client.force_login(user_factory(name, is_staff=True, perms=perms))
    return client


def reconcile(client: Client, operation: Any, action: str, **fields: str) -> Any:
    """Run the operations list's reconcile ACTION on OPERATION, at its current fence."""
    return client.post(OPS_LIST, {"action": action, ACTION_CHECKBOX_NAME: [operation.pk],
                                  f"fence-{operation.pk}": operation.fence, **fields},
                       follow=True)


def incident(kind: str) -> Any:
    """The demo's users and accounts, then its incident of KIND: the operation it leaves."""
    from io import StringIO

    from django.core.management import call_command

    from guarded_tools.models import Operation

    call_command("demo_seed", stdout=StringIO())
    call_command("demo_incident", kind, stdout=StringIO())
    return Operation.objects.order_by("-created_at").first()


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
    AuditEntry.objects.bulk_create(
        AuditEntry(actor=confirmation.decided_by or confirmation.requested_by,
                   action=AuditEntry.Action.APPROVE,
                   operation=operation, confirmation=confirmation, status=confirmation.status)
        for operation, confirmation in zip(operations, confirmations, strict=True))
