"""Provides approvals native to MCP: a task for a staff approval, a URL elicitation for consent."""

from __future__ import annotations

from typing import Any

from guarded_tools.confirmations import queue as confirmations
from guarded_tools.core.definition import Tool
from guarded_tools.core.errors import ConfirmationRequired, ToolNotFound
from guarded_tools.transports.mcp import tasks as tasks_ext
from guarded_tools.transports.mcp.protocol import (
    Exchange,
    accepts_url_elicitation,
    declares_tasks,
)
from guarded_tools.transports.mcp.results import error_result
from guarded_tools.transports.mcp.task_methods import task_fields
from guarded_tools.transports.rest.exception_handler import docs_url

#: The key of the URL elicitation that asks the user to approve on the consent page.
CONSENT_REQUEST = "consent"


def answers_with_task(definition: Tool) -> bool:
    """Whether a call may answer a task: it waits for a staff approval, or is long-running."""
    if definition.owner_consent:
        return False  # the user's consent is asked in the call itself (input_required)
    return definition.queued_confirmation or (definition.long_running
                                              and definition.confirm_mode is None)



def awaiting(ex: Exchange, params: dict[str, Any], definition: Tool, inv: Any,
             error: ConfirmationRequired) -> dict[str, Any] | None:
    """A pending confirmation the MCP way, when the client supports it; else None.

    ``confirm="owner"`` (or a policy's ``Owner()`` rule): an ``input_required`` result
    whose URL elicitation opens the consent page; the client's retry of the same call runs
    it once the user approved (or withdraws it when the user declined in the client). A
    staff approval, for a client with the Tasks extension: a task bound to the call.
    """
    pending = error.extra.get("confirmation") or {}
    # The tool's mode, or the policy's Owner() rule for this call ("decides": "owner").
    if definition.owner_consent or pending.get("decides") == "owner":
        responses = params.get("inputResponses")
        answer = responses.get(CONSENT_REQUEST) if isinstance(responses, dict) else None
        if isinstance(answer, dict) and answer.get("action") in ("decline", "cancel"):
            return _withdrawn(ex, definition, inv, str(pending.get("id")))
        if not accepts_url_elicitation(ex, params) or not pending.get("url"):
            return None
        return {
            "resultType": "input_required",
            "inputRequests": {CONSENT_REQUEST: {
                "method": "elicitation/create",
                "params": {
                    "mode": "url",
                    "message": f"Approve “{definition.annotations['title']}” yourself, signed"
                               " in to the site; then come back here.",
                    "url": pending["url"],
                },
            }},
        }
    if not answers_with_task(definition) or not declares_tasks(ex, params):
        return None
    confirmation = confirmations.hold_for_task(pending.get("id"))
    if confirmation is None:
        return None
    ref = tasks_ext.new_ref(definition, inv.scope, inv.key or "", inv.fingerprint, confirmation)
    return {
        "resultType": "task",
        **task_fields(ref.task_id, ref, tasks_ext.TaskState(
            tasks_ext.WORKING, "Waiting for a person to approve the call; nothing has run yet.",
            confirmation.created_at, waits_for_person=True)),
    }


def _withdrawn(ex: Exchange, definition: Tool, inv: Any, confirmation_id: str) -> dict[str, Any]:
    from guarded_tools.models import Confirmation

    confirmation = Confirmation.objects.filter(pk=confirmation_id).first()
    if confirmation is not None:
        confirmations.withdraw(confirmation, inv.user, "The user declined in their client.")
        return error_result(definition, confirmations.error_for(confirmation, ex.request),
                            docs_url(ex.request))
    return error_result(definition, ToolNotFound(), docs_url(ex.request))
