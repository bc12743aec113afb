"""URLs of the demo site: the admin, the agent endpoints, the OpenAPI document, the order API."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import TemplateView
from rest_framework.routers import DefaultRouter

from project.demo.api import OrderViewSet

router = DefaultRouter()
router.register("orders", OrderViewSet, basename="order")  # the site's API, as before agents

urlpatterns = [
    path("", TemplateView.as_view(template_name="home.html"), name="home"),
    path("admin/", admin.site.urls),
    path("agent/", include("guarded_tools.urls")),
    path("api/", include(router.urls)),
]
