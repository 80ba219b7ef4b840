"""Start the MCP server an MCP client's configuration file names, the way the client does (its
command, args and env), with the official Python SDK's stdio client; print the tools it lists.

    python mcp_config_client.py CONFIG.json SERVER_NAME
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    with open(sys.argv[1]) as f:
        config = json.load(f)
    servers = config.get("mcpServers") or config.get("servers")
    entry = servers[sys.argv[2]]
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=entry.get("env"))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            print(json.dumps(sorted(t.name for t in listed.tools)))


asyncio.run(main())
