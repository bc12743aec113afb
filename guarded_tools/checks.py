"""Provides system checks for settings, databases and every registered tool."""

from __future__ import annotations

import re
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import connections

from guarded_tools.conf import DEFAULTS, REMOVED, gt_settings
from guarded_tools.core import hosts

POSITIVE_INTS = (
    "CONSOLE_COUNT_EXACTLY_UP_TO",
    "EXPORT_PAGE_SIZE",
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "OUTPUT_BUDGET_BYTES",
    "MESSAGE_MAX_CHARS",
    "MAX_KEY_LENGTH",
    "LEASE_SECONDS",
    "SWEEP_BATCH_SIZE",
    "CONFIRMATION_TTL_SECONDS",
    "CONFIRMATION_APPROVAL_TTL_SECONDS",
    "CONFIRMATION_RETRY_AFTER_SECONDS",
    "CONSENT_STEP_UP_FAILURES",
    "CONSENT_STEP_UP_LOCKOUT_SECONDS",
)
#: A header name every server passes on: letters, digits and '-' (servers drop names
#: with '_', and nothing else is a token character people expect in a header name).
HEADER_NAME = re.compile(r"[A-Za-z0-9]+(-[A-Za-z0-9]+)*")


def _known_permissions() -> set[str]:
    """Codenames Django creates for installed models, without touching the database."""
    known: set[str] = set()
    for model in apps.get_models():
        opts = model._meta
        for action in opts.default_permissions:
            known.add(f"{opts.app_label}.{action}_{opts.model_name}")
        for codename, _name in opts.permissions:
            known.add(f"{opts.app_label}.{codename}")
    return known


def _settings_readable() -> bool:
    """Whether ``gt_settings`` can read ``GUARDED_TOOLS``: a dict (E001 tells a site whose
    setting is not one); the checks below read every value through it then."""
    return isinstance(getattr(settings, "GUARDED_TOOLS", {}) or {}, dict)


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    user = getattr(settings, "GUARDED_TOOLS", {}) or {}
    if not isinstance(user, dict):
        return [
            checks.Error(
                "GUARDED_TOOLS must be a dict.",
                hint="Set GUARDED_TOOLS = {...} in your settings.",
                id="guarded_tools.E001",
            )
        ]
    for name in sorted(set(user) & set(REMOVED)):
        messages.append(
            checks.Warning(
                f"GUARDED_TOOLS[{name!r}] is ignored: {REMOVED[name]}.",
                hint=f"Remove {name!r} from GUARDED_TOOLS.",
                id="guarded_tools.W006",
            )
        )
    for name in sorted(set(user) - set(DEFAULTS) - set(REMOVED)):
        messages.append(
            checks.Error(
                f"GUARDED_TOOLS has an unknown setting {name!r}.",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="guarded_tools.E001",
            )
        )
    # The values as the site wrote them, from the dict itself: this check judges them
    # before anything reads (and keeps) them through ``gt_settings``.
    for name in POSITIVE_INTS:
        value = user.get(name, DEFAULTS[name])
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            messages.append(
                checks.Error(
                    f"GUARDED_TOOLS[{name!r}] must be a positive integer.",
                    hint=f"The default is {DEFAULTS[name]}.",
                    id="guarded_tools.E002",
                )
            )
    header = user.get("IDEMPOTENCY_HEADER", DEFAULTS["IDEMPOTENCY_HEADER"])
    if not isinstance(header, str) or not HEADER_NAME.fullmatch(header):
        messages.append(
            checks.Error(
                f"GUARDED_TOOLS['IDEMPOTENCY_HEADER'] is not a usable header name: {header!r}.",
                hint="Use letters, digits and '-' (the default is 'Idempotency-Key'). Agents"
                " are told this name, and servers drop headers whose names have '_' or spaces.",
                id="guarded_tools.E006",
            )
        )
    messages.extend(check_step_up())
    messages.extend(check_exception_handler())
    return messages


def check_exception_handler() -> list[checks.CheckMessage]:
    """``EXCEPTION_HANDLER`` names a callable that imports (every error goes through it)."""
    try:
        handler = gt_settings.EXCEPTION_HANDLER
        problem = None if callable(handler) else f"{handler!r} is not callable"
    except Exception as exc:  # ImportError, or an error raised while importing its module
        problem = f"{type(exc).__name__}: {exc}"
    if problem is None:
        return []
    return [checks.Error(
        f"GUARDED_TOOLS['EXCEPTION_HANDLER'] does not give a handler ({problem}).",
        hint="Name a function handler(exc, context) -> response by its dotted path, as DRF's"
        " EXCEPTION_HANDLER; the default is"
        f" {DEFAULTS['EXCEPTION_HANDLER']!r}, which a site's handler may call and adjust.",
        id="guarded_tools.E014",
    )]


def check_step_up() -> list[checks.CheckMessage]:
    """``CONSENT_STEP_UP`` names a factory of objects with ``render`` and ``verify``."""
    try:
        step_up = gt_settings.CONSENT_STEP_UP()
        usable = callable(getattr(step_up, "render", None)) and callable(
            getattr(step_up, "verify", None))
    except Exception as exc:  # an import string that does not import, a failing factory
        usable, step_up = False, exc
    if usable:
        return []
    return [checks.Error(
        f"GUARDED_TOOLS['CONSENT_STEP_UP'] gives no usable step-up: {step_up!r}.",
        hint="Name a class (or callable) whose instances have render(request, confirmation)"
        " and verify(request, confirmation) -> label; the default is"
        " 'guarded_tools.console.consent.PasswordStepUp'.",
        id="guarded_tools.E012",
    )]


@checks.register(checks.Tags.compatibility)
def check_links(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The host approvers' emails link to: named, absolute, or the emails carry no link."""
    if not _settings_readable():
        return []  # E001 says so
    base = gt_settings.CONSOLE_BASE_URL
    if base:
        problem = hosts.base_url_problem(base)
        return [] if problem is None else [checks.Error(
            f"GUARDED_TOOLS['CONSOLE_BASE_URL'] cannot start a link: {problem}.",
            hint="Set it to the address people open the site at, such as"
            " 'https://ops.example.com'; until then approvers' emails carry no link.",
            id="guarded_tools.E013",
        )]
    if not gt_settings.CONFIRMATION_NOTIFY_EMAIL or not apps.is_installed("django.contrib.admin"):
        return []
    return [checks.Warning(
        "Approvers' emails carry no link to the request: GUARDED_TOOLS['CONSOLE_BASE_URL']"
        " is not set.",
        hint="Set it to the address people open the admin's site at, such as"
        " 'https://ops.example.com' (a link in an email must be absolute, and the Host of"
        " an agent's request is not the site's to give). Without it the email says where"
        " to find the request in the admin.",
        id="guarded_tools.W013",
    )]


@checks.register(checks.Tags.database)
def check_databases(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """What the databases' settings do to claims; what differs between databases is the
    store backends' to say (``features``), as everywhere outside them."""
    from guarded_tools.store.backends import features

    messages: list[checks.CheckMessage] = []
    for alias, config in settings.DATABASES.items():
        if config.get("ATOMIC_REQUESTS"):
            messages.append(
                checks.Warning(
                    f"Database {alias!r} has ATOMIC_REQUESTS=True.",
                    hint="guarded_tools views opt out of it, but calling a tool from your own"
                    " atomic views would nest the claim in the request transaction and fail."
                    " Wrap such views in transaction.non_atomic_requests.",
                    id="guarded_tools.W001",
                )
            )
        if not features(connections[alias]).begins_with_write_lock:  # SQLite's setting
            messages.append(
                checks.Warning(
                    f"SQLite database {alias!r} does not use IMMEDIATE transactions.",
                    hint='Set OPTIONS={"transaction_mode": "IMMEDIATE", "init_command":'
                    ' "PRAGMA journal_mode=WAL;"} so concurrent claims wait instead of'
                    ' failing with "database is locked" (and so atomic tools can run as'
                    ' one transaction).',
                    id="guarded_tools.W002",
                )
            )
    return messages


@checks.register(checks.Tags.compatibility)
def check_isolation(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Atomic tools claim first on a PostgreSQL database above READ COMMITTED."""
    from guarded_tools.core.registry import registry
    from guarded_tools.store.backends import features

    if not gt_settings.ATOMIC_SINGLE_TRANSACTION or not any(t.atomic for t in registry):
        return []
    messages: list[checks.CheckMessage] = []
    for alias, config in settings.DATABASES.items():
        options = config.get("OPTIONS") or {}
        if features(connections[alias]).isolation_above_read_committed:  # PostgreSQL's
            messages.append(
                checks.Warning(
                    f"Database {alias!r} runs its transactions above READ COMMITTED"
                    f" (OPTIONS isolation_level={options['isolation_level']!r}): atomic tools"
                    " cannot lock their key and run in one transaction there.",
                    hint="A transaction's snapshot there predates its key lock, so a duplicate"
                    " could miss the original's row. Atomic tools on it commit their claim"
                    " first, as other tools do (their effect still commits with the"
                    " completion). Use READ COMMITTED for the one-transaction path.",
                    id="guarded_tools.W005",
                )
            )
    return messages


@checks.register()
def check_tools(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from guarded_tools.core.registry import registry

    messages: list[checks.CheckMessage] = []
    known = _known_permissions()
    for definition in registry:
        if definition.input_schema.get("type") != "object":
            messages.append(
                checks.Error(
                    f"Tool {definition.name!r}: the input schema's top-level type is not"
                    " 'object'.",
                    hint="Tool inputs are JSON objects: set \"type\": \"object\".",
                    id="guarded_tools.E003",
                )
            )
        for problem, hint in definition.disabled_guards():
            messages.append(
                checks.Error(f"Tool {definition.name!r}: {problem}", hint=hint,
                             id="guarded_tools.E007")
            )
        for perm in definition.permissions:
            if perm not in known:
                messages.append(
                    checks.Error(
                        f"Tool {definition.name!r} requires unknown permission {perm!r}.",
                        hint="Use 'app_label.codename' of an installed model's permission.",
                        id="guarded_tools.E004",
                    )
                )
        key = definition.key_field
        if key and key not in definition.input_schema.get("properties", {}):
            messages.append(
                checks.Error(
                    f"Tool {definition.name!r} takes its idempotency key from {key!r},"
                    " which its input schema does not declare.",
                    hint=f"Add {key!r} (a string) to the schema's properties and required.",
                    id="guarded_tools.E005",
                )
            )
        if not definition.reachable_over_mcp:
            messages.append(
                checks.Warning(
                    f"Tool {definition.name!r} takes its idempotency key from the"
                    f" {gt_settings.IDEMPOTENCY_HEADER} header, so MCP clients cannot call it.",
                    hint="Name an input field (idempotency_key='operationId') so that agents"
                    " speaking MCP can send the key; the tool is left out of MCP's tools/list.",
                    id="guarded_tools.W004",
                )
            )
        if definition.idempotent and not definition.journal and definition.recover is None \
                and not definition.atomic:
            messages.append(
                checks.Warning(
                    f"Tool {definition.name!r} has no journal, no recover and is not atomic.",
                    hint="Any failure after its claim will end as outcome_unknown. Enable the"
                    " journal, add recover, or use atomic=True for a same-database effect.",
                    id="guarded_tools.W003",
                )
            )
    return messages


#: Values a budget's sum field must refuse: negative amounts, then values that are not
#: numbers (each is refused at run time too, before anything is reserved).
NEGATIVE_AMOUNTS: tuple[Any, ...] = (-1, -0.01, "-1", "-0.01")
NOT_AMOUNTS: tuple[Any, ...] = ("abc", "", "NaN", "Infinity", "-Infinity", "12,50", True, None,
                                [], {})
#: Keywords of an error at the input's root that refuse the field itself.
_REFUSES_THE_FIELD = {"additionalProperties", "unevaluatedProperties", "propertyNames"}


def _refuses(validator: Any, field: str, value: Any) -> bool:
    """Whether the input schema refuses ``value`` as ``field`` (an input of that field alone:
    the errors of other missing fields do not count)."""
    for error in validator.iter_errors({field: value}):
        path = list(error.absolute_path)
        if path[:1] == [field] or (not path and error.validator in _REFUSES_THE_FIELD):
            return True
    return False


def _amount_field_problems(definition: Any, field: str) -> list[str]:
    """What the tool's input schema lets through in a budget's sum field, in words."""
    import json

    schema = definition.input_schema
    required = schema.get("required")
    problems = [] if isinstance(required, list) and field in required else [
        "does not require"]
    try:
        negative = [v for v in NEGATIVE_AMOUNTS if not _refuses(definition.validator, field, v)]
        other = [v for v in NOT_AMOUNTS if not _refuses(definition.validator, field, v)]
    except Exception:  # a schema the validator cannot apply: E003 and registration say why
        return problems
    if negative:
        problems.append(f"allows to be negative (such as {json.dumps(negative[0])})")
    if other:
        problems.append(f"allows to be no number (such as {json.dumps(other[0])})")
    return problems


def _listed(parts: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


@checks.register()
def check_budget_amounts(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A budget's sum field the tool's input schema leaves optional, or lets be negative or
    something other than a number: such calls are refused when they come (``invalid_input``,
    before anything is reserved), so the schema should say so to the agent first."""
    from guarded_tools.core.policy import Policy
    from guarded_tools.core.registry import registry

    messages: list[checks.CheckMessage] = []
    for definition in registry:
        policy = definition.confirm
        if not isinstance(policy, Policy):
            continue
        fields: dict[str, Any] = {}
        for budget in policy.budgets:
            if budget.sum_field:
                fields.setdefault(budget.sum_field, budget)
        for field, budget in fields.items():
            problems = _amount_field_problems(definition, field)
            if problems:
                messages.append(checks.Warning(
                    f"Tool {definition.name!r}: the budget {budget.name!r} sums the input"
                    f" field {field!r}, which the input schema {_listed(problems)}.",
                    hint=f"List {field!r} in the schema's \"required\" and declare it as"
                    ' {"type": "number", "minimum": 0} or as a string of digits such as'
                    ' {"type": "string", "pattern": "^\\\\d+(\\\\.\\\\d{1,2})?$"}. Meanwhile'
                    " a call whose amount is missing, negative or not a number is refused"
                    " (invalid_input) before anything is reserved.",
                    id="guarded_tools.W015",
                ))
    return messages


#: Brokers that hand an unacknowledged message to another consumer after a visibility
#: timeout (kombu's transport option), with kombu's default for each.
VISIBILITY_TIMEOUT_DEFAULTS = {"redis": 3600, "rediss": 3600, "sentinel": 3600, "sqs": 1800}
SWEEP_TASK = "guarded_tools.tasks.sweep"
APPROVAL_TASK = "guarded_tools.tasks.execute_approved"
DEFAULT_BEAT_SCHEDULERS = {"", "celery.beat:PersistentScheduler", "celery.beat.PersistentScheduler"}


def _celery_setting(name: str, default: Any) -> Any:
    """A Celery setting from Django settings (``CELERY_<NAME>``), else the current app's."""
    django_name = f"CELERY_{name.upper()}"
    if hasattr(settings, django_name):
        return getattr(settings, django_name)
    from celery import current_app

    return current_app.conf.get(name, default)


def _longest_lease() -> tuple[int, str]:
    """The longest lease a claim can get, and where it comes from."""
    from guarded_tools.core.registry import registry

    longest, source = int(gt_settings.LEASE_SECONDS), "GUARDED_TOOLS['LEASE_SECONDS']"
    for definition in registry:
        if definition.lease > longest:
            longest, source = definition.lease, f"tool {definition.name!r}'s lease_seconds"
    return longest, source


def _acks_late(task_name: str, declared: bool | None) -> bool:
    """Whether Celery acknowledges ``task_name`` after it runs, as its workers would see it."""
    from celery.app.annotations import prepare, resolve_all

    from guarded_tools import tasks

    acks_late = declared
    task = getattr(tasks, task_name.rsplit(".", 1)[1])
    for annotation in resolve_all(prepare(_celery_setting("task_annotations", None)), task):
        if isinstance(annotation, dict) and "acks_late" in annotation:
            acks_late = bool(annotation["acks_late"])
    if acks_late is None:
        acks_late = bool(_celery_setting("task_acks_late", False))
    return acks_late


@checks.register()
def check_celery(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The Celery settings the sweep and execution on approval rely on."""
    messages: list[checks.CheckMessage] = []
    broker = _celery_setting("broker_url", None) or ""
    if isinstance(broker, (list, tuple)):
        broker = broker[0] if broker else ""
    scheme = str(broker).split(";", 1)[0].split("://", 1)[0].split("+", 1)[0].lower()
    if scheme in VISIBILITY_TIMEOUT_DEFAULTS:
        options = _celery_setting("broker_transport_options", None) or {}
        timeout = options.get("visibility_timeout", VISIBILITY_TIMEOUT_DEFAULTS[scheme])
        lease, source = _longest_lease()
        if isinstance(timeout, (int, float)) and timeout < lease:
            messages.append(
                checks.Warning(
                    f"The {scheme} broker's visibility_timeout ({timeout:g} s) is shorter than"
                    f" the longest lease ({lease} s, {source}).",
                    hint="The broker hands a task nobody acknowledged yet (acks_late, or"
                    " prefetched and waiting) to another worker after visibility_timeout,"
                    " while its first delivery may still hold a claim: the second finds the"
                    " operation in flight and gives up, and sweeps run twice. Set"
                    " CELERY_BROKER_TRANSPORT_OPTIONS = {'visibility_timeout': N} with N above"
                    " the longest lease.",
                    id="guarded_tools.W010",
                )
            )
    if gt_settings.EXECUTE_ON_APPROVAL and not _acks_late(APPROVAL_TASK, None):
        messages.append(
            checks.Warning(
                f"EXECUTE_ON_APPROVAL is on, and Celery acknowledges {APPROVAL_TASK} before it"
                " runs (task_acks_late is False).",
                hint="A worker lost while it runs an approved call forgets the task: the call"
                " then runs on the agent's retry, not at once (a claim it made waits for the"
                " sweep). Set CELERY_TASK_ACKS_LATE = True, or annotate the task with"
                " {'acks_late': True}, so the broker delivers it again; a second delivery is"
                " safe (the approval is consumed once, the key makes it a replay).",
                id="guarded_tools.W011",
            )
        )
    scheduler = str(_celery_setting("beat_scheduler", "") or "")
    schedule = _celery_setting("beat_schedule", None)
    schedule = schedule if isinstance(schedule, dict) else {}
    if scheduler in DEFAULT_BEAT_SCHEDULERS and not any(
        isinstance(entry, dict) and entry.get("task") == SWEEP_TASK
        for entry in schedule.values()
    ):
        messages.append(
            checks.Warning(
                f"No beat schedule entry runs {SWEEP_TASK}.",
                hint="Without a periodic sweep, claims whose process died wait until a caller"
                " retries the same key, and confirmations never expire. Add"
                f" CELERY_BEAT_SCHEDULE = {{'guarded-tools-sweep': {{'task': '{SWEEP_TASK}',"
                " 'schedule': 30.0}} and run exactly one beat; or run `manage.py"
                " guarded_tools_sweep --loop` instead and silence this check"
                " (SILENCED_SYSTEM_CHECKS).",
                id="guarded_tools.W012",
            )
        )
    return messages


@checks.register()
def check_derived_schemas(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A serializer field the schema mapping could not express, for every tool that has one.

    drf-spectacular maps such a field to a bare ``string``: served as it is, the schema
    would be looser than the serializer, so it is an error until the field says its type.
    """
    from guarded_tools.core.registry import registry

    return [
        checks.Error(
            f"Tool {definition.name!r}: its schema cannot express a serializer field: {problem}",
            hint="Give the field a JSON Schema with drf_spectacular.utils.extend_schema_field"
            " (or a return type hint on its get_<field> method), or use a field DRF maps.",
            id="guarded_tools.E011",
        )
        for definition in registry
        for problem in definition.schema_problems
    ]


@checks.register(checks.Tags.security)
def check_published_routes(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A published viewset whose own route takes agent credentials without refusing them.

    Its route runs no guard: the agent's token would delete through it what the tool asks
    a person to approve.
    """
    from guarded_tools.core.registry import registry
    from guarded_tools.permissions import RefuseAgentCredentials, accepts_agent_credentials

    published: dict[type, list[str]] = {}
    for definition in registry:
        view_action = getattr(definition, "published_action", None)
        if view_action is not None:
            published.setdefault(view_action[0], []).append(definition.name)
    messages: list[checks.CheckMessage] = []
    for viewset, names in published.items():
        accepted = accepts_agent_credentials(viewset)
        if accepted and RefuseAgentCredentials not in getattr(viewset, "permission_classes", ()):
            messages.append(checks.Warning(
                f"{viewset.__qualname__}, published as {', '.join(sorted(names))}, accepts"
                f" agent credentials on its own route ({', '.join(accepted)}, which the tool"
                " endpoints take too): an agent reaches the view there without the guard.",
                hint="Keep guarded_viewset's default refuse_agent_credentials=True, or put"
                " guarded_tools.permissions.RefuseAgentCredentials first in its"
                " permission_classes, or give its route authentication agents do not have"
                " (AGENT_AUTHENTICATION_CLASSES names what agents have).",
                obj=viewset,
                id="guarded_tools.W014",
            ))
    return messages


#: Brokers one machine's processes share at most: kombu's in-memory transport lives inside
#: one process (a worker never sees what the web process sends), its filesystem transport in
#: one machine's folders.
LOCAL_BROKERS = {"memory": "an in-process", "filesystem": "a filesystem"}
#: What waits for a Celery worker (and beat), said where a deployment lacks one.
WAITS_FOR_A_WORKER = (
    "approvers' emails, EXECUTE_ON_APPROVAL's run at once, long-running calls started in the"
    " background, and the sweep that recovers abandoned calls and expires requests")


def _celery_app_found() -> bool:
    """Whether the site created a Celery app (Celery's own Django guide: ``mysite/celery.py``
    imported by ``mysite/__init__.py``); without one, ``current_app`` is Celery's fallback
    app, named ``default``, which reads none of the site's ``CELERY_*`` settings."""
    from celery import current_app

    return str(current_app.main or "") != "default"


@checks.register(checks.Tags.security, deploy=True)
def check_deployment(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """What a deployed site needs beyond its settings' syntax: a Celery app, a broker its
    processes share, and the address approvers' links start with (``check --deploy``)."""
    messages: list[checks.CheckMessage] = []
    if not _celery_app_found():
        messages.append(checks.Warning(
            "No Celery app found: the site's CELERY_* settings configure nothing, and what"
            f" waits for a worker never runs ({WAITS_FOR_A_WORKER}).",
            hint="Add mysite/celery.py with app = Celery('mysite');"
            " app.config_from_object('django.conf:settings', namespace='CELERY');"
            " app.autodiscover_tasks(), and in mysite/__init__.py: from .celery import app as"
            " celery_app. Then run a worker and one beat: celery -A mysite worker -B.",
            id="guarded_tools.W016",
        ))
    messages.extend(_check_broker())
    if _settings_readable() and not gt_settings.CONSOLE_BASE_URL and not (
            gt_settings.CONFIRMATION_NOTIFY_EMAIL  # with the admin, W013 says it already
            and apps.is_installed("django.contrib.admin")):
        messages.append(checks.Warning(
            "GUARDED_TOOLS['CONSOLE_BASE_URL'] is not set: approvers' emails and the links"
            " read away from a request carry no address of the site.",
            hint="GUARDED_TOOLS = {..., 'CONSOLE_BASE_URL': 'https://ops.example.com'}, the"
            " address people open the admin at.",
            id="guarded_tools.W018",
        ))
    return messages


def _check_broker() -> list[checks.CheckMessage]:
    """A broker named, and one that the web processes and the workers share."""
    broker = _celery_setting("broker_url", None) or ""
    if isinstance(broker, (list, tuple)):
        broker = broker[0] if broker else ""
    scheme = str(broker).split(";", 1)[0].split("://", 1)[0].split("+", 1)[0].lower()
    eager = bool(_celery_setting("task_always_eager", False))
    if not broker:
        problem = ("No Celery broker is named (CELERY_BROKER_URL): Celery falls back to"
                   " amqp://guest@localhost//")
    elif scheme in LOCAL_BROKERS:
        problem = (f"CELERY_BROKER_URL names {LOCAL_BROKERS[scheme]} broker ({scheme}://),"
                   " which a site's processes on several machines (or, in memory, two"
                   " processes) cannot share")
    elif eager:
        problem = ("CELERY_TASK_ALWAYS_EAGER is on: tasks run inside the web request that"
                   " sends them, and nothing runs them later")
    else:
        return []
    return [checks.Warning(
        f"{problem}; what waits for a worker ({WAITS_FOR_A_WORKER}) may never run.",
        hint="CELERY_BROKER_URL = 'redis://localhost:6379/0' (pip install"
        " 'guarded-tools[redis]') or your RabbitMQ's amqp:// address, and"
        " CELERY_TASK_ALWAYS_EAGER = False. Without Celery, run `manage.py"
        " guarded_tools_sweep --loop` beside the site: it recovers abandoned calls and"
        " expires requests (emails and running approved calls at once still need a worker).",
        id="guarded_tools.W017",
    )]
