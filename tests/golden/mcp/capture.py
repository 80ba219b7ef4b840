"""Capture what real MCP servers answer to tools/list (stdio) into tests/golden/mcp/*.json.

Install the servers first (any folder; set MCP_PREFIX to it):
  npm install @modelcontextprotocol/server-filesystem @modelcontextprotocol/server-memory \
    @modelcontextprotocol/server-everything @modelcontextprotocol/server-sequential-thinking \
    @playwright/mcp @modelcontextprotocol/server-postgres @modelcontextprotocol/server-slack \
    @modelcontextprotocol/server-brave-search @modelcontextprotocol/server-gitlab \
    @modelcontextprotocol/server-google-maps
  python3 -m venv venv && venv/bin/pip install mcp mcp-server-time mcp-server-fetch mcp-server-git
then: venv/bin/python capture.py [server...]
Credentials the servers ask for at start are placeholders: listing tools needs none.
"""
import asyncio, json, os, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

PREFIX = os.environ.get("MCP_PREFIX", ".")
B = os.path.join(PREFIX, "node_modules/.bin/")
V = os.path.join(PREFIX, "venv/bin/")
OUT = os.path.dirname(os.path.abspath(__file__))
SERVERS = {
    "filesystem": ([B + "mcp-server-filesystem", "/tmp"], {}),
    "memory": ([B + "mcp-server-memory"], {}),
    "everything": ([B + "mcp-server-everything"], {}),
    "sequential-thinking": ([B + "mcp-server-sequential-thinking"], {}),
    "playwright": ([B + "playwright-mcp", "--headless"], {}),
    "postgres": ([B + "mcp-server-postgres", "postgresql://127.0.0.1:1/db"], {}),
    "slack": ([B + "mcp-server-slack"], {"SLACK_BOT_TOKEN": "xoxb-unused", "SLACK_TEAM_ID": "T0"}),
    "brave-search": ([B + "mcp-server-brave-search"], {"BRAVE_API_KEY": "unused"}),
    "gitlab": ([B + "mcp-server-gitlab"], {"GITLAB_PERSONAL_ACCESS_TOKEN": "unused"}),
    "google-maps": ([B + "mcp-server-google-maps"], {"GOOGLE_MAPS_API_KEY": "unused"}),
    "time": ([V + "mcp-server-time"], {}),
    "fetch": ([V + "mcp-server-fetch"], {}),
    "git": ([V + "mcp-server-git"], {}),
}

async def one(name, argv, env):
    p = StdioServerParameters(command=argv[0], args=argv[1:], env={**os.environ, **env})
    async with stdio_client(p) as (r, w):
        async with ClientSession(r, w) as s:
            init = await s.initialize()
            tools = await s.list_tools()
            data = {"server": init.model_dump(by_alias=True, exclude_none=True).get("serverInfo"),
                    "tools": [t.model_dump(exclude_none=True, by_alias=True) for t in tools.tools]}
            json.dump(data, open(os.path.join(OUT, f"{name}.json"), "w"), indent=1, sort_keys=True)
            print(name, data["server"], len(tools.tools))

async def main():
    for name, (argv, env) in SERVERS.items():
        if len(sys.argv) > 1 and name not in sys.argv[1:]:
            continue
        try:
            await asyncio.wait_for(one(name, argv, env), 60)
        except Exception as e:
            print("FAIL", name, repr(e)[:200])

asyncio.run(main())
