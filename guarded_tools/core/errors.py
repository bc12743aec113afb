"""Provides the errors the guard owns, each declaring its code, status and catalog entry.

The guard raises errors only for decisions it owns. Anything else a context hook,
store, handler or verifier raises keeps its identity in Python; over HTTP it becomes
``internal_error`` with a correlation id, and its text goes only to the log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from guarded_tools.core.catalog import (
    ERROR_STATUSES,
    catalogs,
    is_code,
    resolve_link,
    site_names,
    site_text,
    status_problem,
)
from guarded_tools.core.codes import BUILTIN
from guarded_tools.core.repair import (
    ANY_AUDIENCE,
    RETRY_POLICIES,
    Action,
    Audience,
    KeyAdvice,
    Repair,
    RepairPlan,
    RetryPolicy,
    coerce_repair,
    render_message,
)

__all__ = [
    "AuthorizationError",
    "BudgetExceeded",
    "ConfirmationError",
    "ConfirmationExpired",
    "ConfirmationNotFound",
    "ConfirmationRequired",
    "CsrfFailed",
    "GuardError",
    "IdempotencyKeyInvalid",
    "IdempotencyKeyMissing",
    "IdempotencyKeyReused",
    "InternalError",
    "LeaseLost",
    "MalformedRequest",
    "MethodNotAllowed",
    "NotAuthenticated",
    "OperationFailed",
    "OperationInFlight",
    "OperationNotFound",
    "OutcomeUnknownError",
    "RateLimited",
    "RequestTooLarge",
    "ToolError",
    "ToolNotFound",
    "ValidationError",
    "VerificationError",
]

Arises = Literal["request", "call", "keyed_call"]


class GuardError(Exception):
    """Base of every error the guard renders for agents.

    Subclasses declare ``code``; status, retry policy, default message and the
    catalog's why/fix/link come from the catalog entry for that code.
    """

    code: str = "internal_error"
    error_type: str = "guard_error"
    #: What an ``after_repair`` retry does with its idempotency key (see ``KeyAdvice``).
    key_advice: KeyAdvice = "same"
    #: The repair when the raiser gives none.
    default_repair: Repair | RepairPlan | None = None
    #: When neither the raiser nor ``default_repair`` gives a repair: the catalog's
    #: ``fix``, as the audience reads it, becomes one step with this action.
    fix_action: Action | None = None
    #: Where the error can arise: on any ``request`` (no tool involved, as for the tool
    #: list, ``initialize`` or an operation's status), only in a tool ``call``, or only
    #: in a ``keyed_call`` (a tool that takes an idempotency key).
    arises: ClassVar[Arises] = "call"

    def __init__(
        self,
        message: str | None = None,
        *,
        code: str | None = None,
        retry: RetryPolicy | None = None,
        repair: Repair | RepairPlan | Mapping[str, Any] | None = None,
        details: Mapping[str, Any] | None = None,
        status: int | None = None,
        why: str | None = None,
        fix: str | None = None,
        link: str | None = None,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if code is not None:
            self.code = code
        #: The catalog's entry as written: each audience reads it with ``for_site``.
        self.entry = BUILTIN.entries.get(self.code)
        entry = self.entry.for_site() if self.entry is not None else None
        self.raw_message = message or (entry.message if entry else "The call failed.")
        if retry is None:
            retry = entry.retry if entry else "never"  # type: ignore[assignment]
        self.retry: RetryPolicy = retry  # type: ignore[assignment]
        if self.retry not in RETRY_POLICIES:
            raise ValueError(f"retry must be one of {RETRY_POLICIES}, not {self.retry!r}")
        self.repair = coerce_repair(repair if repair is not None else self.default_repair)
        self.details = dict(details or {})
        self.status_code = status or (entry.status if entry else 500)
        self.why = why if why is not None else (entry.why if entry else "")
        self.fix = fix if fix is not None else (entry.fix if entry else "")
        self.link = link if link is not None else (entry.link if entry else "")
        self.extra: dict[str, Any] = dict(extra or {})
        self.headers: dict[str, str] = dict(headers or {})
        super().__init__(self.message)

    @property
    def message(self) -> str:
        """The portable message: code, retry policy in words, bounded next action."""
        return self.message_for(ANY_AUDIENCE)

    def text(self, name: str, audience: Audience = ANY_AUDIENCE) -> str:
        """``message``, ``why`` or ``fix`` as ``audience`` reads it.

        The catalog's text (still the entry's own, not the raiser's) in the audience's
        wording; the raiser's text with the audience's names filled in (:func:`site_text`).
        """
        own = self.raw_message if name == "message" else getattr(self, name)
        if self.entry is not None:
            written = self.entry.for_site()
            if own == getattr(written, name):
                return str(getattr(self.entry.for_site(audience), name))
        return str(site_text(own, site_names(audience)))

    def repair_for(self, audience: Audience = ANY_AUDIENCE) -> Repair | RepairPlan | None:
        """The repair as ``audience`` reads it: its instructions name the audience's words."""
        if self.repair is None and self.fix_action is not None and self.retry == "after_repair":
            return Repair(action=self.fix_action, instruction=self.text("fix", audience))
        return fill_repair(self.repair, site_names(audience))

    def message_for(self, audience: Audience = ANY_AUDIENCE) -> str:
        """The portable message for ``audience``: its transport's words, and key talk only
        where the call has a key."""
        from guarded_tools.conf import gt_settings

        try:
            limit = gt_settings.MESSAGE_MAX_CHARS
        except Exception:  # settings not configured (plain Python use)
            limit = 1500
        head, repair = self.text("message", audience), self.repair_for(audience)
        # Rendered once (it is read for ``args``, ``str()`` and ``as_dict``), again only
        # if what it is made of changes.
        made_of = (self.code, head, self.retry, repair, limit, self.key_advice, audience.has_key)
        cached = self.__dict__.get("_rendered")
        if cached is not None and cached[0] == made_of:
            return str(cached[1])
        text = render_message(
            self.code, head, self.retry, repair, limit=limit,
            key=self.key_advice, keyed=audience.has_key,
        )
        self.__dict__["_rendered"] = (made_of, text)
        return text

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # The default rebuilds with ``cls(*self.args)``, which does not match the
        # subclasses' signatures (``ToolError(code, ...)``, ``InternalError(id)``).
        return (_restore, (type(self), self.args, self.__dict__.copy()))

    def as_dict(self, docs_url: str = "", audience: Audience = ANY_AUDIENCE) -> dict[str, Any]:
        """The structured error ``audience`` receives; ``details`` stay server-side."""
        data: dict[str, Any] = {
            "type": self.error_type,
            "code": self.code,
            "message": self.message_for(audience),
            "retry": self.retry,
        }
        repair = self.repair_for(audience)
        if repair is not None:
            data["repair"] = repair.as_dict()
        for name in ("why", "fix"):
            if text := self.text(name, audience):
                data[name] = text
        link = resolve_link(self.link, docs_url)
        if link:
            data["link"] = link
        data.update(self.extra)
        return data


def fill_repair(
    repair: Repair | RepairPlan | None, names: Mapping[str, str]
) -> Repair | RepairPlan | None:
    """``repair`` with the names in its instructions filled in (:func:`site_text`)."""
    if isinstance(repair, RepairPlan):
        steps = tuple(fill_repair(step, names) for step in repair.steps)
        if steps == repair.steps:
            return repair
        return dataclasses.replace(repair, steps=steps)  # type: ignore[arg-type]
    if repair is None or "{" not in repair.instruction:
        return repair
    return dataclasses.replace(repair, instruction=site_text(repair.instruction, names))


def _restore(cls: type[GuardError], args: tuple[Any, ...], state: dict[str, Any]) -> GuardError:
    """Rebuild a pickled or copied error without calling its ``__init__``."""
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class ToolError(GuardError):
    """An expected business failure the handler raises, with what to do next.

    Raised before the effect (or with the journal left empty) it is the
    application's statement that nothing happened: the claim is released and a
    repaired retry with the same key runs.
    """

    error_type = "tool_error"

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        retryable: bool | None = None,
        repair: Repair | RepairPlan | Mapping[str, Any] | None = None,
        details: Mapping[str, Any] | None = None,
        status: int | None = None,
        why: str | None = None,
        fix: str | None = None,
        link: str | None = None,
    ) -> None:
        if not is_code(code):
            raise ValueError("A ToolError code is 1-64 lowercase letters, digits or '_'.")
        if retry is None:
            if retryable is None:
                retry = "after_repair" if repair is not None else "never"
            elif not retryable:
                retry = "never"
            else:
                retry = "after_repair" if repair is not None else "as_is"
        if status is not None and (
            isinstance(status, bool) or not isinstance(status, int) or status not in ERROR_STATUSES
        ):
            raise ValueError(
                f"A ToolError status is a 4xx code, or 502, 503 or 504: {status_problem(status)}."
            )
        super().__init__(
            message or code.replace("_", " ").capitalize(),
            code=code,
            retry=retry,
            repair=repair,
            details=details,
            status=status or 409,
            why=why or "",
            fix=fix or "",
            link=link or "",
        )
        # An application catalog's entry, read for each audience as the guard's own are
        # (its ``{tool_list}``, ``{keep_key}`` and ``keyless`` texts) while the error
        # still carries the entry's texts.
        owner = catalogs.owner(code)
        self.entry = owner.entries.get(code) if owner is not None else None

    @property
    def retryable(self) -> bool:
        return self.retry != "never"


class ValidationError(GuardError):
    """The input does not match the tool's schema; ``issues`` say where."""

    code = "invalid_input"
    error_type = "validation_error"
    key_advice = "unused"  # validation runs before the claim; the key may be a bad field

    def __init__(self, issues: list[dict[str, Any]], message: str | None = None, *,
                 fields: Sequence[str] | None = None) -> None:
        """``fields``: the input fields to change, in order (a missing property among
        them); by default each issue's path (:func:`issue_fields`)."""
        self.issues = issues
        names = issue_fields(issues) if fields is None else tuple(dict.fromkeys(fields))[:8]
        repair = Repair(action="change_input", fields=names)
        super().__init__(message, repair=repair)
        self.extra["issues"] = issues


def issue_fields(issues: list[dict[str, Any]]) -> tuple[str, ...]:
    """The fields to change: each issue's path up to its first undisclosed segment.

    A root-level issue (or one under a property the schema does not declare) names no
    field: ``(root)`` or ``<property>`` would read as a field called ``root`` or
    ``property`` once reduced to a safe name.
    """
    fields: list[str] = []
    for issue in issues:
        parts: list[str] = []
        for part in issue.get("path") or []:
            if part == "<property>":
                break
            parts.append(str(part))
        name = ".".join(parts)
        if name and name not in fields:
            fields.append(name)
    return tuple(fields[:8])


class MalformedRequest(GuardError):
    """The body is not one valid JSON object (``malformed_request``)."""

    code = "malformed_request"
    error_type = "request_error"
    arises = "request"
    fix_action = "change_input"


class MethodNotAllowed(GuardError):
    """The endpoint does not answer that HTTP method (the response's ``Allow`` says which)."""

    code = "method_not_allowed"
    error_type = "request_error"
    arises = "request"
    fix_action = "change_input"


class RequestTooLarge(GuardError):
    """The body is over ``MAX_BODY_BYTES``; splitting the work needs one key per part."""

    code = "request_too_large"
    error_type = "request_error"
    key_advice = "new"
    arises = "request"
    #: The catalog's fix is the step to take (the two said it in near-identical words).
    fix_action = "change_input"


class IdempotencyKeyMissing(GuardError):
    """The tool needs an idempotency key and the call has none (``idempotency_key_missing``)."""

    code = "idempotency_key_missing"
    error_type = "idempotency_error"
    key_advice = "new"
    arises = "keyed_call"
    fix_action = "change_input"


class IdempotencyKeyInvalid(GuardError):
    """The key was refused as it is: keeping it can never work."""

    code = "idempotency_key_invalid"
    error_type = "idempotency_error"
    key_advice = "new"
    arises = "keyed_call"
    default_repair = Repair(
        action="change_input",
        instruction="Replace the key with a new UUID and reuse that new key for every retry"
        " of this call.",
    )


class IdempotencyKeyReused(GuardError):
    """The key was used with another input (``idempotency_key_reused``)."""

    code = "idempotency_key_reused"
    error_type = "idempotency_error"
    arises = "keyed_call"


class OperationInFlight(GuardError):
    """Another call with the same key is running (``operation_in_flight``)."""

    code = "operation_in_flight"
    error_type = "idempotency_error"
    arises = "keyed_call"


class NotAuthenticated(GuardError):
    """The call carries no valid credentials (``not_authenticated``)."""

    code = "not_authenticated"
    error_type = "authorization_error"
    arises = "request"
    default_repair = Repair(
        action="ask_user",
        instruction="If your host has no credentials for this site, ask the user for them;"
        " then send them with the request (for example an Authorization: Token header) and"
        " repeat it.",
    )


class AuthorizationError(GuardError):
    """Raised when a permission or the ``authorize`` callable denies the call."""

    code = "authorization_denied"
    error_type = "authorization_error"
    arises = "request"


class CsrfFailed(AuthorizationError):
    """Django's CSRF check refused a session-authenticated call; the token cures it."""

    code = "csrf_failed"
    fix_action = "refresh_state"


class ConfirmationError(GuardError):
    """The confirmation step declined the operation (or it expired)."""

    code = "confirmation_declined"
    error_type = "confirmation_error"


class ConfirmationExpired(ConfirmationError):
    """Nobody decided in time, or an approval lapsed before a call used it."""

    code = "confirmation_expired"


class ConfirmationRequired(GuardError):
    """A person must approve the call first; carries ``confirmation`` in ``extra``.

    Its headers say where the caller may read the confirmation's state (``Location``)
    and when to ask again (``Retry-After``).
    """

    code = "confirmation_required"
    error_type = "confirmation_error"
    default_repair = Repair(
        action="retry_same_operation",
        instruction="Wait for a person to approve it, then repeat this exact call with"
        " unchanged input.{no_new_key}",
    )


class OperationFailed(GuardError):
    """A person marked the operation failed (the default code of a reconciled failure)."""

    code = "operation_failed"
    error_type = "tool_error"
    arises = "keyed_call"


class ToolNotFound(GuardError):
    """No tool of that name, or none this caller may see (``tool_not_found``)."""

    code = "tool_not_found"
    error_type = "request_error"
    arises = "request"


class OperationNotFound(GuardError):
    """No operation of that id for this caller (``operation_not_found``)."""

    code = "operation_not_found"
    error_type = "request_error"
    arises = "request"


class ConfirmationNotFound(GuardError):
    """No request for approval of that id for this caller (``confirmation_not_found``)."""

    code = "confirmation_not_found"
    error_type = "request_error"
    arises = "request"


class RateLimited(GuardError):
    """A throttle or a budget's count refused the call before it ran (``rate_limited``)."""

    code = "rate_limited"
    error_type = "request_error"
    arises = "request"


class BudgetExceeded(GuardError):
    """The call would take a budget past its limit in this window: what remains,
    when the window frees it, and a repair (lower the amount, wait, or ask the user)."""

    code = "budget_exceeded"
    error_type = "request_error"
    arises = "call"
    default_repair = Repair(
        action="ask_user",
        instruction="Lower the amount to what the budget has left, wait until its window"
        " frees it, or ask the user to raise the limit.",
    )


class VerificationError(GuardError):
    """The verifier did not confirm the intended result (or timed out)."""

    code = "verification_failed"
    error_type = "verification_error"


class OutcomeUnknownError(GuardError):
    """The operation may have committed and recovery could not prove either way.

    ``retryable`` is always false; ``__cause__`` keeps the execution or recovery
    failure for the application's logs.
    """

    code = "outcome_unknown"
    error_type = "outcome_unknown"
    arises = "keyed_call"
    retryable = False

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("repair", Repair(action="reconcile"))
        super().__init__(message, retry="never", **kwargs)


class InternalError(GuardError):
    """What an agent sees of an exception the guard does not own."""

    code = "internal_error"
    error_type = "internal_error"
    arises = "request"

    def __init__(self, correlation_id: str) -> None:
        super().__init__(
            f"The server failed while handling this call (correlation id {correlation_id}).",
            extra={"correlation_id": correlation_id},
        )


class LeaseLost(Exception):
    """This process no longer owns the operation: another took it over.

    ``evidence`` is what the stale owner was about to record; the pipeline keeps it as a
    late result once any transaction around the failed write has rolled back.
    """

    def __init__(self, operation_id: str, evidence: Any = None) -> None:
        super().__init__(operation_id)
        self.evidence = evidence
