"""Tests of guarded_tools.transports: REST, MCP, ASGI, OAuth, the agent's errors."""
