"""Provides the guard pipeline: every stage of a tool call, top to bottom, in one class.

    validate ─► context ─► authorize ─► precheck + confirm (always) ─► claim
      ─► precheck + confirm (effect-only, fresh claims) ─► execute ─► [raised] recover
      ─► output budget ─► verify ─► complete

Each stage is a method a subclass may override (``PIPELINE_CLASS`` setting).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from django.apps import apps
from django.db import connections, router, transaction
from django.utils import timezone

from guarded_tools.conf import gt_settings
from guarded_tools.core.cancellation import CancelSignal
from guarded_tools.core.catalog import is_code
from guarded_tools.core.errors import (
    AuthorizationError,
    ConfirmationError,
    GuardError,
    IdempotencyKeyInvalid,
    IdempotencyKeyMissing,
    IdempotencyKeyReused,
    LeaseLost,
    NotAuthenticated,
    OperationInFlight,
    OutcomeUnknownError,
    ToolError,
    VerificationError,
)
from guarded_tools.core.schema.validation import validate
from guarded_tools.models import Operation, OperationState
from guarded_tools.pipeline.permissions import (
    answer,
    granted,
    permission_query,
    permissions_database,
)
from guarded_tools.store import (
    JSON_ENCODER,
    Claim,
    OperationHandle,
    OperationStore,
    PendingOperationHandle,
    fingerprint,
    refuse_enclosing_transaction,
    storable_json,
)
from guarded_tools.store.replays import Remembered, replays

if TYPE_CHECKING:
    from guarded_tools.tools.registry import Tool

logger = logging.getLogger("guarded_tools")


@dataclass
class Invocation:
    """One call of a tool, as the transport received it."""

    input: Mapping[str, Any]
    user: Any = None
    principal: str | None = None
    header_key: str | None = None
    request: Any = None
    signal: CancelSignal | None = None
    wait: float = 0
    context: Any = None
    key: str | None = None
    scope: str = ""
    fingerprint: str = ""
    #: How the call arrived: ``rest``, ``mcp``, or ``python`` (``tool(...)`` in code).
    transport: str = "python"
    #: The caller's W3C trace context (``trace_carrier``): metadata for observers, not input.
    trace: Mapping[str, str] = field(default_factory=dict)
    #: The credential (an OAuth access token) of a call with no request: a run an approval
    #: started. Its scopes are checked as the request's would be.
    credential: Any = None


#: W3C Trace Context keys a call may carry, each with the longest value kept.
TRACE_KEYS = {"traceparent": 128, "tracestate": 512}


def trace_carrier(source: Mapping[str, Any] | None) -> dict[str, str]:
    """The W3C trace context in request headers or MCP ``params._meta``, bounded.

    Only ``traceparent`` and ``tracestate`` (``tracestate`` only beside a
    ``traceparent``), as printable ASCII no longer than W3C allows; anything else is
    dropped. Observers continue the caller's trace from it (``guarded_tools.contrib.otel``).
    """
    carrier: dict[str, str] = {}
    for name, limit in TRACE_KEYS.items():
        value = source.get(name) if source is not None else None
        if isinstance(value, str) and len(value) <= limit and value.isascii() and (
            value.isprintable()
        ):
            carrier[name] = value.strip()
    return carrier if carrier.get("traceparent") else {}


@dataclass
class ToolContext:
    """What a handler receives besides its input."""

    user: Any
    context: Any
    signal: CancelSignal
    operation: OperationHandle | None = None
    request: Any = None
    tool: Tool | None = None


@dataclass
class GuardResult:
    """A successful call: the output and the operation it belongs to."""

    output: Any
    operation: dict[str, Any] | None = None
    replayed: bool = False
    recovered: bool = False
    #: The output as JSON, when the guard already serialized it (for the replay cache).
    output_json: str | None = field(default=None, repr=False, compare=False)
    #: A person decided this result (reconciliation), so ``verify`` does not judge it.
    #: Looked up only for tools that have a verifier: for the others it changes nothing.
    reconciled: bool = False

    def answer(self) -> Any:
        """The output as the agent gets it: as stored, so a call and its replays agree.

        Decoded from the JSON the guard made of it, as replays are: a ``Decimal`` or a
        ``datetime`` reads the same in the first answer as in every replay. An output
        that is not JSON (an object, NaN) was stored with typed placeholders for what
        is not, and is answered so: it could not be sent as it is, and its effect has
        already happened.
        """
        if self.replayed:
            return self.output
        if self.output_json is not None:
            return json.loads(self.output_json)
        return storable_json(self.output)


@dataclass(frozen=True)
class GuardEvent:
    """Lifecycle metadata for ``observe``: never inputs, outputs or details."""

    stage: str
    tool: str
    invocation_id: str
    at: Any
    operation_id: str | None = None
    code: str | None = None
    replayed: bool = False
    recovered: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    #: The invocation's transport and trace carrier (see ``Invocation``).
    transport: str = ""
    trace: Mapping[str, str] = field(default_factory=dict)


class _Observer:
    """Emits events to the tool's and the site's observers; contains their errors."""

    def __init__(self, definition: Tool, inv: Invocation | None = None) -> None:
        self.tool = definition
        self.transport = inv.transport if inv is not None else ""
        self.trace: Mapping[str, str] = inv.trace if inv is not None else {}
        self.sinks: list[Callable[[GuardEvent], Any]] = [
            s for s in [definition.observe, *gt_settings.OBSERVERS] if s is not None
        ]
        self.invocation_id = ""
        if self.sinks:
            factory = definition.invocation_id or (lambda: uuid.uuid4().hex)
            self.invocation_id = str(factory())
        self.operation_id: str | None = None

    def emit(self, stage: str, **meta: Any) -> None:
        if not self.sinks:
            return
        now = (self.tool.now or timezone.now)()
        event = GuardEvent(
            stage=stage,
            tool=self.tool.name,
            invocation_id=self.invocation_id,
            at=now,
            operation_id=self.operation_id,
            transport=self.transport,
            trace=self.trace,
            **meta,
        )
        for sink in self.sinks:
            try:
                sink(event)
            except Exception:
                logger.warning("observer failed at stage %s of %s", stage, self.tool.name)


def principal_scope(user: Any, principal: str | None) -> str | None:
    """Whose keys these are. Keys never cross principals."""
    if principal:
        return f"principal:{principal}"
    if user is not None and getattr(user, "is_authenticated", False):
        cls = user.__class__  # a session's lazy user answers its user's class
        meta = getattr(cls, "_meta", None)  # None: a user object that is no model
        label = meta.label_lower if meta is not None else f"{cls.__module__}.{cls.__qualname__}"
        return f"{label}:{user.pk}"
    return None


@functools.lru_cache(maxsize=512)
def _takes(hook: Callable[..., Any], name: str) -> bool:
    """Whether ``hook`` accepts the keyword argument ``name`` (by name or ``**kwargs``)."""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # no signature to read: pass only what it always got
        return False
    return any(p.kind is p.VAR_KEYWORD or (p.name == name and p.kind is not p.POSITIONAL_ONLY)
               for p in parameters)


def principal_kwargs(hook: Callable[..., Any], inv: Invocation) -> dict[str, Any]:
    """Whose operation it is, ``user`` and ``scope``, for a hook that takes them.

    ``recover`` and ``verify`` read state by the operation's key, which the agent chose:
    they must scope what they read by its principal too. These arguments came after
    the hooks' first signatures, so a hook that does not name them (or take
    ``**kwargs``) is called as before.
    """
    def takes(name: str) -> bool:
        try:
            return _takes(hook, name)
        except TypeError:  # an unhashable callable object: read its signature each time
            return _takes.__wrapped__(hook, name)

    return {name: value for name, value in (("user", inv.user), ("scope", inv.scope))
            if takes(name)}


def _decision(value: Any, yes: str) -> tuple[bool, str]:
    """Hooks answer a bool or a mapping like ``{"allowed": bool, "reason": str}``."""
    if isinstance(value, Mapping):
        return bool(value.get(yes)), str(value.get("reason") or "")
    return bool(value), ""


class Pipeline:
    """Runs one invocation of ``tool`` through every guard stage."""

    store_class: type[OperationStore] | None = None

    def __init__(self, definition: Tool) -> None:
        self.tool = definition
        self.store = (self.store_class or gt_settings.STORE_CLASS)()

    # -- entry point ---------------------------------------------------------------------
    def run(self, inv: Invocation) -> GuardResult:
        obs = _Observer(self.tool, inv)
        obs.emit("started")
        try:
            result = self.guarded(inv, obs)
        except OutcomeUnknownError as exc:
            obs.emit("outcome_unknown", code=exc.code)
            raise
        except GuardError as exc:
            obs.emit("failed", code=exc.code)
            raise
        except BaseException:
            obs.emit("failed", code="internal_error")
            raise
        obs.emit("succeeded", replayed=result.replayed, recovered=result.recovered)
        return result

    def guarded(self, inv: Invocation, obs: _Observer) -> GuardResult:
        remembered = self.remembered(inv)
        if remembered is None or remembered.fingerprint != inv.fingerprint:
            inv.input = self.validate_input(inv)
        inv.scope = self.identify(inv)
        inv.context = self.resolve_context(inv)
        deferred = self.check_authorization(inv, obs, defer=self.defers_permissions)
        if self.tool.idempotent:
            try:
                inv.key = self.resolve_key(inv)
            except GuardError:
                if deferred is not None:  # a refusal comes first, as it always does
                    self.check_authorization(inv, obs)
                raise
        if (self.tool.idempotent or self.tool.confirm_mode) and not inv.fingerprint:
            inv.fingerprint = fingerprint(inv.input)
        if self.tool.confirm_mode == "always":
            self.check_preconditions(inv)
            self.confirm(inv, obs)
        if not self.tool.idempotent:
            return self.execute_unclaimed(inv, obs)
        if callable(self.tool.idempotency_key):  # such a key exists only now
            remembered = replays.get(self.tool.name, inv.scope, inv.key or "")
        if remembered is not None:
            if deferred is not None:
                self.check_authorization(inv, obs)
            return self.replay_remembered(inv, remembered, obs)
        result = self.claimed(inv, obs, deferred)
        if result.operation is not None and result.operation.get("status") == "succeeded":
            replays.put(self.tool.name, inv.scope, inv.key or "", fingerprint=inv.fingerprint,
                        output=result.output, operation=result.operation,
                        recovered=result.recovered, output_json=result.output_json,
                        reconciled=result.reconciled)
        return result

    def claimed(
        self, inv: Invocation, obs: _Observer, permissions: tuple[str, list[Any]] | None = None
    ) -> GuardResult:
        """Claim the key, then execute, replay, refuse or recover, as the claim says.

        ``permissions``: a deferred permission query (``check_authorization``).
        """
        claim = None
        if self.locks_key:
            result, claim = self.execute_locked(inv, obs, permissions)
            if result is not None:
                return result
        if claim is None:
            claim = self.claim(inv)
        obs.operation_id = str(claim.operation.pk)
        if claim.kind == "completed":
            return self.replay(inv, claim.operation, obs)
        if claim.kind == "in_flight":
            raise OperationInFlight(
                headers={"Retry-After": str(claim.retry_after)},
                extra={"operation": claim.operation.summary()},
            )
        if claim.kind == "abandoned":
            return self.recover_abandoned(inv, claim, obs)
        return self.execute_fresh(inv, claim, obs)

    # -- stages before the claim -----------------------------------------------------------
    def remembered(self, inv: Invocation) -> Remembered | None:
        """This process's answer for the call's key, looked up before validation.

        When the input is the very one answered (the same fingerprint, set here), it
        passed this tool's validator then (only succeeded calls are remembered, and a
        process keeps its schemas), so its replay skips validation; everything else
        still runs, and any other input is validated first as always. A key computed
        by a callable needs the validated input: it is looked up later instead.
        """
        if not self.tool.idempotent or callable(self.tool.idempotency_key):
            return None
        key = self.given_key(inv)
        scope = self.scope_of(inv)
        if not isinstance(key, str) or not key or scope is None:
            return None  # refused later, by identify or resolve_key
        found = replays.get(self.tool.name, scope, key)
        if found is not None:
            inv.fingerprint = fingerprint(inv.input)
        return found

    def validate_input(self, inv: Invocation) -> Mapping[str, Any]:
        validate(
            self.tool.validator,
            inv.input,
            known=self.tool.schema_names,
            max_issues=gt_settings.MAX_ISSUES,
        )
        return inv.input

    def identify(self, inv: Invocation) -> str:
        scope = self.scope_of(inv)
        if scope is None:
            raise NotAuthenticated()
        return scope

    def scope_of(self, inv: Invocation) -> str | None:
        """Whose keys the call uses: its principal, "anonymous" where allowed, else None."""
        scope = principal_scope(inv.user, inv.principal)
        if scope is None and self.tool.allow_anonymous:
            return "anonymous"
        return scope

    def resolve_context(self, inv: Invocation) -> Any:
        if self.tool.context is None:
            return None
        return self.tool.context(inv.input, user=inv.user, request=inv.request)

    def check_authorization(
        self, inv: Invocation, obs: _Observer, *, defer: bool = False
    ) -> tuple[str, list[Any]] | None:
        """OAuth scopes, Django permissions, then the object-level callable; on every call,
        replays too.

        With ``defer`` (see ``defers_permissions``) a permission check that needs a
        query returns that query instead of running it; the caller runs it, in the
        round trip that locks the key, and passes its rows to ``check_permission_rows``
        before anything else happens.
        """
        self.check_scopes(inv)
        if self.tool.permissions:
            user = inv.user
            if user is None or not getattr(user, "is_authenticated", False):
                raise NotAuthenticated()
            decided = permission_query(user, self.tool.permissions)
            if defer and not isinstance(decided, bool):
                return decided
            if not answer(decided, self.tool.permissions):
                raise AuthorizationError()
        if self.tool.authorize is not None:
            allowed, _reason = _decision(
                self.tool.authorize(
                    input=inv.input, context=inv.context, user=inv.user, signal=self._signal(inv)
                ),
                "allowed",
            )
            if not allowed:
                # The reason is application text about the caller's request; it is
                # logged, not sent, so that no data about other objects leaks.
                raise AuthorizationError()
        if self.tool.permissions or self.tool.authorize is not None:
            obs.emit("authorized")
        return None

    def check_scopes(self, inv: Invocation) -> None:
        """The OAuth scopes the tool needs, when the call came with an OAuth token."""
        if (inv.request is not None or inv.credential is not None) and apps.is_installed(
                "oauth2_provider"):
            from guarded_tools.contrib import oauth

            oauth.check_scopes(self.tool, inv.request, inv.credential)

    def authorize_read(self, inv: Invocation) -> None:
        """A read of a call's state or result (its operation, its confirmation, its task):
        the authorization its replay would face, with the call's stored input."""
        inv.scope = self.identify(inv)
        inv.context = self.resolve_context(inv)
        unobserved = _Observer(self.tool, None)
        unobserved.sinks = []  # a read is no call: observers see calls' lifecycles only
        self.check_authorization(inv, unobserved)

    def check_permission_rows(self, rows: Any, obs: _Observer) -> None:
        """The deferred permission check, with its query's rows."""
        if not granted(rows, self.tool.permissions):
            raise AuthorizationError()
        obs.emit("authorized")

    @cached_property
    def defers_permissions(self) -> bool:
        """Whether the permission query can go in the round trip that locks the key.

        Only when nothing else depends on authorization before the key's lock: no
        ``authorize`` callable (it runs after the permissions), no confirmation before
        the claim, and the permissions read from the database the key is locked in.
        """
        return (
            bool(self.tool.permissions)
            and self.tool.authorize is None
            and self.tool.confirm_mode is None
            and self.locks_key
            and permissions_database() == router.db_for_write(Operation)
        )

    def check_preconditions(self, inv: Invocation) -> None:
        """The tool's business preconditions, before anyone is asked to confirm the call.

        ``precheck(input=, context=, user=)`` raises the tool's ``ToolError`` (with its
        repair) for a call that cannot succeed, so no person approves it first. It runs
        for fresh calls only: a replay never reaches it.

        Before a confirmation asked after the claim (``effect-only``, ``owner``), the
        input's own validation (``Tool.input_check``: a serializer's, a model's, a
        published view's) runs first, without saving: a call it refuses answers
        ``invalid_input`` and no person is asked to approve it. It runs again, as
        always, right before the handler (what it looks up may change meanwhile).
        """
        if self.tool.input_check is not None and self.tool.confirms_after_claim:
            self.tool.input_check(dict(inv.input), self.make_context(inv, None))
        if self.tool.precheck is not None:
            self.tool.precheck(input=inv.input, context=inv.context, user=inv.user)

    def confirm(self, inv: Invocation, obs: _Observer, claim: Claim | None = None) -> None:
        obs.emit("confirmation_requested")
        if self.tool.queued_confirmation:
            from guarded_tools.pipeline.confirmations import require_approval

            try:
                confirmation = require_approval(
                    self.tool, inv, claim.operation.pk if claim is not None else None)
            except ConfirmationError:
                obs.emit("declined")
                raise
            if claim is not None:
                type(confirmation).objects.filter(pk=confirmation.pk).update(
                    operation_id=claim.operation.pk
                )
            obs.emit("confirmed")
            return
        hook = self.tool.confirm
        request = hook["request"] if isinstance(hook, Mapping) else hook
        assert callable(request)
        confirmed, reason = _decision(
            request(input=inv.input, context=inv.context, user=inv.user, signal=self._signal(inv)),
            "confirmed",
        )
        if not confirmed:
            obs.emit("declined")
            raise ConfirmationError(
                "The call was declined." + (f" Reason: {reason}" if reason else ""),
                repair={"action": "ask_user", "instruction": "Ask the user how to proceed."},
            )
        obs.emit("confirmed")

    def given_key(self, inv: Invocation) -> Any:
        """The key as the caller gave it (an input field or the header), unchecked."""
        spec = self.tool.idempotency_key
        return inv.input.get(spec) if isinstance(spec, str) else inv.header_key

    def resolve_key(self, inv: Invocation) -> str:
        spec = self.tool.idempotency_key
        if callable(spec):
            key: Any = spec(inv.input, context=inv.context)
        else:
            key = self.given_key(inv)
        if key is None or key == "":
            raise IdempotencyKeyMissing(
                repair={
                    "action": "change_input",
                    "fields": [spec] if isinstance(spec, str) else [],
                    "instruction": "Send a new unique key (a UUID)"
                    + (f" in the {gt_settings.IDEMPOTENCY_HEADER} header" if spec is None else "")
                    + " and reuse it on every retry.",
                }
            )
        if (
            not isinstance(key, str)
            or len(key) > gt_settings.MAX_KEY_LENGTH
            or not key.isprintable()
            or not key.strip()
        ):
            raise IdempotencyKeyInvalid()
        return key

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
            and not inspect.iscoroutinefunction(self.tool.handler)
            and self.store.can_lock()
        )

    # -- replays -------------------------------------------------------------------------
    def replay(self, inv: Invocation, operation: Operation, obs: _Observer) -> GuardResult:
        """The stored result of a completed operation; ``verify`` judges it again unless a
        person decided it (their decision is final: it is never re-judged)."""
        obs.emit("replayed")
        if operation.state == OperationState.SUCCEEDED:
            result = GuardResult(
                output=operation.output,
                operation=operation.summary(replayed=True),
                replayed=True,
                recovered=operation.recovered,
                # Set by the person's decision, on the row this replay read: no query.
                reconciled=operation.reconciled,
            )
            if not result.reconciled:
                self.verify(inv, result, obs)
            return result
        raise self.stored_error(operation)

    def replay_remembered(
        self, inv: Invocation, remembered: Remembered, obs: _Observer
    ) -> GuardResult:
        """A replay answered from this process's replay cache: no SQL statement."""
        if remembered.fingerprint != inv.fingerprint:
            raise IdempotencyKeyReused()
        obs.operation_id = str(remembered.operation.get("id"))
        obs.emit("replayed")
        result = GuardResult(
            output=remembered.output,
            operation=dict(remembered.operation),
            replayed=True,
            recovered=remembered.recovered,
            reconciled=remembered.reconciled,
        )
        if not result.reconciled:
            self.verify(inv, result, obs)
        return result

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

    # -- execution -----------------------------------------------------------------------
    def execute_unclaimed(self, inv: Invocation, obs: _Observer) -> GuardResult:
        if self.tool.confirm_mode != "always":
            self.check_preconditions(inv)
        ctx = self.make_context(inv, None)
        output = self.call_handler(inv, ctx)
        obs.emit("executed")
        result = GuardResult(output=output, output_json=self.measure_output(output, obs))
        self.verify(inv, result, obs)
        return result

    def execute_fresh(self, inv: Invocation, claim: Claim, obs: _Observer) -> GuardResult:
        if self.tool.confirm_mode != "always":
            try:
                self.check_preconditions(inv)
                if self.tool.confirms_after_claim:
                    self.confirm(inv, obs, claim)
            except BaseException:
                self.store.release(claim)  # nothing ran: the key is fresh again
                raise
        handle = OperationHandle(self.store, claim, self.lease_seconds)
        ctx = self.make_context(inv, handle)
        if self.tool.atomic:
            return self.execute_atomic(inv, claim, ctx, obs)
        try:
            output = self.call_handler(inv, ctx)
        except BaseException as exc:
            return self.handle_failure(inv, claim, handle, exc, obs)
        obs.emit("executed")
        return self.finalize(inv, claim, output, obs, recovered=False)

    def execute_atomic(
        self, inv: Invocation, claim: Claim, ctx: ToolContext, obs: _Observer
    ) -> GuardResult:
        """Effect, journal, verify and completion commit together, or not at all."""
        try:
            with transaction.atomic(using=router.db_for_write(Operation), durable=True):
                output = self.call_handler(inv, ctx)
                obs.emit("executed")
                result = self.finalize(inv, claim, output, obs, recovered=False)
        except LeaseLost:
            return self.after_lost_lease(claim)  # rolled back: nothing to keep
        except BaseException:
            # Nothing committed: the claim can be released safely. If the release
            # finds the claim completed, the commit happened after all: replay it.
            if not self._try_release(claim):
                operation = self.store.refresh(claim.operation)
                if operation.state == OperationState.SUCCEEDED:
                    return self.replay(inv, operation, obs)
            raise
        return result

    def execute_locked(
        self, inv: Invocation, obs: _Observer, permissions: tuple[str, list[Any]] | None = None
    ) -> tuple[GuardResult | None, Claim | None]:
        """An atomic tool's call as one transaction: lock the key, run, insert the result.

        The key is locked for the transaction (``OperationStore.lock_key``); the
        handler's effect, its journal, ``verify`` and the operation row, inserted
        already succeeded, commit together or not at all. A crash at any point
        leaves nothing: no effect, no claim to recover. A duplicate arriving
        meanwhile finds the key locked (``operation_in_flight``). When the key
        already has a row, nothing runs here: ``(None, claim)`` says what the row
        means (None for a released key, which the ordinary claim takes again).
        """
        using = router.db_for_write(Operation)
        refuse_enclosing_transaction(connections[using])  # NestedTransaction
        with transaction.atomic(using=using, durable=True):
            state, found, permission_rows = self.store.lock_key(
                tool=self.tool.name, scope=inv.scope, key=inv.key or "", also=permissions
            )
            if permissions is not None:  # before anything the lock says
                self.check_permission_rows(permission_rows, obs)
            if state == "busy":
                raise OperationInFlight(headers={"Retry-After": "1"})
            if found is not None:  # the key exists: decided outside this transaction
                operation, db_now = found
                if operation.state == OperationState.RELEASED:
                    return None, None
                return None, self.store.classify(operation, db_now, inv.fingerprint)
            self.check_preconditions(inv)  # a refusal rolls back with the lock: nothing left
            claim = self.store.pending(
                tool=self.tool.name, scope=inv.scope, key=inv.key or "",
                fp=inv.fingerprint, input=inv.input, user=inv.user,
            )
            obs.operation_id = str(claim.operation.pk)
            handle = PendingOperationHandle(self.store, claim, self.lease_seconds)
            output = self.call_handler(inv, self.make_context(inv, handle))
            obs.emit("executed")
            text = self.measure_output(output, obs)
            summary = claim.operation.summary()
            result = GuardResult(output=output, operation=summary, output_json=text)
            self.verify(inv, result, obs)
            self.store.insert_completed(claim, storable_json(output, text), handle.pending)
        result.operation = {**summary, "status": claim.operation.state}  # as inserted
        return result, claim

    def _try_release(self, claim: Claim) -> bool:
        try:
            return self.store.release(claim)
        except Exception:
            logger.exception("could not release operation %s", claim.operation.pk)
            return True

    def make_context(self, inv: Invocation, handle: OperationHandle | None) -> ToolContext:
        return ToolContext(
            user=inv.user,
            context=inv.context,
            signal=self._signal(inv),
            operation=handle,
            request=inv.request,
            tool=self.tool,
        )

    def call_handler(self, inv: Invocation, ctx: ToolContext) -> Any:
        """Run the handler; an ``async def`` one runs on the server's event loop.

        Under ASGI the coroutine runs natively on the server's loop (asgiref's
        ``async_to_sync`` from the request thread); when the caller's signal is
        aborted (the client went away) the coroutine is cancelled.
        """
        if inspect.iscoroutinefunction(self.tool.handler):
            return async_to_sync(_cancellable)(self.tool.handler, dict(inv.input), ctx)
        return self.tool.handler(dict(inv.input), ctx)

    def _signal(self, inv: Invocation) -> CancelSignal:
        if inv.signal is None:
            inv.signal = CancelSignal()
        return inv.signal

    # -- after the handler ---------------------------------------------------------------
    def handle_failure(
        self,
        inv: Invocation,
        claim: Claim,
        handle: OperationHandle,
        exc: BaseException,
        obs: _Observer,
    ) -> GuardResult:
        """Release (proven pre-effect), recover, or abandon; never run the handler again."""
        if isinstance(exc, LeaseLost):
            return self.after_lost_lease(claim, evidence=exc.evidence)
        if isinstance(exc, ToolError) and (
            not self.tool.journal or self.proves_no_effect(claim)
        ):
            self.store.release(claim)
            raise exc
        if self.tool.recover is not None:
            result = self.run_recover(inv, claim, handle, exc, obs)
            assert result is not None  # with an exception, "released" re-raises it
            return result
        if self.proves_no_effect(claim):
            self.store.release(claim)
            raise exc
        # Without a recover hook nobody can ever prove the outcome: a person decides.
        self.store.mark_unknown(claim, evidence(exc, "no recover hook"))
        raise OutcomeUnknownError(
            extra={"operation": {**claim.operation.summary(), "status": "outcome_unknown"}}
        ) from exc

    def run_recover(
        self,
        inv: Invocation,
        claim: Claim,
        handle: OperationHandle,
        exc: BaseException | None,
        obs: _Observer,
        *,
        terminal: bool = False,
    ) -> GuardResult | None:
        """Ask the tool's ``recover`` what really happened.

        ``terminal`` is set when recovery itself took the claim over: a second
        "not recovered" then means nobody can prove the outcome, so it is marked
        unknown instead of abandoned again.
        """
        summary = claim.operation.summary()
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
            self.store.mark_unknown(claim, evidence(exc, "recover raised "
                                                    + type(recovery_error).__name__))
            raise OutcomeUnknownError(extra={"operation": summary}) from recovery_error
        decision = dict(decision or {})
        if decision.get("recovered"):
            obs.emit("recovered", recovered=True)
            return self.finalize(inv, claim, decision.get("output"), obs, recovered=True)
        if decision.get("outcome") == "unknown":
            self.store.mark_unknown(claim, evidence(exc, "outcome unknown"))
            raise OutcomeUnknownError(extra={"operation": summary}) from exc
        # Asked after recover ran: it may have cleared the journal once it proved that
        # no effect happened.
        if self.proves_no_effect(claim):
            self.store.release(claim)
            if exc is not None:
                raise exc
            return None  # released: proven not executed
        if terminal:
            self.store.mark_unknown(claim, evidence(exc, "not recovered, journal not empty"))
        else:
            self.store.abandon(claim)
        raise OutcomeUnknownError(extra={"operation": summary}) from exc

    def proves_no_effect(self, claim: Claim) -> bool:
        """True when nothing of the handler's effect can have committed.

        An ``atomic`` tool's effect commits only with its completion; otherwise a
        configured journal that is empty proves the handler stopped before its effect.
        """
        return self.tool.atomic or (
            self.tool.journal and self.store.journal_empty(claim.operation)
        )

    def recover_abandoned(self, inv: Invocation, claim: Claim, obs: _Observer) -> GuardResult:
        """A caller met a claim with no live owner: recover it inline, never re-execute."""
        from guarded_tools.pipeline.recovery import recover_operation

        outcome = recover_operation(claim.operation, store=self.store, definition=self.tool)
        operation = self.store.refresh(claim.operation)
        if outcome == "released" or operation.state == OperationState.RELEASED:
            # Proven not executed: the key is fresh, so this call claims it normally.
            claim = self.claim(inv)
            obs.operation_id = str(claim.operation.pk)
            if claim.kind == "fresh":
                return self.execute_fresh(inv, claim, obs)
            operation = claim.operation
        if operation.state in (OperationState.SUCCEEDED, OperationState.FAILED,
                               OperationState.OUTCOME_UNKNOWN):
            return self.replay(inv, operation, obs)
        raise OperationInFlight(
            headers={"Retry-After": "1"}, extra={"operation": operation.summary()}
        )

    def finalize(
        self, inv: Invocation, claim: Claim, output: Any, obs: _Observer, *, recovered: bool
    ) -> GuardResult:
        """Budget, verify, complete: finalization the caller's cancellation cannot stop."""
        text = self.measure_output(output, obs)
        result = GuardResult(
            output=output,
            operation=claim.operation.summary(),
            recovered=recovered,
            output_json=text,
        )
        try:
            self.verify(inv, result, obs)
        except VerificationError as exc:
            if not self.tool.atomic:
                self.store.mark_unknown(claim, exc.as_dict(), output=storable_json(output))
            exc.extra["operation"] = claim.operation.summary()
            raise
        if not self.store.complete(claim, storable_json(output, text), recovered=recovered):
            if self.tool.atomic:
                raise LeaseLost(str(claim.operation.pk))
            return self.after_lost_lease(claim, evidence={"output": storable_json(output)})
        result.operation = {**claim.operation.summary(), "status": OperationState.SUCCEEDED,
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

    def measure_output(self, output: Any, obs: _Observer) -> str | None:
        """The output's JSON text (kept for the replay cache), None if it is not JSON."""
        budget = self.tool.output_budget_bytes or gt_settings.OUTPUT_BUDGET_BYTES
        try:
            text = JSON_ENCODER.encode(output)
        except (TypeError, ValueError):
            obs.emit("output_unmeasurable")
            logger.warning("tool %s returned an output that is not JSON", self.tool.name)
            return None
        size = len(text.encode("utf-8"))
        if size > budget:
            obs.emit("output_oversized", extra={"bytes": size, "budget": budget})
            logger.warning(
                "tool %s output is %d bytes, over its budget of %d", self.tool.name, size, budget
            )
            return text
        obs.emit("output_validated", extra={"bytes": size})
        return text

    def verify(self, inv: Invocation, result: GuardResult, obs: _Observer) -> None:
        """Run ``verify`` with its own signal, bounded by ``verify_timeout``."""
        verifier = self.tool.verify
        if verifier is None:
            return
        signal = CancelSignal()
        kwargs = {
            "input": dict(inv.input),
            "output": result.output,
            "context": inv.context,
            "replayed": result.replayed,
            "recovered": result.recovered,
            "signal": signal,
            **principal_kwargs(verifier, inv),
        }
        timeout = self.tool.verify_timeout
        if timeout is None:
            decision = verifier(**kwargs)
        else:
            decision = _call_with_deadline(verifier, kwargs, timeout, signal)
        verified, reason = _decision(decision, "verified")
        if not verified:
            # The verifier's reason is application text that may quote the input: DEBUG only.
            logger.warning("tool %s: verification failed", self.tool.name)
            logger.debug("tool %s: verification failed: %s", self.tool.name, reason)
            raise VerificationError()
        obs.emit("verified")


def _cancel_soon(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
    loop.call_soon_threadsafe(task.cancel)


async def _cancellable(handler: Callable[..., Any], input: dict[str, Any], ctx: ToolContext) -> Any:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        ctx.signal.on_abort(lambda reason: _cancel_soon(loop, task))
    return await handler(input, ctx)


def _call_with_deadline(
    fn: Callable[..., Any], kwargs: dict[str, Any], timeout: float, signal: CancelSignal
) -> Any:
    """Call ``fn`` in a thread of its own and give up on it at the deadline.

    Inside a transaction (an atomic tool's, or the site's own) the verifier must use
    this thread's connection instead: another thread's could not see the uncommitted
    effect it is there to check. The deadline then aborts its signal, and an answer
    that comes after it fails verification all the same.
    """
    if any(c.in_atomic_block for c in connections.all(initialized_only=True)):
        timer = threading.Timer(timeout, signal.abort, args=("verify_timeout",))
        timer.daemon = True
        timer.start()
        try:
            decision = fn(**kwargs)
        finally:
            timer.cancel()
        if signal.aborted:
            raise VerificationError("Verification did not finish in time.")
        return decision

    def target() -> Any:
        try:
            return fn(**kwargs)
        finally:
            connections.close_all()

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="gt-verify")
    future = pool.submit(target)
    try:
        return future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        signal.abort("verify_timeout")
        raise VerificationError("Verification did not finish in time.") from None
    finally:
        pool.shutdown(wait=False)


def evidence(exc: BaseException | None, recover: str) -> dict[str, Any]:
    """The stored error of an outcome nobody could prove, for the operator's page: the
    handler's failure class (never its text, which replays never carry either) and what
    recovery answered."""
    data: dict[str, Any] = {"code": "outcome_unknown", "recover": recover}
    if exc is not None:
        data["failure"] = type(exc).__name__
    return data


def get_pipeline(definition: Tool) -> Pipeline:
    cls = gt_settings.PIPELINE_CLASS
    return cls(definition)  # type: ignore[no-any-return]
