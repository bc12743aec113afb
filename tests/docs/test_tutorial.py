"""The tutorial's last step, run as written: its ``send_welcome`` tool ends as
``outcome_unknown`` (500, retry never, the same answer to a retry) with its journal entry,
and a person's *Mark not executed* releases the key so the agent's retry runs it."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from guarded_tools import registry
from guarded_tools.models import Operation, OperationState
from guarded_tools.pipeline.reconciliation import mark_not_executed
from tests.docs.reference import DOCS

TUTORIAL = (DOCS / "tutorial.md").read_text(encoding="utf-8")
BLOCK = next(b for b in re.findall(r"```python\n(.*?)```", TUTORIAL, flags=re.S)
             if "def send_welcome" in b)


@pytest.fixture
def send_welcome() -> Iterator[dict[str, Any]]:
    namespace: dict[str, Any] = {}
    exec("from guarded_tools import tool\n" + BLOCK, namespace)  # as shop/tools.py would
    yield namespace
    registry.unregister("send_welcome")


@pytest.mark.django_db
def test_the_tutorials_unknown_outcome_and_its_reconciliation(
    send_welcome: dict[str, Any], client_for: Any, alice: Any, user_factory: Any,
) -> None:
    agent = client_for(alice)
    call = {"operationId": f"welcome-{uuid.uuid4().hex[:6]}", "username": "olduser"}

    answer = agent.post("/agent/tools/send_welcome/", call, format="json")
    assert answer.status_code == 500, answer.content
    error = answer.json()["error"]
    assert (error["code"], error["retry"]) == ("outcome_unknown", "never")
    again = agent.post("/agent/tools/send_welcome/", call, format="json")
    assert again.json()["error"]["code"] == "outcome_unknown"

    operation = Operation.objects.get(key=call["operationId"])
    assert operation.state == OperationState.OUTCOME_UNKNOWN
    assert [entry.data for entry in operation.journal.all()] == [{"to": "olduser"}]

    operator = user_factory("operator", perms=("guarded_tools.reconcile_operation",),
                            is_staff=True)
    mark_not_executed(operation, operator, "the mail server has no such message",
                      fence=operation.fence)
    retried = agent.post("/agent/tools/send_welcome/", call, format="json")
    assert retried.json()["error"]["code"] == "outcome_unknown"  # it ran again, and failed
    assert Operation.objects.get(pk=operation.pk).fence > operation.fence
