"""A real MCP client (the official Python SDK) driving `toolgate mcp serve` over stdio — or,
with MCP_URL set, over streamable HTTP with the token as its bearer — for
local/tests/mcp_serve.rs. One JSON line per step on stdout; it waits for a line on stdin after
the call that needs a human, while the test approves it over gRPC.

usage: mcp_client.py TOOLGATE_BINARY SERVER_URL  (token in TOOLGATE_TOKEN)
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def say(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


def texts(result):
    return [c.text for c in result.content if getattr(c, "type", "") == "text"]


def is_error(result):
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", None))


def structured(result):
    value = getattr(result, "structured_content", None)
    return value if value is not None else getattr(result, "structuredContent", None)


def transport():
    url = os.environ.get("MCP_URL")
    if url:
        headers = {"Authorization": f"Bearer {os.environ['TOOLGATE_TOKEN']}"}
        return streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))
    params = StdioServerParameters(
        command=sys.argv[1],
        args=["mcp", "serve", "--server", sys.argv[2], "--intent", "echo a greeting message to the user", "--wait-seconds", "20"],
        env={"TOOLGATE_TOKEN": os.environ["TOOLGATE_TOKEN"], "PATH": os.environ.get("PATH", "")},
    )
    return stdio_client(params)


async def main():
    async with transport() as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            say("tools", names=[t.name for t in listed.tools],
                meta={t.name: (t.meta or {}) for t in listed.tools})
            echo = await session.call_tool("test.echo", {"msg": "hello over mcp"})
            say("echo", isError=is_error(echo), text=texts(echo))
            gated = await session.call_tool("test.gated", {"msg": "after a human said yes"})
            say("gated", isError=is_error(gated), state=structured(gated), text=texts(gated))
            sys.stdin.readline()  # the test approved the call
            got = None
            for _ in range(300):
                got = await session.call_tool("toolgate.get_call", {"callId": structured(gated)["callId"]})
                phase = (structured(got) or {}).get("phase")
                if phase not in ("AwaitingApproval", "Authorized", "Running"):
                    break
                await asyncio.sleep(0.1)
            say("approved", isError=is_error(got), text=texts(got))
            bad = await session.call_tool("test.echo", {"msg": 5})
            say("bad", isError=is_error(bad), text=texts(bad))
            unknown = await session.call_tool("no.such-tool", {})
            say("unknown", isError=is_error(unknown), text=texts(unknown))


asyncio.run(main())
