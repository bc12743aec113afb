"""The MCP transport: the Streamable HTTP endpoint and the MCP Tasks extension."""
