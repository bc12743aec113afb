# mcp_client.py: call the site's tools from Python with the official MCP client
# (pip install "mcp>=2"). Give it the agent's token (python manage.py drf_create_token agent):
#   GT_TOKEN=<token> python mcp_client.py [operationId]
# The first run asks for approval; approve the request in the admin, run it again with the
# same operationId, and the call runs once.
import os
import sys

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL = os.environ.get("GT_MCP_URL", "http://127.0.0.1:8000/agent/mcp/")
TOKEN = os.environ["GT_TOKEN"]


async def main(operation_id: str) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Token {TOKEN}"}, timeout=30)
    async with Client(streamable_http_client(URL, http_client=http)) as client:
        listed = await client.list_tools()
        print("tools:", ", ".join(t.name for t in listed.tools))

        users = await client.call_tool("list_users", {})
        print("list_users:", users.structured_content)

        result = await client.call_tool(
            "deactivate_user", {"operationId": operation_id, "username": "olduser"})
        # A call waiting for approval is an error result whose text says what to do next.
        print("deactivate_user:", "waiting" if result.is_error else "done")
        print(result.content[0].text if result.is_error else result.structured_content)


anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else "mcp-deactivate-1")
