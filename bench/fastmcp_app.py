"""The peer of the benchmarks: FastMCP serving ``echo(value: int)`` (``bench/peer.py``).

``app`` is FastMCP's Streamable HTTP application, stateless with JSON responses (one
POST per ``tools/call``, as the app's MCP endpoint answers), for uvicorn
(``uvicorn bench.fastmcp_app:app``) and for gunicorn with uvicorn workers (it is an
ASGI application). Two tools: ``echo``, whose output FastMCP validates against the
schema it derives from ``-> Echo`` (as shipped), and ``echo_raw`` with
``output_schema=None`` (no output validation), beside the app's ``echo`` and
``echo_raw`` (bench/tools.py) with the same schemas.
"""

from __future__ import annotations

from typing import TypedDict

from fastmcp import FastMCP


class Echo(TypedDict):
    value: int


mcp = FastMCP("bench-peer")


@mcp.tool
def echo(value: int) -> Echo:
    """Return the value."""
    return {"value": value}


@mcp.tool(output_schema=None)
def echo_raw(value: int) -> dict[str, int]:
    """Return the value (no output schema, so no output validation)."""
    return {"value": value}


app = mcp.http_app(path="/mcp/", stateless_http=True, json_response=True)
