"""Provides the ``GUARDED_TOOLS`` settings object, read lazily and reloaded in tests."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

__all__ = ["DEFAULTS", "gt_settings"]

DEFAULTS: dict[str, Any] = {
    # Requests and responses
    "MAX_BODY_BYTES": 256 * 1024,
    "MAX_JSON_DEPTH": 64,
    "OUTPUT_BUDGET_BYTES": 1024 * 1024,
    "MESSAGE_MAX_CHARS": 1500,
    "MAX_KEY_LENGTH": 255,
    "MAX_ISSUES": 20,
    # Idempotency and recovery
    "LEASE_SECONDS": 300,
    "RETENTION_DAYS": 30,
    "SWEEP_BATCH_SIZE": 100,
    "IDEMPOTENCY_HEADER": "Idempotency-Key",
    "ATOMIC_SINGLE_TRANSACTION": True,
    "REPLAY_CACHE_SIZE": 1024,
    "REPLAY_CACHE_SECONDS": 300,
    "REPLAY_CACHE_MAX_BYTES": 64 * 1024,
    # Confirmation queue
    "CONFIRMATION_TTL_SECONDS": 24 * 3600,
    "CONFIRMATION_APPROVAL_TTL_SECONDS": 3600,
    "CONFIRMATION_MAX_WAIT_SECONDS": 30,
    "CONFIRMATION_POLL_INTERVAL": 0.5,  # how often a call held by `Prefer: wait` looks again
    # How long an agent is told to wait before asking again about a request that waits for
    # a person (REST's Retry-After, MCP's retry_after, an MCP task's pollInterval): a
    # person decides in minutes or hours, so asking every second only adds load.
    "CONFIRMATION_RETRY_AFTER_SECONDS": 30,
    # A person may approve their own call of a tool with confirm="always" or
    # "effect-only"; never a policy's Approvers(n) (never the requester).
    "CONFIRMATION_ALLOW_SELF_APPROVAL": False,
    "CONFIRMATION_SHARE_DECLINE_REASON": False,
    "CONFIRMATION_REASON_MAX_CHARS": 300,
    # Email approvers about each new request (Django's mail settings); the signal
    # confirmation_requested serves any other channel. CONSOLE_BASE_URL makes the
    # email's link to the request's admin page absolute ("https://ops.example.com").
    "CONFIRMATION_NOTIFY_EMAIL": True,
    "CONSOLE_BASE_URL": "",
    # The operation page's link to a failure's logs or trace: a str.format template over
    # {trace_id} (the caller's W3C trace, which the OpenTelemetry span continues) and
    # {correlation_id}, e.g. "https://logs.example/trace/{trace_id}"; "" shows no link.
    "CONSOLE_TRACE_URL": "",
    # The admin's lists and tiles count rows one by one up to this many; past it they
    # show PostgreSQL's estimate ("about 1,000,000") or, elsewhere, "more than 10,000".
    "CONSOLE_COUNT_EXACTLY_UP_TO": 10_000,
    "EXECUTE_ON_APPROVAL": False,
    # What sends an approved call, and a request's email, to the task queue: import strings
    # of functions taking the confirmation's id, read at each send (the pipeline sits below
    # the Celery tasks module, so it names it instead of importing it).
    "ENQUEUE_EXECUTE_APPROVED": "guarded_tools.tasks.enqueue_execute_approved",
    "ENQUEUE_NOTIFY_APPROVERS": "guarded_tools.tasks.enqueue_notify_approvers",
    # The consent page (confirm="owner"): what the user supplies at the moment of deciding,
    # which an agent holding their session cannot (guarded_tools.console.consent.PasswordStepUp's
    # interface: render(request, confirmation), verify(request, confirmation) -> label),
    # and how many failed attempts a user gets per lockout window before it refuses more.
    "CONSENT_STEP_UP": "guarded_tools.console.consent.PasswordStepUp",
    "CONSENT_STEP_UP_FAILURES": 5,
    "CONSENT_STEP_UP_LOCKOUT_SECONDS": 900,
    # Extension points (import strings)
    "PIPELINE_CLASS": "guarded_tools.pipeline.Pipeline",
    # The stages every call walks, in order (guarded_tools.pipeline.stages); a tool's own
    # ``stages`` replaces the list for its calls.
    "STAGES": [
        "guarded_tools.pipeline.stages.validation.ValidationStage",
        "guarded_tools.pipeline.stages.context.ContextStage",
        "guarded_tools.pipeline.stages.authorization.AuthorizationStage",
        "guarded_tools.pipeline.stages.idempotency.IdempotencyStage",
        "guarded_tools.pipeline.stages.policy.PolicyStage",
        "guarded_tools.pipeline.stages.budget.BudgetStage",
        "guarded_tools.pipeline.stages.allowance.AllowanceStage",
        "guarded_tools.pipeline.stages.confirmation.ConfirmationStage",
        "guarded_tools.pipeline.stages.execution.ExecutionStage",
        "guarded_tools.pipeline.stages.output_budget.OutputBudgetStage",
        "guarded_tools.pipeline.stages.verification.VerificationStage",
    ],
    "STORE_CLASS": "guarded_tools.store.backends.by_vendor",
    "OBSERVERS": [],
    "ERROR_CATALOGS": [],
    "DOCS_URL": "",
    # MCP
    "MCP_ALLOWED_ORIGINS": [],
    "SERVER_NAME": "guarded-tools",
    # OAuth resource server (guarded-tools[oauth]; see guarded_tools.contrib.oauth)
    "OAUTH_PROTECTS": [],  # "mcp" and/or "rest": where DOT bearer tokens are accepted
    "OAUTH_RESOURCE": "",  # the MCP resource identifier; "" derives the MCP URL
    "OAUTH_DEFAULT_SCOPES": None,  # import string: tool -> scopes, for tools without scopes=
    "OAUTH_CHALLENGE_SCOPES": [],  # what a 401 asks a host to start with; [] leaves it to PRM
    # Published viewsets' own routes refuse agent credentials (guarded_tools.permissions):
    # import strings of DRF authentication classes; None: the tool endpoints' own
    # DEFAULT_AUTHENTICATION_CLASSES except sessions (OAuth tokens: by their audience).
    "AGENT_AUTHENTICATION_CLASSES": None,
}

IMPORT_STRINGS = {"PIPELINE_CLASS", "STORE_CLASS", "STAGES", "OBSERVERS", "OAUTH_DEFAULT_SCOPES",
                  "CONSENT_STEP_UP", "AGENT_AUTHENTICATION_CLASSES"}

#: Settings that do nothing any more, each with why: accepted so that a site that still
#: names one starts (check ``E001`` refuses unknown names), and warned of (``W006``).
REMOVED: dict[str, str] = {
    "PREPARED_STATEMENTS": "the store no longer prepares statements itself (measured in"
    " docs/performance.md, 'Ablation'); psycopg's own preparation applies with"
    " OPTIONS={'server_side_binding': True} and its 'prepare_threshold'",
}


class GuardedToolsSettings:
    """Attribute access to ``settings.GUARDED_TOOLS`` with defaults.

    Values are read from Django settings on first access and cached as attributes
    (later reads do not reach ``__getattr__``: the pipeline reads several per call);
    the cache is dropped whenever ``GUARDED_TOOLS`` changes (``override_settings`` in
    tests).
    """

    def __init__(self, defaults: dict[str, Any] | None = None) -> None:
        self.defaults = defaults or DEFAULTS

    @property
    def user_settings(self) -> dict[str, Any]:
        return getattr(django_settings, "GUARDED_TOOLS", {}) or {}

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_") or attr not in self.defaults:
            raise AttributeError(f"Invalid guarded_tools setting: {attr!r}")
        value = self.user_settings.get(attr, self.defaults[attr])
        if attr in IMPORT_STRINGS:
            value = _import(value)
        setattr(self, attr, value)
        return value

    def reload(self) -> None:
        for attr in self.defaults:  # the cached values are the attributes set
            self.__dict__.pop(attr, None)


def _import(value: Any) -> Any:
    if isinstance(value, str):
        return import_string(value)
    if isinstance(value, (list, tuple)):
        return [import_string(v) if isinstance(v, str) else v for v in value]
    return value


gt_settings = GuardedToolsSettings()


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "GUARDED_TOOLS":
        gt_settings.reload()


setting_changed.connect(_reload)
