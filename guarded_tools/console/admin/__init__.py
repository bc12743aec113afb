"""Provides the admin: confirmations to decide, operations to reconcile, the audit trail.

Every action declares ``permissions=[...]`` (``approve_confirmation`` or
``reconcile_operation``), acts only on eligible rows, reports counts and writes an
audit row through :mod:`guarded_tools.confirmations.queue` and
:mod:`guarded_tools.pipeline.reconciliation`, which re-check the permission themselves so
that a crafted POST cannot skip it.

One module per group of views: :mod:`.confirmations`, :mod:`.operations`,
:mod:`.records`, :mod:`.budgets` (overrides, with ``manage_budgets``, and budget use),
:mod:`.allowances` (granted and revoked by those who may approve the calls);
what they share in :mod:`.common` and :mod:`.rendering`.
"""

from guarded_tools.console.admin.allowances import AllowanceAdmin
from guarded_tools.console.admin.budgets import BudgetOverrideAdmin, BudgetUseAdmin
from guarded_tools.console.admin.common import (
    MAX_LOOKUP_CHARS,
    ReadOnlyMixin,
    SafeChangeList,
    SafeLookupsMixin,
    ToolFilter,
    stacked_time,
    unmatchable,
    unmatchable_lookup,
)
from guarded_tools.console.admin.confirmations import ConfirmationAdmin
from guarded_tools.console.admin.operations import (
    FENCE_FIELD,
    RECONCILIATIONS,
    OperationAdmin,
    evidence,
    posted_fences,
)
from guarded_tools.console.admin.records import AuditEntryAdmin, JournalEntryAdmin
from guarded_tools.console.admin.rendering import (
    JSON_SHOWN_CHARS,
    highlight_json,
    input_rows,
    json_download,
    pretty_json,
)

__all__ = [
    "FENCE_FIELD", "JSON_SHOWN_CHARS", "MAX_LOOKUP_CHARS", "RECONCILIATIONS",
    "AllowanceAdmin", "AuditEntryAdmin", "BudgetOverrideAdmin", "BudgetUseAdmin",
    "ConfirmationAdmin", "JournalEntryAdmin", "OperationAdmin",
    "ReadOnlyMixin", "SafeChangeList", "SafeLookupsMixin", "ToolFilter", "evidence",
    "highlight_json", "input_rows", "json_download", "posted_fences", "pretty_json",
    "stacked_time", "unmatchable", "unmatchable_lookup",
]
