"""Approvers are reminded once before a request expires: the beat task, run twice or by
several workers at the same moment, sends one reminder per request."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from guarded_tools import Approvers, Policy, Rule
from guarded_tools.models import Confirmation
from guarded_tools.tasks import remind_approvers
from tests.conftest import in_threads
from tests.pipeline.policy_support import SCHEMA, pay

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting(make_tool: Any, alice: Any, client_for: Any, user_factory: Any,
            settings: Any) -> Confirmation:
    settings.GUARDED_TOOLS = {"CONFIRMATION_NOTIFY_EMAIL": False}
    user_factory("approver", email="approver@example.com", is_staff=True,
                 perms=("guarded_tools.approve_confirmation",))
    definition = make_tool(input_schema=SCHEMA, confirm=Policy(rules=[
        Rule(outcome=Approvers(1), description="one approver decides")]))
    assert pay(client_for(alice), definition.name, 120).status_code == 202
    return Confirmation.objects.get(tool=definition.name)


def expiring_in(confirmation: Confirmation, minutes: int) -> None:
    Confirmation.objects.filter(pk=confirmation.pk).update(
        expires_at=timezone.now() + timedelta(minutes=minutes))


def test_reminded_once_within_the_hour_before_expiry(waiting: Confirmation) -> None:
    expiring_in(waiting, 120)
    assert remind_approvers() == 0  # not yet: two hours left
    expiring_in(waiting, 30)
    assert remind_approvers() == 1
    assert remind_approvers() == 0
    (reminder,) = mail.outbox
    assert reminder.to == ["approver@example.com"]
    assert reminder.subject.startswith("Expires soon: ")
    assert "expires at" in reminder.body
    assert Confirmation.objects.get(pk=waiting.pk).reminded_at is not None


def test_an_expired_or_decided_request_is_not_reminded(waiting: Confirmation) -> None:
    expiring_in(waiting, -1)
    assert remind_approvers() == 0
    expiring_in(waiting, 30)
    Confirmation.objects.filter(pk=waiting.pk).update(status="declined")
    assert remind_approvers() == 0 and not mail.outbox


def test_no_reminders_when_switched_off(waiting: Confirmation, settings: Any) -> None:
    settings.GUARDED_TOOLS = {"CONFIRMATION_REMIND_BEFORE_SECONDS": 0}
    expiring_in(waiting, 5)
    assert remind_approvers() == 0 and not mail.outbox


def test_eight_workers_at_once_remind_once(waiting: Confirmation) -> None:
    expiring_in(waiting, 30)
    sent = in_threads(8, lambda i: remind_approvers(), timeout=60)
    assert sum(sent) == 1, sent
    assert len(mail.outbox) == 1
