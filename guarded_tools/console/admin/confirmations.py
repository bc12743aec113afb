"""Provides the approvers' admin: the queue of confirmations and the request page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.exceptions import NotRegistered
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from django.views.decorators.clickjacking import xframe_options_deny

from guarded_tools.confirmations import queue as confirmations
from guarded_tools.confirmations.presentation import present_request, requested_summary
from guarded_tools.console import queue
from guarded_tools.console.admin.common import (
    ReadOnlyMixin,
    ReasonForm,
    SafeLookupsMixin,
    ToolFilter,
)
from guarded_tools.console.admin.exports import ExportMixin
from guarded_tools.console.admin.records import audit_action
from guarded_tools.console.admin.rendering import (
    JSON_SHOWN_CHARS,
    input_rows,
    json_download,
)
from guarded_tools.console.formatting import age, when
from guarded_tools.console.validity import Validity, check_now
from guarded_tools.core.registry import registry
from guarded_tools.models import (
    Confirmation,
    ConfirmationStatus,
    Operation,
)


# -- confirmations ---------------------------------------------------------------------------
def approvals_line(confirmation: Confirmation) -> str:
    """Where the request stands, in words: "1 of 2 approvals given" (an approval by one
    person counts as given once it is approved), or who decides a request its owner
    decides."""
    counted = queue.approvals_given(confirmation)
    if counted is None:
        return confirmations.approvals_text(confirmation)
    return _("%(given)d of %(needed)d approvals given") % {"given": counted[0],
                                                           "needed": counted[1]}


class ConfirmationToolFilter(ToolFilter):
    """By tool, listing the registered tools that ask for confirmation."""

    def offered(self) -> set[str]:
        return {t.name for t in registry if t.confirm_mode}


class StatusFilter(admin.SimpleListFilter):
    """By status, the pending requests unless told otherwise: the queue is what waits
    for a decision; "all" (or another status) lists the others.

    Its parameter is the field's own (``status__exact``), so links to one status keep
    working.
    """

    title = _("status")
    parameter_name = "status__exact"
    ALL = "all"
    DEFAULT = ConfirmationStatus.PENDING

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [*ConfirmationStatus.choices, (self.ALL, _("all"))]

    def value(self) -> str:
        return super().value() or self.DEFAULT

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == self.ALL:
            return queryset
        if value not in ConfirmationStatus.values:
            return queryset.none()
        return queryset.filter(status=value)

    def choices(self, changelist: Any) -> Any:
        # Django's "All" removes the parameter, which here means the default: "all" is
        # a value of its own, and the default is marked as chosen.
        counts = self.get_facet_queryset(changelist) if changelist.add_facets else None
        for i, (lookup, title) in enumerate(self.lookup_choices):
            if counts is not None:
                title = f"{title} ({counts.get(f'{i}__c', '-')})"
            yield {
                "selected": self.value() == str(lookup),
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }


class ExpiresFilter(admin.SimpleListFilter):
    title = _("waiting")
    parameter_name = "waiting"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Pending and not expired"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.pending() if self.value() == "yes" else queryset  # type: ignore[attr-defined]


@admin.register(Confirmation)
class ConfirmationAdmin(ExportMixin, SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
    # The summary names the tool's action; the sidebar filters by tool.
    # The summary as the request read when it was asked (stored with it): a page costs
    # the same queries however many rows it shows and whatever their tools' hooks do.
    # A pending request's precheck runs as its row is shown (its "would fail now" mark),
    # as on its page: a page of the queue is at most ``list_per_page`` of them. Two facts
    # share a cell where one explains the other (the approvals and the rule that asks
    # them, the status and who decided, the wait and the time left), so that the
    # columns fit the content area at 1280 px and the sentence keeps its room.
    list_display = ["request", "amount", "approvals_given", "requester", "status_badge", "age"]
    #: The columns of the pending requests' list (the default): all waiting, none decided.
    pending_list_display = ["request", "amount", "approvals_given", "requester", "age"]
    list_display_links = ["request"]
    list_filter = [StatusFilter, ExpiresFilter, ConfirmationToolFilter]
    list_per_page = 25
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

    @staticmethod
    def pending_only(request: HttpRequest) -> bool:
        """Whether the list shows the pending requests alone (the default)."""
        return (request.GET.get(StatusFilter.parameter_name) or StatusFilter.DEFAULT
                ) == StatusFilter.DEFAULT

    def get_list_display(self, request: HttpRequest) -> Any:
        return self.pending_list_display if self.pending_only(request) else self.list_display

    def has_approve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(confirmations.APPROVE_PERMISSION)

    @admin.display(description=_("request"))
    def request(self, obj: Confirmation) -> str:
        # A request only its owner decides says so in the queue (the registry knows: no
        # query per row), so no approver takes it for one of theirs; a pending request
        # the tool's precheck would refuse now says so too (the reason on hover).
        marks = [format_html('<span class="gt-badge gt-owner" data-testid="owner-only">{}'
                             '</span>', _("its owner decides"))] \
            if confirmations.owner_decides(obj) else []
        validity = self.validity(obj)
        if validity is not None and validity.state != "passes":
            marks.append(format_html(
                '<span class="gt-badge gt-validity-mark gt-validity-{}" title="{}"'
                ' data-testid="validity-mark">{}</span>', validity.state, validity.text,
                _("would fail now") if validity.fails else _("not checked")))
        return format_html('<span class="gt-summary">{}</span>{}', requested_summary(obj),
                           format_html_join("", " {}", ((mark,) for mark in marks)))

    def validity(self, obj: Confirmation) -> Validity | None:
        """The tool's precheck of a request still waiting, run now; None otherwise."""
        if obj.status != ConfirmationStatus.PENDING or obj.expires_at <= timezone.now():
            return None
        return check_now(obj)

    @admin.display(description=_("amount"))
    def amount(self, obj: Confirmation) -> str | None:
        return queue.amount(obj)

    @admin.display(description=_("approvals"), ordering="approvals_required")
    def approvals_given(self, obj: Confirmation) -> str:
        """"1 of 2" (who gave them on hover), over the policy's rule that asks them."""
        counted = queue.approvals_given(obj)
        names = ", ".join(str(given.get("label", "")) for given in obj.approvals)
        given = _("owner") if counted is None else _("%(given)d of %(needed)d") % {
            "given": counted[0], "needed": counted[1]}
        rule = format_html('<div class="gt-cell-note" data-testid="rule">{}</div>',
                           obj.policy_rule) if obj.policy_rule else ""
        return format_html('<span class="gt-nowrap" title="{}" data-testid="approvals">{}'
                           '</span>{}', names, given, rule)

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, obj: Confirmation) -> str:
        """The status, over who decided (and when, on hover)."""
        decided = format_html('<div class="gt-cell-note" title="{}">{}</div>',
                              when(obj.decided_at), obj.decided_by) \
            if obj.decided_by is not None else ""
        return format_html('<span class="gt-badge gt-{}">{}</span>{}', obj.status,
                           obj.get_status_display(), decided)

    @admin.display(description=_("requested by"), ordering="requested_by_label")
    def requester(self, obj: Confirmation) -> str:
        return str(obj.requester)

    @admin.display(description=_("waiting"), ordering="created_at")
    def age(self, obj: Confirmation) -> str:
        """How long it has waited, over the time left to decide it (or to use its
        approval); the exact times on hover."""
        waited = format_html('<span class="gt-nowrap" title="{}">{}</span>', when(obj.created_at),
                             age(timezone.now() - obj.created_at))
        if obj.status not in (ConfirmationStatus.PENDING, ConfirmationStatus.APPROVED):
            return waited
        left = obj.expires_at - timezone.now()
        return format_html('{}<div class="gt-cell-note" title="{}" data-testid="time-left">{}'
                           '</div>', waited, when(obj.expires_at),
                           format_html(str(_("{left} left")), left=format_html(
                               '<span class="gt-nowrap">{}</span>', age(left)))
                           if left.total_seconds() > 0 else _("expired"))

    # Decision pages refuse framing themselves (clickjacking), whatever the site's
    # middleware: the list (its approve/decline actions and their forms), the detail page
    # and its Decide target.
    @method_decorator(xframe_options_deny)
    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        extra_context = {**(extra_context or {}), "gt_waiting": queue.waiting_for(request.user),
                         "gt_pending_only": self.pending_only(request)}
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

    @admin.action(description=_("Approve selected confirmations…"), permissions=["approve"])
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        """A second look first, as Django's "delete selected" does: each request's
        summary, and those left out (not this person's to decide) with the reason."""
        decidable, left_out = self._sorted_for_approval(request, queryset)
        if request.POST.get("post") == "yes":  # the confirmation page's own submit
            self._decide_many(request, queryset.filter(
                pk__in=[c.pk for c in decidable]), True, "")
            if left_out:
                self.message_user(request, ngettext(
                    "%(n)d left out: not yours to decide.",
                    "%(n)d left out: not yours to decide.", len(left_out))
                    % {"n": len(left_out)}, messages.WARNING)
            return None
        return TemplateResponse(request, "admin/guarded_tools/confirmation/approve_selected.html", {
            **self.admin_site.each_context(request),
            "title": _("Approve these requests?"),
            "decidable": [(c, requested_summary(c)) for c in decidable],
            "left_out": [(c, requested_summary(c), why) for c, why in left_out],
            "queryset": queryset,
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        })

    #: The most requests one bulk approval lists (and approves).
    bulk_approval_limit = 100

    def _sorted_for_approval(self, request: HttpRequest, queryset: QuerySet[Any]
                             ) -> tuple[list[Confirmation], list[tuple[Confirmation, str]]]:
        """The selected requests this person may approve now, and the others with why."""
        decidable, left_out = [], []
        for confirmation in queryset.select_related("requested_by")[:self.bulk_approval_limit]:
            if confirmation.status != ConfirmationStatus.PENDING:
                status = confirmation.get_status_display()
                left_out.append((confirmation, str(_("already decided: %(status)s")
                                                   % {"status": status})))
                continue
            refusal = confirmations.can_decide(request.user, confirmation)
            if refusal:
                left_out.append((confirmation, refusal))
            else:
                decidable.append(confirmation)
        return decidable, left_out

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
                done: Any
                if confirmation.status == ConfirmationStatus.PENDING:  # one of several
                    done = _("Approval recorded: %(n)s; another person must approve.") % {
                        "n": confirmations.approvals_text(confirmation)}
                elif confirmations.runs_when_approved(confirmation):
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
            # The other calls: not the very call being decided (its claim, released while
            # it waits, would read as if it had run).
            recent = (Operation.objects.filter(tool=confirmation.tool, scope=confirmation.scope)
                      .exclude(key=confirmation.key)
                      .order_by("-created_at")[:5]) if may_view_operations else None
            extra_context = {
                **(extra_context or {}),
                "confirmation": confirmation,
                "presented": present_request(confirmation, confirmation.input, request.user),
                "recent_calls": recent,
                "may_view_operations": may_view_operations,
                "open": open_,
                # Is it still valid? The tool's precheck, run now, beside the summary.
                "validity": check_now(confirmation) if open_ else None,
                "tool_description": definition.description if definition else "",
                "input_rows": rows,
                "input_fields_not_shown": not_shown,
                "input_download_url": download_url,
                "can_decide": open_ and refusal is None,
                "refusal": refusal if open_ else None,
                "owner_decides": confirmations.owner_decides(confirmation),
                "approvals_text": approvals_line(confirmation),
                "still_can": confirmations.who_still_can(confirmation) if open_ else (),
                "decide_url": reverse("admin:guarded_tools_confirmation_decide",
                                      args=[confirmation.pk]),
                "audit": [(row, audit_action(row, about_confirmation=True)) for row in
                          confirmation.audit.select_related("actor", "operation")],
                "allow_url": allow_url(request, confirmation, definition),
            }
        return super().change_view(request, object_id, form_url, extra_context)


def allow_url(request: HttpRequest, confirmation: Confirmation, definition: Any) -> str:
    """Where a person who may approve this request grants an allowance for calls like it
    (the allowance's add form, filled from the request); "" when its rule takes none."""
    from guarded_tools.confirmations.allowances import APPROVE_PERMISSION, takes_allowances

    if definition is None or not takes_allowances(definition.confirm) or not (
            request.user.has_perm(APPROVE_PERMISSION)) or confirmations.owner_decides(
            confirmation):
        return ""
    return reverse("admin:guarded_tools_allowance_add") + f"?confirmation={confirmation.pk}"

