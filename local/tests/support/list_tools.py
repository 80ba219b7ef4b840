"""A reviewer's view of an MCP server's tools: `initialize` and every page of `tools/list` with
the official Python SDK, printed as `{"serverInfo": {...}, "tools": [...]}` (what `toolgate mcp
normalize` reads; the server's version goes into each descriptor's, as discovery does).

usage: list_tools.py URL               (streamable HTTP; bearer in MCP_BEARER, if any)
       list_tools.py -- COMMAND ARGS…  (stdio)
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def transport():
    if sys.argv[1] == "--":
        return stdio_client(StdioServerParameters(command=sys.argv[2], args=sys.argv[3:]))
    bearer = os.environ.get("MCP_BEARER")
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    return streamable_http_client(sys.argv[1], http_client=create_mcp_http_client(headers=headers))


async def main():
    async with transport() as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            init = await session.initialize()
            tools, cursor = [], None
            while True:
                page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
                tools.extend(t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in page.tools)
                cursor = page.next_cursor if hasattr(page, "next_cursor") else page.nextCursor
                if not cursor:
                    break
    info = init.server_info if hasattr(init, "server_info") else init.serverInfo
    print(json.dumps({"serverInfo": {"name": info.name, "version": info.version}, "tools": tools}))


asyncio.run(main())
