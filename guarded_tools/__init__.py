"""Provides agent-callable Django tools with every call guarded.

The public surface is re-exported lazily so that importing ``guarded_tools`` in
settings or ``INSTALLED_APPS`` never touches models before Django is ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "AuthorizationError",
    "CancelSignal",
    "ConfirmationError",
    "GuardError",
    "OutcomeUnknownError",
    "Repair",
    "RepairPlan",
    "ToolError",
    "ValidationError",
    "VerificationError",
    "guard",
    "registry",
    "tool",
]

_LAZY = {
    "AuthorizationError": "guarded_tools.exceptions",
    "ConfirmationError": "guarded_tools.exceptions",
    "GuardError": "guarded_tools.exceptions",
    "OutcomeUnknownError": "guarded_tools.exceptions",
    "ToolError": "guarded_tools.exceptions",
    "ValidationError": "guarded_tools.exceptions",
    "VerificationError": "guarded_tools.exceptions",
    "Repair": "guarded_tools.repair",
    "RepairPlan": "guarded_tools.repair",
    "CancelSignal": "guarded_tools.cancellation",
    "guard": "guarded_tools.registry",
    "registry": "guarded_tools.registry",
    "tool": "guarded_tools.registry",
}

if TYPE_CHECKING:  # pragma: no cover
    from guarded_tools.cancellation import CancelSignal
    from guarded_tools.exceptions import (
        AuthorizationError,
        ConfirmationError,
        GuardError,
        OutcomeUnknownError,
        ToolError,
        ValidationError,
        VerificationError,
    )
    from guarded_tools.registry import guard, registry, tool
    from guarded_tools.repair import Repair, RepairPlan


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'guarded_tools' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
