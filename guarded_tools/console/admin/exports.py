"""Provides the Export buttons of the audit trail, operations and confirmations lists.

``…/export.csv`` and ``…/export.jsonl`` beside a list export what the list shows with the
same query string: its filters and its search (every row they match, not one page). They
need the list's view permission and ``guarded_tools.export_records``; each export writes
an audit entry before its first row and says how many rows it sent at its end.
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    StreamingHttpResponse,
)
from django.http.response import HttpResponseBase
from django.urls import path, reverse

from guarded_tools.console import export


class ExportMixin:
    """Adds the export URLs and buttons to a ``ModelAdmin`` of an exported model."""

    def has_export_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(export.EXPORT_PERMISSION)) and bool(
            self.has_view_permission(request))  # type: ignore[attr-defined]

    def get_urls(self) -> list[Any]:
        opts = self.model._meta  # type: ignore[attr-defined]
        view = self.admin_site.admin_view(self.export_view)  # type: ignore[attr-defined]
        return [path("export.<str:fmt>", view,
                     name=f"{opts.app_label}_{opts.model_name}_export"),
                *super().get_urls()]  # type: ignore[misc]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if self.has_export_permission(request):
            opts = self.model._meta  # type: ignore[attr-defined]
            query = request.GET.urlencode()
            extra_context = {**(extra_context or {}), "gt_exports": [
                (label, reverse(f"admin:{opts.app_label}_{opts.model_name}_export",
                                args=[fmt]) + (f"?{query}" if query else ""))
                for fmt, label in (("csv", "CSV"), ("jsonl", "JSON Lines"))]}
        return super().changelist_view(request, extra_context)  # type: ignore[misc, no-any-return]

    def export_view(self, request: HttpRequest, fmt: str) -> HttpResponseBase:
        if not self.has_export_permission(request):
            raise PermissionDenied
        if fmt not in export.FORMATS:
            raise PermissionDenied  # no such export: nothing is said about the rows
        kind = export.kind_of(self.model)  # type: ignore[attr-defined]
        try:
            changelist = self.get_changelist_instance(request)  # type: ignore[attr-defined]
        except IncorrectLookupParameters:
            return HttpResponseBadRequest("A filter of this export is not one the list has.")
        entry = export.audited(request.user, kind, fmt, request.GET.urlencode(), "admin")
        running = export.Export(kind, changelist.queryset, fmt, entry)
        content: Any = running.achunks() if isinstance(request, ASGIRequest) \
            else running.chunks()
        response = StreamingHttpResponse(content, content_type=export.FORMATS[fmt])
        response["Content-Disposition"] = f'attachment; filename="{export.filename(kind, fmt)}"'
        response["Cache-Control"] = "no-store"
        return response


__all__ = ["ExportMixin"]
