"""URLs of the demo site: admin, agent endpoints, the order API, /metrics and the OAuth server."""

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import TemplateView
from rest_framework.routers import DefaultRouter

from project.demo.api import OrderViewSet

router = DefaultRouter()
router.register("orders", OrderViewSet, basename="order")  # the site's API, as before agents

urlpatterns = [
    path("", TemplateView.as_view(template_name="home.html"), name="home"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("agent/", include("guarded_tools.urls")),
    path("api/", include(router.urls)),
]

if settings.OAUTH_INSTALLED:
    from oauth2_provider import urls as oauth2_urls

    urlpatterns = [
        # RFC 8414 and RFC 9728 metadata at the site's root, where clients look for them
        # (/.well-known/oauth-protected-resource/agent/mcp names the MCP resource).
        path("", include((oauth2_urls.metadata_urlpatterns, "oauth2_provider_root"))),
        path("o/", include(oauth2_urls)),
        *urlpatterns,
    ]

if settings.TELEMETRY_INSTALLED:
    from project import telemetry

    telemetry.configure()  # before the first call: URLs load before any view runs
    urlpatterns.append(path("metrics", telemetry.metrics_view, name="metrics"))
