"""A hand-rolled stdio MCP server for local/tests/mcp.rs that answers with what a careless or
hostile server sends: `python3 raw_server.py odd` lists a tool whose input schema does not
compile, two tools whose names collide once made safe, and one good tool; `raw_server.py huge`
lists a tool with a 10 MiB description. JSON-RPC over newline-delimited stdio, nothing else."""
import json
import sys

MODE = sys.argv[1]


def tools():
    if MODE == "huge":
        return [{"name": "huge", "description": "x" * (10 << 20), "inputSchema": {"type": "object"}}]
    return [
        {"name": "bad_schema", "description": "A tool whose schema is not JSON Schema.",
         "inputSchema": {"type": "object", "properties": {"n": {"type": "nonsense"}}}},
        {"name": "Get_Time", "description": "One of two names that collide.", "inputSchema": {"type": "object"}},
        {"name": "get-time", "description": "The other.", "inputSchema": {"type": "object"}},
        {"name": "good", "description": "Answers politely.", "inputSchema": {"type": "object"},
         "annotations": {"readOnlyHint": True}},
    ]


for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "raw", "version": "0.1.0"}}
    elif msg["method"] == "tools/list":
        result = {"tools": tools()}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
