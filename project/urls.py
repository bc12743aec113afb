"""URLs of the demo site: the admin, the agent endpoints and the OpenAPI document."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import TemplateView

urlpatterns = [
    path("", TemplateView.as_view(template_name="home.html"), name="home"),
    path("admin/", admin.site.urls),
    path("agent/", include("guarded_tools.urls")),
]
