"""Issue 28 items 1-2 in Chromium: the operation's timeline after a sweep, a person's
decision and a retry, every event in its row and its order, who did it in its column."""

from __future__ import annotations

import os
import uuid
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from guarded_tools.models import Operation
from tests.integration.browser import OPS_LIST, expect, log_in
from tests.store.timeline import SCHEMA, Payment

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.xdist_group("console_browser")]


def test_the_timeline_in_chromium_keeps_every_event_in_order(
        page: Any, user_factory: Any, make_tool: Any, client_for: Any,
        tmp_path: Path) -> None:
    payment = Payment()
    definition = make_tool(payment.handler, recover=payment.recover, input_schema=SCHEMA)
    agent = client_for(user_factory("alice"))
    body = {"operationId": uuid.uuid4().hex, "note": "n"}
    assert agent.post(f"/agent/tools/{definition.name}/", body,
                      format="json").status_code == 500
    operation = Operation.objects.get(tool=definition.name)
    Operation.objects.filter(pk=operation.pk).update(lease_expires_at=None)
    call_command("guarded_tools_sweep", stdout=StringIO())
    user_factory("operator", is_staff=True, perms=(
        "guarded_tools.view_operation", "guarded_tools.reconcile_operation"))
    log_in(page, "operator")
    page.goto(f"{OPS_LIST}{operation.pk}/change/")
    page.fill("#id_note", "The bank shows no transfer.")  # the form is on the page
    page.get_by_test_id("mark_not_executed").click()
    expect(page.get_by_test_id("state")).to_have_text("released")
    payment.fail = False
    assert agent.post(f"/agent/tools/{definition.name}/", body,
                      format="json").status_code == 200
    page.goto(f"{OPS_LIST}{operation.pk}/change/")
    rows = page.get_by_test_id("event")
    expect(rows).to_have_count(11)
    whats = rows.locator("td:nth-child(2)").all_inner_texts()
    assert whats[0] == "Claimed" and whats[-1] == "Succeeded", whats
    assert whats.index("Outcome unknown") < whats.index("Marked operation not executed") \
        < whats.index("Claimed again (a retry)"), whats
    who = rows.locator('[data-testid="who"]').all_inner_texts()
    assert who[3:6] == ["sweep"] * 3 and who[6:8] == ["operator"] * 2, who
    page.get_by_test_id("timeline").scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "operation-timeline-1280.png"), full_page=True)
    if os.environ.get("GT_HISTORY_SCREENSHOT"):
        page.screenshot(path=os.environ["GT_HISTORY_SCREENSHOT"], full_page=True)
