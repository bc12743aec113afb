"""Provides the admin of the records: journal entries and the audit trail."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from guarded_tools.console.admin.common import (
    ReadOnlyMixin,
    SafeLookupsMixin,
    stacked_time,
)
from guarded_tools.console.admin.rendering import (
    highlight_json,
)
from guarded_tools.console.formatting import when
from guarded_tools.models import (
    AuditEntry,
    JournalEntry,
)


@admin.register(JournalEntry)
class JournalEntryAdmin(SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
    # Times as every other page shows them: UTC ISO with the zone.
    list_display = ["at", "operation", "kind", "fence", "removed"]
    list_filter = ["kind", "removed"]
    list_select_related = ["operation"]
    search_fields = ["operation__key", "operation__tool"]
    show_full_result_count = False
    fields = readonly_fields = ("operation", "kind", "data_json", "fence", "removed",
                                "written_at")

    @admin.display(description=_("at"))
    def at(self, obj: JournalEntry) -> str:
        return stacked_time(obj.created_at)

    @admin.display(description=_("written at"))
    def written_at(self, obj: JournalEntry) -> str:
        return when(obj.created_at)

    @admin.display(description=_("data"))
    def data_json(self, obj: JournalEntry) -> SafeString:
        return highlight_json(obj.data)


def _link(name: str, obj: Any) -> str:
    if obj is None:
        return "—"
    return format_html('<a href="{}">{}</a>',
                       reverse(f"admin:{obj._meta.app_label}_{name}_change", args=[obj.pk]), obj)


@admin.register(AuditEntry)
class AuditEntryAdmin(SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["at", "who", "action", "status_then", "subject", "note"]
    # Newest first in the order the rows were written: the primary key's index serves it
    # (no index has created_at, so ordering by it sorts the whole trail), and each row's
    # time is taken as it is inserted, so the two orders agree.
    ordering = ["-pk"]

    @admin.display(description=_("at"), ordering="created_at")
    def at(self, obj: AuditEntry) -> str:
        return stacked_time(obj.created_at)

    @admin.display(description=_("who"), ordering="actor")
    def who(self, obj: AuditEntry) -> str:
        if obj.actor is None:
            return str(_("recovery"))
        user_model = type(obj.actor)._meta
        return format_html('<a href="{}">{}</a>', reverse(
            f"admin:{user_model.app_label}_{user_model.model_name}_change",
            args=[obj.actor.pk]), obj.actor) if self.admin_site.is_registered(
            type(obj.actor)) else str(obj.actor)

    @admin.display(description=_("status then"), ordering="status")
    def status_then(self, obj: AuditEntry) -> str:
        return format_html('<span class="gt-badge gt-{}">{}</span>', obj.status,
                           obj.status.replace("_", " ")) if obj.status else "—"

    @admin.display(description=_("about"))
    def subject(self, obj: AuditEntry) -> str:
        """The operation and the confirmation the entry is about, each linked."""
        links = [_link(name, row) for name, row in (("operation", obj.operation),
                                                   ("confirmation", obj.confirmation))
                 if row is not None]
        data = obj.data if isinstance(obj.data, dict) else {}
        if "budget_override" in data:  # the override may be gone: its words, not a link
            links.append(format_html("budget {} for {}", data.get("budget"),
                                     data.get("principal")))
        return format_html_join(mark_safe("<br>"), "{}", ((link,) for link in links)) \
            if links else "—"
    list_filter = ["action"]
    list_select_related = ["actor", "operation", "confirmation", "confirmation__requested_by"]
    search_fields = ["actor__username", "note"]
    show_full_result_count = False
