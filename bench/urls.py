"""URLs of the benchmark site: the unguarded views, the guarded tools, the admin."""

from django.contrib import admin
from django.urls import include, path

from bench import floor, views

urlpatterns = [
    path("ping/", views.ping),
    # The floors F-K (the keyed call's) and F-M (the read-only call's): under the MCP
    # endpoint's path, so that the app's ASGI entry serves them as it serves MCP, and
    # through an include, as a site mounts the app's URLs, so that URL resolution costs
    # them what it costs the calls they stand beside.
    path("agent/mcp/floor/", include([
        path("", floor.keyed_mcp_floor),
        path("read/", floor.read_mcp_floor),
        path("features/", floor.keyed_features_floor),  # F-K+ (bench.frame)
    ])),
    path("agent/", include("guarded_tools.urls")),
    path("admin/", admin.site.urls),
    # Every view a guarded call is compared with (A, the floors, the references), at its
    # own path but through an include, as the guarded calls are (a site mounts the app's
    # URLs with one): resolving a path through an include costs Django about 6 µs more
    # than a top-level pattern, which is no part of the guard. Last, so that no guarded
    # call tries them first.
    path("", include([
        path("plain/", views.PlainInsertView.as_view()),
        path("floor/", views.FloorInsertView.as_view()),
        path("floor-full/", views.FloorFullView.as_view()),
        path("floor-replay/", views.FloorReplayView.as_view()),
        path("floor-remote/", views.FloorRemoteView.as_view()),
        path("plain-remote/", views.PlainRemoteView.as_view()),
        path("idempotency-key/", views.idempotent_db),
        path("idempotency-key-mem/", views.idempotent_mem),
    ])),
]
