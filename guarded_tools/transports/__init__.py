"""How agents reach a call: REST, MCP (with MCP Tasks), ASGI cancellation."""
