"""Provides the pieces the pipeline decides a failed handler or an abandoned claim with.

Whether a claim provably had no effect, the tool's ``recover`` asked, an outcome marked
unknown with what failed, the stored error every replay answers, and why a claim is
released. Plain functions, each given what it reads (the tool, the store, the claim):
the pipeline (``Pipeline.handle_failure``, ``run_recover``, ``recover_abandoned``)
chooses between release, recovery and a person's decision, and never runs the handler
again.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from guarded_tools.core.cancellation import CancelSignal
from guarded_tools.core.catalog import is_code
from guarded_tools.core.errors import (
    BudgetExceeded,
    ConfirmationError,
    ConfirmationExpired,
    ConfirmationRequired,
    GuardError,
    OutcomeUnknownError,
    RateLimited,
    ToolError,
)
from guarded_tools.models import Operation, OperationState, ReleaseReason
from guarded_tools.pipeline.stages.base import principal_kwargs

logger = logging.getLogger("guarded_tools")

if TYPE_CHECKING:
    from guarded_tools.core.call import Invocation
    from guarded_tools.core.definition import Tool
    from guarded_tools.store import Claim, OperationHandle, OperationStore


def proves_no_effect(tool: Tool, store: OperationStore, claim: Claim) -> bool:
    """True when nothing of the handler's effect can have committed.

    An ``atomic`` tool's effect commits only with its completion; otherwise a
    configured journal that is empty proves the handler stopped before its effect.
    """
    return tool.atomic or bool(tool.journal and store.journal_empty(claim.operation))


def mark_unknown(store: OperationStore, claim: Claim, exc: BaseException | None, recover: str,
                 inv: Invocation, summary: dict[str, Any]) -> OutcomeUnknownError:
    """Mark the outcome unknown, what failed on its event; the error the agent gets,
    with the correlation id the event and the log carry."""
    what = what_failed(exc, inv)
    if exc is not None:
        logger.error("outcome unknown %s: %s", what["correlation_id"], type(exc).__name__,
                     exc_info=exc)
    store.mark_unknown(claim, evidence(exc, recover), failure=what)
    return OutcomeUnknownError(extra={"operation": summary,
                                      "correlation_id": what["correlation_id"]})


def ask_recover(tool: Tool, store: OperationStore, inv: Invocation, claim: Claim,
                handle: OperationHandle, exc: BaseException | None) -> dict[str, Any]:
    """The tool's ``recover`` answer; its own failure is an outcome nobody can prove
    (marked unknown, and its error raised)."""
    assert tool.recover is not None
    try:
        decision = tool.recover(
            input=dict(inv.input),
            context=inv.context,
            error=exc,
            operation=handle,
            signal=CancelSignal(),
            **principal_kwargs(tool.recover, inv),
        )
    except Exception as recovery_error:
        raise mark_unknown(store, claim, exc, "recover raised " + type(recovery_error).__name__,
                           inv, claim.operation.summary()) from recovery_error
    return dict(decision or {})


def stored_error(operation: Operation) -> GuardError:
    """The terminal error a person or recovery stored, for every replay."""
    data = dict(operation.error or {})
    summary = operation.summary(replayed=True)
    if operation.state == OperationState.OUTCOME_UNKNOWN:
        return OutcomeUnknownError(extra={"operation": summary})
    code = str(data.get("code") or "operation_failed")
    error = ToolError(
        code if is_code(code) else "operation_failed",
        str(data.get("message") or "The operation failed."),
        retry="never",
        status=int(data.get("status") or 409),
        repair=data.get("repair"),
    )
    error.extra["operation"] = summary
    return error


def release_reason(exc: BaseException) -> ReleaseReason:
    """Why a fresh claim refused before its handler ran is released, from what refused it:
    a person's approval asked for, declined, expired or withdrawn, a rate limit, a budget,
    any other check (``refused``); an exception that is no refusal failed before the effect."""
    if isinstance(exc, ConfirmationRequired):
        return ReleaseReason.WAITING_FOR_APPROVAL
    if isinstance(exc, ConfirmationExpired):
        return ReleaseReason.EXPIRED
    if isinstance(exc, ConfirmationError):
        asked = exc.extra.get("confirmation")
        withdrawn = isinstance(asked, dict) and asked.get("status") == "withdrawn"
        return ReleaseReason.WITHDRAWN if withdrawn else ReleaseReason.DECLINED
    if isinstance(exc, RateLimited):
        return ReleaseReason.RATE_LIMITED
    if isinstance(exc, BudgetExceeded):
        return ReleaseReason.OVER_BUDGET
    if isinstance(exc, GuardError):
        return ReleaseReason.REFUSED
    return ReleaseReason.FAILED_BEFORE_EFFECT


def evidence(exc: BaseException | None, recover: str) -> dict[str, Any]:
    """The stored error of an outcome nobody could prove, for the operator's page: the
    handler's failure class (never its text, which replays never carry either) and what
    recovery answered."""
    data: dict[str, Any] = {"code": "outcome_unknown", "recover": recover}
    if exc is not None:
        data["failure"] = type(exc).__name__
    return data



#: The most characters of an exception's message an operator's page shows.
MESSAGE_LIMIT = 500


def what_failed(exc: BaseException | None, inv: Invocation) -> dict[str, Any]:
    """What failed, for the operation's history (never for the agent): the exception's
    message, bounded, with every string of the input it quotes redacted (tools mark no
    field secret: any input value may be one); a correlation id; the caller's trace id."""
    message = str(exc)[:4 * MESSAGE_LIMIT] if exc is not None else ""
    for value in sorted(_strings(inv.input), key=len, reverse=True):
        message = message.replace(value, "[redacted]")
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT - 1] + "…"
    return {"message": message or None, "correlation_id": uuid.uuid4().hex,
            "trace_id": trace_id(inv.trace)}


def _strings(value: Any, depth: int = 0) -> list[str]:
    if isinstance(value, str):
        return [value] if len(value) >= 3 else []
    if depth > 8:
        return []
    items = value.values() if isinstance(value, dict) else value \
        if isinstance(value, (list, tuple)) else ()
    return [s for item in items for s in _strings(item, depth + 1)]


def trace_id(carrier: Any) -> str | None:
    """The trace id of a W3C ``traceparent`` (the OpenTelemetry span continues it)."""
    parts = str((carrier or {}).get("traceparent", "")).split("-")
    if len(parts) == 4 and len(parts[1]) == 32 and parts[1] != "0" * 32:
        return parts[1]
    return None
