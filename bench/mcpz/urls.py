"""The django-mcpz peer's one URL: its ``MCPServer`` with ``echo(value: int)`` at ``/mcp/``.

Anonymous (``django_mcpz.server.public``, as the app's read-only ``echo`` allows anonymous
callers). django-mcpz decodes the arguments into ``EchoParams`` with msgspec (an int, no
unknown field) and encodes the returned ``Echo`` once, as the text content and as
``structuredContent``; it does not validate the output against the schema it declares.
"""

from __future__ import annotations

import msgspec
from django.http import HttpRequest
from django.urls import path
from django_mcpz.server import MCPServer, public

server = MCPServer(name="bench-mcpz", version="1.0.0", auth=public)


class EchoParams(msgspec.Struct):
    value: int


class Echo(msgspec.Struct):
    value: int


@server.tool(description="Return the value.", read_only=True)
def echo(request: HttpRequest, params: EchoParams) -> Echo:
    return Echo(value=params.value)


urlpatterns = [path("mcp/", server)]
