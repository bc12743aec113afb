"""Provides what every list of the console shares: read-only rows, safe lookups, filters."""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import (
    ERROR_FLAG,
    IGNORED_PARAMS,
    PAGE_VAR,
    SEARCH_VAR,
    ChangeList,
)
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from guarded_tools.console.formatting import when
from guarded_tools.core.registry import registry
from guarded_tools.store.counting import EstimatingPaginator


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
    # An empty cell reads as the console's own placeholder, as its columns write it.
    empty_value_display = "—"

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


def stacked_time(value: Any) -> str:
    """A list cell's time: the date over the time to the second, so columns stay narrow."""
    day, _sep, rest = when(value).partition(" ")
    return format_html('<span class="gt-time">{}<br>{}</span>', day, rest)
