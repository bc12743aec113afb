"""Provides the operators' admin: operations, their evidence and reconciliation."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.clickjacking import xframe_options_deny

from guarded_tools.confirmations.presentation import present_request, summarize
from guarded_tools.console.admin.common import (
    ReadOnlyMixin,
    SafeLookupsMixin,
    ToolFilter,
    stacked_time,
)
from guarded_tools.console.admin.exports import ExportMixin
from guarded_tools.console.admin.rendering import (
    highlight_json,
    input_rows,
    json_download,
    pretty_json,
)
from guarded_tools.console.formatting import age, when
from guarded_tools.core.catalog import CODE
from guarded_tools.core.registry import registry
from guarded_tools.models import (
    JournalEntry,
    Operation,
    OperationState,
    unknown_first,
)
from guarded_tools.pipeline import gateway, reconciliation
from guarded_tools.tasks import NextSweep, next_sweep

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


#: Each reconciliation: its action, what the person says by choosing it, its button.
RECONCILIATIONS = (
    ("mark_succeeded", _("Mark succeeded"), _("marked succeeded")),
    ("mark_not_executed", _("Mark not executed"), _("marked not executed")),
    ("mark_failed", _("Mark failed"), _("marked failed")),
)


#: What a note must say, when a decision comes without one.
NOTE_REQUIRED = _("A note is required: say how you established the outcome. Nothing was"
                  " changed.")


class DecisionForm(forms.Form):
    """An operation page's reconcile form: one note, and what each decision records.

    Every decision needs the note; "Mark succeeded" needs the output replays will return
    (checked by ``reconciliation.output_refusal``), "Mark failed" an error code and
    message. ``fence`` is the attempt the page showed.
    """

    action = forms.ChoiceField(choices=[(action, label) for action, label, _past
                                        in RECONCILIATIONS])
    fence = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    note = forms.CharField(
        label=_("Note"), max_length=2000, error_messages={"required": NOTE_REQUIRED},
        widget=forms.Textarea(attrs={"rows": 2, "required": True}),
        help_text=_("How did you establish the outcome? Recorded in the audit trail."))
    output = forms.CharField(
        label=_("Output (JSON)"), required=False, widget=forms.Textarea(attrs={"rows": 4}),
        help_text=_("What replays return, checked against the tool's output schema."))
    code = forms.RegexField(label=_("Error code"), regex=CODE, initial="operation_failed",
                            required=False)
    message = forms.CharField(label=_("Message for the agent"), max_length=500,
                              required=False,
                              initial="The operation failed and was reconciled by a person.")

    def __init__(self, *args: Any, operation: Operation, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.operation = operation
        hint = output_hint(operation)
        if hint:
            self.fields["output"].widget.attrs["placeholder"] = hint

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        action = data.get("action")
        if action == "mark_succeeded":
            text = data.get("output") or ""
            if not text.strip():
                self.add_error("output", _("Enter the output replays will return: what the"
                                           " evidence shows the operation produced."))
                return data
            try:
                data["output"] = reconciliation.parse_output(text)
            except reconciliation.ReconcileRefused as exc:
                self.add_error("output", str(exc))
                return data
            refusal = reconciliation.output_refusal(self.operation, data["output"])
            if refusal:
                self.add_error("output", refusal)
        elif action == "mark_failed":
            for name in ("code", "message"):
                if not data.get(name):
                    self.add_error(name, _("Mark failed records this for the agent's"
                                           " replays: fill it in."))
        return data


def output_hint(operation: Operation) -> str:
    """The output schema's required fields and their types, as a placeholder says it
    (shown in an empty field, never sent as a value)."""
    definition = registry.find(operation.tool)
    schema = definition.output_schema if definition is not None else None
    if not schema:
        return ""
    props = schema.get("properties") or {}

    def kind(name: str) -> str:
        spec = props.get(name)
        return str(spec.get("type", "any")) if isinstance(spec, dict) else "any"

    fields = [f"{name} ({kind(name)})" for name in schema.get("required") or ()
              if isinstance(name, str)]
    return gettext("Required: %s") % ", ".join(fields) if fields else ""


#: The longest output (pretty JSON) a "Mark succeeded" form starts from: a longer one is
#: downloaded, corrected and pasted instead of sent back with every page.
OUTPUT_START_CHARS = 16 * 1024


def start_output(operation: Operation, form: forms.Form) -> str:
    """The output the evidence holds, as ``form``'s output field starts from it: empty
    when there is none, or when it is too long for the page (its help then says where
    to download it)."""
    started = reconciliation.output_to_start_from(operation)
    text = pretty_json(started) if started is not None else ""
    if len(text) <= OUTPUT_START_CHARS:
        return text
    field = form.fields["output"]
    field.help_text = format_html(
        "{} {}", field.help_text, gettext("The stored output is too long to start from here:"
                                          " download it, correct it and paste it."))
    return ""


#: The most journal entries the top of an operation's page lists (all are in the evidence).
FACTS_SHOWN = 10


def deciding_facts(operation: Operation) -> list[dict[str, Any]]:
    """What the journal says, for the top of an unknown outcome's page: each live entry
    (any means the effect may have happened) and each late result, in one line, with what
    the tool's ``evidence`` hook says of its reference ("no ledger entry with this
    reference")."""
    definition = registry.find(operation.tool)
    rows = JournalEntry.objects.filter(operation_id=operation.pk, removed=False).order_by(
        "id").values_list("kind", "fence", "data")[:FACTS_SHOWN]
    return [{"late": kind == JournalEntry.Kind.LATE_RESULT, "fence": fence,
             "data": one_line(data),
             "evidence": reconciliation.journal_evidence(data, operation, definition)}
            for kind, fence, data in rows]


def one_line(value: Any, limit: int = 300) -> str:
    """``value`` as compact JSON on one line, cut at ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"


#: What each outcome of a recovery means, in an operator's words, and the state it leaves.
RECOVERY_OUTCOMES = {
    "completed": (_("Recovery ran: the tool's recover hook established that the operation"
                    " succeeded, and replays return its output."), OperationState.SUCCEEDED),
    "released": (_("Recovery ran: the journal proves the operation never ran, so its key is"
                   " released and the agent's next call runs it."), OperationState.RELEASED),
    "unknown": (_("Recovery ran: nobody could prove what happened, so the operation waits for"
                  " a person to reconcile it."), OperationState.OUTCOME_UNKNOWN),
}


def recovery_sentence(outcome: str, state: str) -> str:
    """What "Recover now" did, in one sentence; the state only when the outcome does not
    already say it (someone else moved the operation on meanwhile)."""
    said, leaves = RECOVERY_OUTCOMES.get(outcome, (gettext("Recovery ran: %s.") % outcome, ""))
    if state == leaves:
        return str(said)
    return f"{said} " + gettext("It is now %(state)s.") % {
        "state": OperationState(state).label if state in OperationState.values else state}


def evidence(operation: Operation) -> dict[str, Any]:
    """What an operator decides from, for one operation: the request as people read it,
    its raw input, output and error (each bounded, downloadable), the live journal (any
    entry means the effect may have happened) and the timeline."""
    def shown(part: str) -> SafeString:
        url = reverse("admin:guarded_tools_operation_download", args=[operation.pk, part])
        return highlight_json(getattr(operation, part), download_url=url)

    def titled(part: str) -> dict[str, Any] | None:
        """An object's fields under the schema's titles, bounded, with the whole as a
        download; None for a value that is not an object (shown as JSON instead)."""
        value = getattr(operation, part)
        if not isinstance(value, dict) or not value:
            return None
        rows, not_shown = input_rows(operation.tool, value, part=part)
        return {"rows": rows, "not_shown": not_shown, "url": reverse(
            "admin:guarded_tools_operation_download", args=[operation.pk, part])}

    error = operation.error if isinstance(operation.error, dict) else {}
    unknown = operation.state == OperationState.OUTCOME_UNKNOWN
    return {
        "presented": present_request(operation, operation.input),
        "input": titled("input") or shown("input"),
        "output": (titled("output") or shown("output")) if operation.output is not None
        else None,
        # The warning before "Mark not executed" only where that decision is offered;
        # elsewhere the journal is evidence, shown as such.
        "journal_warns": unknown,
        # The fence counts every claim and takeover; ``attempts`` the fresh claims.
        "takeovers": max(operation.fence - operation.attempts, 0),
        "journal_matters": unknown or abandoned(operation),
        "error": shown("error") if operation.error is not None else None,
        "failure": error.get("failure", ""),
        "recover_said": error.get("recover", ""),
        "verify_said": error.get("message", "") if error.get("code") == "verification_failed"
        else "",
        "journal": [highlight_json(data, limit=4096)
                    for data in reconciliation.effect_may_have_happened(operation)],
        "timeline": reconciliation.timeline(operation),
    }


def abandoned(operation: Operation) -> bool:
    """Whether nobody runs ``operation`` any more: abandoned, or in flight past its lease."""
    if operation.state == OperationState.ABANDONED:
        return True
    return (operation.state == OperationState.IN_FLIGHT and operation.lease_expires_at is not None
            and operation.lease_expires_at < timezone.now())


def next_sweep_sentence(sweep: NextSweep) -> str:
    """When the sweep takes an abandoned operation over, as far as this process knows."""
    hook = gettext("takes it over and runs the tool's recover hook (never the handler).")
    every = age(timedelta(seconds=sweep.every)) if sweep.every else ""
    if not sweep.scheduled:
        return gettext("No periodic sweep is scheduled in these settings: it waits for the"
                 " caller's retry, manage.py guarded_tools_sweep, or Recover now.")
    if sweep.at is None:
        return gettext("The sweep runs every %(every)s (when it last ran is not known here: its"
                 " cache is not this process's) and %(hook)s") % {"every": every, "hook": hook}
    if not sweep.overdue:
        said = gettext("The next sweep, at %(at)s, %(hook)s") % {"at": when(sweep.at), "hook": hook}
        return said if not every else f"{said} {gettext('Sweeps run every %s.') % every}"
    late = timezone.now() - sweep.at
    said = gettext("The next sweep is due now (the last one started at %(last)s; every %(every)s)"
             " and %(hook)s") % {"last": when(sweep.last), "every": every, "hook": hook}
    if sweep.every and late.total_seconds() > sweep.every:
        said += " " + gettext("None has started for %(late)s past its time: is Celery beat"
                        " running?") % {"late": age(late)}
    return said


class LeaseFilter(admin.SimpleListFilter):
    """Running (in flight, lease live) or abandoned (no live owner: the sweep's rows)."""

    title = _("lease")
    parameter_name = "lease"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("live", _("Running now (lease live)")),
                ("expired", _("Abandoned (lease expired)"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "live":
            return queryset.running()  # type: ignore[attr-defined, no-any-return]
        if self.value() == "expired":
            return queryset.abandoned()  # type: ignore[attr-defined, no-any-return]
        return queryset


@admin.register(Operation)
class OperationAdmin(ExportMixin, SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
    # The last update is on the operation's page: the list fits at 1280 px with the summary.
    list_display = ["tool_name", "summary", "short_key", "user", "state_badge", "created"]
    list_filter = ["state", LeaseFilter, ToolFilter, "recovered"]
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

    @admin.display(description=_("tool"), ordering="tool")
    def tool_name(self, obj: Operation) -> str:
        # A line may break after an underscore, never inside a word ("prepare_payment_…").
        return format_html_join(mark_safe("_<wbr>"), "{}", ((part,) for part in
                                                          obj.tool.split("_")))

    @admin.display(description=_("request"))
    def summary(self, obj: Operation) -> str:
        # The schema's titles and plain values: no hook, no query per row.
        return summarize(obj, obj.input, hooks=False)

    @admin.display(description=_("key"), ordering="key")
    def short_key(self, obj: Operation) -> str:
        return obj.key if len(obj.key) <= 40 else obj.key[:39] + "…"

    @admin.display(description=_("state"), ordering="state")
    def state_badge(self, obj: Operation) -> str:
        # "recovered" is said beside the state, not as the admin's red ✗ on every row
        # that never needed recovering.
        recovered = format_html('<div class="gt-recovered">{}</div>', _("recovered")) \
            if obj.recovered else ""
        if abandoned(obj):  # its owner's lease ran out: nobody runs it now
            return format_html('<span class="gt-badge gt-abandoned">{}</span>{}',
                               OperationState.ABANDONED.label, recovered)
        # Why a released claim is released: waiting for approval is not "proved not run".
        reason = format_html('<div class="gt-release-reason">{}</div>',
                             obj.get_release_reason_display()) \
            if obj.state == OperationState.RELEASED and obj.release_reason else ""
        return format_html('<span class="gt-badge gt-{}">{}</span>{}{}', obj.state,
                           obj.get_state_display(), reason, recovered)

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
                **self.decide_context(operation, ev,
                                      self.decision_form(operation) if can else None),
                "abandoned": abandoned(operation),
                "next_sweep": next_sweep_sentence(next_sweep()) if abandoned(operation)
                else "",
                "can_recover": abandoned(operation) and self.has_reconcile_permission(request),
                "recover_url": reverse("admin:guarded_tools_operation_recover",
                                       args=[operation.pk]),
                "confirmations": operation.confirmations.select_related(
                    "requested_by", "decided_by").order_by("created_at")[:20],
            }
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self) -> list[Any]:
        return [
            path("<uuid:pk>/<str:part>.json", self.admin_site.admin_view(self.download_view),
                 name="guarded_tools_operation_download"),
            path("<uuid:pk>/recover/", self.admin_site.admin_view(self.recover_view),
                 name="guarded_tools_operation_recover"),
            path("<uuid:pk>/reconcile/", self.admin_site.admin_view(self.reconcile_view),
                 name="guarded_tools_operation_reconcile"),
            *super().get_urls(),
        ]

    @method_decorator(xframe_options_deny)
    def recover_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        """POST target of "Recover now": the sweep's recovery of this one operation."""
        if request.method != "POST" or not self.has_reconcile_permission(request):
            raise PermissionDenied
        operation = get_object_or_404(Operation, pk=pk)
        outcome = gateway.recover_now(operation, request.user) if abandoned(operation) \
            else "skipped"
        if outcome == "skipped":
            self.message_user(request, _("Nothing was recovered: this operation is not"
                                         " abandoned any more (its owner, the sweep or a"
                                         " retry has it)."), messages.WARNING)
        else:
            operation.refresh_from_db()
            self.message_user(request, recovery_sentence(outcome, operation.state),
                              messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:guarded_tools_operation_change",
                                            args=[operation.pk]))

    # -- an unknown outcome's page and its reconcile form -----------------------------------
    @staticmethod
    def decision_form(operation: Operation, data: Any = None) -> DecisionForm:
        """The form for ``operation`` as the page shows it (on the current attempt, its
        output started from the evidence), or bound to what was posted."""
        form = DecisionForm(data, operation=operation, initial={"fence": operation.fence})
        if not form.is_bound:
            form.initial["output"] = start_output(operation, form)
        return form

    @staticmethod
    def decide_context(operation: Operation, ev: dict[str, Any],
                       form: DecisionForm | None) -> dict[str, Any]:
        """What the top of an unknown outcome's page shows: the facts the decision rests
        on (the journal with what the tool's evidence hook says of it, what the handler,
        recovery and ``verify`` said) and, for those who may reconcile, the form."""
        if operation.state != OperationState.OUTCOME_UNKNOWN:
            return {"facts": None, "decide_form": None}
        # The journal is shown once, up here with its warning; the evidence below lists it.
        ev["journal_warns"] = False
        return {
            "facts": deciding_facts(operation),
            "decide_form": form,
            "reconcile_url": reverse("admin:guarded_tools_operation_reconcile",
                                     args=[operation.pk]),
            "output_schema": OperationAdmin._output_schema([operation]),
            "stored_output": one_line(operation.output) if operation.output is not None
            else "",
        }

    @method_decorator(xframe_options_deny)
    def reconcile_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        """The reconcile form's own address: GET shows it, POST decides (a note always;
        the output or the error the decision records), or shows the form again with what
        was typed and why it was refused. Only for those who may reconcile."""
        if not self.has_reconcile_permission(request):
            raise PermissionDenied
        operation = get_object_or_404(Operation, pk=pk)
        page = reverse("admin:guarded_tools_operation_change", args=[operation.pk])
        if operation.state != OperationState.OUTCOME_UNKNOWN:
            self.message_user(request, _(
                "This operation is not waiting for reconciliation any more (now: %(state)s;"
                " someone may have decided it since the form was opened): nothing was"
                " changed.") % {"state": operation.get_state_display()},
                messages.ERROR if request.method == "POST" else messages.WARNING)
            return HttpResponseRedirect(page)
        if request.method != "POST":
            return self.reconcile_page(request, operation, self.decision_form(operation))
        form = self.decision_form(operation, request.POST)
        if not form.is_valid():
            return self.reconcile_page(request, operation, form)
        action = form.cleaned_data["action"]
        try:
            self._apply(action, operation, request.user, form.cleaned_data,
                        form.cleaned_data["fence"])
        except reconciliation.ReconcileRefused as exc:
            return self.reconcile_page(request, operation, form, str(exc))
        verb = {a: past for a, _label, past in RECONCILIATIONS}[action]
        self.message_user(request, ngettext("%(n)d operation reconciled.",
                                            "%(n)d operations reconciled.", 1) % {"n": 1}
                          + f" {operation}: {verb}.", messages.SUCCESS)
        return HttpResponseRedirect(page)

    def reconcile_page(self, request: HttpRequest, operation: Operation, form: DecisionForm,
                       error: str | None = None) -> TemplateResponse:
        """The reconcile form on a page of its own: the facts and the form first, the
        rest of the evidence below; a refused form keeps everything that was typed."""
        ev = evidence(operation)
        if error is None and form.is_bound and form.errors:
            error = gettext("Nothing was changed: correct what is marked below.")
        return TemplateResponse(request, "admin/guarded_tools/operation/reconcile.html", {
            **self.admin_site.each_context(request),
            "title": gettext("Reconcile %(operation)s") % {"operation": operation},
            "opts": self.model._meta,
            "operation": operation,
            "presented": ev["presented"],
            "ev": ev,
            "error": error,
            **self.decide_context(operation, ev, form),
        })

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
        form = form_class(request.POST if "note" in request.POST else None)
        first = eligible.first() if single and form_class is SucceededForm else None
        if first is not None:  # the evidence's output, else empty: never a made-up one
            form.initial["output"] = start_output(first, form)
            if output_hint(first):
                form.fields["output"].widget.attrs["placeholder"] = output_hint(first)
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
            "output_schema": self._output_schema(shown) if action == "mark_succeeded" else None,
        })

    @staticmethod
    def _output_schema(shown: list[Operation]) -> SafeString | None:
        """The output schema the typed output is checked against, shown beside the form."""
        definition = registry.find(shown[0].tool) if shown else None
        schema = definition.output_schema if definition is not None else None
        return highlight_json(dict(schema), limit=16384) if schema else None

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
