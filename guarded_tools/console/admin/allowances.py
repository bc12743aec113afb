"""Provides the admin of allowances: grant one (from a request's page, or anew), grant a
pending or suspended one again, revoke one, and the list with what is used and left.

Granting and revoking need what approving the calls needs (``approve_confirmation``);
:mod:`guarded_tools.confirmations.allowances` re-checks it, with the four-eyes rule and
the rule's group and permission, so a crafted POST cannot skip it. An allowance's bounds
never change once proposed: a different one is a new allowance.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from guarded_tools.confirmations import allowances
from guarded_tools.console.admin.common import SafeLookupsMixin
from guarded_tools.console.formatting import when
from guarded_tools.core.registry import registry
from guarded_tools.models import Allowance, AllowanceStatus, Confirmation
from guarded_tools.models.allowances import AllowanceQuerySet

APPROVE = allowances.APPROVE_PERMISSION


def allowing_tools() -> list[str]:
    """The registered tools whose policy has a rule that takes allowances."""
    return sorted(t.name for t in registry if allowances.takes_allowances(t.confirm))


class AllowanceForm(forms.ModelForm):
    tool = forms.ChoiceField(label=_("Tool"), help_text=_(
        "A tool whose approval policy lets rules be met by an allowance"
        " (Approvers(n, allowances=True))."))

    class Meta:
        model = Allowance
        fields = ["tool", "user", "group", "application", "count", "limit", "window",
                  "sum_field", "per_call", "constraints", "expires_at", "note",
                  "confirmation"]
        widgets = {"confirmation": forms.HiddenInput}

    #: Set by the admin: who is granting (the form checks that they may).
    granter: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields.get("tool")  # not on an allowance's page: it shows its values
        if isinstance(field, forms.ChoiceField):
            field.choices = [("", "---------"), *[(n, n) for n in allowing_tools()]]

    def clean_constraints(self) -> Any:
        value = self.cleaned_data.get("constraints") or {}
        if not isinstance(value, dict) or not all(
                isinstance(v, list) and v for v in value.values()):
            raise forms.ValidationError(_('Give a list of allowed values per field, e.g.'
                                          ' {"receiverId": ["r-17"]}.'))
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        principals = [bool(data.get("user")), bool(data.get("group")),
                      bool(data.get("application"))]
        if sum(principals) != 1:
            raise forms.ValidationError(_("Give one principal: a user, a group or an OAuth"
                                          " application."))
        if data.get("count") is None and data.get("limit") is None:
            raise forms.ValidationError(_("Give a number of calls or a sum per window."))
        if (data.get("limit") is not None or data.get("per_call") is not None) and not data.get(
                "sum_field"):
            self.add_error("sum_field", _("Name the input field the sum counts."))
        expires = data.get("expires_at")
        if expires is not None and expires <= timezone.now():
            self.add_error("expires_at", _("Give a date in the future."))
        if self.errors:
            return data
        candidate = Allowance(**{k: v for k, v in data.items() if k != "note"})
        request = data.get("confirmation")
        needed = allowances.requirement(candidate, request.input if request else None)
        if needed.problem:
            raise forms.ValidationError(f"This allowance cannot be granted: {needed.problem}.")
        candidate.approvals_required = needed.n
        candidate.approvers_group, candidate.approvers_permission = (needed.group,
                                                                     needed.permission)
        refusal = allowances.may_grant(self.granter, candidate)
        if refusal:
            raise forms.ValidationError(refusal)
        self.needed = needed
        return data


@admin.register(Allowance)
class AllowanceAdmin(SafeLookupsMixin, admin.ModelAdmin):
    form = AllowanceForm
    list_display = ["number", "tool", "principal", "state", "bounds", "left", "granted_by",
                    "until"]
    list_filter = ["status", "tool"]
    list_select_related = ["user", "group"]
    search_fields = ["tool", "application", "user__username", "group__name", "note"]
    raw_id_fields = ["user"]
    actions = ["grant_selected", "revoke_selected"]
    fieldsets = [
        (None, {"fields": ["tool", ("user", "group", "application")]}),
        (_("Bounds"), {"fields": [("count", "limit", "window"), ("sum_field", "per_call"),
                                  "constraints", "expires_at"]}),
        (None, {"fields": ["note", "confirmation"]}),
    ]
    class Media:
        css = {"all": ["guarded_tools/admin.css"]}

    shown = ["number", "tool", "principal", "state", "status_reason", "bounds", "until", "left",
             "granted_by", "required", "policy_rule", "policy_version", "request", "note",
             "created", "revoked_by", "revoked"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Allowance]:
        """With what each used in its window now, read in the same query (the "left now"
        column costs no query per row)."""
        found = super().get_queryset(request)
        assert isinstance(found, AllowanceQuerySet)
        return found.with_use(timezone.now())

    # -- who sees and does what ----------------------------------------------------------
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        opts = self.opts
        view = f"{opts.app_label}.{get_permission_codename('view', opts)}"
        return request.user.has_perm(view) or request.user.has_perm(APPROVE)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(APPROVE)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # bounds never change: grant, revoke, or propose a new one

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoked, never deleted: the audit trail names it

    def has_approve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(APPROVE)

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fieldsets if obj is None else [(None, {"fields": self.shown})]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [] if obj is None else self.shown

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False,
                 **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        if obj is None:
            return type("GrantingForm", (form,), {"granter": request.user})
        return form

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """From a request's page (``?confirmation=<id>``): its tool and requester, its
        amount as the bound a call, its other text fields as the values allowed."""
        initial: dict[str, Any] = {"window": "day",
                                   "expires_at": timezone.now() + timedelta(days=30)}
        asked: Any = request.GET.get("confirmation")
        found = Confirmation.objects.filter(pk=asked).first() if _uuid(asked) else None
        if found is None:
            return {**initial, **super().get_changeform_initial_data(request)}
        like = allowances.like_request(found)
        initial.update(tool=found.tool, user=found.requested_by_id, confirmation=found.pk,
                       sum_field=like.sum_field, per_call=like.per_call, count=like.count,
                       constraints=like.constraints)
        return initial

    def save_model(self, request: HttpRequest, obj: Allowance, form: Any,
                   change: bool) -> None:
        base = obj.confirmation.input if obj.confirmation is not None else None
        try:
            allowances.propose(obj, request.user, base=base, note=obj.note)
        except allowances.GrantRefused as exc:  # changed since the form's check
            self.message_user(request, str(exc), messages.ERROR)

    def response_add(self, request: HttpRequest, obj: Allowance,
                     post_url_continue: Any = None) -> Any:
        if obj.pk is None:  # refused at the save (see save_model)
            from django.http import HttpResponseRedirect

            return HttpResponseRedirect(request.path)
        return super().response_add(request, obj, post_url_continue)

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return None  # the grant is in its history already (propose)

    # -- actions ---------------------------------------------------------------------------
    @admin.action(description=_("Grant the selected allowances"), permissions=["approve"])
    def grant_selected(self, request: HttpRequest, queryset: QuerySet[Allowance]) -> None:
        done, refused = 0, []
        for allowance in queryset.filter(status__in=[AllowanceStatus.PENDING,
                                                     AllowanceStatus.SUSPENDED]):
            try:
                allowances.grant(allowance, request.user)
                done += 1
            except allowances.GrantRefused as exc:
                refused.append(f"#{allowance.pk}: {exc}")
        self.message_user(request, ngettext("Granted %d allowance.", "Granted %d allowances.",
                                            done) % done, messages.SUCCESS)
        for text in refused:
            self.message_user(request, text, messages.WARNING)

    @admin.action(description=_("Revoke the selected allowances"), permissions=["approve"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[Allowance]) -> None:
        done = sum(1 for allowance in queryset.exclude(status=AllowanceStatus.REVOKED)
                   if allowances.revoke(allowance, request.user, "revoked in the admin"))
        self.message_user(request, ngettext("Revoked %d allowance: the next call waits for a"
                                            " person.", "Revoked %d allowances: the next"
                                            " calls wait for a person.", done) % done,
                          messages.SUCCESS)

    # -- columns -----------------------------------------------------------------------------
    @admin.display(description="#", ordering="pk")
    def number(self, obj: Allowance) -> str:
        return f"#{obj.pk}"

    @admin.display(description=_("for"))
    def principal(self, obj: Allowance) -> str:
        return obj.principal

    @admin.display(description=_("status"), ordering="status")
    def state(self, obj: Allowance) -> str:
        if obj.status == AllowanceStatus.ACTIVE and obj.expires_at <= timezone.now():
            return str(_("expired"))
        if obj.status == AllowanceStatus.PENDING:
            return f"{obj.get_status_display()} ({len(obj.approvals)} of" \
                   f" {max(obj.approvals_required, 1)})"
        return str(obj.get_status_display())

    @admin.display(description=_("bounds"))
    def bounds(self, obj: Allowance) -> str:
        """One bound a line (the window's, the per-call, each constraint), each kept whole
        where it fits: a narrow column never breaks a phrase into its words."""
        return format_html_join("", '<span class="gt-bound">{}</span>',
                                ((phrase,) for phrase in allowances.bounds(obj)))

    @admin.display(description=_("left now"))
    def left(self, obj: Allowance) -> str:
        return allowances.left_text(obj)

    @admin.display(description=_("granted by"))
    def granted_by(self, obj: Allowance) -> str:
        return obj.granters or "—"

    @admin.display(description=_("granters required"))
    def required(self, obj: Allowance) -> str:
        if obj.approvals_required == 0:
            return str(_("the owner, for their own account"))
        return f"{obj.approvals_required} (rule \"{obj.policy_rule}\")"

    @admin.display(description=_("granted from request"))
    def request(self, obj: Allowance) -> Any:
        if obj.confirmation_id is None:
            return "—"
        return format_html('<a href="../../../confirmation/{}/change/">{}</a>',
                           obj.confirmation_id, obj.confirmation_id)

    @admin.display(description=_("created at"))
    def created(self, obj: Allowance) -> str:
        return when(obj.created_at)

    @admin.display(description=_("revoked at"))
    def revoked(self, obj: Allowance) -> str:
        return when(obj.revoked_at)

    @admin.display(description=_("until"), ordering="expires_at")
    def until(self, obj: Allowance) -> str:
        return allowances.until(obj.expires_at)


def _uuid(value: Any) -> bool:
    import uuid

    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True

