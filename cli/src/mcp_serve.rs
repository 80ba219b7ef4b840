//! `toolgate mcp serve`: toolgate as an MCP server for MCP clients — on stdio with the
//! command line's token, or on streamable HTTP (`--listen`) where each request's bearer token is
//! the caller's — in front of either runtime's gRPC API. `tools/list` is the caller's tool view in MCP
//! format (why each tool is there in `_meta`), plus `toolgate.get_call`; `tools/call` proposes a
//! governed call and waits for it — never longer than `--wait-seconds`. A call that needs a
//! human returns at once with what it waits for (its id, the args and tool digests an approver
//! binds); the client asks `toolgate.get_call` later. Nothing is decided here: the runtime
//! behind the API decides, this only translates.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use toolgate_proto::v1 as pb;

use crate::client::Conn;
use toolgate_client::Client;

/// The tool that reports on a call proposed earlier.
const GET_CALL: &str = "toolgate.get_call";

/// A call's user goal when the session states none.
const UNSTATED_GOAL: &str = "the task the user asked for (not stated to toolgate mcp serve)";

/// Options of `toolgate mcp serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// The task the MCP client works on: the tool view is ranked by it and holds only the tools
    /// it describes, and each call's intent says it (MCP carries no intent of its own). Without
    /// it the client is offered every tool the caller may use, up to --max-tools.
    #[arg(long, default_value = "")]
    pub intent: String,
    /// Namespace of the tools (default: the caller's service-account namespace).
    #[arg(long, default_value = "")]
    pub namespace: String,
    /// At most this many tools in the view.
    #[arg(long, default_value_t = 32)]
    pub max_tools: u32,
    /// The longest a `tools/call` waits for its call to end before answering with its state.
    #[arg(long, default_value_t = 60)]
    pub wait_seconds: u64,
    /// Serve streamable HTTP at `http://<this address>/mcp` instead of stdio: every request
    /// carries `Authorization: Bearer <toolgate token>` and acts as that caller (a request
    /// without a known token gets 401). Loopback only: tokens must not cross a network in clear.
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
    /// With `--listen`: a request that sends no `Authorization` acts as the command line's
    /// token (`--token`, `TOOLGATE_TOKEN`) — one principal on loopback, for MCP clients that
    /// cannot send a header (the conformance runner, the Inspector's CLI).
    #[arg(long, requires = "listen")]
    pub single_principal: bool,
}

/// What the gateway needs to propose a call of a tool in the view.
#[derive(Debug, Clone)]
struct Entry {
    /// ToolDescriptor name.
    object: String,
    /// The digest the view showed: the call is pinned to what the client saw.
    digest: String,
    /// The first of its action types, for the call's intent.
    action: String,
}

pub(crate) struct Gateway {
    /// The connection to the API (with the command line's token on stdio), or why there is none
    /// yet (no token, the server down): said to the MCP client as each request's error, and
    /// connected again at the next request.
    base: tokio::sync::Mutex<Result<Client, String>>,
    /// How to connect again on stdio.
    conn: Option<Conn>,
    /// Whether callers are named per request (streamable HTTP) rather than by `base`.
    http: bool,
    args: ServeArgs,
    entries: tokio::sync::Mutex<HashMap<String, Entry>>,
}

/// Serve MCP over stdin/stdout until the client goes (or a signal comes); `--listen` serves
/// streamable HTTP instead ([`crate::mcp_http::run`]).
pub fn run_stdio(conn: &Conn, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        // Serve even when the API cannot be reached or no token was given: the MCP client
        // then shows why with each request, rather than a closed connection.
        let client = crate::client::connect(conn)
            .await
            .map_err(|e| toolgate_client::error_line(e.as_ref()));
        let gateway = Gateway::new(client, Some(conn.clone()), false, args);
        let service = gateway
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| anyhow::anyhow!("starting the MCP server on stdio: {e}"))?;
        service
            .waiting()
            .await
            .map_err(|e| anyhow::anyhow!("serving MCP: {e}"))?;
        Ok(ExitCode::SUCCESS)
    })
}

/// The bearer token of a request, if it sends one.
pub(crate) fn bearer(headers: &axum::http::HeaderMap) -> Option<String> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let token = value.strip_prefix("Bearer ")?.trim();
    (!token.is_empty()).then(|| token.to_string())
}

fn text(t: impl Into<String>) -> ContentBlock {
    ContentBlock::text(t.into())
}

fn internal(what: &str, e: impl std::fmt::Display) -> McpError {
    McpError::internal_error(format!("{what}: {e}"), None)
}

impl Gateway {
    pub(crate) fn new(
        base: Result<Client, String>,
        conn: Option<Conn>,
        http: bool,
        args: ServeArgs,
    ) -> Gateway {
        Gateway {
            base: tokio::sync::Mutex::new(base),
            conn,
            http,
            args,
            entries: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The API client acting as this request's caller: the bearer token of its HTTP request
    /// (checked before it got here), or the command line's. Without a connection yet, one is
    /// tried again; failing, the MCP client is told why (an error it shows, with the fix).
    async fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Client, McpError> {
        let mut base = self.base.lock().await;
        if let (Err(_), Some(conn)) = (&*base, &self.conn) {
            *base = crate::client::connect(conn)
                .await
                .map_err(|e| toolgate_client::error_line(e.as_ref()));
        }
        let base = base.as_ref().map_err(|why| {
            McpError::internal_error(
                format!("toolgate cannot serve this client: {why} (the MCP client's configuration gives `toolgate mcp serve` its --server and TOOLGATE_TOKEN)"),
                None,
            )
        })?;
        if !self.http {
            return Ok(base.clone());
        }
        let token = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| bearer(&p.headers))
            .unwrap_or_default();
        Ok(base.with_token(&token))
    }

    /// The caller's view, as MCP tools; remembers how to propose each.
    async fn view(&self, c: &mut Client) -> Result<Vec<Tool>, McpError> {
        let request = |format: pb::ViewFormat| pb::GetToolViewRequest {
            namespace: self.args.namespace.clone(),
            intent: self.args.intent.clone(),
            format: format as i32,
            max_tools: self.args.max_tools,
            action_type: String::new(),
            explain: false,
        };
        let (mcp, canonical) = {
            let mcp = c
                .view(request(pb::ViewFormat::Mcp))
                .await
                .map_err(|e| internal("GetToolView", e.into_status().message()))?;
            let canonical = c
                .view(request(pb::ViewFormat::Canonical))
                .await
                .map_err(|e| internal("GetToolView", e.into_status().message()))?;
            (mcp, canonical)
        };
        let listed: Vec<Value> =
            serde_json::from_str(&mcp.payload_json).map_err(|e| internal("the view", e))?;
        let details: Vec<Value> =
            serde_json::from_str(&canonical.payload_json).map_err(|e| internal("the view", e))?;
        let mut entries = HashMap::new();
        let mut tools = Vec::new();
        for mut tool in listed {
            let name = tool["name"].as_str().unwrap_or_default().to_string();
            let Some(d) = details.iter().find(|d| d["canonicalName"] == name.as_str()) else {
                continue;
            };
            tool["_meta"] = json!({
                "toolgate.dev/reason": d["reason"],
                "toolgate.dev/approval": d["approval"],
                "toolgate.dev/riskTier": d["riskTier"],
            });
            entries.insert(
                name,
                Entry {
                    object: d["name"].as_str().unwrap_or_default().to_string(),
                    digest: d["digest"].as_str().unwrap_or_default().to_string(),
                    action: d["actionTypes"][0]
                        .as_str()
                        .unwrap_or("execute")
                        .to_string(),
                },
            );
            tools.push(serde_json::from_value::<Tool>(tool).map_err(|e| internal("a tool", e))?);
        }
        tools.push(
            serde_json::from_value(json!({
                "name": GET_CALL,
                "description": "The state of a call proposed earlier through toolgate (one that waited for a human approval, or was still running): its phase, and its result once it ended.",
                "inputSchema": {"type": "object", "additionalProperties": false, "required": ["callId"],
                                "properties": {"callId": {"type": "string", "description": "The call id toolgate answered with (structuredContent.callId)."}}},
                "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
            }))
            .map_err(|e| internal("a tool", e))?,
        );
        *self.entries.lock().await = entries;
        Ok(tools)
    }

    async fn entry(&self, c: &mut Client, name: &str) -> Result<Option<Entry>, McpError> {
        if let Some(e) = self.entries.lock().await.get(name) {
            return Ok(Some(e.clone()));
        }
        self.view(c).await?;
        Ok(self.entries.lock().await.get(name).cloned())
    }

    async fn get(&self, c: &mut Client, id: &str) -> Result<pb::Call, tonic::Status> {
        let r = c.req(pb::GetCallRequest { id: id.into() });
        Ok(c.api().get_call(r).await?.into_inner())
    }

    /// Wait until the call ends, waits for a human, or the wait is over.
    async fn settle(&self, c: &mut Client, mut call: pb::Call) -> Result<pb::Call, tonic::Status> {
        let deadline = Instant::now() + Duration::from_secs(self.args.wait_seconds);
        while !matches!(
            call.phase.as_str(),
            "Succeeded" | "Failed" | "Denied" | "Cancelled" | "AwaitingApproval"
        ) && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
            call = self.get(c, &call.id).await?;
        }
        Ok(call)
    }

    async fn propose(
        &self,
        c: &mut Client,
        entry: &Entry,
        name: &str,
        args: Value,
        traceparent: Option<&str>,
    ) -> CallToolResult {
        let request = pb::ProposeCallRequest {
            namespace: self.args.namespace.clone(),
            tool: entry.object.clone(),
            tool_digest: entry.digest.clone(),
            args_json: args.to_string(),
            intent: Some(pb::Intent {
                user_goal: if self.args.intent.trim().is_empty() {
                    UNSTATED_GOAL.into()
                } else {
                    self.args.intent.clone()
                },
                current_task: format!("MCP tools/call {name}"),
                action_type: entry.action.clone(),
                rationale_summary: "called by an MCP client through toolgate mcp serve".into(),
                evidence_refs: vec![],
            }),
            idempotency_key: String::new(),
            dry_run: false,
            session_id: String::new(),
        };
        match c.propose_traced(request, traceparent).await {
            Err(e) => refused(&e.into_status()),
            Ok(call) => match self.settle(c, call).await {
                Ok(call) => answer(&call),
                Err(s) => refused(&s),
            },
        }
    }
}

/// A refusal of the API, in words the client shows.
fn refused(s: &tonic::Status) -> CallToolResult {
    let (code, field) = toolgate_api::error::status_code_and_field(s);
    let mut words = format!("toolgate refused the call ({code}): {}", s.message());
    if let Some(field) = field.filter(|f| !f.is_empty()) {
        words.push_str(&format!(" [field {field}]"));
    }
    CallToolResult::error(vec![text(words)])
}

/// A call as the MCP client sees it: its result once it ended, or what it waits for.
fn answer(call: &pb::Call) -> CallToolResult {
    let reasons = call
        .reasons
        .iter()
        .map(|r| format!("{}: {}", r.code, r.message))
        .collect::<Vec<_>>()
        .join("; ");
    let state = json!({
        "callId": call.id,
        "phase": call.phase,
        "argsDigest": call.args_digest,
        "toolDigest": call.tool_digest,
    });
    match call.phase.as_str() {
        "Succeeded" => {
            let status: Value = serde_json::from_str(&call.status_json).unwrap_or(Value::Null);
            let mut result = CallToolResult::success(vec![text(call.output_preview.clone())]);
            let structured = &status["result"]["structuredOutput"];
            if !structured.is_null() {
                result.structured_content = Some(structured.clone());
            }
            result
        }
        "AwaitingApproval" => {
            let mut result = CallToolResult::success(vec![text(format!(
                "Call {} waits for a human approval ({reasons}). It runs once an approver binds args digest {} and tool digest {} (`toolgate approve {}`); then ask {GET_CALL} with {{\"id\": \"{}\"}} for its result.",
                call.id, call.args_digest, call.tool_digest, call.id, call.id
            ))]);
            result.structured_content = Some(state);
            result
        }
        "Failed" | "Denied" | "Cancelled" => {
            // The first step that did not hold says why (the last only says the call ended).
            let why = call
                .conditions
                .iter()
                .find(|c| c.status == "False")
                .map(|c| format!("{}: {}", c.reason, c.message))
                .unwrap_or(reasons);
            let mut result = CallToolResult::error(vec![text(format!(
                "Call {} {}: {why}",
                call.id,
                call.phase.to_lowercase()
            ))]);
            result.structured_content = Some(state);
            result
        }
        _ => {
            let mut result = CallToolResult::success(vec![text(format!(
                "Call {} is {}; ask {GET_CALL} with {{\"id\": \"{}\"}} for its result.",
                call.id,
                call.phase.to_lowercase(),
                call.id
            ))]);
            result.structured_content = Some(state);
            result
        }
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("toolgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Governed tools: every call is validated, decided by policy, approved by a human when its risk says so, and run in a sandbox. A call that waits for approval answers at once with its id; ask toolgate.get_call for its result later.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut c = self.caller(&context).await?;
        Ok(ListToolsResult::with_all_items(self.view(&mut c).await?))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let mut c = self.caller(&context).await?;
        let name = request.name.to_string();
        // The MCP client's trace context (`_meta.traceparent`): the call joins its trace.
        let traceparent = request
            .meta
            .as_ref()
            .and_then(|m| m.0.get("traceparent"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        if name == GET_CALL {
            // `callId`, as a waiting call's answer names it (`id` is still taken).
            let Some(id) = args["callId"].as_str().or_else(|| args["id"].as_str()) else {
                return Ok(CallToolResult::error(vec![text(
                    "callId: expected the call id toolgate answered with (structuredContent.callId), found none",
                )])
                .into());
            };
            return Ok(match self.get(&mut c, id).await {
                Ok(call) => answer(&call),
                Err(s) => refused(&s),
            }
            .into());
        }
        let Some(entry) = self.entry(&mut c, &name).await? else {
            return Ok(CallToolResult::error(vec![text(format!(
                "{name} is not in your tool view for this task; list the tools again"
            ))])
            .into());
        };
        Ok(self
            .propose(&mut c, &entry, &name, args, traceparent.as_deref())
            .await
            .into())
    }
}
