"""Provides the URLs to mount with ``path("agent/", include("guarded_tools.urls"))``."""

from django.urls import URLPattern, path, re_path

from guarded_tools.console import consent
from guarded_tools.transports.mcp import server as mcp
from guarded_tools.transports.rest import document, views
from guarded_tools.transports.rest import urls as rest_urls

app_name = "guarded_tools"

#: The REST routes, also what the OpenAPI document describes.
rest_urlpatterns = rest_urls.rest_urlpatterns

urlpatterns = [
    path("tools/", views.ToolListView.as_view(), name="tool-list"),
    path("tools/<str:name>/", views.ToolCallView.as_view(), name="tool-call"),
    path("operations/<uuid:pk>/", views.OperationDetailView.as_view(), name="operation-detail"),
    path("errors.json", views.ErrorCatalogView.as_view(), name="errors-json"),
    path("llms.txt", views.LlmsTxtView.as_view(), name="llms-txt"),
]

urlpatterns = [
    # First: every MCP call comes to this one endpoint, so Django tries it first.
    path("mcp/", mcp.McpView.as_view(), name="mcp"),
    *rest_urlpatterns,
    path("openapi.json", document.OpenAPIView.as_view(), name="openapi"),
    path("docs/", views.SwaggerView.as_view(), name="docs"),
    path("errors/", views.ErrorsPageView.as_view(), name="errors-page"),
    # The Location of a confirmation_required answer: what the caller polls.
    path("confirmations/<uuid:pk>/", views.ConfirmationDetailView.as_view(),
         name="confirmation-detail"),
    # Where the user approves a confirm="owner" call themself, in their own session.
    path("confirmations/<uuid:pk>/consent/", consent.ConsentView.as_view(),
         name="confirmation-consent"),
    path("confirmations/<str:pk>/", views.ConfirmationDetailView.as_view()),
    # Any other id answers the JSON not-found error, not Django's HTML 404 (kept out of
    # ``rest_urlpatterns`` so that the OpenAPI document still says the id is a UUID).
    path("operations/<str:pk>/", views.OperationDetailView.as_view()),
]


def _other_spelling(pattern: URLPattern) -> URLPattern:
    """The same view without (or with) the trailing slash, unnamed: ``reverse`` gives one.

    Served, not redirected: a redirected POST loses its body, MCP clients do not follow
    it, and with ``DEBUG`` Django's ``APPEND_SLASH`` refuses a POST with an HTML 500.
    """
    route = str(pattern.pattern)
    other = route[:-1] if route.endswith("/") else f"{route}/"
    return path(other, pattern.callback)


urlpatterns += [_other_spelling(p) for p in urlpatterns if isinstance(p, URLPattern)]
# Last: every other path under the prefix answers the agents' JSON not-found error (a
# site mounting the app at its root puts this include after its own URLs).
urlpatterns.append(re_path(r"^", views.NotFoundView.as_view(), name="not-found"))
