"""Provides what the pipeline does when a handler raised or a claim was abandoned.

Release (an empty journal or an atomic tool's rollback proves no effect), ask the tool's
``recover``, or leave the outcome to a person: never run the handler again. A mixin of
``guarded_tools.pipeline.Pipeline``; recovery reaches it through ``Pipeline.resume``.
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
    LeaseLost,
    OperationInFlight,
    OutcomeUnknownError,
    RateLimited,
    ToolError,
)
from guarded_tools.models import Operation, OperationState, ReleaseReason
from guarded_tools.pipeline.stages.base import Call, principal_kwargs
from guarded_tools.store import Claim, OperationHandle, OperationStore

logger = logging.getLogger("guarded_tools")

if TYPE_CHECKING:
    from guarded_tools.core.call import GuardResult, Invocation
    from guarded_tools.core.definition import Tool


class FailureHandling:
    """The pipeline's answers to a failed handler and to an abandoned claim."""

    if TYPE_CHECKING:
        tool: Tool
        store: OperationStore

        def release(self, call: Call, claim: Claim, reason: str) -> bool: ...
        def claim(self, inv: Invocation) -> Claim: ...
        def replay(self, call: Call, operation: Operation) -> GuardResult: ...
        def execute_fresh(self, call: Call, claim: Claim) -> GuardResult: ...
        def after_lost_lease(self, claim: Claim, *, evidence: Any = None) -> GuardResult: ...
        def finalize(self, call: Call, claim: Claim, output: Any, *,
                     recovered: bool) -> GuardResult: ...

    def handle_failure(
        self, call: Call, claim: Claim, handle: OperationHandle, exc: BaseException
    ) -> GuardResult:
        """Release (proven pre-effect), recover, or abandon; never run the handler again."""
        if isinstance(exc, LeaseLost):
            return self.after_lost_lease(claim, evidence=exc.evidence)
        if isinstance(exc, ToolError) and (
            not self.tool.journal or self.proves_no_effect(claim)
        ):
            self.release(call, claim, ReleaseReason.FAILED_BEFORE_EFFECT)
            raise exc
        if self.tool.recover is not None:
            result = self.run_recover(call, claim, handle, exc)
            assert result is not None  # with an exception, "released" re-raises it
            return result
        if self.proves_no_effect(claim):
            self.release(call, claim, ReleaseReason.FAILED_BEFORE_EFFECT)
            raise exc
        # Without a recover hook nobody can ever prove the outcome: a person decides.
        raise self.unknown(claim, exc, "no recover hook", call.inv, {
            **claim.operation.summary(), "status": "outcome_unknown"}) from exc

    def unknown(self, claim: Claim, exc: BaseException | None, recover: str, inv: Invocation,
                summary: dict[str, Any]) -> OutcomeUnknownError:
        """Mark the outcome unknown, what failed on its event; the error the agent gets,
        with the correlation id the event and the log carry."""
        what = what_failed(exc, inv)
        if exc is not None:
            logger.error("outcome unknown %s: %s", what["correlation_id"], type(exc).__name__,
                         exc_info=exc)
        self.store.mark_unknown(claim, evidence(exc, recover), failure=what)
        return OutcomeUnknownError(extra={"operation": summary,
                                          "correlation_id": what["correlation_id"]})

    def run_recover(
        self,
        call: Call,
        claim: Claim,
        handle: OperationHandle,
        exc: BaseException | None,
        *,
        terminal: bool = False,
    ) -> GuardResult | None:
        """Ask the tool's ``recover`` what really happened.

        ``terminal`` is set when recovery itself took the claim over: a second
        "not recovered" then means nobody can prove the outcome, so it is marked
        unknown instead of abandoned again.
        """
        summary = claim.operation.summary()
        decision = self.ask_recover(call.inv, claim, handle, exc)
        if decision.get("recovered"):
            call.events.emit("recovered", recovered=True)
            return self.finalize(call, claim, decision.get("output"), recovered=True)
        if decision.get("outcome") == "unknown":
            raise self.unknown(claim, exc, "outcome unknown", call.inv, summary) from exc
        # Asked after recover ran: it may have cleared the journal once it proved that
        # no effect happened.
        if self.proves_no_effect(claim):
            self.release(call, claim, ReleaseReason.FAILED_BEFORE_EFFECT)
            if exc is not None:
                raise exc
            return None  # released: proven not executed
        if terminal:
            self.store.mark_unknown(claim, evidence(exc, "not recovered, journal not empty"))
        else:
            self.store.abandon(claim)
        raise OutcomeUnknownError(extra={"operation": summary}) from exc

    def ask_recover(
        self, inv: Invocation, claim: Claim, handle: OperationHandle, exc: BaseException | None
    ) -> dict[str, Any]:
        """The tool's ``recover`` answer; its own failure is an outcome nobody can prove."""
        assert self.tool.recover is not None
        try:
            decision = self.tool.recover(
                input=dict(inv.input),
                context=inv.context,
                error=exc,
                operation=handle,
                signal=CancelSignal(),
                **principal_kwargs(self.tool.recover, inv),
            )
        except Exception as recovery_error:
            raise self.unknown(claim, exc, "recover raised " + type(recovery_error).__name__,
                               inv, claim.operation.summary()) from recovery_error
        return dict(decision or {})

    def proves_no_effect(self, claim: Claim) -> bool:
        """True when nothing of the handler's effect can have committed.

        An ``atomic`` tool's effect commits only with its completion; otherwise a
        configured journal that is empty proves the handler stopped before its effect.
        """
        return self.tool.atomic or (
            self.tool.journal and self.store.journal_empty(claim.operation)
        )

    def recover_abandoned(self, call: Call, claim: Claim) -> GuardResult:
        """A caller met a claim with no live owner: recover it inline, never re-execute."""
        from guarded_tools.pipeline.recovery import recover_operation

        outcome = recover_operation(claim.operation, store=self.store, definition=self.tool)
        operation = self.store.refresh(claim.operation)
        if outcome == "released" or operation.state == OperationState.RELEASED:
            # Proven not executed: the key is fresh, so this call claims it normally.
            claim = self.claim(call.inv)
            call.events.operation_id = str(claim.operation.pk)
            if claim.kind == "fresh":
                return self.execute_fresh(call, claim)
            operation = claim.operation
        if operation.state in (OperationState.SUCCEEDED, OperationState.FAILED,
                               OperationState.OUTCOME_UNKNOWN):
            return self.replay(call, operation)
        raise OperationInFlight(
            headers={"Retry-After": "1"}, extra={"operation": operation.summary()}
        )

    def stored_error(self, operation: Operation) -> GuardError:
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
