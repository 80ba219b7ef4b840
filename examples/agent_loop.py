#!/usr/bin/env python3
"""An agent loop with toolgate in the middle: the model sees only the tool view toolgate gives
for this step, its tool call (OpenAI format) becomes a governed call, and the recorded result
goes back to the model. The "model" here is scripted (one tool call, then an answer) so the loop
runs without a provider; swap `scripted_model` for your SDK's chat call.

    python3 examples/agent_loop.py --server 127.0.0.1:7070 --token $TOOLGATE_TOKEN
"""

import argparse
import json

from toolgate import Client


def scripted_model(messages, tools):
    """Asks for the serializer source through whatever name the view gave file.read."""
    if messages[-1]["role"] == "tool":
        return {"role": "assistant", "content": "formatDate uses toISOString; the test expects local time."}
    name = next(t["function"]["name"] for t in tools if t["function"]["name"].startswith("file__read"))
    return {
        "role": "assistant",
        "tool_calls": [{"id": "t1", "type": "function",
                        "function": {"name": name, "arguments": json.dumps({"path": "src/serializer.ts"})}}],
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server", default="127.0.0.1:7070")
    p.add_argument("--token", required=True)
    a = p.parse_args()
    tg = Client(a.server, token=a.token)
    task = "find why the serializer test fails"
    messages = [{"role": "user", "content": task}]
    view = tg.view(task, format="openai", max_tools=6)
    reply = scripted_model(messages, view.tools)
    messages.append(reply)
    for tc in reply.get("tool_calls", []):
        # The provider name maps back to the tool (dots become "__").
        tool = tc["function"]["name"].replace("__", ".")
        call = tg.propose(tool, json.loads(tc["function"]["arguments"]), action_type="read", task=task)
        done = tg.wait(call.id)
        content = done.output_preview if done.phase == "Succeeded" else f"{done.phase}: {done.reasons}"
        messages.append({"role": "tool", "tool_call_id": tc["id"], "content": content})
    print(json.dumps(messages))


if __name__ == "__main__":
    main()
