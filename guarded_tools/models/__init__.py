"""Provides the app's models: the operation journal, the confirmation queue, the audit
trail with each operation's events, the budgets' counters and the allowances.

One module per subject; every model is importable from ``guarded_tools.models`` as before.
"""

from guarded_tools.models.allowances import (
    Allowance,
    AllowanceCounter,
    AllowanceQuerySet,
    AllowanceStatus,
    AllowanceUse,
)
from guarded_tools.models.audit import AuditEntry, OperationEvent, record_in_admin_history
from guarded_tools.models.budgets import BudgetAlert, BudgetCounter, BudgetOverride, Reservation
from guarded_tools.models.confirmations import (
    LAPSING,
    Confirmation,
    ConfirmationQuerySet,
    ConfirmationStatus,
)
from guarded_tools.models.operations import (
    CoveringIndex,
    JournalEntry,
    JournalEntryQuerySet,
    Operation,
    OperationQuerySet,
    OperationState,
    ReleaseReason,
    unknown_first,
)

__all__ = [
    "LAPSING",
    "Allowance",
    "AllowanceCounter",
    "AllowanceQuerySet",
    "AllowanceStatus",
    "AllowanceUse",
    "AuditEntry",
    "BudgetAlert",
    "BudgetCounter",
    "BudgetOverride",
    "Confirmation",
    "ConfirmationQuerySet",
    "ConfirmationStatus",
    "CoveringIndex",
    "JournalEntry",
    "JournalEntryQuerySet",
    "Operation",
    "OperationEvent",
    "OperationQuerySet",
    "OperationState",
    "ReleaseReason",
    "Reservation",
    "record_in_admin_history",
    "unknown_first",
]
