"""``ENQUEUE_EXECUTE_APPROVED`` / ``ENQUEUE_NOTIFY_APPROVERS``: the confirmation queue sends
to the task queue by the functions these settings name (issue 26: the pipeline names the
Celery tasks module instead of importing it), so a site may queue elsewhere."""

from __future__ import annotations

from typing import Any

import pytest

from guarded_tools import confirmations
from guarded_tools.models import Confirmation
from tests.conftest import Effects, key

SENT: list[tuple[str, str]] = []


def queue_approved(confirmation_id: str) -> None:
    SENT.append(("approved", confirmation_id))


def queue_email(confirmation_id: str) -> None:
    SENT.append(("email", confirmation_id))


@pytest.fixture
def own_queue(settings: Any) -> Any:
    SENT.clear()
    settings.GUARDED_TOOLS = {
        **settings.GUARDED_TOOLS, "EXECUTE_ON_APPROVAL": True,
        "ENQUEUE_EXECUTE_APPROVED": "tests.confirmations.test_enqueue_settings.queue_approved",
        "ENQUEUE_NOTIFY_APPROVERS": "tests.confirmations.test_enqueue_settings.queue_email",
    }
    yield SENT
    SENT.clear()


def test_a_site_queues_the_email_and_the_approved_call_with_its_own_functions(
    own_queue: list[tuple[str, str]], make_tool: Any, alice: Any, client_for: Any,
    django_user_model: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    handler = Effects()
    definition = make_tool(handler, confirm="effect-only")
    client = client_for(alice)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/agent/tools/{definition.name}/", {"operationId": key()},
                               format="json")
    assert response.status_code == 202
    pk = str(Confirmation.objects.get().pk)
    assert own_queue == [("email", pk)]
    approver = django_user_model.objects.create_superuser("boss", "boss@example.com", "pw")
    with django_capture_on_commit_callbacks(execute=True):
        confirmations.approve(Confirmation.objects.get(), approver)
    assert own_queue == [("email", pk), ("approved", pk)]
    assert handler.count == 0  # the site's queue has it; Celery was never sent anything
