//! `toolgate mcp config CLIENT`: the snippet an MCP client's configuration takes to start
//! `toolgate mcp serve` — the caller's governed tools as that client's MCP server. Each client
//! reads its own shape; the token is referenced the way the client can fill it in (VS Code asks
//! for it, Claude Code expands an environment variable), or written in with `--embed-token`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::{Value, json};

use crate::client::out::Format;
use crate::outln;

/// The MCP clients whose configuration is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum McpClient {
    /// Claude Desktop: `claude_desktop_config.json`, under `mcpServers`.
    ClaudeDesktop,
    /// Claude Code: a project's `.mcp.json` (or `claude mcp add-json toolgate '<the entry>'`).
    ClaudeCode,
    /// VS Code: `.vscode/mcp.json`, under `servers`, the token asked for once (an input).
    Vscode,
    /// Cursor: `.cursor/mcp.json` (or `~/.cursor/mcp.json`), under `mcpServers`.
    Cursor,
}

/// What `toolgate mcp config` was asked for.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    /// The MCP client to configure.
    #[arg(value_enum)]
    pub client: McpClient,
    /// The name of the server entry.
    #[arg(long, default_value = "toolgate")]
    pub name: String,
    /// The task the client works on (`mcp serve --intent`): the view holds the tools it describes.
    #[arg(long)]
    pub intent: Option<String>,
    /// Namespace of the tools (`mcp serve --namespace`).
    #[arg(long)]
    pub serve_namespace: Option<String>,
    /// Write the token (`--token`, `TOOLGATE_TOKEN`) into the snippet instead of a reference to
    /// it: the file then holds a credential; keep it private.
    #[arg(long)]
    pub embed_token: bool,
    /// The `toolgate` binary the client starts (default: the one beside this binary, by its full
    /// path: clients start servers with a short PATH).
    #[arg(long)]
    pub command: Option<PathBuf>,
    /// Output: the snippet as JSON (`text`, `json`) or YAML.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Format,
}

/// Print the snippet for `a.client`, and where it goes on stderr.
pub fn run(conn: &crate::client::Conn, a: &ConfigArgs) -> anyhow::Result<ExitCode> {
    let command = match &a.command {
        Some(c) => c.clone(),
        None => std::env::current_exe()
            .context("locating this binary")?
            .with_file_name("toolgate"),
    };
    let mut args = vec![
        "mcp".to_string(),
        "serve".into(),
        "--server".into(),
        conn.server.clone(),
    ];
    if let Some(intent) = &a.intent {
        args.extend(["--intent".into(), intent.clone()]);
    }
    if let Some(ns) = &a.serve_namespace {
        args.extend(["--namespace".into(), ns.clone()]);
    }
    for (flag, path) in [
        ("--ca", &conn.ca),
        ("--client-cert", &conn.client_cert),
        ("--client-key", &conn.client_key),
    ] {
        if let Some(p) = path {
            args.extend([flag.to_string(), p.display().to_string()]);
        }
    }
    let token = if a.embed_token {
        conn.token
            .clone()
            .context("--embed-token: no token; pass --token or set TOOLGATE_TOKEN")?
    } else {
        match a.client {
            McpClient::Vscode => format!("${{input:{}-token}}", a.name),
            McpClient::ClaudeCode => "${TOOLGATE_TOKEN}".into(),
            // Neither expands anything: the placeholder is to be replaced.
            McpClient::ClaudeDesktop | McpClient::Cursor => "<a toolgate bearer token>".into(),
        }
    };
    let command = command.display().to_string();
    let (snippet, file) = snippet(a, &command, &args, &token);
    eprintln!("toolgate: {file}");
    match a.output {
        Format::Yaml => crate::client::out::object(&snippet, Format::Yaml),
        _ => outln!("{}", serde_json::to_string_pretty(&snippet)?),
    }
    Ok(ExitCode::SUCCESS)
}

/// The snippet in the client's shape, and where it goes.
fn snippet(a: &ConfigArgs, command: &str, args: &[String], token: &str) -> (Value, &'static str) {
    let entry = json!({"command": command, "args": args, "env": {"TOOLGATE_TOKEN": token}});
    match a.client {
        McpClient::ClaudeDesktop => (
            json!({"mcpServers": {&a.name: entry}}),
            "merge into claude_desktop_config.json (Settings → Developer → Edit Config), then restart Claude Desktop",
        ),
        McpClient::ClaudeCode => (
            json!({"mcpServers": {&a.name: entry}}),
            "save as .mcp.json in the project (Claude Code expands ${TOOLGATE_TOKEN} from its environment)",
        ),
        McpClient::Cursor => (
            json!({"mcpServers": {&a.name: entry}}),
            "merge into .cursor/mcp.json in the project, or ~/.cursor/mcp.json",
        ),
        McpClient::Vscode => {
            let mut server = entry;
            server["type"] = json!("stdio");
            let mut config = json!({"servers": {&a.name: server}});
            if !a.embed_token {
                config["inputs"] = json!([{
                    "type": "promptString",
                    "id": format!("{}-token", a.name),
                    "description": "toolgate bearer token",
                    "password": true,
                }]);
            }
            (
                config,
                "save as .vscode/mcp.json in the workspace (VS Code asks for the token once)",
            )
        }
    }
}
