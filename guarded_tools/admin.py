"""Provides the admin: operations with their journal, confirmations, the audit trail."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from guarded_tools.models import AuditEntry, Confirmation, JournalEntry, Operation


def pretty_json(value: Any) -> str:
    return format_html(
        '<pre class="gt-json">{}</pre>',
        json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str),
    )


class ReadOnlyMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class JournalInline(ReadOnlyMixin, admin.TabularInline):
    model = JournalEntry
    extra = 0
    fields = ["kind", "data_json", "fence", "removed", "created_at"]
    readonly_fields = fields

    @admin.display(description=_("data"))
    def data_json(self, obj: JournalEntry) -> str:
        return pretty_json(obj.data)


@admin.register(Operation)
class OperationAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["tool", "short_key", "user", "state", "recovered", "created_at", "updated_at"]
    list_filter = ["state", "tool", "recovered"]
    search_fields = ["key", "tool", "user__username"]
    list_select_related = ["user"]
    date_hierarchy = "created_at"
    inlines = [JournalInline]
    fields = [
        "id", "tool", "scope", "key", "user", "state", "recovered", "fence", "owner",
        "lease_expires_at", "input_json", "output_json", "error_json", "attempts",
        "created_at", "updated_at", "completed_at",
    ]
    readonly_fields = fields

    @admin.display(description=_("key"), ordering="key")
    def short_key(self, obj: Operation) -> str:
        return obj.key if len(obj.key) <= 40 else obj.key[:39] + "…"

    @admin.display(description=_("input"))
    def input_json(self, obj: Operation) -> str:
        return pretty_json(obj.input)

    @admin.display(description=_("output"))
    def output_json(self, obj: Operation) -> str:
        return pretty_json(obj.output)

    @admin.display(description=_("error"))
    def error_json(self, obj: Operation) -> str:
        return pretty_json(obj.error)


@admin.register(Confirmation)
class ConfirmationAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["tool", "requested_by", "status", "created_at", "expires_at", "decided_by"]
    list_filter = ["status", "tool"]
    search_fields = ["requested_by__username", "tool", "key"]
    list_select_related = ["requested_by", "decided_by"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["created_at", "actor", "action", "operation", "confirmation", "note"]
    list_filter = ["action"]
    list_select_related = ["actor", "operation", "confirmation"]
