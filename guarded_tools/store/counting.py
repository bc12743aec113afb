"""Provides the console's row counts: exact up to a bound, PostgreSQL's estimate past it.

Counting a million rows reads a million rows (about 80 ms on PostgreSQL, whatever the
indexes); counting up to ``CONSOLE_COUNT_EXACTLY_UP_TO`` reads at most that many. Past
the bound PostgreSQL's planner says how many rows the query would return (its row
estimate, from the statistics ``ANALYZE`` keeps), which is shown as "about …", never as
an exact number. Other databases have no such estimate: their lists count exactly and
their tiles say "more than …".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.paginator import Page, Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.formats import number_format
from django.utils.functional import cached_property
from django.utils.translation import gettext as _

from guarded_tools.conf import gt_settings
from guarded_tools.store.backends import features, ops

__all__ = ["EstimatingPaginator"]


@dataclass(frozen=True)
class RowCount:
    """How many rows: ``n`` itself when ``exact``; else at least ``n`` ("more than"),
    or about ``n`` when ``estimated`` (PostgreSQL's planner)."""

    n: int
    exact: bool = True
    estimated: bool = False

    def __bool__(self) -> bool:
        return self.n > 0

    def __str__(self) -> str:
        if self.exact:
            return number_format(self.n, force_grouping=True)
        if self.estimated:
            return _("about %(n)s") % {"n": number_format(rounded(self.n), force_grouping=True)}
        return _("more than %(n)s") % {"n": number_format(self.n - 1, force_grouping=True)}


def rounded(n: int) -> int:
    """``n`` to two significant digits (an estimate claims no more): 966,781 → 970,000."""
    digits = len(str(n)) - 2
    return round(n, -digits) if digits > 0 else n


def estimate(queryset: QuerySet[Any]) -> int | None:
    """The planner's estimate of the rows ``queryset`` returns (PostgreSQL's: one
    ``EXPLAIN``, which plans the query and runs nothing); None where the database's
    store features say it has none (``estimates_rows``)."""
    return ops(connections[queryset.db]).estimate_rows(queryset)  # type: ignore[no-any-return]


def count_up_to(queryset: QuerySet[Any], limit: int | None = None) -> RowCount:
    """The rows of ``queryset``, counted exactly up to ``limit`` (by default
    ``CONSOLE_COUNT_EXACTLY_UP_TO``) and estimated past it; "more than ``limit``"
    where there is no estimate or it is no more than ``limit`` (a search the planner
    cannot judge: the count has just proved it wrong).

    The same queries at any size (a count over at most ``limit + 1`` rows, and on
    PostgreSQL the estimate, asked for even when the count stays under the bound).
    """
    limit = gt_settings.CONSOLE_COUNT_EXACTLY_UP_TO if limit is None else limit
    if queryset.query.is_empty():
        return RowCount(0)
    seen = queryset.order_by()[: limit + 1].count()
    guess = estimate(queryset)
    if seen <= limit:
        return RowCount(seen)
    if guess is None or guess <= limit:  # no estimate, or one the count just disproved
        return RowCount(limit + 1, exact=False)
    return RowCount(guess, exact=False, estimated=True)


class EstimatingPaginator(Paginator):
    """Django's paginator whose count is exact up to ``CONSOLE_COUNT_EXACTLY_UP_TO``
    rows and, past it on PostgreSQL, the planner's estimate (``row_count`` says which).

    An estimate can miss the last rows or promise more: the last page is read from
    the other end of the order (the oldest rows, not an ``OFFSET`` over all the others),
    and so is a page the estimate put past the end. Other databases count exactly.
    """

    @cached_property
    def row_count(self) -> RowCount:
        items = self.object_list
        if isinstance(items, QuerySet) and features(connections[items.db]).estimates_rows:
            return count_up_to(items)
        return RowCount(super().count)

    @property
    def count(self) -> int:  # type: ignore[override]
        return self.row_count.n

    def page(self, number: Any) -> Page:
        number = self.validate_number(number)
        items = self.object_list
        if self.row_count.exact or number == 1 or not (isinstance(items, QuerySet)
                                                       and items.ordered):
            return super().page(number)
        if number < self.num_pages:
            bottom = (number - 1) * self.per_page
            rows = list(items[bottom: bottom + self.per_page])
            if rows:
                return Page(rows, number, self)
        last = list(items.reverse()[: self.per_page])
        return Page(last[::-1], number, self)


class CountedInWords:
    """A changelist as the admin's own templates read it, with ``result_count`` in
    words ("about 1,000,000"), so they never show an estimate as an exact number."""

    def __init__(self, changelist: Any, count: RowCount) -> None:
        self._changelist = changelist
        self.result_count = str(count)
        self.selection_note_all = _("All selected (%(total_count)s)") % {
            "total_count": self.result_count}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._changelist, name)


def in_words(changelist: Any) -> Any:
    """``changelist`` itself when its count is exact, else a ``CountedInWords``."""
    count = getattr(getattr(changelist, "paginator", None), "row_count", None)
    if count is None or count.exact:
        return changelist
    return CountedInWords(changelist, count)
