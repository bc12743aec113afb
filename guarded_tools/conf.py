"""Provides the ``GUARDED_TOOLS`` settings: their typed declaration, and the object reading them.

:data:`SETTINGS` declares every setting once (name, type, default, what it does); the
defaults (:data:`DEFAULTS`), the system checks and the settings reference of the docs are
read from it, so a setting cannot exist without its documentation.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

__all__ = ["DEFAULTS", "SETTINGS", "Setting", "gt_settings"]


@dataclass(frozen=True)
class Setting:
    """One key of ``settings.GUARDED_TOOLS``: its name, type, default and what it does."""

    #: The key, e.g. ``"LEASE_SECONDS"``.
    name: str
    #: The type a value must have, as written in a type hint (``"int"``, ``"list[str]"``).
    type: str
    #: The value used when the site's ``GUARDED_TOOLS`` does not name the key.
    default: Any
    #: The reference's section the setting is listed under.
    group: str
    #: What the setting does, a sentence or a few (reStructuredText inline markup).
    doc: str
    #: The value is an import string (or a list of them), imported on first read.
    import_string: bool = False


_REQUESTS = "Requests and responses"
_IDEMPOTENCY = "Idempotency and recovery"
_CONFIRMATIONS = "Approvals (confirmation queue)"
_CONSOLE = "Console (the admin)"
_EXTENSIONS = "Extension points"
_MCP = "MCP and OAuth"

#: Every setting, in the reference's order.
SETTINGS: tuple[Setting, ...] = (
    # Requests and responses
    Setting("MAX_BODY_BYTES", "int", 256 * 1024, _REQUESTS,
            doc="Larger request bodies are refused with 413 before they are read."),
    Setting("MAX_JSON_DEPTH", "int", 64, _REQUESTS,
            doc="Deeper JSON bodies are refused with 400."),
    Setting("OUTPUT_BUDGET_BYTES", "int", 1024 * 1024, _REQUESTS,
            doc="The default bound of a tool's serialized output (per tool: ``output_budget``)."),
    Setting("MESSAGE_MAX_CHARS", "int", 1500, _REQUESTS,
            doc="The bound of every message written for an agent."),
    Setting("MAX_KEY_LENGTH", "int", 255, _REQUESTS,
            doc="The longest idempotency key accepted."),
    Setting("MAX_ISSUES", "int", 20, _REQUESTS,
            doc="How many validation issues one error lists at most."),
    # Idempotency and recovery
    Setting("LEASE_SECONDS", "int", 300, _IDEMPOTENCY,
            doc="How long a claim on an operation lasts (per tool: ``lease_seconds``); a handler"
                " extends it with ``ctx.operation.heartbeat()``."),
    Setting("RETENTION_DAYS", "int", 30, _IDEMPOTENCY,
            doc="Completed operations older than this are purged by the sweep (0 keeps them)."),
    Setting("SWEEP_BATCH_SIZE", "int", 100, _IDEMPOTENCY,
            doc="Operations the sweep handles per batch."),
    Setting("IDEMPOTENCY_HEADER", "str", "Idempotency-Key", _IDEMPOTENCY,
            doc="The header agents are told about everywhere (``GET tools/``, error plans, the"
                " catalog); check ``guarded_tools.E006`` refuses names servers drop."),
    Setting("ATOMIC_SINGLE_TRANSACTION", "bool", True, _IDEMPOTENCY,
            doc="Atomic tools run as one transaction (key lock, effect, operation); ``False``:"
                " they claim first, in a transaction of its own."),
    Setting("REPLAY_CACHE_SIZE", "int", 1024, _IDEMPOTENCY,
            doc="Succeeded operations each process keeps to answer replays from memory; 0 turns"
                " the cache off."),
    Setting("REPLAY_CACHE_SECONDS", "int", 300, _IDEMPOTENCY,
            doc="How long a succeeded operation stays in the replay cache."),
    Setting("REPLAY_CACHE_MAX_BYTES", "int", 64 * 1024, _IDEMPOTENCY,
            doc="Larger outputs are not kept in the replay cache."),
    # Approvals
    Setting("CONFIRMATION_TTL_SECONDS", "int", 24 * 3600, _CONFIRMATIONS,
            doc="How long a request waits for a decision (per tool: ``confirmation_ttl``)."),
    Setting("CONFIRMATION_APPROVAL_TTL_SECONDS", "int", 3600, _CONFIRMATIONS,
            doc="How long an approval waits for the call that uses it; then it expires"
                " (``confirmation_expired``)."),
    Setting("CONFIRMATION_MAX_WAIT_SECONDS", "int", 30, _CONFIRMATIONS,
            doc="The bound of ``Prefer: wait=N``, per request (an MCP batch shares it)."),
    Setting("CONFIRMATION_POLL_INTERVAL", "float", 0.5, _CONFIRMATIONS,
            doc="How often a call held by ``Prefer: wait`` looks for the decision, in seconds."),
    Setting("CONFIRMATION_RETRY_AFTER_SECONDS", "int", 30, _CONFIRMATIONS,
            doc="How long an agent is told to wait before asking again about a request that waits"
                " for a person: REST's ``Retry-After``, MCP's ``retry_after`` and an MCP task's"
                " poll interval. A person decides in minutes or hours, so asking every second only"
                " adds load."),
    Setting("CONFIRMATION_ALLOW_SELF_APPROVAL", "bool", False, _CONFIRMATIONS,
            doc="Four eyes by default; ``True`` lets a person approve their own call of a tool"
                " with ``confirm=\"always\"`` or ``\"effect-only\"``, never a policy's"
                " ``Approvers(n)``."),
    Setting("CONFIRMATION_SHARE_DECLINE_REASON", "bool", False, _CONFIRMATIONS,
            doc="Put the approver's reason for declining in the agent's message."),
    Setting("CONFIRMATION_REASON_MAX_CHARS", "int", 300, _CONFIRMATIONS,
            doc="The bound of an approver's reason."),
    Setting("CONFIRMATION_NOTIFY_EMAIL", "bool", True, _CONFIRMATIONS,
            doc="Email approvers about each new request (Django's mail settings); the signal"
                " ``confirmation_requested`` serves any other channel."),
    Setting("CONFIRMATION_REMIND_BEFORE_SECONDS", "int", 3600, _CONFIRMATIONS,
            doc="Remind the approvers once, by email, of a request still waiting this many"
                " seconds before it expires (the Celery beat task"
                " ``guarded_tools.tasks.remind_approvers``); 0 never reminds."),
    Setting("BUDGET_ALERT_NOTIFY_EMAIL", "bool", True, _CONFIRMATIONS,
            doc="Email the people who manage budgets (``manage_budgets``) when a principal"
                " reaches one of a budget's thresholds (``Budget(alerts=...)``); the signal"
                " ``budget_alert`` serves any other channel, and observers get the lifecycle"
                " event ``budget_alert``."),
    Setting("ENQUEUE_NOTIFY_BUDGET_ALERT", "str",
            "guarded_tools.tasks.enqueue_notify_budget_alert", _CONFIRMATIONS,
            doc="Import string of the function that sends a budget alert's email to the task"
                " queue (it takes the alert's id)."),
    Setting("EXECUTE_ON_APPROVAL", "bool", False, _CONFIRMATIONS,
            doc="Run an approved call at once in Celery instead of at the agent's retry."),
    Setting("ENQUEUE_EXECUTE_APPROVED", "str", "guarded_tools.tasks.enqueue_execute_approved",
            _CONFIRMATIONS,
            doc="Import string of the function that sends an approved call to the task queue (it"
                " takes the confirmation's id, and is read at each send); replace it to use"
                " another queue."),
    Setting("ENQUEUE_NOTIFY_APPROVERS", "str", "guarded_tools.tasks.enqueue_notify_approvers",
            _CONFIRMATIONS,
            doc="Import string of the function that sends a request's email to the task queue"
                " (it takes the confirmation's id)."),
    Setting("CONSENT_STEP_UP", "str", "guarded_tools.console.consent.PasswordStepUp",
            _CONFIRMATIONS, import_string=True,
            doc="What the user supplies on the consent page (``confirm=\"owner\"``) at the moment"
                " of deciding, which an agent holding their session cannot: a class with"
                " ``render(request, confirmation)`` and ``verify(request, confirmation)`` returning"
                " a label."),
    Setting("CONSENT_STEP_UP_FAILURES", "int", 5, _CONFIRMATIONS,
            doc="Failed step-ups a user gets per lockout window before the consent page refuses"
                " more."),
    Setting("CONSENT_STEP_UP_LOCKOUT_SECONDS", "int", 900, _CONFIRMATIONS,
            doc="The lockout window of ``CONSENT_STEP_UP_FAILURES``, in seconds."),
    # Console
    Setting("CONSOLE_BASE_URL", "str", "", _CONSOLE,
            doc="Makes the approvers' email link to the request's admin page absolute"
                " (``\"https://ops.example.com\"``)."),
    Setting("CONSOLE_TRACE_URL", "str", "", _CONSOLE,
            doc="The operation page's link to a failure's logs or trace: a ``str.format`` template"
                " over ``{trace_id}`` (the caller's W3C trace) and ``{correlation_id}``, e.g."
                " ``\"https://logs.example/trace/{trace_id}\"``; ``\"\"`` shows no link."),
    Setting("CONSOLE_COUNT_EXACTLY_UP_TO", "int", 10_000, _CONSOLE,
            doc="The admin's lists and tiles count rows one by one up to this many; past it they"
                " show PostgreSQL's estimate (\"about 1,000,000\") or, elsewhere, \"more than"
                " 10,000\"."),
    Setting("EXPORT_PAGE_SIZE", "int", 2000, _CONSOLE,
            doc="Rows an export of the audit trail, operations or confirmations reads per query"
                " (keyset pages: memory stays flat whatever the rows, and no server-side cursor"
                " is needed, so PgBouncer in transaction mode serves them)."),
    # Extension points
    Setting("PIPELINE_CLASS", "str", "guarded_tools.pipeline.Pipeline", _EXTENSIONS,
            import_string=True,
            doc="A subclass of ``guarded_tools.pipeline.Pipeline`` (a stage needs none)."),
    Setting("STAGES", "list[str]", [
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
    ], _EXTENSIONS, import_string=True,
        doc="Import strings of the stage classes every call walks, in order; a tool's own"
            " ``stages`` replaces the list for its calls."),
    Setting("STORE_CLASS", "str", "guarded_tools.store.backends.by_vendor", _EXTENSIONS,
            import_string=True,
            doc="The operation store. The default picks it by the ``vendor`` of the database"
                " operations are written to: ``PostgreSQLOperationStore`` on PostgreSQL,"
                " ``SQLiteOperationStore`` on SQLite, the ORM's ``OperationStore`` elsewhere; set"
                " a subclass of either (or any callable returning a store) to replace it. It"
                " is called when a pipeline is built: once per tool and database where the"
                " pipeline is shared (the store's class declares ``stateless = True``)."),
    Setting("OBSERVERS", "list[str]", [], _EXTENSIONS, import_string=True,
            doc="Import strings of callables that receive every lifecycle event."),
    Setting("ERROR_CATALOGS", "list[str]", [], _EXTENSIONS,
            doc="Import strings of a site's own error catalogs, listed beside the guard's own on"
                " the errors page and in its exports."),
    Setting("DOCS_URL", "str", "", _EXTENSIONS,
            doc="Where error ``link``\\ s point (an anchor per code is appended); by default the"
                " site's own ``errors/`` page. Point it at the docs' error reference"
                " (``…/reference/errors.html``) to send agents there."),
    Setting("EXCEPTION_HANDLER", "str | None",
            "guarded_tools.transports.rest.exception_handler.exception_handler", _EXTENSIONS,
            import_string=True,
            doc="What turns an exception into the response of a REST view or the MCP endpoint,"
                " as DRF's ``EXCEPTION_HANDLER``: an import string of ``handler(exc, context)``"
                " returning a response or ``None`` (``None``: an unhandled exception, a 500)."
                " Wrap the default to change what agents get; it asks the view how to render"
                " (the MCP endpoint answers JSON-RPC errors)."),
    # MCP and OAuth
    Setting("MCP_ALLOWED_ORIGINS", "list[str]", [], _MCP,
            doc="Browser origins allowed to reach the MCP endpoint (others get 403)."),
    Setting("SERVER_NAME", "str", "guarded-tools", _MCP,
            doc="The server name MCP clients are told at ``initialize``."),
    Setting("OAUTH_PROTECTS", "list[str]", [], _MCP,
            doc="``\"mcp\"`` and/or ``\"rest\"``: where django-oauth-toolkit bearer tokens are"
                " accepted (``guarded-tools[oauth]``)."),
    Setting("OAUTH_RESOURCE", "str", "", _MCP,
            doc="The MCP resource identifier; ``\"\"`` derives it from the MCP URL."),
    Setting("OAUTH_DEFAULT_SCOPES", "str | None", None, _MCP, import_string=True,
            doc="Import string of a function from a tool to its scopes, for tools without"
                " ``scopes=``."),
    Setting("OAUTH_CHALLENGE_SCOPES", "list[str]", [], _MCP,
            doc="What a 401 asks a host to start with; ``[]`` leaves it to the protected resource"
                " metadata."),
    Setting("AGENT_AUTHENTICATION_CLASSES", "list[str] | None", None, _MCP, import_string=True,
            doc="Import strings of DRF authentication classes whose credentials are agents',"
                " refused on published viewsets' own routes; ``None``: the tool endpoints'"
                " ``DEFAULT_AUTHENTICATION_CLASSES`` except sessions (OAuth tokens: by their"
                " audience)."),
)

#: Every setting's default, by name (read-only view of :data:`SETTINGS`).
DEFAULTS: dict[str, Any] = {setting.name: setting.default for setting in SETTINGS}

IMPORT_STRINGS = frozenset(setting.name for setting in SETTINGS if setting.import_string)

#: Settings that do nothing any more, each with why: accepted so that a site that still
#: names one starts (check ``E001`` refuses unknown names), and warned of (``W006``).
REMOVED: dict[str, str] = {
    "PREPARED_STATEMENTS": "the store no longer prepares statements itself (measured in"
    " bench/NOTEBOOK.md, 'Ablation'); psycopg's own preparation applies with"
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


@functools.cache
def installed(name: str) -> bool:
    """``django.apps.apps.is_installed(name)``, asked once per name: a call asks whether
    an optional integration is installed, and Django's answer walks every installed app.
    Forgotten whenever ``INSTALLED_APPS`` changes (``override_settings`` in tests)."""
    from django.apps import apps

    return apps.is_installed(name)


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "GUARDED_TOOLS":
        gt_settings.reload()
    elif setting == "INSTALLED_APPS":
        installed.cache_clear()


setting_changed.connect(_reload)
