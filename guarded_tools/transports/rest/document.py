"""Provides ``GET openapi.json``: the OpenAPI 3.1 document of the tools this caller may call.

Apart from the other REST views because the document describes them: it is built from
the REST URL patterns (:mod:`guarded_tools.transports.rest.urls`), which import those
views, so this view sits above them. drf-spectacular is optional: it is imported only
when the document is asked for, and without it the answer says what to install.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from guarded_tools.core.errors import GuardError
from guarded_tools.transports.rest.base import GuardedAPIView, visible_tools

#: What to install for the document (the ``openapi`` extra, as the docs page says).
INSTALL = 'pip install "guarded-tools[openapi]"'


def not_installed() -> GuardError:
    """``501``: this site serves no OpenAPI document until drf-spectacular is installed."""
    return GuardError(
        "This site serves no OpenAPI document: it is built by drf-spectacular, which is not"
        f" installed. The site's operators install it with: {INSTALL}.",
        code="openapi_not_installed", status=501, retry="never",
        why="The OpenAPI document is an optional part of the site, made by drf-spectacular;"
        " the tools themselves work without it.",
        fix=f"Read each tool's input schema from GET tools/ instead; a person can install the"
        f" document with {INSTALL} (and add \"drf_spectacular\" to INSTALLED_APPS).",
    )


class OpenAPIView(GuardedAPIView):
    """The OpenAPI 3.1 document of the tools this caller may call (needs drf-spectacular,
    the ``openapi`` extra: ``501`` saying so without it). The document's views carry
    drf-spectacular's schema class themselves, whatever ``DEFAULT_SCHEMA_CLASS`` says."""

    throttle_classes: list[Any] = []

    def get(self, request: Request) -> Response:
        if find_spec("drf_spectacular") is None:
            raise not_installed()
        from guarded_tools.transports.rest.openapi import build_document

        return Response(build_document(request, visible_tools(request.user)))


