"""The public API, written down: each public module's ``__all__``, one home per name.

``PUBLIC`` is the list of public modules and the names each exports. A public name is
defined in one module; a documented path that is not its defining module is a plain
re-export (``from … import …`` and ``__all__``), and code inside the package imports the
defining modules. Changing the public API means editing ``PUBLIC``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "guarded_tools"

PUBLIC: dict[str, frozenset[str]] = {
    "guarded_tools": frozenset({
        "Approvers", "AuthorizationError", "Budget", "CancelSignal", "ConfirmationError",
        "GuardError", "GuardedTool", "OutcomeUnknownError", "Owner", "Policy", "Refuse",
        "Repair", "RepairPlan", "Rule", "Run", "Tool", "ToolError", "ValidationError",
        "VerificationError", "guard", "registry", "tool",
    }),
    "guarded_tools.asgi": frozenset({"with_cancellation"}),
    "guarded_tools.catalog": frozenset({
        "CatalogEntry", "ErrorCatalog", "catalogs", "export_json", "export_llms_txt",
    }),
    "guarded_tools.oauth": frozenset({
        "OAuthCredentials", "ResourceServerAuthentication", "ScopeStage", "scope_per_app",
        "scope_per_tool", "validate_resource",
    }),
    "guarded_tools.otel": frozenset({"OpenTelemetryObserver", "get_observer", "observe"}),
    "guarded_tools.presentation": frozenset({"present_request"}),
    "guarded_tools.serializers": frozenset({"spectacular_components"}),
    "guarded_tools.viewsets": frozenset({"guarded_view", "guarded_viewset"}),
    "guarded_tools.confirmations": frozenset({
        "DecisionRefused", "approve", "can_decide", "decline",
    }),
    "guarded_tools.confirmations.allowances": frozenset({
        "GrantRefused", "Requirement", "grant", "like_request", "propose", "requirement",
        "revoke", "suspend",
        "takes_allowances", "words_for_agent",
    }),
    "guarded_tools.credentials": frozenset({
        "CredentialKind", "CredentialRevoked", "DrfTokenCredentials", "kinds", "register",
        "unregister",
    }),
    "guarded_tools.permissions": frozenset({"RefuseAgentCredentials"}),
    "guarded_tools.signals": frozenset({"budget_alert", "confirmation_decided",
                                        "confirmation_requested"}),
    "guarded_tools.conf": frozenset({"DEFAULTS", "SETTINGS", "Setting", "gt_settings"}),
    "guarded_tools.tasks": frozenset({
        "enqueue_execute_approved", "enqueue_notify_approvers", "enqueue_notify_budget_alert",
        "execute_approved", "notify_approvers", "notify_budget_alert", "remind_approvers",
        "sweep",
    }),
    "guarded_tools.auth_backends": frozenset({"OneQueryModelBackend"}),
    "guarded_tools.authentication": frozenset({"TokenAuthentication"}),
    "guarded_tools.models": frozenset({
        "LAPSING", "Allowance", "AllowanceCounter", "AllowanceQuerySet", "AllowanceStatus",
        "AllowanceUse", "AuditEntry", "BudgetAlert", "BudgetCounter", "BudgetOverride",
        "Confirmation",
        "ConfirmationQuerySet", "ConfirmationStatus", "CoveringIndex", "JournalEntry",
        "JournalEntryQuerySet", "Operation", "OperationEvent", "OperationQuerySet",
        "OperationState", "ReleaseReason", "Reservation", "record_in_admin_history",
        "unknown_first",
    }),
    "guarded_tools.pipeline": frozenset({
        "GuardEvent", "GuardResult", "Invocation", "Pipeline", "ToolContext", "get_pipeline",
        "principal_scope", "trace_carrier",
    }),
    "guarded_tools.pipeline.stages": frozenset({
        "Call", "DEFAULT_STAGES", "HOOKS", "Stage",
    }),
    "guarded_tools.pipeline.recovery": frozenset({"SweepReport", "sweep"}),
    "guarded_tools.pipeline.reconciliation": frozenset({
        "ReconcileRefused", "mark_failed", "mark_not_executed", "mark_succeeded",
    }),
    "guarded_tools.store": frozenset({
        "COMPLETED", "JSON_ENCODER", "LOCK_CLASS", "NESTED_TRANSACTION", "Claim", "ClaimKind",
        "LockState", "Locked", "NestedTransaction", "OperationHandle", "OperationStore",
        "PendingOperationHandle", "db_now_plus", "fingerprint", "key_hash", "new_token",
        "reads_committed", "refuse_enclosing_transaction", "storable_json", "user_row",
    }),
    "guarded_tools.store.backends": frozenset({"by_vendor", "features", "ops"}),
    "guarded_tools.store.counting": frozenset({"EstimatingPaginator"}),
    "guarded_tools.console.consent": frozenset({"ConsentView", "PasswordStepUp"}),
}

#: The documented paths that re-export names defined elsewhere: never imported from inside.
REEXPORTS = frozenset({
    "guarded_tools.asgi", "guarded_tools.catalog", "guarded_tools.credentials",
    "guarded_tools.oauth", "guarded_tools.otel", "guarded_tools.presentation",
    "guarded_tools.serializers", "guarded_tools.viewsets",
})


def errors_public() -> frozenset[str]:
    """``core.errors``' public names: every ``GuardError`` it defines, and ``LeaseLost``."""
    errors = importlib.import_module("guarded_tools.core.errors")
    return frozenset(
        name for name, value in vars(errors).items()
        if isinstance(value, type) and value.__module__ == errors.__name__
        and (issubclass(value, errors.GuardError) or value is errors.LeaseLost)
    )


def public_modules() -> dict[str, frozenset[str]]:
    return {**PUBLIC, "guarded_tools.core.errors": errors_public()}


@pytest.mark.parametrize("module_name", sorted(public_modules()))
def test_a_public_module_exports_exactly_its_listed_names(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert set(module.__all__) == set(public_modules()[module_name])
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        getattr(module, name)


@pytest.mark.parametrize("module_name", sorted(public_modules()))
def test_a_public_name_is_the_object_its_defining_module_holds(module_name: str) -> None:
    """Whatever public path reaches a class or function, it is the defining module's own."""
    module = importlib.import_module(module_name)
    for name in module.__all__:
        value = getattr(module, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        home = getattr(value, "__module__", "")
        assert home.startswith("guarded_tools."), (module_name, name, home)
        defining = importlib.import_module(home)
        assert getattr(defining, value.__qualname__.split(".")[0]) is value, (module_name, name)


def test_a_name_reached_by_two_public_paths_is_one_object() -> None:
    """The root's, the re-exports' and the defining modules' names are the same objects."""
    pairs = [
        ("guarded_tools.Tool", "guarded_tools.core.definition.Tool"),
        ("guarded_tools.registry", "guarded_tools.core.registry.registry"),
        ("guarded_tools.tool", "guarded_tools.tools.registry.tool"),
        ("guarded_tools.Policy", "guarded_tools.core.policy.Policy"),
        ("guarded_tools.GuardError", "guarded_tools.core.errors.GuardError"),
        ("guarded_tools.asgi.with_cancellation", "guarded_tools.transports.asgi.with_cancellation"),
        ("guarded_tools.catalog.ErrorCatalog", "guarded_tools.core.catalog.ErrorCatalog"),
        ("guarded_tools.catalog.catalogs", "guarded_tools.core.catalog.catalogs"),
        ("guarded_tools.oauth.scope_per_app", "guarded_tools.contrib.oauth.scope_per_app"),
        ("guarded_tools.otel.observe", "guarded_tools.contrib.otel.observe"),
        ("guarded_tools.presentation.present_request",
         "guarded_tools.confirmations.presentation.present_request"),
        ("guarded_tools.serializers.spectacular_components",
         "guarded_tools.tools.sources.serializers.spectacular_components"),
        ("guarded_tools.viewsets.guarded_viewset",
         "guarded_tools.tools.sources.viewsets.guarded_viewset"),
        ("guarded_tools.confirmations.approve", "guarded_tools.confirmations.queue.approve"),
        ("guarded_tools.credentials.register", "guarded_tools.core.credentials.register"),
        ("guarded_tools.store.OperationStore",
         "guarded_tools.store.backends.base.OperationStore"),
    ]
    for public, defining in pairs:
        assert resolve(public) is resolve(defining), public


# -- the package's own imports --------------------------------------------------------------
def package_modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).with_suffix("")
        if "migrations" in relative.parts:
            continue
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        yield ".".join(parts), ast.parse(path.read_text(encoding="utf-8"))


def imported_modules(node: ast.AST) -> Iterator[tuple[str, str | None]]:
    """(module, name) for each thing an import statement imports (name None: a module)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        for alias in node.names:
            yield node.module, alias.name


def test_no_module_replaces_itself_in_sys_modules() -> None:
    found = []
    for module, tree in package_modules():
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            found += [module for target in targets if isinstance(target, ast.Subscript)
                      and ast.unparse(target.value) == "sys.modules"]
    assert found == []


def test_no_underscore_name_is_imported_across_the_packages_modules() -> None:
    found = []
    for module, tree in package_modules():
        for node in ast.walk(tree):
            for source, name in imported_modules(node):
                if source.startswith("guarded_tools") and name and name.startswith("_"):
                    found.append(f"{module}: from {source} import {name}")
    assert found == []


def test_no_module_of_the_package_imports_a_re_export() -> None:
    found = []
    for module, tree in package_modules():
        for node in ast.walk(tree):
            for source, name in imported_modules(node):
                reached = {source, f"{source}.{name}"} if name else {source}
                if reached & REEXPORTS:
                    found.append(f"{module}: {source} {name or ''}")
    assert found == []


def test_no_module_defines_all_twice() -> None:
    twice = []
    for module, tree in package_modules():
        count = sum(1 for node in tree.body
                    for target in (node.targets if isinstance(node, ast.Assign) else
                                   [node.target] if isinstance(node, ast.AnnAssign) else [])
                    if isinstance(target, ast.Name) and target.id == "__all__")
        if count > 1:
            twice.append(module)
    assert twice == []


# -- the docs' paths ---------------------------------------------------------------------
def resolve(dotted: str) -> Any:
    """The object ``dotted`` names: the longest importable module, then its attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[i:]:
            value = getattr(value, attribute)
        return value
    raise ModuleNotFoundError(dotted)


def not_python_names() -> set[str]:
    """The docs' ``guarded_tools.…`` names that are no Python object: system check ids,
    the app's permissions, and the metric and span names OpenTelemetry reads."""
    config = apps.get_app_config("guarded_tools")
    names = set()
    for model in config.get_models():
        meta = model._meta
        names |= {f"guarded_tools.{action}_{meta.model_name}"
                  for action in meta.default_permissions}
        names |= {f"guarded_tools.{codename}" for codename, _ in meta.permissions}
    otel = ast.parse((PACKAGE / "contrib" / "otel.py").read_text(encoding="utf-8"))
    names |= {node.value for node in ast.walk(otel)
              if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    return names


DOCUMENTED = sorted({
    match for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for match in re.findall(r"`(guarded_tools(?:\.\w+)+)[`(]", path.read_text(encoding="utf-8"))
    if not re.fullmatch(r"guarded_tools\.[EW]\d{3}", match)
})


def test_the_docs_name_paths() -> None:
    assert len(DOCUMENTED) > 20


@pytest.mark.parametrize("dotted", DOCUMENTED)
def test_every_path_the_docs_name_resolves(dotted: str) -> None:
    if dotted in not_python_names():
        return
    resolve(dotted)
