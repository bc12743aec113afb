"""A site that mounts the agent endpoints at its root, beside an upload view of its own."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import include, path


def upload(request: HttpRequest) -> HttpResponse:
    return HttpResponse(str(len(request.body)))


urlpatterns = [
    path("upload/", upload),
    path("", include("guarded_tools.urls")),
]
