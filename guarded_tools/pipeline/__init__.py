"""Provides the guard pipeline: a call walks its stages, with the claim between them.

The path of one call::

    stages, before_claim:  validation ─► context ─► authorization (scopes, permissions,
                           authorize) ─► idempotency (key) ─► policy (the rule) ─► budget
                           (the amount) ─► confirmation ("always")
    the claim, and the way it says the call goes (below)
    stages, after_claim:   budget (reserve) ─► allowance (a standing approval) ─►
                           confirmation (precheck; "effect-only", "owner"), fresh claims
                           only
    execution (the handler) ─► [raised] release (budget, allowance: on_release) | recover
                                        | outcome_unknown
    stages, after_execute: output budget ─► verification ─► complete
    stages, on_replay:     verification (a stored result answered again)
    stages, on_read:       context ─► authorization (a read of the call's state)

The stages are classes (``guarded_tools.pipeline.stages``) listed in the ``STAGES`` setting
or a tool's ``stages``: a site adds or replaces one there, without subclassing this class
(``PIPELINE_CLASS`` still can). Each stage sees only the call (``stages.Call``): the
tool, the invocation, its key and scope, its signal, the store, the events. The policy
stage decides the approval rule before the claim, the budget stage reserves after a fresh
claim, and the allowance stage runs a call within a standing approval without asking
anyone (all three are in the default list). Callers above the pipeline (the transports,
the tasks, the console) go through one façade, :mod:`guarded_tools.pipeline.gateway`,
which builds pipelines with :func:`get_pipeline`, the one factory.

The ways through a call, each for a reason:

=================  ===============================================  ======================
way                when                                             why it exists
=================  ===============================================  ======================
unclaimed          the tool has no idempotency                      nothing to claim
cached replay      this process answered the key (replay cache)     a replay with no SQL
one transaction    an atomic tool (``execute_locked``): lock the    no claim row to commit
                   key, run, insert the result, one commit          or recover: one commit
claimed            every other call: the claim commits first, then  the handler runs with
                   its kind decides: fresh (run; an atomic tool's   no transaction open;
                   effect and completion in one transaction),       a crash leaves a claim
                   completed (replay), in flight (refuse),          that recovery decides
                   abandoned (recover inline, never re-run)
=================  ===============================================  ======================
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router, transaction

from guarded_tools.conf import gt_settings

# The call's words, defined in ``core.call``, public here.
from guarded_tools.core.call import (
    GuardEvent,
    GuardResult,
    Invocation,
    RememberedResult,
    ToolContext,
    principal_scope,
    trace_carrier,
)
from guarded_tools.core.definition import build_pipeline, stateless
from guarded_tools.core.errors import (
    GuardError,
    IdempotencyKeyReused,
    LeaseLost,
    OperationInFlight,
    OutcomeUnknownError,
    ToolError,
    VerificationError,
)
from guarded_tools.core.jsonvalues import JSON_ENCODER, unwrapped
from guarded_tools.models import Operation, OperationState, ReleaseReason
from guarded_tools.pipeline import failures
from guarded_tools.pipeline.events import Events
from guarded_tools.pipeline.failures import release_reason
from guarded_tools.pipeline.stages import Call, Stage, stage_classes
from guarded_tools.pipeline.stages.base import overriding, plan, resolve_context, scope_of
from guarded_tools.store import (
    Claim,
    OperationHandle,
    OperationStore,
    PendingOperationHandle,
    refuse_enclosing_transaction,
    storable_json,
)
from guarded_tools.store.replays import replays

if TYPE_CHECKING:
    from guarded_tools.core.definition import Tool

__all__ = [
    "GuardEvent",
    "GuardResult",
    "Invocation",
    "Pipeline",
    "ToolContext",
    "get_pipeline",
    "principal_scope",
    "trace_carrier",
]

logger = logging.getLogger("guarded_tools")


class Pipeline:
    """Runs one invocation of ``tool`` through its stages, and the claim between them."""

    store_class: type[OperationStore] | None = None
    #: This class keeps nothing of a call on its instances (see :attr:`shared`); a
    #: subclass says so again in its own body, as it may add state.
    stateless = True

    def __init__(self, definition: Tool) -> None:
        self.tool = definition
        self.store = (self.store_class or gt_settings.STORE_CLASS)()
        self.stage_classes = stage_classes(definition)
        self.stages: list[Stage] = [cls() for cls in self.stage_classes]

    @property
    def shared(self) -> bool:
        """Whether one pipeline may serve every call of the tool, in every thread: its
        class, its store's class and every stage class declare ``stateless = True`` in
        their own bodies. The factory then builds it once per tool and database (see
        :meth:`shared_per`) until a setting it is built from changes; otherwise once per
        call, as a DRF view builds its permission classes."""
        return all(stateless(type(part)) for part in (self, self.store, *self.stages))

    @classmethod
    def shared_per(cls, definition: Tool) -> Any:
        """What a shared pipeline of ``definition`` is built once for: the database
        operations are written to (a router may choose it per request), which decides the
        store and whether a call can run as one transaction (``locks_key``)."""
        return router.db_for_write(Operation)

    @cached_property
    def hooks(self) -> dict[str, tuple[int, ...]]:
        """Each hook's positions in the stage list that a call of this tool walks."""
        return plan(self.tool, self.stage_classes)

    def call(self, inv: Invocation, events: Events | None = None) -> Call:
        """What the stages are given for ``inv`` (with silent events unless ``events``)."""
        return Call(self.tool, inv, events if events is not None else self.observe(
            silent=True), store=self.store)

    def walk(self, hook: str, call: Call, *args: Any) -> None:
        """Call ``hook`` on every stage that has it and has work for this tool
        (``Stage.has_work``), in the list's order."""
        walkers = self.walkers.get(hook)
        if walkers is None:  # a hook of a site's own
            walkers = self.walkers[hook] = tuple(
                getattr(self.stages[i], hook) for i in overriding(self.stage_classes, hook))
        for step in walkers:
            step(call, *args)

    @cached_property
    def walkers(self) -> dict[str, tuple[Callable[..., Any], ...]]:
        """Each hook's bound methods, in :attr:`hooks`' order: looked up once per pipeline
        (its stages are made with it), not once per stage on every call."""
        return {hook: tuple(getattr(self.stages[i], hook) for i in positions)
                for hook, positions in self.hooks.items()}

    # -- public entry points -------------------------------------------------------------
    def observe(self, inv: Invocation | None = None, *, silent: bool = False) -> Events:
        """The events of one call (or, ``silent``, of a read that tells no observer)."""
        return Events(self.tool, inv, silent=silent)

    def run(self, inv: Invocation) -> GuardResult:
        events = self.observe(inv)
        events.emit("started")
        try:
            result = self.guarded(inv, events)
        except OutcomeUnknownError as exc:
            events.emit("outcome_unknown", code=exc.code)
            raise
        except GuardError as exc:
            events.emit("failed", code=exc.code)
            raise
        except BaseException:
            events.emit("failed", code="internal_error")
            raise
        events.emit("succeeded", replayed=result.replayed, recovered=result.recovered)
        return result

    def guarded(self, inv: Invocation, events: Events) -> GuardResult:
        """The stages of ``run`` without its first and last events."""
        return self.proceed(self.prepare(inv, events))

    def prepare(self, inv: Invocation, events: Events) -> Call:
        """Every stage before the claim, then stop: nothing is claimed, nothing runs.

        MCP Tasks hands a call over to Celery here (``proceed`` runs it on a worker).
        """
        call = self.call(inv, events)
        if not callable(self.tool.idempotency_key):  # a computed key exists only later
            call.look_up_replay(call.given_key())
        self.walk("before_claim", call)
        return call

    def proceed(self, call: Call) -> GuardResult:
        """From the claim on: the way the call goes (see the module's table)."""
        if not self.tool.idempotent:
            return self.execute_unclaimed(call)
        if call.remembered is not None:
            return self.replay_remembered(call)
        inv = call.inv
        result = self.claimed(call)
        if result.operation is not None and result.operation.get("status") == "succeeded":
            if result.output_json is None and result.replayed:  # read from the database
                result.output_json = answer_text(result.output)
            replays.put(self.tool.name, inv.scope, inv.key or "", fingerprint=inv.fingerprint,
                        output=result.output, operation=result.operation,
                        recovered=result.recovered, output_json=result.output_json,
                        reconciled=result.reconciled, canonical=call.canonical)
        return result

    def authorize_read(self, inv: Invocation) -> None:
        """A read of a call's state or result (its operation, its confirmation, its task):
        the authorization its replay would face, with the call's stored input."""
        self.walk("on_read", self.call(inv))

    def check_preconditions(self, inv: Invocation) -> None:
        """The tool's business preconditions now, as the stages check them before anyone
        is asked (the console's "is it still valid?"): every stage's ``preconditions``
        hook, in the list's order; the tool's ``ToolError`` when the call would fail,
        else nothing. Nothing is claimed or run."""
        self.walk("preconditions", self.call(inv))

    def resume(self, inv: Invocation, claim: Claim, handle: OperationHandle) -> GuardResult | None:
        """Decide a call recovery took over: ask ``recover``, never run the handler.

        None when it was released (proven not executed); a second "not recovered" is
        marked unknown (nobody can prove the outcome).
        """
        return self.run_recover(self.call(inv, self.observe()), claim, handle, None,
                                terminal=True)

    def claimed(self, call: Call) -> GuardResult:
        """Claim the key, then execute, replay, refuse or recover, as the claim says."""
        claim = None
        if self.locks_key:
            result, claim = self.execute_locked(call)
            if result is not None:
                return result
        if claim is None:
            claim = self.claim(call.inv)
        call.events.operation_id = str(claim.operation.pk)
        if claim.kind == "completed":
            return self.replay(call, claim.operation)
        if claim.kind == "in_flight":
            raise OperationInFlight(
                headers={"Retry-After": str(claim.retry_after)},
                extra={"operation": claim.operation.summary()},
            )
        if claim.kind == "abandoned":
            return self.recover_abandoned(call, claim)
        return self.execute_fresh(call, claim)

    # -- what the pipeline's callers ask of a call ---------------------------------------
    def scope_of(self, inv: Invocation) -> str | None:
        """Whose keys the call uses: its principal, "anonymous" where allowed, else None."""
        return scope_of(self.tool, inv)

    def resolve_context(self, inv: Invocation) -> Any:
        return resolve_context(self.tool, inv)

    def call_handler(self, call: Call, ctx: ToolContext) -> Any:
        """The execution stage runs the handler (the list's last stage with ``execute``)."""
        return self.executor(call, ctx)

    @cached_property
    def executor(self) -> Callable[[Call, ToolContext], Any]:
        """The ``execute`` of the list's last stage that has one, looked up once."""
        for stage in reversed(self.stages):
            execute = getattr(stage, "execute", None)
            if execute is not None:
                return execute  # type: ignore[no-any-return]
        raise ImproperlyConfigured(f"The stages of tool {self.tool.name!r} have no execution"
                                   " stage (a stage with execute(call, ctx)).")

    # -- the claim -----------------------------------------------------------------------
    def claim(self, inv: Invocation) -> Claim:
        # Inside a caller's transaction the store raises NestedTransaction (ImproperlyConfigured).
        return self.store.claim(
            tool=self.tool.name,
            scope=inv.scope,
            key=inv.key or "",
            fp=inv.fingerprint,
            input=inv.input,
            user=inv.user,
            lease_seconds=self.lease_seconds,
        )

    def release(self, call: Call, claim: Claim, reason: str) -> bool:
        """Release a fresh claim whose effect never happened, saying why (a
        ``ReleaseReason``); the stages give back what it
        reserved (``on_release``) in the release's own transaction, and only when this
        release took the claim: a claim someone else took over or released gives nothing
        back here, so each claim's reservations come back once, whoever releases it (the
        call, the sweep, a person's "Recover now" or "Mark not executed")."""
        with transaction.atomic(using=router.db_for_write(Operation)):
            released = self.store.release(claim, reason)
            if released:
                self.walk("on_release", call, claim)
        return released

    def release_taken_over(self, inv: Invocation, claim: Claim,
                           reason: str = ReleaseReason.FAILED_BEFORE_EFFECT) -> bool:
        """Release a claim recovery took over, proven not run (``release`` for a claim
        that no call of this process holds)."""
        return self.release(self.call(inv), claim, reason)

    def released_by_a_person(self, operation: Operation, fence: int) -> None:
        """A person decided that attempt ``fence`` never ran and released the key: the
        stages give back what its claim reserved. Called in the transaction that released
        it, so no retry can reserve again before this gives back."""
        inv = Invocation(input=operation.input, user=operation.user, scope=operation.scope)
        self.walk("on_release", self.call(inv), Claim("fresh", operation, fence=fence))

    @property
    def lease_seconds(self) -> int:
        return self.tool.lease

    @cached_property
    def locks_key(self) -> bool:
        """Whether calls run as one transaction: key lock, effect, operation (``atomic``).

        Not for tools that ask for a queued confirmation after the claim (the pending
        confirmation must commit while the call waits), nor for ``async def``
        handlers, nor on databases where the store cannot lock a key in a transaction,
        nor when ``ATOMIC_SINGLE_TRANSACTION`` is off (then an atomic tool's claim
        commits first, as every other tool's does, and shows while it runs).
        """
        return (
            self.tool.atomic
            and gt_settings.ATOMIC_SINGLE_TRANSACTION
            and not self.tool.confirms_after_claim
            and not self.tool.is_async
            and self.store.can_lock()
        )

    # -- the ways through a call ---------------------------------------------------------
    def execute_unclaimed(self, call: Call) -> GuardResult:
        """A tool without idempotency: no claim, nothing to replay or recover."""
        self.walk("after_claim", call, None)
        output = self.call_handler(call, call.context_for(None))
        call.events.emit("executed")
        result = GuardResult(output=output)
        self.walk("after_execute", call, result)
        return result

    def execute_fresh(self, call: Call, claim: Claim) -> GuardResult:
        """A fresh claim, committed: run the handler, then finalize or handle its failure."""
        try:
            self.walk("after_claim", call, claim)
        except BaseException as exc:
            # Nothing ran: the key is fresh again, and what refused the call says why.
            self.release(call, claim, release_reason(exc))
            raise
        handle = OperationHandle(self.store, claim, self.lease_seconds)
        ctx = call.context_for(handle)
        if self.tool.atomic:
            return self.execute_atomic(call, claim, ctx)
        try:
            output = self.call_handler(call, ctx)
        except BaseException as exc:
            return self.handle_failure(call, claim, handle, exc)
        call.events.emit("executed")
        return self.finalize(call, claim, output, recovered=False)

    def execute_atomic(self, call: Call, claim: Claim, ctx: ToolContext) -> GuardResult:
        """Effect, journal, verify and completion commit together, or not at all."""
        try:
            with transaction.atomic(using=router.db_for_write(Operation), durable=True):
                output = self.call_handler(call, ctx)
                call.events.emit("executed")
                result = self.finalize(call, claim, output, recovered=False)
        except LeaseLost:
            return self.after_lost_lease(claim)  # rolled back: nothing to keep
        except BaseException:
            # Nothing committed: the claim can be released safely. If the release
            # finds the claim completed, the commit happened after all: replay it.
            if not self._try_release(call, claim):
                operation = self.store.refresh(claim.operation)
                if operation.state == OperationState.SUCCEEDED:
                    return self.replay(call, operation)
            raise
        return result

    def execute_locked(self, call: Call) -> tuple[GuardResult | None, Claim | None]:
        """An atomic tool's call as one transaction: lock the key, run, insert the result.

        The key is locked for the transaction (``OperationStore.lock_key``); the
        handler's effect, its journal, ``verify`` and the operation row, inserted
        already succeeded, commit together or not at all. A crash at any point
        leaves nothing: no effect, no claim to recover. A duplicate arriving
        meanwhile finds the key locked (``operation_in_flight``). When the key
        already has a row, nothing runs here: ``(None, claim)`` says what the row
        means (None for a released key, which the ordinary claim takes again).
        """
        inv, using = call.inv, router.db_for_write(Operation)
        refuse_enclosing_transaction(connections[using])  # NestedTransaction
        with transaction.atomic(using=using, durable=True):
            state, found, _ = self.store.lock_key(tool=self.tool.name, scope=inv.scope,
                                                  key=inv.key or "")
            if state == "busy":
                raise OperationInFlight(headers={"Retry-After": "1"})
            if found is not None:  # the key exists: decided outside this transaction
                operation, db_now = found
                if operation.state == OperationState.RELEASED:
                    return None, None
                return None, self.store.classify(operation, db_now, inv.fingerprint)
            call.in_transaction = True
            self.walk("after_claim", call, None)  # a refusal rolls back with the lock
            claim = self.store.pending(
                tool=self.tool.name, scope=inv.scope, key=inv.key or "",
                fp=inv.fingerprint, input=inv.input, user=inv.user,
            )
            call.events.operation_id = str(claim.operation.pk)
            handle = PendingOperationHandle(self.store, claim, self.lease_seconds)
            output = self.call_handler(call, call.context_for(handle))
            call.events.emit("executed")
            summary = claim.operation.summary()
            result = GuardResult(output=output, operation=summary)
            self.walk("after_execute", call, result)
            stored = storable_json(output, result.output_json)
            self.store.insert_completed(claim, stored, handle.pending)
            claim.operation.output = unwrapped(stored)  # saved as its text; read as the value
        result.operation = {**summary, "status": claim.operation.state}  # as inserted
        return result, claim

    def _try_release(self, call: Call, claim: Claim) -> bool:
        try:
            return self.release(call, claim, ReleaseReason.FAILED_BEFORE_EFFECT)
        except Exception:
            logger.exception("could not release operation %s", claim.operation.pk)
            return True

    # -- a failed handler, an abandoned claim (never run the handler again) -------------
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
        raise failures.mark_unknown(self.store, claim, exc, "no recover hook", call.inv, {
            **claim.operation.summary(), "status": "outcome_unknown"}) from exc

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
        decision = failures.ask_recover(self.tool, self.store, call.inv, claim, handle, exc)
        if decision.get("recovered"):
            call.events.emit("recovered", recovered=True)
            return self.finalize(call, claim, decision.get("output"), recovered=True)
        if decision.get("outcome") == "unknown":
            raise failures.mark_unknown(self.store, claim, exc, "outcome unknown", call.inv,
                                        summary) from exc
        # Asked after recover ran: it may have cleared the journal once it proved that
        # no effect happened.
        if self.proves_no_effect(claim):
            self.release(call, claim, ReleaseReason.FAILED_BEFORE_EFFECT)
            if exc is not None:
                raise exc
            return None  # released: proven not executed
        if terminal:
            self.store.mark_unknown(claim, failures.evidence(
                exc, "not recovered, journal not empty"))
        else:
            self.store.abandon(claim)
        raise OutcomeUnknownError(extra={"operation": summary}) from exc

    def proves_no_effect(self, claim: Claim) -> bool:
        """True when nothing of the handler's effect can have committed."""
        return failures.proves_no_effect(self.tool, self.store, claim)

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
        return failures.stored_error(operation)

    # -- replays -------------------------------------------------------------------------
    def replay(self, call: Call, operation: Operation) -> GuardResult:
        """The stored result of a completed operation; ``verify`` judges it again unless a
        person decided it (their decision is final: it is never re-judged)."""
        call.events.emit("replayed")
        if operation.state != OperationState.SUCCEEDED:
            raise self.stored_error(operation)
        result = GuardResult(
            output=operation.output,
            operation=operation.summary(replayed=True),
            replayed=True,
            recovered=operation.recovered,
            # Set by the person's decision, on the row this replay read: no query.
            reconciled=operation.reconciled,
        )
        self.walk("on_replay", call, result)
        return result

    def replay_remembered(self, call: Call) -> GuardResult:
        """A replay answered from this process's replay cache: no SQL statement."""
        remembered = call.remembered
        assert remembered is not None
        if remembered.fingerprint != call.inv.fingerprint:
            raise IdempotencyKeyReused()
        call.events.operation_id = str(remembered.operation.get("id"))
        call.events.emit("replayed")
        result = RememberedResult.of(
            remembered.output_json,
            operation=dict(remembered.operation),
            replayed=True,
            recovered=remembered.recovered,
            reconciled=remembered.reconciled,
        )
        self.walk("on_replay", call, result)
        return result

    # -- finalization --------------------------------------------------------------------
    def finalize(self, call: Call, claim: Claim, output: Any, *, recovered: bool) -> GuardResult:
        """Budget, verify, complete: finalization the caller's cancellation cannot stop."""
        summary = claim.operation.summary()
        result = GuardResult(output=output, operation=summary, recovered=recovered)
        try:
            self.walk("after_execute", call, result)
        except VerificationError as exc:
            if not self.tool.atomic:
                self.store.mark_unknown(claim, exc.as_dict(), output=storable_json(output))
                summary = claim.operation.summary()  # the state it was marked with
            exc.extra["operation"] = summary
            raise
        if not self.store.complete(claim, storable_json(output, result.output_json),
                                   recovered=recovered):
            if self.tool.atomic:
                raise LeaseLost(str(claim.operation.pk))
            return self.after_lost_lease(claim, evidence={"output": storable_json(output)})
        result.operation = {**summary, "status": OperationState.SUCCEEDED,
                            "recovered": recovered}
        return result

    def after_lost_lease(self, claim: Claim, *, evidence: Any = None) -> GuardResult:
        """Another process took the claim over: keep what we had as evidence, never retry.

        The caller gets what the new owner decided: its result, its stored error, or
        "still running" while it works (and when it released the key, a retry with the
        same key runs it); an unknown outcome otherwise.
        """
        logger.warning("operation %s: lease lost before completion", claim.operation.pk)
        if evidence is not None:
            try:
                self.store.record_late_result(claim, evidence)
            except Exception:  # the evidence is a courtesy; the decision stands without it
                logger.exception("could not keep the late result of %s", claim.operation.pk)
        operation = self.store.refresh(claim.operation)
        if operation.state == OperationState.SUCCEEDED:
            return GuardResult(
                output=operation.output,
                operation=operation.summary(replayed=True),
                replayed=True,
                recovered=operation.recovered,
            )
        if operation.state == OperationState.FAILED:
            raise self.stored_error(operation)
        if operation.state in (OperationState.IN_FLIGHT, OperationState.RELEASED):
            raise OperationInFlight(
                headers={"Retry-After": "1"}, extra={"operation": operation.summary()}
            )
        raise OutcomeUnknownError(extra={"operation": operation.summary()})


def answer_text(output: Any) -> str | None:
    """A stored output's JSON text, as the agent receives it (``JSON_ENCODER``'s): made once
    for the replay cache and the answer; None if it is not JSON (it always is, once read)."""
    try:
        return JSON_ENCODER.encode(output)
    except (TypeError, ValueError):
        return None


def get_pipeline(definition: Tool) -> Pipeline:
    """The pipeline for ``definition``: the site's ``PIPELINE_CLASS`` (built by the one
    factory, ``guarded_tools.core.definition.build_pipeline``)."""
    pipeline: Pipeline = build_pipeline(definition)
    return pipeline
