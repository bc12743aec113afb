"""Provides the REST routes: the tool list and calls, an operation's status, the catalog.

Also what the OpenAPI document describes (:mod:`guarded_tools.transports.rest.openapi`);
the app's URLconf (``guarded_tools.urls``) mounts them with MCP's and the console's.
"""

from django.urls import URLPattern, path

from guarded_tools.transports.rest import views

rest_urlpatterns: list[URLPattern] = [
    path("tools/", views.ToolListView.as_view(), name="tool-list"),
    path("tools/<str:name>/", views.ToolCallView.as_view(), name="tool-call"),
    path("operations/<uuid:pk>/", views.OperationDetailView.as_view(), name="operation-detail"),
    path("errors.json", views.ErrorCatalogView.as_view(), name="errors-json"),
    path("llms.txt", views.LlmsTxtView.as_view(), name="llms-txt"),
]
