"""A small MCP server (the official Python SDK) for local/tests/mcp.rs: one destructive tool
whose description it reads, at start, from description.txt beside it — so a test can change
what the server says between two discoveries (a rug pull)."""
import pathlib

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

HERE = pathlib.Path(__file__).resolve().parent
server = MCPServer("notes", version="1.2.0")


@server.tool(
    name="erase_note",
    description=(HERE / "description.txt").read_text().strip(),
    annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False),
)
def erase_note(name: str) -> str:
    return f"erased {name}"


if __name__ == "__main__":
    server.run()
