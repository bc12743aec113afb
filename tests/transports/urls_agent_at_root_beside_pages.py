"""A site that mounts the agent endpoints at its root after a catch-all of its own pages
(any other path ending in a slash is one of its pages, as a CMS routes them)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import include, path, re_path

AGENT_PATHS = r"(?:tools|operations|confirmations|mcp|docs|errors)(?:/|$)"


def page(request: HttpRequest, slug: str) -> HttpResponse:
    return HttpResponse(f"page {slug}")


urlpatterns = [
    re_path(rf"^(?!{AGENT_PATHS})(?P<slug>.+)/$", page),
    path("", include("guarded_tools.urls")),
]
