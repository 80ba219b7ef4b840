#!/usr/bin/env python3
"""An agent loop with toolgate in the middle: the model sees only the tool view toolgate gives
for this step, its tool call (OpenAI format) becomes a governed call, and the recorded result
goes back to the model. The "model" here is scripted (one tool call, then an answer) so the loop
runs without a provider; swap `scripted_model` for your SDK's chat call. Type-checked with
`mypy --strict`.

    python3 examples/agent_loop.py --server 127.0.0.1:7070 --token $TOOLGATE_TOKEN
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from toolgate import Call, Client, ToolgateError

Message = dict[str, Any]


def scripted_model(messages: list[Message], tools: list[dict[str, Any]]) -> Message:
    """Asks for the serializer source through whatever name the view gave file.read."""
    if messages[-1]["role"] == "tool":
        return {"role": "assistant", "content": "formatDate uses toISOString; the test expects local time."}
    name = next(t["function"]["name"] for t in tools if t["function"]["name"].startswith("file__read"))
    return {
        "role": "assistant",
        "tool_calls": [{"id": "t1", "type": "function",
                        "function": {"name": name, "arguments": json.dumps({"path": "src/serializer.ts"})}}],
    }


def result_for_the_model(call: Call) -> str:
    """The preview of a call that succeeded; otherwise its phase and why."""
    if call.phase == "Succeeded":
        return call.output_preview
    if call.waiting_for_approval:
        return f"waiting for a person to approve call {call.id}"
    return f"{call.phase}: " + "; ".join(f"{r.code}: {r.message}" for r in call.reasons)


def run(tg: Client, task: str) -> list[Message]:
    """One step of the loop: view, model, governed calls, results back to the model."""
    messages: list[Message] = [{"role": "user", "content": task}]
    view = tg.view(task, format="openai", max_tools=6)
    reply = scripted_model(messages, view.tools)
    messages.append(reply)
    for tc in reply.get("tool_calls", []):
        # The provider name the model used maps back to the tool and the digest it was shown.
        tool = view.tool(tc["function"]["name"])
        if tool is None:
            content = f"no such tool in this view: {tc['function']['name']}"
        else:
            try:
                call = tg.propose(tool.name, json.loads(tc["function"]["arguments"]),
                                  task=task, tool_digest=tool.digest)
                content = result_for_the_model(tg.wait(call, timeout=60))
            except ToolgateError as e:
                content = f"refused: {e}"
        messages.append({"role": "tool", "tool_call_id": tc["id"], "content": content})
    return messages


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--server", default="127.0.0.1:7070")
    p.add_argument("--token", required=True)
    a = p.parse_args()
    with Client(a.server, token=a.token) as tg:
        print(json.dumps(run(tg, "find why the serializer test fails")))


if __name__ == "__main__":
    main()
