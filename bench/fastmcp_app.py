"""A peer of the benchmarks: FastMCP 4 serving ``echo(value: int)`` (``bench/peer.py``).

``app`` is FastMCP's Streamable HTTP application, stateless with JSON responses (one
POST per ``tools/call``, as the app's MCP endpoint answers), for uvicorn
(``uvicorn bench.fastmcp_app:app``) and for gunicorn with uvicorn workers (it is an
ASGI application). The tool as FastMCP ships it: pydantic validates the arguments
against the schema derived from ``value: int``; the result, typed ``-> Echo``, is sent
as ``structuredContent`` (and as text) without being validated against the output
schema derived from it; the synchronous function runs in a worker thread
(``run_in_thread``, on by default). Anonymous, no middleware, nothing kept.
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


app = mcp.http_app(path="/mcp/", stateless_http=True, json_response=True)
