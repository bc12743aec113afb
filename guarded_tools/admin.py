"""Provides the admin: confirmations to decide, operations to reconcile, the audit trail.

Every action declares ``permissions=[...]`` (``approve_confirmation`` or
``reconcile_operation``), acts only on eligible rows, reports counts and writes an
audit row through :mod:`guarded_tools.confirmations` and
:mod:`guarded_tools.reconciliation`, which re-check the permission themselves so
that a crafted POST cannot skip it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Case, IntegerField, QuerySet, Value, When
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from guarded_tools import confirmations, reconciliation
from guarded_tools.catalog import CODE
from guarded_tools.models import (
    AuditEntry,
    Confirmation,
    ConfirmationStatus,
    JournalEntry,
    Operation,
    OperationState,
)
from guarded_tools.registry import registry

_TOKEN = re.compile(
    r'(?P<key>"(?:\\.|[^"\\])*"(?=\s*:))|(?P<str>"(?:\\.|[^"\\])*")'
    r"|(?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<lit>\btrue\b|\bfalse\b|\bnull\b)"
)


def highlight_json(value: Any) -> SafeString:
    """Pretty JSON with escaped, classed spans for keys, strings, numbers, literals."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    parts: list[str] = []
    last = 0
    for match in _TOKEN.finditer(text):
        parts.append(format_html("{}", text[last: match.start()]))
        kind = match.lastgroup or "str"
        parts.append(format_html('<span class="gt-{}">{}</span>', kind, match.group(0)))
        last = match.end()
    parts.append(format_html("{}", text[last:]))
    return format_html('<pre class="gt-json">{}</pre>', mark_safe("".join(parts)))  # noqa: S308


def input_rows(tool_name: str, data: Any) -> list[tuple[str, str, SafeString]]:
    """(title, field, highlighted value) per top-level input field, schema titles first."""
    definition = registry.find(tool_name)
    props = (definition.input_schema.get("properties", {}) if definition else {}) or {}
    rows = []
    for name, value in (data or {}).items() if isinstance(data, dict) else []:
        spec = props.get(name, {}) if isinstance(props.get(name), dict) else {}
        rows.append((str(spec.get("title") or name), name, highlight_json(value)))
    return rows


class ReadOnlyMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReasonForm(forms.Form):
    reason = forms.CharField(
        label=_("Reason"),
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=2000,
        help_text=_("Recorded in the audit trail."),
    )


class ToolFilter(admin.SimpleListFilter):
    """By tool, listing the registered tools that can have operations (not read-only).

    Django's field filter would list ``SELECT DISTINCT tool`` of the whole table, a scan
    that grows with it (about 90 ms at a million rows); the registry already knows the
    names. A tool no longer registered is still found with ``?tool=<name>``.
    """

    title = _("tool")
    parameter_name = "tool"

    def offered(self) -> set[str]:
        return {t.name for t in registry if not t.read_only}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names, value = self.offered(), self.value()
        if value:
            names.add(value)
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(tool=self.value()) if self.value() else queryset


# -- confirmations ---------------------------------------------------------------------------
class ConfirmationToolFilter(ToolFilter):
    """By tool, listing the registered tools that ask for confirmation."""

    def offered(self) -> set[str]:
        return {t.name for t in registry if t.confirm_mode}


class ExpiresFilter(admin.SimpleListFilter):
    title = _("waiting")
    parameter_name = "waiting"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Pending and not expired"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.pending() if self.value() == "yes" else queryset  # type: ignore[attr-defined]


@admin.register(Confirmation)
class ConfirmationAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["tool", "requested_by", "status_badge", "created_at", "expires_at",
                    "decided_by"]
    list_filter = ["status", ExpiresFilter, ConfirmationToolFilter]
    search_fields = ["requested_by__username", "requested_by__email"]
    list_select_related = ["requested_by", "decided_by"]
    ordering = ["-created_at"]
    show_full_result_count = False
    actions = ["approve_selected", "decline_selected"]
    change_form_template = "admin/guarded_tools/confirmation/detail.html"
    change_list_template = "admin/guarded_tools/confirmation/change_list.html"
    fields = readonly_fields = ("tool", "status", "requested_by", "key", "input", "operation",
                                "decided_by", "decided_at", "reason", "created_at",
                                "expires_at", "reported_at")

    def has_approve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(confirmations.APPROVE_PERMISSION)

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, obj: Confirmation) -> str:
        return format_html('<span class="gt-badge gt-{}">{}</span>', obj.status,
                           obj.get_status_display())

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        extra_context = {**(extra_context or {}), "gt_stats": confirmations.stats()}
        return super().changelist_view(request, extra_context)

    def _decide_many(self, request: HttpRequest, queryset: QuerySet[Any], approved: bool,
                     reason: str) -> None:
        done, refused = 0, []
        for confirmation in queryset.filter(status=ConfirmationStatus.PENDING):
            try:
                if approved:
                    confirmations.approve(confirmation, request.user, reason)
                else:
                    confirmations.decline(confirmation, request.user, reason)
                done += 1
            except confirmations.DecisionRefused as exc:
                refused.append(str(exc))
        verb = _("approved") if approved else _("declined")
        self.message_user(request, ngettext("%(n)d confirmation %(verb)s.",
                                            "%(n)d confirmations %(verb)s.", done)
                          % {"n": done, "verb": verb}, messages.SUCCESS if done else messages.INFO)
        skipped = queryset.count() - done
        if skipped:
            detail = f" ({refused[0]})" if refused else ""
            self.message_user(request, ngettext(
                "%(n)d skipped: not pending, expired, or not yours to decide.",
                "%(n)d skipped: not pending, expired, or not yours to decide.", skipped)
                % {"n": skipped} + detail, messages.WARNING)

    @admin.action(description=_("Approve selected confirmations"), permissions=["approve"])
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._decide_many(request, queryset, True, "")

    @admin.action(description=_("Decline selected confirmations…"), permissions=["approve"])
    def decline_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        form = ReasonForm(request.POST if "reason" in request.POST else None)
        if form.is_valid():
            self._decide_many(request, queryset, False, form.cleaned_data["reason"])
            return None
        return TemplateResponse(request, "admin/guarded_tools/reason_form.html", {
            **self.admin_site.each_context(request),
            "title": _("Decline confirmations"),
            "form": form,
            "objects": queryset,
            "action": "decline_selected",
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "submit_label": _("Decline"),
        })

    def get_urls(self) -> list[Any]:
        return [
            path("<uuid:pk>/decide/", self.admin_site.admin_view(self.decide_view),
                 name="guarded_tools_confirmation_decide"),
            *super().get_urls(),
        ]

    def decide_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        """POST target of the Approve / Decline buttons on the detail page."""
        if request.method != "POST" or not self.has_approve_permission(request):
            raise PermissionDenied
        confirmation = get_object_or_404(Confirmation, pk=pk)
        decision = request.POST.get("decision")
        try:
            if decision == "approve":
                confirmations.approve(confirmation, request.user, request.POST.get("reason", ""))
                if confirmations.runs_when_approved(confirmation):
                    done = _("Approved. It runs now; the agent's retry gets its result.")
                else:
                    done = _("Approved. The agent's retry will run it once.")
                self.message_user(request, done, messages.SUCCESS)
            elif decision == "decline":
                confirmations.decline(confirmation, request.user, request.POST.get("reason", ""))
                self.message_user(request, _("Declined."), messages.SUCCESS)
            else:
                raise confirmations.DecisionRefused("Choose approve or decline.")
        except confirmations.DecisionRefused as exc:
            self.message_user(request, str(exc), messages.ERROR)
        return HttpResponseRedirect(
            reverse("admin:guarded_tools_confirmation_change", args=[confirmation.pk])
        )

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: Any = None) -> HttpResponse:
        confirmation = self.get_object(request, object_id)
        if confirmation is not None:
            definition = registry.find(confirmation.tool)
            refusal = confirmations.can_decide(request.user, confirmation)
            open_ = (confirmation.status == ConfirmationStatus.PENDING
                     and Confirmation.objects.pending().filter(pk=confirmation.pk).exists())
            extra_context = {
                **(extra_context or {}),
                "confirmation": confirmation,
                "tool_description": definition.description if definition else "",
                "input_rows": input_rows(confirmation.tool, confirmation.input),
                "input_json": highlight_json(confirmation.input),
                "can_decide": open_ and refusal is None,
                "refusal": refusal if open_ else None,
                "decide_url": reverse("admin:guarded_tools_confirmation_decide",
                                      args=[confirmation.pk]),
                "audit": confirmation.audit.select_related("actor"),
            }
        return super().change_view(request, object_id, form_url, extra_context)


# -- operations ------------------------------------------------------------------------------
class OperationPartInline(ReadOnlyMixin, admin.TabularInline):
    """Journal and audit rows are part of the operation: whoever sees it sees them."""

    extra = 0

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("guarded_tools.view_operation")


class JournalInline(OperationPartInline):
    model = JournalEntry
    fields = readonly_fields = ("kind", "data_json", "fence", "removed", "created_at",)
    verbose_name_plural = _("journal entries and late results")

    @admin.display(description=_("data"))
    def data_json(self, obj: JournalEntry) -> SafeString:
        return highlight_json(obj.data)


class AuditInline(OperationPartInline):
    model = AuditEntry
    fk_name = "operation"
    fields = readonly_fields = ("created_at", "actor", "action", "note",)


class ReconcileForm(forms.Form):
    note = forms.CharField(label=_("Note"), widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                           max_length=2000, help_text=_("How did you establish the outcome?"))


class SucceededForm(ReconcileForm):
    output = forms.CharField(label=_("Output (JSON)"),
                             widget=forms.Textarea(attrs={"rows": 8, "cols": 60}),
                             help_text=_("What replays will return; checked against the tool's"
                                         " output schema."))

    def clean_output(self) -> Any:
        try:
            return json.loads(self.cleaned_data["output"])
        except ValueError as exc:
            raise forms.ValidationError(
                _("This is not valid JSON: %(e)s"), params={"e": exc}
            ) from exc


class FailedForm(ReconcileForm):
    code = forms.RegexField(label=_("Error code"), regex=CODE,
                            initial="operation_failed")
    message = forms.CharField(label=_("Message for the agent"), max_length=500,
                              initial="The operation failed and was reconciled by a person.")


@admin.register(Operation)
class OperationAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["tool", "short_key", "user", "state_badge", "recovered", "created_at",
                    "updated_at"]
    list_filter = ["state", ToolFilter, "recovered"]
    search_fields = ["key", "user__username"]
    list_select_related = ["user"]
    show_full_result_count = False
    inlines = [JournalInline, AuditInline]
    actions = ["mark_succeeded", "mark_not_executed", "mark_failed"]
    change_list_template = "admin/guarded_tools/operation/change_list.html"
    fields = readonly_fields = (
        "id", "tool", "scope", "key", "user", "state", "recovered", "fence", "owner",
        "lease_expires_at", "input_json", "output_json", "error_json", "attempts",
        "created_at", "updated_at", "completed_at",)

    def get_ordering(self, request: HttpRequest) -> list[Any]:
        # Unknown outcomes first: they are the ones waiting for a person.
        unknown_first = Case(When(state=OperationState.OUTCOME_UNKNOWN, then=Value(0)),
                             default=Value(1), output_field=IntegerField())
        return [unknown_first.asc(), "-created_at"]

    def has_reconcile_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(reconciliation.RECONCILE_PERMISSION)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        extra_context = {**(extra_context or {}), "gt_dashboard": reconciliation.dashboard()}
        return super().changelist_view(request, extra_context)

    @admin.display(description=_("key"), ordering="key")
    def short_key(self, obj: Operation) -> str:
        return obj.key if len(obj.key) <= 40 else obj.key[:39] + "…"

    @admin.display(description=_("state"), ordering="state")
    def state_badge(self, obj: Operation) -> str:
        return format_html('<span class="gt-badge gt-{}">{}</span>', obj.state,
                           obj.get_state_display())

    @admin.display(description=_("input"))
    def input_json(self, obj: Operation) -> SafeString:
        return highlight_json(obj.input)

    @admin.display(description=_("output"))
    def output_json(self, obj: Operation) -> SafeString:
        return highlight_json(obj.output)

    @admin.display(description=_("error"))
    def error_json(self, obj: Operation) -> SafeString:
        return highlight_json(obj.error)

    def _reconcile(self, request: HttpRequest, queryset: QuerySet[Any], *, action: str,
                   form_class: type[ReconcileForm], title: str, single: bool = False) -> Any:
        eligible = queryset.filter(state=OperationState.OUTCOME_UNKNOWN)
        if not eligible.exists():
            self.message_user(request, _("None of the selected operations has an unknown"
                                         " outcome; nothing to reconcile."), messages.WARNING)
            return None
        if single and eligible.count() != 1:
            self.message_user(request, _("Mark one operation at a time as succeeded: each has"
                                         " its own output."), messages.WARNING)
            return None
        form = form_class(request.POST if "note" in request.POST else None)
        if form.is_valid():
            done, problems = 0, []
            for operation in eligible:
                try:
                    self._apply(action, operation, request.user, form.cleaned_data)
                    done += 1
                except reconciliation.ReconcileRefused as exc:
                    problems.append(str(exc))
            if problems and done == 0 and single:
                return self._form_page(request, eligible, form, action, title, problems[0])
            if problems:
                self.message_user(request, problems[0], messages.ERROR)
            self.message_user(request, ngettext("%(n)d operation reconciled.",
                                                "%(n)d operations reconciled.", done)
                              % {"n": done}, messages.SUCCESS if done else messages.INFO)
            return None
        return self._form_page(request, eligible, form, action, title)

    def _form_page(self, request: HttpRequest, objects: QuerySet[Any], form: forms.Form,
                   action: str, title: str, error: str | None = None) -> TemplateResponse:
        return TemplateResponse(request, "admin/guarded_tools/reason_form.html", {
            **self.admin_site.each_context(request),
            "title": title,
            "form": form,
            "objects": objects,
            "action": action,
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "submit_label": title,
            "error": error,
        })

    @staticmethod
    def _apply(action: str, operation: Operation, user: Any, data: dict[str, Any]) -> None:
        if action == "mark_succeeded":
            reconciliation.mark_succeeded(operation, user, data["output"], data["note"])
        elif action == "mark_not_executed":
            reconciliation.mark_not_executed(operation, user, data["note"])
        else:
            reconciliation.mark_failed(operation, user, data["note"], code=data["code"],
                                       message=data["message"])

    @admin.action(description=_("Mark succeeded (enter its output)…"),
                  permissions=["reconcile"])
    def mark_succeeded(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        return self._reconcile(request, queryset, action="mark_succeeded",
                               form_class=SucceededForm, title=str(_("Mark succeeded")),
                               single=True)

    @admin.action(description=_("Mark not executed (releases the key)…"),
                  permissions=["reconcile"])
    def mark_not_executed(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        return self._reconcile(request, queryset, action="mark_not_executed",
                               form_class=ReconcileForm, title=str(_("Mark not executed")))

    @admin.action(description=_("Mark failed (replays get this error)…"),
                  permissions=["reconcile"])
    def mark_failed(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        return self._reconcile(request, queryset, action="mark_failed", form_class=FailedForm,
                               title=str(_("Mark failed")))


@admin.register(JournalEntry)
class JournalEntryAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["created_at", "operation", "kind", "fence", "removed"]
    list_filter = ["kind", "removed"]
    list_select_related = ["operation"]
    search_fields = ["operation__key", "operation__tool"]
    show_full_result_count = False
    fields = readonly_fields = ("operation", "kind", "data_json", "fence", "removed",
                                "created_at")

    @admin.display(description=_("data"))
    def data_json(self, obj: JournalEntry) -> SafeString:
        return highlight_json(obj.data)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["created_at", "actor", "action", "operation", "confirmation", "note"]
    list_filter = ["action"]
    list_select_related = ["actor", "operation", "confirmation"]
    search_fields = ["actor__username", "note"]
    show_full_result_count = False


