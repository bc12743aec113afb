"""Provides the admin: confirmations to decide, operations to reconcile, the audit trail.

Every action declares ``permissions=[...]`` (``approve_confirmation`` or
``reconcile_operation``), acts only on eligible rows, reports counts and writes an
audit row through :mod:`guarded_tools.pipeline.confirmations` and
:mod:`guarded_tools.pipeline.reconciliation`, which re-check the permission themselves so
that a crafted POST cannot skip it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.exceptions import NotRegistered
from django.contrib.admin.views.main import (
    ERROR_FLAG,
    IGNORED_PARAMS,
    PAGE_VAR,
    SEARCH_VAR,
    ChangeList,
)
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from django.views.decorators.clickjacking import xframe_options_deny

from guarded_tools.console.formatting import (
    JSON_SHOWN_CHARS,
    age,
    cut_note,
    highlight_json,
    highlighted,
    pretty_json,
    when,
)
from guarded_tools.core.catalog import CODE
from guarded_tools.models import (
    AuditEntry,
    Confirmation,
    ConfirmationStatus,
    JournalEntry,
    Operation,
    OperationState,
    unknown_first,
)
from guarded_tools.pipeline import confirmations, reconciliation
from guarded_tools.pipeline.presentation import present_request, requested_summary
from guarded_tools.store.counting import EstimatingPaginator
from guarded_tools.tools.registry import registry

#: What a row of the input table costs against that budget besides its value.
_ROW_CHARS = 160


def input_rows(tool_name: str, data: Any, *, limit: int = JSON_SHOWN_CHARS
               ) -> tuple[list[tuple[str, str, SafeString]], int]:
    """(title, field, highlighted value) per top-level input field, schema titles first,
    within ``limit`` characters of HTML in all; and how many fields are not shown.

    Fields come in the schema's order, then the others as stored (PostgreSQL's jsonb
    keeps its own order), so what is cut is the same on every database.
    """
    definition = registry.find(tool_name)
    props = (definition.input_schema.get("properties", {}) if definition else {}) or {}
    fields = list(data.items()) if isinstance(data, dict) else [("(input)", data)]
    declared = {name: i for i, name in enumerate(props)}
    fields.sort(key=lambda item: declared.get(item[0], len(declared)))
    rows = []
    budget = limit
    for name, value in fields:
        spec = props.get(name, {}) if isinstance(props.get(name), dict) else {}
        title = str(spec.get("title") or name)
        budget -= _ROW_CHARS + len(escape(title)) + len(escape(name))
        if budget <= 0:
            break
        text = pretty_json(value)
        html, shown = highlighted(text, budget)
        budget -= len(html)
        cut = "" if shown == len(text) else cut_note(len(text) - shown, "")
        rows.append((title, name, format_html('<pre class="gt-json">{}{}</pre>',
                                              mark_safe(html), cut)))  # noqa: S308
    return rows, len(fields) - len(rows)


def json_download(value: Any, filename: str) -> HttpResponse:
    """``value`` as a JSON file the browser saves instead of showing."""
    response = HttpResponse(pretty_json(value), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


class ReadOnlyMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


#: The longest filter or search value a changelist looks for: longer than any value
#: a filtered or searched column holds that is worth finding (keys are at most 255).
MAX_LOOKUP_CHARS = 255


def unmatchable(value: str) -> bool:
    """A filter or search value no row can hold: a NUL (PostgreSQL refuses it in text,
    so the query would fail) or one over ``MAX_LOOKUP_CHARS``."""
    return "\x00" in value or len(value) > MAX_LOOKUP_CHARS


def unmatchable_lookup(request: HttpRequest) -> bool:
    """Whether a filter or search parameter of the changelist's URL is unmatchable."""
    not_lookups = {*IGNORED_PARAMS, PAGE_VAR, ERROR_FLAG} - {SEARCH_VAR}
    return any(unmatchable(value) for name, values in request.GET.lists()
               if name not in not_lookups for value in values)


class SafeChangeList(ChangeList):
    """A changelist whose filters and search match nothing for an unmatchable value.

    Every filter and search parameter (the admin's own, a ``SimpleListFilter``'s, a
    lookup typed into the URL) is checked here, before any query runs.
    """

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
        queryset = super().get_queryset(request, exclude_parameters)
        return queryset.none() if unmatchable_lookup(request) else queryset


class SafeLookupsMixin:
    """Changelists answer a NUL or an oversized filter or search value with no rows."""

    # Exact up to CONSOLE_COUNT_EXACTLY_UP_TO rows, PostgreSQL's estimate past it.
    paginator: ClassVar[type] = EstimatingPaginator

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return SafeChangeList

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Any],
                           search_term: str) -> tuple[QuerySet[Any], bool]:
        if unmatchable(search_term):  # and not a query of thousands of terms to build
            return queryset.none(), False
        return super().get_search_results(  # type: ignore[misc, no-any-return]
            request, queryset, search_term)

    def response_action(self, request: HttpRequest, queryset: QuerySet[Any], *args: Any,
                        **kwargs: Any) -> HttpResponse | None:
        # A crafted selection (not a primary key at all) would fail the action's query.
        primary_key = self.model._meta.pk  # type: ignore[attr-defined]
        for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
            try:
                primary_key.to_python(value)
            except ValidationError:
                self.message_user(  # type: ignore[attr-defined]
                    request, _("The selection names rows that cannot exist: nothing was done."),
                    messages.WARNING)
                return None
        return super().response_action(  # type: ignore[misc, no-any-return]
            request, queryset, *args, **kwargs)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if unmatchable_lookup(request):
            self.message_user(  # type: ignore[attr-defined]
                request,
                _("Nothing matches a filter or search value with a NUL character or over"
                  " %(n)d characters.") % {"n": MAX_LOOKUP_CHARS},
                messages.WARNING,
            )
        return super().changelist_view(request, extra_context)  # type: ignore[misc, no-any-return]


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
        if value and not unmatchable(value):
            names.add(value)
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        return queryset.none() if unmatchable(value) else queryset.filter(tool=value)


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
class ConfirmationAdmin(SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
    # The summary names the tool's action; the sidebar filters by tool.
    # The summary as the request read when it was asked (stored with it): a page costs
    # the same queries however many rows it shows and whatever their tools' hooks do.
    list_display = ["request", "requester", "status_badge", "age", "time_left",
                    "decided_by"]
    list_display_links = ["request"]
    list_filter = ["status", ExpiresFilter, ConfirmationToolFilter]
    search_fields = ["requested_by__username", "requested_by__email", "requested_by_label"]
    list_select_related = ["requested_by", "decided_by"]
    # The queue: oldest first, the request that has waited longest at the top.
    ordering = ["created_at", "pk"]
    show_full_result_count = False
    actions = ["approve_selected", "decline_selected"]
    change_form_template = "admin/guarded_tools/confirmation/detail.html"
    change_list_template = "admin/guarded_tools/confirmation/change_list.html"
    fields = readonly_fields = ("tool", "status", "requested_by", "requested_by_label",
                                "summary", "key", "input", "operation",
                                "decided_by", "decided_at", "reason", "created_at",
                                "expires_at", "reported_at")

    def has_approve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(confirmations.APPROVE_PERMISSION)

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, obj: Confirmation) -> str:
        return format_html('<span class="gt-badge gt-{}">{}</span>', obj.status,
                           obj.get_status_display())

    @admin.display(description=_("request"))
    def request(self, obj: Confirmation) -> str:
        return requested_summary(obj)

    @admin.display(description=_("requested by"), ordering="requested_by_label")
    def requester(self, obj: Confirmation) -> str:
        return str(obj.requester)

    @admin.display(description=_("waiting"), ordering="created_at")
    def age(self, obj: Confirmation) -> str:  # the exact time on hover
        return format_html('<span title="{}">{}</span>', when(obj.created_at),
                           age(timezone.now() - obj.created_at))

    @admin.display(description=_("time left"), ordering="expires_at")
    def time_left(self, obj: Confirmation) -> str:
        if obj.status not in (ConfirmationStatus.PENDING, ConfirmationStatus.APPROVED):
            return "—"
        left = obj.expires_at - timezone.now()
        return age(left) if left.total_seconds() > 0 else str(_("expired"))

    # Decision pages refuse framing themselves (clickjacking), whatever the site's
    # middleware: the list (its approve/decline actions and their forms), the detail page
    # and its Decide target.
    @method_decorator(xframe_options_deny)
    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        extra_context = {**(extra_context or {}), "gt_stats": confirmations.stats()}
        return super().changelist_view(request, extra_context)

    def _decide_many(self, request: HttpRequest, queryset: QuerySet[Any], approved: bool,
                     reason: str) -> None:
        done, refused = 0, []
        selected = queryset.count()  # before deciding: afterwards the queryset is another
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
        skipped = selected - done
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

    #: Characters of HTML the detail page renders of a request's input (the rest is a
    #: download: ``input_download_view``).
    input_shown_chars = JSON_SHOWN_CHARS

    def get_urls(self) -> list[Any]:
        return [
            path("<uuid:pk>/decide/", self.admin_site.admin_view(self.decide_view),
                 name="guarded_tools_confirmation_decide"),
            path("<uuid:pk>/input.json", self.admin_site.admin_view(self.input_download_view),
                 name="guarded_tools_confirmation_input"),
            *super().get_urls(),
        ]

    def input_download_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        """The whole input of one request, as a JSON file, for whoever may view it."""
        if not self.has_view_permission(request):  # before saying whether it exists
            raise PermissionDenied
        confirmation = get_object_or_404(Confirmation, pk=pk)
        return json_download(confirmation.input, f"confirmation-{confirmation.pk}-input.json")

    @method_decorator(xframe_options_deny)
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

    def may_view_operations(self, request: HttpRequest) -> bool:
        """Whether the operations' admin lets this user see them (the list, a page)."""
        try:
            model_admin = self.admin_site.get_model_admin(Operation)
        except NotRegistered:  # a site without the operations' admin
            return False
        return model_admin.has_view_permission(request)

    @method_decorator(xframe_options_deny)
    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: Any = None) -> HttpResponse:
        confirmation = self.get_object(request, object_id)
        if confirmation is not None:
            definition = registry.find(confirmation.tool)
            refusal = confirmations.can_decide(request.user, confirmation)
            open_ = (confirmation.status == ConfirmationStatus.PENDING
                     and Confirmation.objects.pending().filter(pk=confirmation.pk).exists())
            download_url = reverse("admin:guarded_tools_confirmation_input",
                                   args=[confirmation.pk])
            rows, not_shown = input_rows(confirmation.tool, confirmation.input,
                                         limit=self.input_shown_chars)
            # By the principal's scope: a caller with no user row has calls too. Only to
            # those the operations list admits (their keys, states and links are its rows).
            may_view_operations = self.may_view_operations(request)
            recent = (Operation.objects.filter(tool=confirmation.tool, scope=confirmation.scope)
                      .order_by("-created_at")[:5]) if may_view_operations else None
            extra_context = {
                **(extra_context or {}),
                "confirmation": confirmation,
                "presented": present_request(confirmation, confirmation.input, request.user),
                "recent_calls": recent,
                "may_view_operations": may_view_operations,
                "open": open_,
                "tool_description": definition.description if definition else "",
                "input_rows": rows,
                "input_fields_not_shown": not_shown,
                "input_download_url": download_url,
                "can_decide": open_ and refusal is None,
                "refusal": refusal if open_ else None,
                "decide_url": reverse("admin:guarded_tools_confirmation_decide",
                                      args=[confirmation.pk]),
                "audit": confirmation.audit.select_related("actor", "operation"),
            }
        return super().change_view(request, object_id, form_url, extra_context)


# -- operations ------------------------------------------------------------------------------
FENCE_FIELD = "fence-%s"
#: The most operations one reconcile form shows the evidence of (the rest are decided too).
FORM_OPERATIONS_SHOWN = 20


def posted_fences(request: HttpRequest) -> dict[str, int]:
    """The fence a reconcile form showed for each operation, as its hidden fields post it."""
    prefix = FENCE_FIELD % ""
    fences = {}
    for name in request.POST:
        value = request.POST.get(name, "")
        if name.startswith(prefix) and value.isascii() and value.isdigit() and len(value) < 10:
            fences[name[len(prefix):]] = int(value)
    return fences


class ReconcileForm(forms.Form):
    note = forms.CharField(label=_("Note"), widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                           max_length=2000, help_text=_("How did you establish the outcome?"))


class SucceededForm(ReconcileForm):
    output = forms.CharField(label=_("Output (JSON)"),
                             widget=forms.Textarea(attrs={"rows": 8, "cols": 60}),
                             help_text=_("What replays will return; checked against the tool's"
                                         " output schema."))

    def clean_output(self) -> Any:
        # The strict parser agents get: NaN, Infinity or a nesting that breaks the page
        # is a form error here, with the typed text shown back.
        try:
            return reconciliation.parse_output(self.cleaned_data["output"])
        except reconciliation.ReconcileRefused as exc:
            raise forms.ValidationError(str(exc)) from None


class FailedForm(ReconcileForm):
    code = forms.RegexField(label=_("Error code"), regex=CODE,
                            initial="operation_failed")
    message = forms.CharField(label=_("Message for the agent"), max_length=500,
                              initial="The operation failed and was reconciled by a person.")


def stacked_time(value: Any) -> str:
    """A list cell's time: the date over the time to the second, so columns stay narrow."""
    day, _sep, rest = when(value).partition(" ")
    return format_html('<span class="gt-time">{}<br>{}</span>', day, rest)


#: Each reconciliation: its action, what the person says by choosing it, its button.
RECONCILIATIONS = (
    ("mark_succeeded", _("Mark succeeded"), _("marked succeeded")),
    ("mark_not_executed", _("Mark not executed"), _("marked not executed")),
    ("mark_failed", _("Mark failed"), _("marked failed")),
)


def evidence(operation: Operation) -> dict[str, Any]:
    """What an operator decides from, for one operation: the request as people read it,
    its raw input, output and error (each bounded, downloadable), the live journal (any
    entry means the effect may have happened) and the timeline."""
    def shown(part: str) -> SafeString:
        url = reverse("admin:guarded_tools_operation_download", args=[operation.pk, part])
        return highlight_json(getattr(operation, part), download_url=url)

    error = operation.error if isinstance(operation.error, dict) else {}
    return {
        "presented": present_request(operation, operation.input),
        "input": shown("input"),
        "output": shown("output") if operation.output is not None else None,
        "error": shown("error") if operation.error is not None else None,
        "failure": error.get("failure", ""),
        "recover_said": error.get("recover", ""),
        "verify_said": error.get("message", "") if error.get("code") == "verification_failed"
        else "",
        "journal": [highlight_json(data, limit=4096)
                    for data in reconciliation.effect_may_have_happened(operation)],
        "timeline": reconciliation.timeline(operation),
    }


@admin.register(Operation)
class OperationAdmin(SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["tool", "short_key", "user", "state_badge", "created", "updated"]
    list_filter = ["state", ToolFilter, "recovered"]
    search_fields = ["key", "user__username"]
    list_select_related = ["user"]
    show_full_result_count = False
    actions = ["mark_succeeded", "mark_not_executed", "mark_failed"]
    change_list_template = "admin/guarded_tools/operation/change_list.html"
    change_form_template = "admin/guarded_tools/operation/detail.html"
    fields = readonly_fields = (
        "id", "tool", "scope", "key", "user", "state", "recovered", "fence", "owner",
        "lease_expires_at", "input_json", "output_json", "error_json", "attempts",
        "created_at", "updated_at", "completed_at",)

    def get_ordering(self, request: HttpRequest) -> list[Any]:
        # Unknown outcomes first: they are the ones waiting for a person. The index
        # gt_operation_unknown_first serves exactly this order (the primary key makes it
        # total, so the changelist adds nothing the index lacks).
        return [unknown_first().asc(), "-created_at", "-pk"]

    def has_reconcile_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(reconciliation.RECONCILE_PERMISSION)

    # The reconcile actions' forms render from the list; the detail page has the buttons.
    @method_decorator(xframe_options_deny)
    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        extra_context = {**(extra_context or {}), "gt_dashboard": reconciliation.dashboard()}
        return super().changelist_view(request, extra_context)

    @admin.display(description=_("key"), ordering="key")
    def short_key(self, obj: Operation) -> str:
        return obj.key if len(obj.key) <= 40 else obj.key[:39] + "…"

    @admin.display(description=_("state"), ordering="state")
    def state_badge(self, obj: Operation) -> str:
        # "recovered" is said beside the state, not as the admin's red ✗ on every row
        # that never needed recovering.
        recovered = format_html('<div class="gt-recovered">{}</div>', _("recovered")) \
            if obj.recovered else ""
        return format_html('<span class="gt-badge gt-{}">{}</span>{}', obj.state,
                           obj.get_state_display(), recovered)

    @admin.display(description=_("created at"), ordering="created_at")
    def created(self, obj: Operation) -> str:
        return stacked_time(obj.created_at)

    @admin.display(description=_("updated at"), ordering="updated_at")
    def updated(self, obj: Operation) -> str:
        return stacked_time(obj.updated_at)

    @method_decorator(xframe_options_deny)
    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: Any = None) -> HttpResponse:
        operation = self.get_object(request, object_id)
        if operation is not None:
            can = (operation.state == OperationState.OUTCOME_UNKNOWN
                   and self.has_reconcile_permission(request))
            ev = evidence(operation)
            extra_context = {
                **(extra_context or {}),
                "operation": operation,
                "ev": ev,
                "presented": ev["presented"],
                "timeline": ev["timeline"],
                "reconciliations": RECONCILIATIONS if can else (),
                "changelist_url": reverse("admin:guarded_tools_operation_changelist"),
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "confirmations": operation.confirmations.select_related(
                    "requested_by", "decided_by").order_by("created_at")[:20],
            }
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self) -> list[Any]:
        return [
            path("<uuid:pk>/<str:part>.json", self.admin_site.admin_view(self.download_view),
                 name="guarded_tools_operation_download"),
            *super().get_urls(),
        ]

    def download_view(self, request: HttpRequest, pk: str, part: str) -> HttpResponse:
        """An operation's whole input, output or error as a JSON file, for its viewers."""
        if not self.has_view_permission(request):  # before saying whether it exists
            raise PermissionDenied
        if part not in ("input", "output", "error"):
            raise Http404
        operation = get_object_or_404(Operation, pk=pk)
        return json_download(getattr(operation, part), f"operation-{operation.pk}-{part}.json")

    def _shown(self, obj: Operation, part: str) -> SafeString:
        url = reverse("admin:guarded_tools_operation_download", args=[obj.pk, part])
        return highlight_json(getattr(obj, part), download_url=url)

    @admin.display(description=_("input"))
    def input_json(self, obj: Operation) -> SafeString:
        return self._shown(obj, "input")

    @admin.display(description=_("output"))
    def output_json(self, obj: Operation) -> SafeString:
        return self._shown(obj, "output")

    @admin.display(description=_("error"))
    def error_json(self, obj: Operation) -> SafeString:
        return self._shown(obj, "error")

    def _reconcile(self, request: HttpRequest, queryset: QuerySet[Any], *, action: str,
                   form_class: type[ReconcileForm], title: str, single: bool = False) -> Any:
        eligible = queryset.filter(state=OperationState.OUTCOME_UNKNOWN)
        if not eligible.exists():
            if "note" in request.POST:  # a form that was open while someone else decided
                states = ", ".join(sorted({str(OperationState(state).label) for state in
                                           queryset.values_list("state", flat=True)[:20]}))
                self.message_user(request, _(
                    "None of the selected operations is waiting for reconciliation any more"
                    " (now: %(states)s; someone may have decided it since the form was"
                    " opened): nothing to reconcile, nothing was changed.")
                    % {"states": states or "—"},
                    messages.ERROR)
                return None
            self.message_user(request, _("None of the selected operations has an unknown"
                                         " outcome; nothing to reconcile."), messages.WARNING)
            return None
        if single and eligible.count() != 1:
            self.message_user(request, _("Mark one operation at a time as succeeded: each has"
                                         " its own output."), messages.WARNING)
            return None
        initial = {}
        if single and form_class is SucceededForm:
            stored = eligible.values_list("output", flat=True).first()
            if stored is not None:  # what verify refused, or a late result: start from it
                initial["output"] = pretty_json(stored)
        form = form_class(request.POST if "note" in request.POST else None, initial=initial)
        # The attempt each decision is made on: the fence the form showed, as posted back;
        # a form opened now shows the current one.
        fences = posted_fences(request) if form.is_bound else {
            str(operation.pk): operation.fence for operation in eligible}
        if form.is_valid():
            done, problems, decided, last = 0, [], [], None
            chosen = list(eligible)
            for operation in chosen:
                try:
                    self._apply(action, operation, request.user, form.cleaned_data,
                                fences.get(str(operation.pk)))
                    done += 1
                    decided.append(str(operation))
                    last = operation.pk
                except reconciliation.ReconcileRefused as exc:
                    problems.append(str(exc))
            if problems and done == 0 and single:
                return self._form_page(request, eligible, form, action, title, fences,
                                       problems[0])
            if problems:
                self.message_user(request, problems[0], messages.ERROR)
            verb = {a: past for a, _label, past in RECONCILIATIONS}[action]
            self.message_user(request, ngettext("%(n)d operation reconciled.",
                                                "%(n)d operations reconciled.", done)
                              % {"n": done} + (f" {', '.join(decided[:5])}: {verb}."
                                               if decided else ""),
                              messages.SUCCESS if done else messages.INFO)
            if len(chosen) == 1 and last is not None:  # back to the operation, decided
                return HttpResponseRedirect(reverse("admin:guarded_tools_operation_change",
                                                    args=[last]))
            return None
        return self._form_page(request, eligible, form, action, title, fences)

    def _form_page(self, request: HttpRequest, objects: QuerySet[Any], form: forms.Form,
                   action: str, title: str, fences: dict[str, int],
                   error: str | None = None) -> TemplateResponse:
        shown = list(objects)
        for i, operation in enumerate(shown):
            operation.decided_fence = fences.get(str(operation.pk))
            operation.evidence = evidence(operation) if i < FORM_OPERATIONS_SHOWN else None
        return TemplateResponse(request, "admin/guarded_tools/reason_form.html", {
            **self.admin_site.each_context(request),
            "title": title,
            "form": form,
            "objects": shown,
            "action": action,
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "submit_label": title,
            "error": error,
        })

    @staticmethod
    def _apply(action: str, operation: Operation, user: Any, data: dict[str, Any],
               fence: int | None) -> None:
        if fence is None:
            raise reconciliation.ReconcileRefused(
                "The form does not say which attempt it was made on: nothing was changed."
                " Reopen it from the list.")
        if action == "mark_succeeded":
            reconciliation.mark_succeeded(operation, user, data["output"], data["note"],
                                          fence=fence)
        elif action == "mark_not_executed":
            reconciliation.mark_not_executed(operation, user, data["note"], fence=fence)
        else:
            reconciliation.mark_failed(operation, user, data["note"], fence=fence,
                                       code=data["code"], message=data["message"])

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
class JournalEntryAdmin(SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
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


def _link(name: str, obj: Any) -> str:
    if obj is None:
        return "—"
    return format_html('<a href="{}">{}</a>',
                       reverse(f"admin:{obj._meta.app_label}_{name}_change", args=[obj.pk]), obj)


@admin.register(AuditEntry)
class AuditEntryAdmin(SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["at", "who", "action", "status_then", "subject", "note"]
    ordering = ["-created_at", "-pk"]

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
        return format_html_join(mark_safe("<br>"), "{}", ((link,) for link in links)) \
            if links else "—"
    list_filter = ["action"]
    list_select_related = ["actor", "operation", "confirmation", "confirmation__requested_by"]
    search_fields = ["actor__username", "note"]
    show_full_result_count = False


