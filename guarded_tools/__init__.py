"""Provides agent-callable Django tools with every call guarded.

The public surface is re-exported lazily so that importing ``guarded_tools`` in
settings or ``INSTALLED_APPS`` never touches models before Django is ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guarded_tools.core.version import VERSION as __version__  # noqa: F401 - the package's version

__all__ = [
    "Approvers",
    "AuthorizationError",
    "Budget",
    "CancelSignal",
    "ConfirmationError",
    "GuardError",
    "GuardedTool",
    "OutcomeUnknownError",
    "Owner",
    "Policy",
    "Refuse",
    "Repair",
    "RepairPlan",
    "Rule",
    "Run",
    "Tool",
    "ToolError",
    "ValidationError",
    "VerificationError",
    "guard",
    "registry",
    "tool",
]

_LAZY = {
    "AuthorizationError": "guarded_tools.core.errors",
    "ConfirmationError": "guarded_tools.core.errors",
    "GuardError": "guarded_tools.core.errors",
    "OutcomeUnknownError": "guarded_tools.core.errors",
    "ToolError": "guarded_tools.core.errors",
    "ValidationError": "guarded_tools.core.errors",
    "VerificationError": "guarded_tools.core.errors",
    "Approvers": "guarded_tools.core.policy",
    "Budget": "guarded_tools.core.policy",
    "Owner": "guarded_tools.core.policy",
    "Policy": "guarded_tools.core.policy",
    "Refuse": "guarded_tools.core.policy",
    "Rule": "guarded_tools.core.policy",
    "Run": "guarded_tools.core.policy",
    "Repair": "guarded_tools.core.repair",
    "RepairPlan": "guarded_tools.core.repair",
    "CancelSignal": "guarded_tools.core.cancellation",
    "GuardedTool": "guarded_tools.tools.classes",
    "Tool": "guarded_tools.core.definition",
    "guard": "guarded_tools.tools.registry",
    "registry": "guarded_tools.core.registry",
    "tool": "guarded_tools.tools.registry",
}

if TYPE_CHECKING:  # pragma: no cover
    from guarded_tools.core.cancellation import CancelSignal
    from guarded_tools.core.definition import Tool
    from guarded_tools.core.errors import (
        AuthorizationError,
        ConfirmationError,
        GuardError,
        OutcomeUnknownError,
        ToolError,
        ValidationError,
        VerificationError,
    )
    from guarded_tools.core.policy import Approvers, Budget, Owner, Policy, Refuse, Rule, Run
    from guarded_tools.core.registry import registry
    from guarded_tools.core.repair import Repair, RepairPlan
    from guarded_tools.tools.classes import GuardedTool
    from guarded_tools.tools.registry import guard, tool


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'guarded_tools' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
