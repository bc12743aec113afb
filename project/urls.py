"""URLs of the demo site: the admin, the agent endpoints, the OpenAPI document and /metrics."""

from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from django.views.generic import TemplateView

urlpatterns = [
    path("", TemplateView.as_view(template_name="home.html"), name="home"),
    path("admin/", admin.site.urls),
    path("agent/", include("guarded_tools.urls")),
]

if settings.TELEMETRY_INSTALLED:
    from project import telemetry

    telemetry.configure()  # before the first call: URLs load before any view runs
    urlpatterns.append(path("metrics", telemetry.metrics_view, name="metrics"))
