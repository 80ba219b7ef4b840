// A real MCP client (the official TypeScript SDK, @modelcontextprotocol/sdk) driving
// `toolgate mcp serve` over stdio — or, with MCP_URL set, over streamable HTTP with the token as
// its bearer — for local/tests/mcp_serve.rs: the same steps and JSON lines as mcp_client.py. It waits for a line on stdin after the call that needs a human.
//
// usage: node mcp_client.cjs TOOLGATE_BINARY SERVER_URL
//   (token in TOOLGATE_TOKEN, the SDK's folder in TOOLGATE_MCP_NODE)
const path = require("path");
const readline = require("readline");
const sdk = require("module").createRequire(path.join(process.env.TOOLGATE_MCP_NODE, "node_modules", "/"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = sdk("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");

const say = (event, fields) => console.log(JSON.stringify({ event, ...fields }));
const texts = (r) => (r.content || []).filter((c) => c.type === "text").map((c) => c.text);
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function main() {
  const transport = process.env.MCP_URL
    ? new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
        requestInit: { headers: { Authorization: `Bearer ${process.env.TOOLGATE_TOKEN}` } },
      })
    : new StdioClientTransport({
        command: process.argv[2],
        args: ["mcp", "serve", "--server", process.argv[3], "--intent", "echo a greeting message to the user", "--wait-seconds", "20"],
        env: { TOOLGATE_TOKEN: process.env.TOOLGATE_TOKEN, PATH: process.env.PATH || "" },
      });
  const client = new Client({ name: "toolgate-tests-ts", version: "0.0.0" });
  await client.connect(transport);
  const listed = await client.listTools();
  say("tools", {
    names: listed.tools.map((t) => t.name),
    meta: Object.fromEntries(listed.tools.map((t) => [t.name, t._meta || {}])),
  });
  const echo = await client.callTool({ name: "test.echo", arguments: { msg: "hello over mcp" } });
  say("echo", { isError: !!echo.isError, text: texts(echo) });
  const gated = await client.callTool({ name: "test.gated", arguments: { msg: "after a human said yes" } });
  say("gated", { isError: !!gated.isError, state: gated.structuredContent, text: texts(gated) });
  await lines.next(); // the test approved the call
  let got;
  for (let i = 0; i < 300; i++) {
    got = await client.callTool({ name: "toolgate.get_call", arguments: { callId: gated.structuredContent.callId } });
    const phase = (got.structuredContent || {}).phase;
    if (!["AwaitingApproval", "Authorized", "Running"].includes(phase)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  say("approved", { isError: !!got.isError, text: texts(got) });
  const bad = await client.callTool({ name: "test.echo", arguments: { msg: 5 } });
  say("bad", { isError: !!bad.isError, text: texts(bad) });
  const unknown = await client.callTool({ name: "no.such-tool", arguments: {} });
  say("unknown", { isError: !!unknown.isError, text: texts(unknown) });
  await client.close();
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
