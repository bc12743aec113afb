"""URLs of the benchmark site: the unguarded views, the guarded tools, the admin."""

from django.contrib import admin
from django.urls import include, path

from bench import floor, views

urlpatterns = [
    path("ping/", views.ping),
    path("plain/", views.PlainInsertView.as_view()),
    path("floor/", views.FloorInsertView.as_view()),
    path("floor-full/", views.FloorFullView.as_view()),
    path("floor-replay/", views.FloorReplayView.as_view()),
    path("floor-remote/", views.FloorRemoteView.as_view()),
    path("plain-remote/", views.PlainRemoteView.as_view()),
    path("idempotency-key/", views.idempotent_db),
    path("idempotency-key-mem/", views.idempotent_mem),
    # F-K: under the MCP endpoint's path, so that the app's ASGI entry serves it as MCP
    path("agent/mcp/floor/", floor.keyed_mcp_floor),
    # F-M: the read-only call's floor, under the same path for the same reason
    path("agent/mcp/floor/read/", floor.read_mcp_floor),
    path("agent/", include("guarded_tools.urls")),
    path("admin/", admin.site.urls),
]
