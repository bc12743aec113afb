"""The gateway is the transports' one way in: a read of an operation builds one pipeline."""

from __future__ import annotations

from typing import Any

import pytest

from guarded_tools.models import Operation, OperationState
from guarded_tools.pipeline import Pipeline
from tests.conftest import key

pytestmark = pytest.mark.django_db

#: The tools a ``Counted`` pipeline was built for, in order.
BUILT: list[str] = []


class Counted(Pipeline):
    """A pipeline that says each time one is built (``PIPELINE_CLASS``)."""

    def __init__(self, definition: Any) -> None:
        BUILT.append(definition.name)
        super().__init__(definition)


def test_a_get_of_a_failed_operation_builds_one_pipeline_and_answers_its_stored_error(
    make_tool: Any, alice: Any, client_for: Any, settings: Any,
) -> None:
    definition = make_tool()
    client = client_for(alice)
    ran = client.post(f"/agent/tools/{definition.name}/", {"operationId": key()},
                      format="json")
    op_id = ran.json()["operation"]["id"]
    # As a person's "Mark failed" leaves it: the error every replay and read answers.
    Operation.objects.filter(pk=op_id).update(state=OperationState.FAILED, error={
        "code": "card_declined", "message": "The card was declined.", "status": 402})

    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS,
                              "PIPELINE_CLASS": "tests.transports.test_gateway.Counted"}
    BUILT.clear()
    read = client.get(f"/agent/operations/{op_id}/")
    assert read.status_code == 200, read.content
    assert read.json()["status"] == "failed"
    assert read.json()["error"]["code"] == "card_declined"
    assert BUILT == [definition.name]  # one pipeline: the read's authorization and its error
