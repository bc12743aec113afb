"""The errors the guard owns: codes, retry policy, repair, and what reaches the agent."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guarded_tools.core import errors as exc
from guarded_tools.core.errors import (
    BUILTIN,
    GuardError,
    InternalError,
    OutcomeUnknownError,
    ToolError,
    ValidationError,
)
from guarded_tools.core.repair import RETRY_WORDS, Repair, RepairPlan, retry_words

FAST = settings(max_examples=100, deadline=None)
SLOT_REPAIR = {
    "action": "call_tool",
    "tool": "list_available_slots",
    "instruction": "Choose a current slot, then retry with the same operationId.",
}


def everything(error: GuardError) -> str:
    """All an agent could see of ``error``."""
    return str(error) + error.message + json.dumps(error.as_dict(), ensure_ascii=False)


# -- ToolError: retry policy ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retryable", "repair", "expected"),
    [
        (False, None, "never"),
        (False, SLOT_REPAIR, "never"),
        (True, None, "as_is"),
        (True, SLOT_REPAIR, "after_repair"),
        (None, None, "never"),
        (None, SLOT_REPAIR, "after_repair"),
    ],
)
def test_legacy_retryable_maps_to_a_policy(
    retryable: bool | None, repair: dict[str, Any] | None, expected: str
) -> None:
    error = ToolError("slot_stale", "Gone.", retryable=retryable, repair=repair)
    assert error.retry == expected
    assert error.retryable is (expected != "never")
    assert error.as_dict()["retry"] == expected
    assert retry_words(expected, repair is not None) in error.message


@pytest.mark.parametrize("retry", ["never", "as_is", "after_repair"])
@pytest.mark.parametrize("retryable", [None, True, False])
def test_explicit_retry_wins_over_legacy_retryable(retry: str, retryable: bool | None) -> None:
    error = ToolError("slot_stale", retry=retry, retryable=retryable)  # type: ignore[arg-type]
    assert error.retry == retry


@pytest.mark.parametrize("retry", ["", "always", "NEVER", "after-repair"])
def test_an_unknown_retry_policy_is_refused(retry: str) -> None:
    with pytest.raises(ValueError, match="retry must be one of"):
        ToolError("slot_stale", retry=retry)  # type: ignore[arg-type]


@pytest.mark.parametrize("code", ["", "Slot", "slot-stale", "1slot", "slot stale", "a" * 65])
def test_a_malformed_code_is_refused(code: str) -> None:
    with pytest.raises(ValueError, match="code"):
        ToolError(code)


@pytest.mark.parametrize("status", [200, 302, 399, 500, 501, 505])
def test_a_tool_error_status_is_4xx_or_a_dependency_failure(status: int) -> None:
    with pytest.raises(ValueError, match="4xx, or 502, 503 or 504"):
        ToolError("slot_stale", status=status)


@pytest.mark.parametrize("status", [400, 409, 499, 502, 503, 504])
def test_a_tool_error_may_say_a_dependency_failed(status: int) -> None:
    assert ToolError("upstream_down", status=status).status_code == status


def test_tool_error_defaults() -> None:
    error = ToolError("order_already_shipped")
    assert error.status_code == 409
    assert error.code == "order_already_shipped"
    assert error.raw_message == "Order already shipped"
    assert error.error_type == "tool_error"
    assert error.repair is None
    assert error.as_dict() == {
        "type": "tool_error",
        "code": "order_already_shipped",
        "message": error.message,
        "retry": "never",
    }
    assert ToolError("gone", status=410).status_code == 410


def test_tool_error_message_states_code_policy_and_next_action() -> None:
    error = ToolError(
        "slot_stale",
        "The selected slot is no longer available.",
        retry="after_repair",
        repair=SLOT_REPAIR,
    )
    message = str(error)
    assert message == error.message == error.args[0]
    assert message.startswith("The selected slot is no longer available. [slot_stale] ")
    assert RETRY_WORDS["after_repair"] in message
    assert "Next action: call the tool 'list_available_slots' and wait for its result" in message
    assert error.as_dict()["repair"] == SLOT_REPAIR


def test_tool_error_accepts_a_plan_and_keeps_it_whole() -> None:
    steps = [{"action": "call_tool", "tool": f"t{i}"} for i in range(7)]
    plan = {"steps": steps, "preserve": [f"p{i}" for i in range(10)], "update": ["u"]}
    error = ToolError("payment_source_stale", retry="after_repair", repair=plan)
    assert isinstance(error.repair, RepairPlan)
    assert error.as_dict()["repair"] == plan
    assert "'t5'" not in error.message
    assert "'t4'" in error.message


def test_tool_error_refuses_an_unknown_repair_action() -> None:
    with pytest.raises(ValueError, match="Unknown repair action"):
        ToolError("slot_stale", repair={"action": "call_tools", "tool": "x"})


# -- details stay server-side ----------------------------------------------------------------


@FAST
@given(
    secret=st.text(min_size=8, max_size=40).map(lambda s: "SECRET-" + s),
    retry=st.sampled_from(["never", "as_is", "after_repair"]),
)
def test_details_never_reach_message_or_dict(secret: str, retry: str) -> None:
    error = ToolError(
        "order_already_shipped",
        "Shipped orders cannot be cancelled.",
        retry=retry,  # type: ignore[arg-type]
        details={"orderId": secret, secret: [secret], "nested": {"token": secret}},
        repair={"action": "ask_user"},
    )
    assert error.details["orderId"] == secret
    assert "SECRET-" not in everything(error)
    assert "details" not in error.as_dict()


def test_guard_error_details_stay_server_side_too() -> None:
    error = exc.AuthorizationError(details={"db": "postgres://user:pw@db.internal/prod"})
    assert "db.internal" not in everything(error)


# -- the built-in errors -------------------------------------------------------------------------

BUILTIN_CLASSES = [
    (exc.MalformedRequest, "malformed_request", 400),
    (exc.RequestTooLarge, "request_too_large", 413),
    (exc.IdempotencyKeyMissing, "idempotency_key_missing", 400),
    (exc.IdempotencyKeyInvalid, "idempotency_key_invalid", 400),
    (exc.IdempotencyKeyReused, "idempotency_key_reused", 422),
    (exc.OperationInFlight, "operation_in_flight", 409),
    (exc.NotAuthenticated, "not_authenticated", 401),
    (exc.AuthorizationError, "authorization_denied", 403),
    (exc.ConfirmationError, "confirmation_declined", 409),
    (exc.ConfirmationRequired, "confirmation_required", 202),
    (exc.ToolNotFound, "tool_not_found", 404),
    (exc.OperationNotFound, "operation_not_found", 404),
    (exc.RateLimited, "rate_limited", 429),
    (exc.VerificationError, "verification_failed", 502),
    (exc.OutcomeUnknownError, "outcome_unknown", 500),
]


@pytest.mark.parametrize(("cls", "code", "status"), BUILTIN_CLASSES)
def test_builtin_errors_take_code_status_policy_and_catalog_text(
    cls: type[GuardError], code: str, status: int
) -> None:
    error = cls()
    entry = BUILTIN[code]
    assert error.code == code
    assert error.status_code == status == entry.status
    assert error.retry == entry.retry
    data = error.as_dict()
    assert data["code"] == code
    assert data["why"] == entry.why
    assert data["fix"] == entry.fix
    assert data["link"] == f"#{code}"
    assert f"[{code}]" in error.message
    assert error.message.startswith(entry.message)
    repair = error.repair_for()
    assert retry_words(error.retry, repair is not None, error.key_advice) in error.message
    if repair is None:
        # Regression: "after_repair" without a repair used to say "the repair below".
        assert "repair below" not in error.message


def test_links_resolve_against_the_docs_url() -> None:
    error = exc.ToolNotFound()
    assert error.as_dict("https://example.org/docs/")["link"] == (
        "https://example.org/docs/#tool_not_found"
    )


def test_guard_error_overrides() -> None:
    error = exc.AuthorizationError(
        "You may only cancel your own orders.",
        why="custom why",
        fix="custom fix",
        link="",
        extra={"operation": {"id": "1"}},
        headers={"X-A": "b"},
    )
    data = error.as_dict()
    assert data["message"].startswith("You may only cancel your own orders.")
    assert (data["why"], data["fix"]) == ("custom why", "custom fix")
    assert "link" not in data
    assert data["operation"] == {"id": "1"}
    assert error.headers == {"X-A": "b"}


def test_internal_error_carries_only_the_correlation_id() -> None:
    error = InternalError("abc123")
    assert error.code == "internal_error"
    assert error.status_code == 500
    assert "abc123" in error.message
    assert error.as_dict()["correlation_id"] == "abc123"


# -- OutcomeUnknownError --------------------------------------------------------------------------


def test_outcome_unknown_is_never_retryable_and_asks_for_reconciliation() -> None:
    error = OutcomeUnknownError()
    assert error.retryable is False
    assert error.retry == "never"
    assert error.code == "outcome_unknown"
    assert error.repair == Repair(action="reconcile")
    assert RETRY_WORDS["never"] in error.message
    assert "do not retry it with a new key" in error.message


def test_outcome_unknown_keeps_its_cause_but_never_shows_it() -> None:
    original = ConnectionError("db-primary.internal:5432 refused")
    with pytest.raises(OutcomeUnknownError) as info:
        try:
            raise original
        except ConnectionError as failure:
            raise OutcomeUnknownError() from failure
    assert info.value.__cause__ is original
    assert "db-primary" not in everything(info.value)


def test_outcome_unknown_cannot_be_made_retryable() -> None:
    with pytest.raises(TypeError):
        OutcomeUnknownError(retry="as_is")  # type: ignore[call-arg]


# -- ValidationError ------------------------------------------------------------------------------


def test_validation_error_carries_issues_and_a_change_input_repair() -> None:
    issues = [
        {"path": ["email"], "keyword": "format", "message": "must be a valid \"email\""},
        {"path": ["items", 0, "qty"], "keyword": "minimum", "message": "must be >= 1"},
        {"path": ["email"], "keyword": "maxLength", "message": "must have at most 9"},
    ]
    error = ValidationError(issues, "The input is invalid: /email must be a valid email.")
    assert error.code == "invalid_input"
    assert error.status_code == 422
    assert error.retry == "after_repair"
    assert error.issues == issues
    data = error.as_dict()
    assert data["type"] == "validation_error"
    assert data["issues"] == issues
    assert data["repair"] == {"action": "change_input", "fields": ["email", "items.0.qty"]}
    assert "(fields: email, items.0.qty)" in error.message


def test_validation_error_names_no_field_for_root_or_undisclosed_properties() -> None:
    # Regression: these used to be offered as fields called "root" and "property".
    issues = [
        {"path": [], "keyword": "required", "message": "is missing a required property"},
        {"path": ["<property>"], "keyword": "type", "message": "must be of type"},
        {"path": ["items", 2, "<property>"], "keyword": "type", "message": "must be of type"},
    ]
    error = ValidationError(issues)
    assert error.repair == Repair(action="change_input", fields=("items.2",))
    assert "root" not in error.message
    assert "property)" not in error.message


def test_validation_error_field_list_is_bounded() -> None:
    issues = [{"path": [f"f{i}"], "keyword": "type", "message": "m"} for i in range(20)]
    error = ValidationError(issues)
    assert isinstance(error.repair, Repair)
    assert len(error.repair.fields) == 8
    assert len(error.as_dict()["issues"]) == 20


# -- message bound from settings, pickling ---------------------------------------------------


def test_message_respects_message_max_chars(settings: Any) -> None:
    settings.GUARDED_TOOLS = {"MESSAGE_MAX_CHARS": 200}
    plan = {"steps": [{**SLOT_REPAIR, "instruction": "x " * 300}] * 5, "preserve": ["a"]}
    error = ToolError("slot_stale", "y " * 900, retry="after_repair", repair=plan)
    assert len(error.message) <= 200
    assert "[slot_stale]" in error.message
    assert RETRY_WORDS["after_repair"] in error.message
    assert "Next action:" in error.message
    settings.GUARDED_TOOLS = {}
    assert 200 < len(error.message) <= 1500


@FAST
@given(message=st.text(max_size=3000), instruction=st.text(max_size=3000))
def test_any_message_is_bounded(message: str, instruction: str) -> None:
    error = ToolError("c", message, retry="after_repair",
                      repair={"action": "ask_user", "instruction": instruction})
    assert len(error.message) <= 1500
    assert "\n" not in error.message
    assert "[c]" in error.message


@pytest.mark.parametrize(
    "error",
    [
        ToolError("slot_stale", "Gone.", retry="after_repair", repair=SLOT_REPAIR,
                  details={"slot": 4}, status=410),
        ValidationError([{"path": ["a"], "keyword": "type", "message": "m"}]),
        InternalError("abc"),
        OutcomeUnknownError(extra={"operation": {"id": "7"}}),
        exc.OperationInFlight(headers={"Retry-After": "3"}),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_survive_pickle_and_copy(error: GuardError) -> None:
    # Regression: ToolError(*args) was called with the message as the code.
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error), copy.deepcopy(error)):
        assert type(clone) is type(error)
        assert clone.as_dict() == error.as_dict()
        assert clone.details == error.details
        assert clone.status_code == error.status_code
        assert clone.headers == error.headers
        assert str(clone) == str(error)


def test_an_error_renders_its_message_once() -> None:
    from unittest import mock

    from guarded_tools.core import errors as exceptions

    with mock.patch.object(exceptions, "render_message", wraps=exceptions.render_message) as spy:
        error = ToolError("slot_stale", "The slot is gone.", retry="after_repair",
                          repair=SLOT_REPAIR)
        assert str(error) == error.args[0] == error.as_dict()["message"] == error.message
        assert spy.call_count == 1
        error.raw_message = "The slot was taken."  # what it is made of changed: again
        assert error.message.startswith("The slot was taken. [slot_stale]")
        assert spy.call_count == 2
