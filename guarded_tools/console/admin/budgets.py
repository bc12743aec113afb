"""Provides the admin of budgets: staff's overrides per user or group, and what each
principal has used of each budget and when it frees.

Overrides are added, changed and removed only with ``guarded_tools.manage_budgets`` (the
model's own add/change/delete permissions give nothing here); each change writes an
audit row beside Django's admin history. The budget use page is read-only for everyone.
Either page shows to staff with the model's view permission or ``manage_budgets`` only:
the change permission alone shows nothing.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth import get_permission_codename, get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import CharField, Count, Q, QuerySet, Sum, Value
from django.db.models.functions import Cast, Concat
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from guarded_tools.console.admin.common import (
    ReadOnlyMixin,
    SafeChangeList,
    SafeLookupsMixin,
    stacked_time,
    unmatchable,
)
from guarded_tools.console.formatting import when
from guarded_tools.core.policy import Budget, site_zone
from guarded_tools.models import BudgetAlert, BudgetCounter, BudgetOverride
from guarded_tools.pipeline import budget_overrides
from guarded_tools.pipeline.budget_overrides import declared_budgets

MANAGE = "guarded_tools.manage_budgets"


def in_words(budget: Budget) -> str:
    """"at most 10 calls, 2,000.00 of amount per day" for the budget's choice."""
    parts = []
    if budget.count is not None:
        parts.append(f"{budget.count} calls")
    if budget.sum_field and budget.limit is not None:
        parts.append(f"{budget.limit:,.2f} of {budget.sum_field}")
    window = "month" if budget.window == "month" else window_words(budget.window_seconds)
    return f"{budget.name}: at most {', '.join(parts) or 'no limit'} per {window}"


def window_words(seconds: int) -> str:
    """"day", "2 hours", "90 seconds": a window as a person says it after "per"."""
    for size, unit in ((604_800, "week"), (86_400, "day"), (3600, "hour"), (60, "minute"),
                       (1, "second")):
        if seconds % size == 0:
            count = seconds // size
            return unit if count == 1 else f"{count:,} {unit}s"
    return f"{seconds} seconds"  # not reached: every whole number of seconds divides by 1


def may_view(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> bool:
    """The model's view permission or ``manage_budgets``: not its change permission, which
    Django's default accepts too (and which gives nothing here)."""
    opts = model_admin.opts
    view = f"{opts.app_label}.{get_permission_codename('view', opts)}"
    return request.user.has_perm(view) or request.user.has_perm(MANAGE)


class BudgetOverrideForm(forms.ModelForm):
    budget = forms.ChoiceField(
        label=_("Budget"),
        help_text=_("A budget the registered tools declare, with its own limits; the override"
                    " replaces the count and/or the sum you give, for this user or group."))

    class Meta:
        model = BudgetOverride
        fields = ["budget", "user", "group", "count", "limit", "note"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.declared = declared_budgets()
        choices = [(name, in_words(budget)) for name, budget in self.declared.items()]
        current = self.instance.budget if self.instance.pk else ""
        if current and current not in self.declared:
            choices.append((current, f"{current} (no registered tool declares it now)"))
        field = self.fields["budget"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [("", "---------"), *choices]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        budget = self.declared.get(data.get("budget") or "")
        if budget is not None and data.get("limit") is not None and not budget.sum_field:
            self.add_error("limit", _("This budget counts calls only: give a count instead."))
        return data


@admin.register(BudgetOverride)
class BudgetOverrideAdmin(SafeLookupsMixin, admin.ModelAdmin):
    form = BudgetOverrideForm
    list_display = ["budget", "principal", "calls", "amount", "note", "changed"]
    list_filter = ["budget"]
    list_select_related = ["user", "group", "updated_by"]
    search_fields = ["budget", "user__" + get_user_model().USERNAME_FIELD, "group__name", "note"]
    raw_id_fields = ["user"]  # where a search can't be offered (get_autocomplete_fields)
    readonly_fields = ["created_by", "created_at", "updated_by", "updated_at"]
    fieldsets = [
        (None, {"fields": ["budget", ("user", "group"), ("count", "limit"), "note"]}),
        (_("Record"), {"fields": [("created_by", "created_at"), ("updated_by", "updated_at")]}),
    ]

    def get_autocomplete_fields(self, request: HttpRequest) -> list[str]:
        """The user and the group are picked by a search of their names where the site's
        admin can answer one for this person: the related model is registered with
        ``search_fields`` and they may view it (the admin's autocomplete view asks that).
        Otherwise the user is a raw id with its lookup link and the group a select."""
        fields = []
        for name, model in (("user", get_user_model()), ("group", Group)):
            related = self.admin_site.get_model_admin(model) if self.admin_site.is_registered(
                model) else None
            if related is not None and related.get_search_fields(request) and \
                    related.has_view_permission(request):
                fields.append(name)
        return fields

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fieldsets[:1] if obj is None else self.fieldsets  # no record yet

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return may_view(self, request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(MANAGE)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(MANAGE)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(MANAGE)

    @admin.display(description=_("applies to"))
    def principal(self, obj: BudgetOverride) -> str:
        return obj.principal

    @admin.display(description=_("calls"), ordering="count")
    def calls(self, obj: BudgetOverride) -> str:
        return "—" if obj.count is None else str(obj.count)

    @admin.display(description=_("sum"), ordering="limit")
    def amount(self, obj: BudgetOverride) -> str:
        return "—" if obj.limit is None else f"{obj.limit:,.2f}"

    @admin.display(description=_("changed"), ordering="updated_at")
    def changed(self, obj: BudgetOverride) -> str:
        return format_html('{}<br><small class="quiet">by {}</small>',
                           stacked_time(obj.updated_at), obj.updated_by or "—")

    def save_model(self, request: HttpRequest, obj: BudgetOverride, form: Any,
                   change: bool) -> None:
        person: Any = request.user
        with transaction.atomic():
            before = None
            if change:
                row = BudgetOverride.objects.select_for_update().filter(pk=obj.pk).first()
                before = budget_overrides.described(row)
            else:
                obj.created_by = person
            obj.updated_by = person
            super().save_model(request, obj, form, change)
            budget_overrides.record_change(request.user, obj, before)

    def delete_model(self, request: HttpRequest, obj: BudgetOverride) -> None:
        with transaction.atomic():
            self.audit_removal(request, obj)
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        with transaction.atomic():
            for row in queryset.select_related("user", "group"):
                self.audit_removal(request, row)
            super().delete_queryset(request, queryset)

    def audit_removal(self, request: HttpRequest, obj: BudgetOverride) -> None:
        budget_overrides.record_change(request.user, obj, budget_overrides.described(obj),
                                       removed=True)


class BudgetFilter(admin.SimpleListFilter):
    """By budget: the names the registered tools declare (no scan of the counters)."""

    title = _("budget")
    parameter_name = "budget"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names, value = set(declared_budgets()), self.value()
        if value and not unmatchable(value):
            names.add(value)
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(budget=value) if value else queryset


class WindowFilter(admin.SimpleListFilter):
    """Current windows by default (those not yet ended); past ones, or all, on request."""

    title = _("window")
    parameter_name = "window"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("past", _("Past")), ("all", _("All"))]

    def choices(self, changelist: Any) -> Any:
        yield {"selected": self.value() is None, "display": _("Current"),
               "query_string": changelist.get_query_string(remove=[self.parameter_name])}
        for value, label in self.lookup_choices:
            yield {"selected": self.value() == value, "display": label,
                   "query_string": changelist.get_query_string({self.parameter_name: value})}

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        current = budget_overrides.current_windows(timezone.now())
        if self.value() == "all":
            return queryset
        return queryset.exclude(current) if self.value() == "past" else queryset.filter(current)


def user_scopes(rows: list[BudgetCounter]) -> dict[str, Any]:
    """The users the rows' principal scopes name (``app.model:pk``), by scope: one query."""
    model = get_user_model()
    prefix = f"{model._meta.label_lower}:"
    pks = {row.scope.removeprefix(prefix) for row in rows if row.scope.startswith(prefix)}
    field = model._meta.pk
    valid = set()
    for pk in pks:
        with contextlib.suppress(ValidationError):  # not a key of this model: no user
            valid.add(field.to_python(pk))
    return {f"{prefix}{user.pk}": user for user in model.objects.filter(pk__in=valid)} \
        if valid else {}


def overrides_by_user(users: list[Any]) -> dict[Any, list[BudgetOverride]]:
    """Each user's overrides, their own and their groups': two queries for the page."""
    if not users:
        return {}
    model = get_user_model()
    groups: dict[Any, set[Any]] = defaultdict(set)
    if hasattr(model, "groups"):
        through = model.groups.through  # the documented m2m intermediate model
        for user_id, group_id in through.objects.filter(
                **{f"{model._meta.model_name}_id__in": [u.pk for u in users]}
        ).values_list(f"{model._meta.model_name}_id", "group_id"):
            groups[user_id].add(group_id)
    all_groups = set().union(*groups.values())
    rows = list(BudgetOverride.objects.filter(
        Q(user_id__in=[u.pk for u in users]) | Q(group_id__in=all_groups)
    ).select_related("user", "group"))
    return {user.pk: [o for o in rows if o.user_id == user.pk or o.group_id in groups[user.pk]]
            for user in users}


class BudgetUseList(SafeChangeList):
    """The page's rows, each given its user, its budget as it applies and the override
    that decided it, in a constant number of queries whatever the number of rows."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)  # evaluated once; the template reuses these rows
        users = user_scopes(rows)
        overrides = overrides_by_user(list(users.values()))
        declared = declared_budgets()
        reached: dict[Any, dict[int, BudgetAlert]] = defaultdict(dict)
        for alert in BudgetAlert.objects.filter(counter__in=[row.pk for row in rows]):
            reached[alert.counter_id][alert.threshold] = alert
        for row in rows:
            user = users.get(row.scope)
            row.person = user
            row.reached = reached[row.pk]
            budget = declared.get(row.budget)
            row.applied, row.chosen = (None, []) if budget is None else budget_overrides.apply(
                budget, overrides.get(user.pk, []) if user is not None else [])


@admin.register(BudgetCounter)
class BudgetUseAdmin(SafeLookupsMixin, ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["principal", "budget_name", "window", "calls", "amount", "frees_at",
                    "override"]
    list_filter = [BudgetFilter, WindowFilter]
    search_fields = ["scope"]
    search_help_text = _("A username or a principal scope (such as auth.user:42).")
    ordering = ["-window_start", "budget", "scope"]
    list_display_links = None
    show_full_result_count = False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return may_view(self, request)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[BudgetUseList]:
        return BudgetUseList

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None
                        ) -> Any:
        # The zone the budgets' days, weeks and months are counted in, named on the page.
        return super().changelist_view(request, {**(extra_context or {}),
                                                 "site_time_zone": str(site_zone())})

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).annotate(
            used_count=Count("reservations"), used_sum=Sum("reservations__amount"))

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Any],
                           search_term: str) -> tuple[QuerySet[Any], bool]:
        found, duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if not term or unmatchable(term):
            return found, duplicates
        model = get_user_model()
        scopes = model.objects.filter(**{f"{model.USERNAME_FIELD}__icontains": term}).annotate(
            gt_scope=Concat(Value(f"{model._meta.label_lower}:"), Cast("pk", CharField()))
        ).values("gt_scope")
        return found | queryset.filter(scope__in=scopes), duplicates

    @admin.display(description=_("principal"))
    def principal(self, row: BudgetCounter) -> str:
        user = getattr(row, "person", None)
        # The scope may break after its colon: "auth.user:" and a pk of any length still
        # fit the narrow column beside the navigation sidebar at 1280 px.
        kind, colon, ident = row.scope.partition(":")
        scope = format_html("{}{}<wbr>{}", kind, colon, ident)
        if user is None:
            return scope
        return format_html('{}<br><small class="quiet">{}</small>', user, scope)

    @admin.display(description=_("budget"))
    def budget_name(self, row: BudgetCounter) -> str:
        """The budget's name over its alert thresholds (the narrow table keeps its room)."""
        thresholds = self.thresholds(row)
        if thresholds == "—":
            return row.budget
        return format_html('{}<div class="gt-cell-note" data-testid="alerts">{} {}</div>',
                           row.budget, _("alerts at"), thresholds)

    @admin.display(description=_("window start"), ordering="window_start")
    def window(self, row: BudgetCounter) -> str:
        return stacked_time(row.window_start)

    @admin.display(description=_("calls"))
    def calls(self, row: BudgetCounter) -> str:
        budget = getattr(row, "applied", None)
        if budget is None or budget.count is None:
            return str(row.used_count)  # type: ignore[attr-defined]
        return format_html('<b>{}</b><br><small class="quiet">of {}</small>',
                           row.used_count, budget.count)  # type: ignore[attr-defined]

    @admin.display(description=_("sum"))
    def amount(self, row: BudgetCounter) -> str:
        budget = getattr(row, "applied", None)
        used = row.used_sum or Decimal(0)  # type: ignore[attr-defined]
        if budget is None or not budget.sum_field:
            return "—"
        if budget.limit is None:
            return f"{used:,.2f}"
        return format_html('<b>{}</b><br><small class="quiet">of {}</small>', f"{used:,.2f}",
                           f"{Decimal(str(budget.limit)):,.2f}")

    @admin.display(description=_("frees at"))
    def frees_at(self, row: BudgetCounter) -> str:
        budget = getattr(row, "applied", None)
        if budget is None:
            return "—"
        return stacked_time(budget.window_end(row.window_start))

    def thresholds(self, row: BudgetCounter) -> str:
        """The budget's thresholds: those reached in this window in bold, with when (the
        people who manage budgets were told then), the others quiet."""
        budget = getattr(row, "applied", None)
        reached = getattr(row, "reached", {})
        percents = sorted(set(budget.alerts) | set(reached)) if budget is not None else \
            sorted(reached)
        if not percents:
            return "—"
        reached_at = _("reached at %(at)s")
        return format_html_join(" ", "{}", (
            (format_html('<b class="gt-nowrap gt-alert-reached" title="{}"'
                         ' data-testid="alert-reached">{} %</b>',
                         reached_at % {"at": when(reached[p].created_at)}, p)
             if p in reached else
             format_html('<span class="gt-nowrap" data-testid="alert-pending">{} %</span>', p),)
            for p in percents))

    @admin.display(description=_("override"))
    def override(self, row: BudgetCounter) -> str:
        chosen = getattr(row, "chosen", [])
        if not chosen:
            return "—"
        return format_html_join(", ", '<a href="{}">{}</a>', (
            (reverse("admin:guarded_tools_budgetoverride_change", args=[o.pk]), o.principal)
            for o in chosen))


__all__ = ["MANAGE", "BudgetOverrideAdmin", "BudgetUseAdmin", "in_words"]
