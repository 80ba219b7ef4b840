"""A toolgate view as tools of the OpenAI Agents SDK (``pip install toolgate[openai-agents]``).

Why this framework: its ``FunctionTool`` is a name, a description, a JSON Schema and an async
function of the model's JSON arguments — exactly what a view in the ``openai-responses`` format
holds and what :class:`toolgate.AsyncClient` does with a call, so nothing is translated (no
schema rebuilt as Python types, no argument re-validated outside toolgate). Each tool call the
model makes becomes a governed toolgate call: proposed with the view's pinned digest, decided
by policy, run in its sandbox; the model reads the redacted preview, or why it did not run.

.. code-block:: python

    from agents import Agent, Runner
    from toolgate import AsyncClient
    from toolgate.openai_agents import function_tools

    async with AsyncClient(server, token=token) as tg:
        tools = await function_tools(tg, "fix the failing serializer test")
        agent = Agent(name="fixer", instructions="…", tools=tools)
        result = await Runner.run(agent, "The serializer test fails; fix it.")
"""

from __future__ import annotations

import json
from typing import Any, Optional

from agents import FunctionTool
from agents.tool_context import ToolContext

from .aio import AsyncClient
from .errors import ToolgateError, WaitTimeout
from .types import Call, ExposedTool, Phase


def outcome_text(call: Call) -> str:
    """What the model reads of a call: its preview when it succeeded, else why it did not."""
    if call.phase is Phase.SUCCEEDED:
        return call.output_preview
    if call.waiting_for_approval:
        return (
            f"call {call.id} waits for a person's approval; it runs once a reviewer approves it "
            f"(toolgate approve {call.id}). Do not retry it."
        )
    why = "; ".join(f"{r.code}: {r.message}" for r in call.reasons if r.code)
    ended = call.condition("StateUpdated")
    detail = why or (ended.message if ended else "")
    preview = f"\n{call.output_preview}" if call.output_preview else ""
    return f"call {call.id} {call.phase.value.lower()}: {detail}{preview}"


async def function_tools(
    client: AsyncClient,
    intent: str,
    *,
    task: Optional[str] = None,
    max_tools: int = 8,
    namespace: str = "",
    wait_timeout: Optional[float] = 300.0,
) -> list[FunctionTool]:
    """The tools of the caller's view for ``intent`` as Agents SDK ``FunctionTool`` objects.

    A tool's invocation proposes a call (``task`` as its intent, the intent by default), follows
    it to its end for at most ``wait_timeout`` seconds and returns :func:`outcome_text`; a
    refusal (bad args, no grant) is returned as text for the model to read, not raised. A call
    that needs a person returns at once, saying so."""
    view = await client.view(
        intent, format="openai-responses", max_tools=max_tools, namespace=namespace
    )
    tools = []
    for payload in view.tools:
        exposed = view.tool(payload["name"])
        if exposed is None:
            continue
        tools.append(
            FunctionTool(
                name=payload["name"],
                description=payload.get("description", ""),
                params_json_schema=payload.get("parameters", {"type": "object"}),
                on_invoke_tool=_invoker(client, exposed, task or intent, namespace, wait_timeout),
                # toolgate validates the args against the tool's own schema, which need not
                # meet OpenAI's strict-mode rules.
                strict_json_schema=bool(payload.get("strict", False)),
            )
        )
    return tools


def _invoker(
    client: AsyncClient,
    exposed: ExposedTool,
    task: str,
    namespace: str,
    wait_timeout: Optional[float],
) -> Any:
    async def invoke(ctx: ToolContext[Any], args_json: str) -> str:
        try:
            args = json.loads(args_json or "{}")
            if not isinstance(args, dict):
                return f"refused: the arguments must be a JSON object, got {type(args).__name__}"
            call = await client.propose(
                exposed.name,
                args,
                task=task,
                tool_digest=exposed.digest,
                namespace=namespace,
            )
            if call.done or call.waiting_for_approval:
                return outcome_text(call)
            return outcome_text(await client.wait(call, timeout=wait_timeout))
        except json.JSONDecodeError as e:
            return f"refused: the arguments are not JSON ({e})"
        except WaitTimeout as e:
            return f"the call did not end within {e.timeout:g} s; it goes on (id {e.call.id})"
        except ToolgateError as e:
            return f"refused: {e}"

    return invoke
