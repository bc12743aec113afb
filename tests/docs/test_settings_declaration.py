"""The settings' one typed declaration (``guarded_tools.conf.SETTINGS``) gives the same
defaults as the plain dict it replaced, and every setting the app reads is declared there
with a type its default has and a description."""

from __future__ import annotations

import types
import typing
from typing import Any

import pytest

from guarded_tools.conf import DEFAULTS, IMPORT_STRINGS, SETTINGS, Setting, gt_settings

#: ``DEFAULTS`` as it was written by hand before the declaration, key for key.
BEFORE: dict[str, Any] = {
    "MAX_BODY_BYTES": 256 * 1024,
    "MAX_JSON_DEPTH": 64,
    "OUTPUT_BUDGET_BYTES": 1024 * 1024,
    "MESSAGE_MAX_CHARS": 1500,
    "MAX_KEY_LENGTH": 255,
    "MAX_ISSUES": 20,
    "LEASE_SECONDS": 300,
    "RETENTION_DAYS": 30,
    "SWEEP_BATCH_SIZE": 100,
    "IDEMPOTENCY_HEADER": "Idempotency-Key",
    "ATOMIC_SINGLE_TRANSACTION": True,
    "REPLAY_CACHE_SIZE": 1024,
    "REPLAY_CACHE_SECONDS": 300,
    "REPLAY_CACHE_MAX_BYTES": 64 * 1024,
    "CONFIRMATION_TTL_SECONDS": 24 * 3600,
    "CONFIRMATION_APPROVAL_TTL_SECONDS": 3600,
    "CONFIRMATION_MAX_WAIT_SECONDS": 30,
    "CONFIRMATION_POLL_INTERVAL": 0.5,
    "CONFIRMATION_RETRY_AFTER_SECONDS": 30,
    "CONFIRMATION_ALLOW_SELF_APPROVAL": False,
    "CONFIRMATION_SHARE_DECLINE_REASON": False,
    "CONFIRMATION_REASON_MAX_CHARS": 300,
    "CONFIRMATION_NOTIFY_EMAIL": True,
    "CONSOLE_BASE_URL": "",
    "CONSOLE_TRACE_URL": "",
    "CONSOLE_COUNT_EXACTLY_UP_TO": 10_000,
    "EXECUTE_ON_APPROVAL": False,
    "ENQUEUE_EXECUTE_APPROVED": "guarded_tools.tasks.enqueue_execute_approved",
    "ENQUEUE_NOTIFY_APPROVERS": "guarded_tools.tasks.enqueue_notify_approvers",
    "CONSENT_STEP_UP": "guarded_tools.console.consent.PasswordStepUp",
    "CONSENT_STEP_UP_FAILURES": 5,
    "CONSENT_STEP_UP_LOCKOUT_SECONDS": 900,
    "PIPELINE_CLASS": "guarded_tools.pipeline.Pipeline",
    "STAGES": [
        "guarded_tools.pipeline.stages.validation.ValidationStage",
        "guarded_tools.pipeline.stages.context.ContextStage",
        "guarded_tools.pipeline.stages.authorization.AuthorizationStage",
        "guarded_tools.pipeline.stages.idempotency.IdempotencyStage",
        "guarded_tools.pipeline.stages.policy.PolicyStage",
        "guarded_tools.pipeline.stages.budget.BudgetStage",
        "guarded_tools.pipeline.stages.allowance.AllowanceStage",  # added with allowances
        "guarded_tools.pipeline.stages.confirmation.ConfirmationStage",
        "guarded_tools.pipeline.stages.execution.ExecutionStage",
        "guarded_tools.pipeline.stages.output_budget.OutputBudgetStage",
        "guarded_tools.pipeline.stages.verification.VerificationStage",
    ],
    "STORE_CLASS": "guarded_tools.store.backends.by_vendor",
    "OBSERVERS": [],
    "ERROR_CATALOGS": [],
    "DOCS_URL": "",
    "EXCEPTION_HANDLER": "guarded_tools.transports.rest.exception_handler.exception_handler",
    "MCP_ALLOWED_ORIGINS": [],
    "SERVER_NAME": "guarded-tools",
    "OAUTH_PROTECTS": [],
    "OAUTH_RESOURCE": "",
    "OAUTH_DEFAULT_SCOPES": None,
    "OAUTH_CHALLENGE_SCOPES": [],
    "AGENT_AUTHENTICATION_CLASSES": None,
}
#: The settings imported on first read, as listed by hand before the declaration.
IMPORTED_BEFORE = {"PIPELINE_CLASS", "STORE_CLASS", "STAGES", "OBSERVERS", "OAUTH_DEFAULT_SCOPES",
                   "CONSENT_STEP_UP", "AGENT_AUTHENTICATION_CLASSES", "EXCEPTION_HANDLER"}


def test_the_declared_defaults_are_the_defaults_written_before() -> None:
    for name, value in BEFORE.items():
        assert DEFAULTS[name] == value and type(DEFAULTS[name]) is type(value), name
    assert IMPORTED_BEFORE <= IMPORT_STRINGS


def test_every_default_the_app_reads_is_declared_once() -> None:
    names = [setting.name for setting in SETTINGS]
    assert len(names) == len(set(names))
    assert set(DEFAULTS) == set(names)  # a key added to DEFAULTS alone has no entry
    assert gt_settings.defaults is DEFAULTS


def _type(text: str) -> Any:
    namespace = {"list": list, "str": str, "int": int, "float": float, "bool": bool,
                 "dict": dict, "None": None}
    return eval(text, namespace)  # the declaration's own type strings


def _is(value: Any, kind: Any) -> bool:
    if kind is None:
        return value is None
    if isinstance(kind, types.UnionType):
        return any(_is(value, arm) for arm in kind.__args__)
    origin = typing.get_origin(kind)
    if origin is list:
        (item,) = typing.get_args(kind)
        return isinstance(value, list) and all(_is(v, item) for v in value)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_each_setting_has_a_type_its_default_has_and_says_what_it_does(setting: Setting) -> None:
    assert _is(setting.default, _type(setting.type)), (setting.name, setting.type)
    assert len(setting.doc.split()) >= 4 and setting.group


def test_a_type_check_can_fail() -> None:
    assert not _is("300", _type("int")) and not _is([1], _type("list[str]"))
    assert not _is(True, _type("int")) and _is(None, _type("str | None"))
