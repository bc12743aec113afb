"""Provides ``GET openapi.json``: the OpenAPI 3.1 document of the tools this caller may call.

Apart from the other REST views because the document describes them: it is built from
the REST URL patterns (:mod:`guarded_tools.transports.rest.urls`), which import those
views, so this view sits above them. drf-spectacular is optional: it is imported only
when the document is asked for.
"""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from guarded_tools.transports.rest.base import GuardedAPIView, visible_tools


class OpenAPIView(GuardedAPIView):
    """The OpenAPI 3.1 document of the tools this caller may call (needs drf-spectacular)."""

    throttle_classes: list[Any] = []

    def get(self, request: Request) -> Response:
        from guarded_tools.transports.rest.openapi import build_document

        return Response(build_document(request, visible_tools(request.user)))


