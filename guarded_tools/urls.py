"""Provides the URLs to mount with ``path("agent/", include("guarded_tools.urls"))``."""

from django.urls import path

from guarded_tools import views

app_name = "guarded_tools"

urlpatterns = [
    path("tools/", views.ToolListView.as_view(), name="tool-list"),
    path("tools/<str:name>/", views.ToolCallView.as_view(), name="tool-call"),
    path("operations/<uuid:pk>/", views.OperationDetailView.as_view(), name="operation-detail"),
    path("errors.json", views.ErrorCatalogView.as_view(), name="errors-json"),
    path("llms.txt", views.LlmsTxtView.as_view(), name="llms-txt"),
]
