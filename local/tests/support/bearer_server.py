"""An MCP server on streamable HTTP (the official Python SDK) that wants a bearer token, for
local/tests/mcp.rs: every request without `Authorization: Bearer $EXPECTED_BEARER` gets 401, so
discovery and calls work only if toolgate sends the brokered credential. Its one tool says the
caller was authorized (never the token).

usage: bearer_server.py PORT   (token in EXPECTED_BEARER)
"""
import os
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from starlette.responses import JSONResponse

server = MCPServer("vault-backed", version="1.0.0")


@server.tool(
    name="whoami",
    description="Say whether the caller presented the expected credential.",
    annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False),
)
def whoami() -> str:
    return "authorized by bearer"


app = server.streamable_http_app()
expected = f"Bearer {os.environ['EXPECTED_BEARER']}".encode()


class RequireBearer:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
            return
        await self.inner(scope, receive, send)


uvicorn.run(RequireBearer(app), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
