"""Provides system checks for settings, databases and every registered tool."""

from __future__ import annotations

import re
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks

from guarded_tools.conf import DEFAULTS, REMOVED, gt_settings

POSITIVE_INTS = (
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "OUTPUT_BUDGET_BYTES",
    "MESSAGE_MAX_CHARS",
    "MAX_KEY_LENGTH",
    "LEASE_SECONDS",
    "SWEEP_BATCH_SIZE",
    "CONFIRMATION_TTL_SECONDS",
    "CONFIRMATION_APPROVAL_TTL_SECONDS",
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
    return messages


@checks.register(checks.Tags.database)
def check_databases(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
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
        if config.get("ENGINE", "").endswith("sqlite3"):
            options = config.get("OPTIONS", {})
            if str(options.get("transaction_mode", "")).upper() != "IMMEDIATE":
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
    from guarded_tools.registry import registry
    from guarded_tools.store import reads_committed

    if not gt_settings.ATOMIC_SINGLE_TRANSACTION or not any(t.atomic for t in registry):
        return []
    messages: list[checks.CheckMessage] = []
    for alias, config in settings.DATABASES.items():
        options = config.get("OPTIONS") or {}
        if "postgresql" in config.get("ENGINE", "") and not reads_committed(options):
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
    from guarded_tools.registry import registry

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
