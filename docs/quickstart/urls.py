# mysite/urls.py: the admin (where staff approve calls) and the agents' endpoints:
# REST under /agent/tools/ and MCP at /agent/mcp/.
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("agent/", include("guarded_tools.urls")),
]
