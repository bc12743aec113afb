"""Provides the admin of the records: journal entries and the audit trail."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from guarded_tools.confirmations.presentation import requested_summary, summarize
from guarded_tools.console import export
from guarded_tools.console.admin.common import (
    ReadOnlyMixin,
    SafeLookupsMixin,
    stacked_time,
    unmatchable,
)
from guarded_tools.console.admin.exports import ExportMixin
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

    class Media:
        css = {"all": ["guarded_tools/admin.css"]}

    @admin.display(description=_("at"))
    def at(self, obj: JournalEntry) -> str:
        return stacked_time(obj.created_at)

    @admin.display(description=_("written at"))
    def written_at(self, obj: JournalEntry) -> str:
        return when(obj.created_at)

    @admin.display(description=_("data"))
    def data_json(self, obj: JournalEntry) -> SafeString:
        return highlight_json(obj.data)


def _link(name: str, obj: Any, text: Any = None) -> str:
    if obj is None:
        return "—"
    return format_html('<a href="{}">{}</a>', reverse(
        f"admin:{obj._meta.app_label}_{name}_change", args=[obj.pk]),
        obj if text is None else text)


#: What a decision did, said of the request on its own page ("approved", not "approved
#: confirmation": the page is the confirmation's).
_ON_ITS_PAGE: dict[str, Any] = {
    AuditEntry.Action.APPROVE: _("approved"),
    AuditEntry.Action.DECLINE: _("declined"),
    AuditEntry.Action.WITHDRAW: _("withdrew it (the agent)"),
}


def audit_action(entry: AuditEntry, *, about_confirmation: bool = False) -> str:
    """What ``entry`` did, in words. One approval of several says how many are given
    ("approved confirmation (1 of 2 approvals given)"), so it does not read as a request
    approved and still pending. ``about_confirmation``: said on the request's own page."""
    said = str(_ON_ITS_PAGE.get(entry.action, entry.get_action_display())
               if about_confirmation else entry.get_action_display())
    data = entry.data if isinstance(entry.data, dict) else {}
    if entry.action == AuditEntry.Action.APPROVE and entry.status == "pending":
        given = data.get("approvals")
        said += f" ({given})" if given else str(_(" (one approval of several)"))
    if data.get("allowance") is not None:  # which allowance, and how far its grant is
        said += f" #{data['allowance']}"
        if entry.action == AuditEntry.Action.ALLOWANCE_GRANT and data.get("granted"):
            said += f" ({data['granted']})"
    return said


class DateFilter(admin.DateFieldListFilter):
    """By date: today, the past 7 days, this month, this year (in the site's time zone)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.title = _("date")


class PersonFilter(admin.SimpleListFilter):
    """By the person who acted: the staff (who decide and reconcile), and "recovery" for
    what the sweep did with nobody's hand on it. Anyone else (a user deciding on their
    consent page, an agent withdrawing) is found by ``?actor=<id>`` or the search."""

    title = _("person")
    parameter_name = "actor"
    RECOVERY = "none"
    #: The most people the filter lists.
    listed = 100

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        users = get_user_model()._default_manager
        staff = users.filter(is_staff=True) if any(
            f.name == "is_staff" for f in users.model._meta.get_fields()) else users.none()
        people = list(staff.order_by(users.model.USERNAME_FIELD)[:self.listed])
        value = self.value()
        if value and value != self.RECOVERY and not unmatchable(value) and value.isdigit() \
                and all(str(person.pk) != value for person in people):
            people += list(users.filter(pk=value))
        return [*((str(person.pk), str(person)) for person in people),
                (self.RECOVERY, _("recovery (nobody)"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if value == self.RECOVERY:
            return queryset.filter(actor__isnull=True)
        try:
            pk = get_user_model()._meta.pk.to_python(value)  # type: ignore[union-attr]
        except ValidationError:
            return queryset.none()
        return queryset.filter(actor_id=pk)


@admin.register(AuditEntry)
class AuditEntryAdmin(ExportMixin, SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
    # The state an entry left behind sits under its action (one reads the other); the time
    # stays on one line, and the summary keeps its room, at 1280 px with both sidebars.
    list_display = ["at", "who", "action_and_status", "subject", "note"]
    list_display_links = ["at"]
    # Newest first in the order the rows were written: the primary key's index serves it
    # (no index has created_at, so ordering by it sorts the whole trail), and each row's
    # time is taken as it is inserted, so the two orders agree.
    ordering = ["-pk"]
    # By person and by date: the date's choices (today, the past 7 days, this month,
    # this year) cost no query, unlike a date hierarchy's, which reads the whole trail.
    list_filter = ["action", PersonFilter, ("created_at", DateFilter)]
    list_select_related = ["actor", "operation", "confirmation", "confirmation__requested_by"]
    search_fields = ["actor__username", "note"]
    show_full_result_count = False
    fields = readonly_fields = ("at_full", "who", "action_said", "status_then", "subject",
                                "note", "data_json")

    class Media:
        css = {"all": ["guarded_tools/admin.css"]}

    @admin.display(description=_("at"), ordering="created_at")
    def at(self, obj: AuditEntry) -> str:
        # One line: the date and the time to the second, with the zone.
        return format_html('<span class="gt-time">{}</span>', when(obj.created_at))

    @admin.display(description=_("at"))
    def at_full(self, obj: AuditEntry) -> str:
        return when(obj.created_at)

    @admin.display(description=_("who"), ordering="actor")
    def who(self, obj: AuditEntry) -> str:
        if obj.actor is None:
            return str(_("recovery"))
        user_model = type(obj.actor)._meta
        return format_html('<a href="{}">{}</a>', reverse(
            f"admin:{user_model.app_label}_{user_model.model_name}_change",
            args=[obj.actor.pk]), obj.actor) if self.admin_site.is_registered(
            type(obj.actor)) else str(obj.actor)

    @admin.display(description=_("action"), ordering="action")
    def action_said(self, obj: AuditEntry) -> str:
        return audit_action(obj)

    @admin.display(description=_("action"), ordering="action")
    def action_and_status(self, obj: AuditEntry) -> str:
        status = format_html('<div class="gt-cell-note">{}</div>', self.status_then(obj)) \
            if obj.status else ""
        return format_html("{}{}", audit_action(obj), status)

    @admin.display(description=_("status then"), ordering="status")
    def status_then(self, obj: AuditEntry) -> str | None:
        return format_html('<span class="gt-badge gt-{}">{}</span>', obj.status,
                           obj.status.replace("_", " ")) if obj.status else None

    @admin.display(description=_("about"))
    def subject(self, obj: AuditEntry) -> str | None:
        """What the entry is about, in the words stored with it (the request's summary as
        it read when it was asked), linked to the confirmation and the operation."""
        data = obj.data if isinstance(obj.data, dict) else {}
        summary = data.get("summary") or ""
        links: list[Any] = []
        if obj.confirmation is not None:
            links.append(_link("confirmation", obj.confirmation,
                               summary or requested_summary(obj.confirmation)))
        if obj.operation is not None:  # the schema's titles and values: no hook, no query
            links.append(_link("operation", obj.operation, _("its operation") if links else (
                summary or summarize(obj.operation, obj.operation.input, hooks=False))))
        if not links and summary:  # what it was about is gone: its words, not a link
            links.append(summary)
        if obj.action == AuditEntry.Action.EXPORT:  # how many rows, with which filters
            links.append(export.said(data))
        if "budget_override" in data:  # the override may be gone: its words, not a link
            links.append(format_html("budget {} for {}", data.get("budget"),
                                     data.get("principal")))
        return format_html_join(mark_safe("<br>"), "{}", ((link,) for link in links)) \
            if links else None

    @admin.display(description=_("data"))
    def data_json(self, obj: AuditEntry) -> SafeString:
        return highlight_json(obj.data)
