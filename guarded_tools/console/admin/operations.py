"""Provides the operators' admin: operations, their evidence and reconciliation."""

from __future__ import annotations

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

from guarded_tools.console.admin.common import (
    ReadOnlyMixin,
    SafeLookupsMixin,
    ToolFilter,
    stacked_time,
)
from guarded_tools.console.admin.rendering import (
    highlight_json,
    input_rows,
    json_download,
    pretty_json,
)
from guarded_tools.console.formatting import age, when
from guarded_tools.core.catalog import CODE
from guarded_tools.models import (
    Operation,
    OperationState,
    unknown_first,
)
from guarded_tools.pipeline import reconciliation, recovery
from guarded_tools.pipeline.presentation import present_request, summarize
from guarded_tools.tasks import NextSweep, next_sweep
from guarded_tools.tools.registry import registry

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


#: What each outcome of a recovery means, in an operator's words.
RECOVERY_OUTCOMES = {
    "completed": _("the tool's recover hook established the outcome"),
    "released": _("released: the journal proves it never ran"),
    "unknown": _("still unknown, waiting for a person to reconcile it"),
}


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
class OperationAdmin(SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
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
                "reconciliations": RECONCILIATIONS if can else (),
                "abandoned": abandoned(operation),
                "next_sweep": next_sweep_sentence(next_sweep()) if abandoned(operation)
                else "",
                "can_recover": abandoned(operation) and self.has_reconcile_permission(request),
                "recover_url": reverse("admin:guarded_tools_operation_recover",
                                       args=[operation.pk]),
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
            path("<uuid:pk>/recover/", self.admin_site.admin_view(self.recover_view),
                 name="guarded_tools_operation_recover"),
            *super().get_urls(),
        ]

    @method_decorator(xframe_options_deny)
    def recover_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        """POST target of "Recover now": the sweep's recovery of this one operation."""
        if request.method != "POST" or not self.has_reconcile_permission(request):
            raise PermissionDenied
        operation = get_object_or_404(Operation, pk=pk)
        outcome = recovery.recover_now(operation, request.user) if abandoned(operation) \
            else "skipped"
        if outcome == "skipped":
            self.message_user(request, _("Nothing was recovered: this operation is not"
                                         " abandoned any more (its owner, the sweep or a"
                                         " retry has it)."), messages.WARNING)
        else:
            operation.refresh_from_db()
            self.message_user(request, _("Recovered: %(outcome)s. It is now %(state)s.") % {
                "outcome": RECOVERY_OUTCOMES.get(outcome, outcome),
                "state": operation.get_state_display()}, messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:guarded_tools_operation_change",
                                            args=[operation.pk]))

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
            initial["output"] = self._output_to_start_from(eligible)
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

    @staticmethod
    def _output_to_start_from(eligible: QuerySet[Any]) -> str:
        """The stored output (what verify refused, a late result), else the output
        schema's required fields, typed: the person fills in values, not the shape."""
        tool, stored = eligible.values_list("tool", "output").first() or ("", None)
        if stored is not None:
            return pretty_json(stored)
        definition = registry.find(tool)
        schema = definition.output_schema if definition is not None else None
        return pretty_json(reconciliation.output_skeleton(schema)) if schema else ""

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
