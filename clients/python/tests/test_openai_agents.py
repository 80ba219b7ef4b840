"""The OpenAI Agents SDK adapter: a view's tools as the SDK's FunctionTool objects, invoked as the
SDK invokes them (its ToolContext, the model's JSON arguments), against a real `toolgate local`.
No model is called: the invocation is what a model's tool call leads to."""

import asyncio
import json

import pytest

agents = pytest.importorskip("agents")

from agents import FunctionTool  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402

from toolgate import AsyncClient  # noqa: E402
from toolgate.openai_agents import function_tools  # noqa: E402

from conftest import AGENT  # noqa: E402


def invoke(tool, args):
    ctx = ToolContext(context=None, tool_name=tool.name, tool_call_id="call-1",
                      tool_arguments=json.dumps(args))
    return tool.on_invoke_tool(ctx, json.dumps(args))


def test_a_view_becomes_function_tools_whose_calls_are_governed(server):
    async def flow():
        async with AsyncClient(server, token=AGENT) as tg:
            tools = await function_tools(tg, "read the serializer source file", max_tools=4)
            assert tools and all(isinstance(t, FunctionTool) for t in tools)
            by_name = {t.name: t for t in tools}
            read = by_name["file__read"]
            assert read.params_json_schema["properties"]["path"]["type"] == "string"
            assert read.description
            said = await invoke(read, {"path": "src/serializer.ts"})
            assert "formatDate" in said
            # Refusals come back as text for the model, not as exceptions.
            refused = await invoke(read, {"path": "../outside"})
            assert refused.startswith("refused: ") or "denied" in refused, refused
            gated = await function_tools(tg, "echo a message after approval", max_tools=16)
            echo = {t.name: t for t in gated}.get("test__gated")
            assert echo is not None, [t.name for t in gated]
            waits = await invoke(echo, {"msg": "hello"})
            assert "waits for a person's approval" in waits, waits
            # The call is there for a reviewer, pinned to the digest the model was shown.
            pending = [c async for c in tg.calls(tool="test.gated", phase="AwaitingApproval")]
            assert pending

    asyncio.run(flow())
