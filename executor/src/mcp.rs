//! The `mcp` adapter: the tool's MCP server started over stdio inside the call's sandbox, with
//! the same process setup as a CLI tool (environment, seccomp, Landlock, its own process group),
//! then `initialize` and one `tools/call` with the call's args (rmcp, the official SDK). Its
//! answer is the result: text content to the `stdout` artifact and the preview,
//! `structuredContent` checked against the tool's output schema, `isError` a failed call with
//! the server's words. The server's stderr is the `stderr` artifact. Nothing outlives the call:
//! the server's process group is killed once the answer is in, or at the deadline.

use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::transport::TokioChildProcess;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
};
use toolgate_artifacts::ArtifactStore;
use toolgate_contract::exec::ExecSpec;
use toolgate_contract::redact::Redactor;
use toolgate_crds::{CallResult, ResultStatus};

use crate::outcome::{Ended, assemble, failure, open_output, open_stderr};
use crate::process::{PIPE_GRACE, kill_group, pump, tool_process};
use crate::spec::{Credential, ExecError};

/// Why the exchange with the server ended without an answer.
enum NoAnswer {
    /// Past the deadline.
    TimedOut,
    /// The server broke the protocol, exited, or refused.
    Protocol(String),
}

/// Run one `tools/call` on the tool's server: started on stdio inside the sandbox, or reached
/// over streamable HTTP under the sandbox's egress rules with the call's credential as bearer.
pub(crate) async fn run_mcp(
    spec: &ExecSpec,
    credentials: &[Credential],
    credentials_dir: &std::path::Path,
    store: &ArtifactStore,
    redactor: &Redactor,
) -> Result<CallResult, ExecError> {
    let Some(mcp) = spec.execution.mcp.as_ref() else {
        return Err(ExecError::Unrunnable(
            "execution.mcp.tool is missing: an mcp tool names its tool on the server".into(),
        ));
    };
    let tool = mcp.tool.clone();
    let timeout = Duration::from_millis(spec.limits.timeout_ms);
    let request = Request {
        tool: tool.clone(),
        arguments: spec.args.as_object().cloned(),
        // The call's trace context, where MCP carries it (`_meta.traceparent`).
        traceparent: spec
            .env
            .set
            .get(toolgate_contract::exec::TRACEPARENT_ENV)
            .cloned(),
    };
    if let Some(url) = &mcp.url {
        let parsed = reqwest::Url::parse(url).map_err(|e| {
            ExecError::Unrunnable(format!("execution.mcp.url {url:?} is not a URL: {e}"))
        })?;
        let client = crate::http::egress_client(spec, &parsed)?;
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
        if let Some(c) = credentials.first() {
            config = config.auth_header(c.value.trim());
        }
        let transport = StreamableHttpClientTransport::with_client(client, config);
        let out = open_output(spec, store, redactor, "stdout", "text/plain; charset=utf-8").await?;
        let started = Instant::now();
        let answer = match tokio::time::timeout(timeout, exchange(transport, &request)).await {
            Ok(a) => a,
            Err(_) => Err(NoAnswer::TimedOut),
        };
        return conclude(spec, answer, out, None, started).await;
    }
    let Some((program, rest)) = spec.execution.argv.split_first() else {
        return Err(ExecError::Unrunnable(
            "execution.argv is empty: an mcp tool names the command of its server (or execution.mcp.url)".into(),
        ));
    };
    let cmd = tool_process(spec, credentials, credentials_dir, program, rest)?;
    let out = open_output(spec, store, redactor, "stdout", "text/plain; charset=utf-8").await?;
    let mut err = open_stderr(spec, store, redactor).await?;
    let started = Instant::now();
    let (transport, stderr) = match TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(p) => p,
        Err(e) => {
            let o = out.finish(None).await?;
            let _ = err.finish(None).await?;
            return Ok(failure(
                ResultStatus::Error,
                "spawn-failed",
                &format!("cannot start the MCP server {program:?}: {e}"),
                false,
                vec![o.artifact],
                started,
            ));
        }
    };
    let pid = transport.id();
    let call = async {
        let answer = match tokio::time::timeout(timeout, exchange(transport, &request)).await {
            Ok(a) => a,
            Err(_) => Err(NoAnswer::TimedOut),
        };
        // Whatever the server left running goes with it.
        kill_group(pid);
        answer
    };
    let read_err = async {
        match stderr {
            Some(s) => tokio::time::timeout(timeout + PIPE_GRACE, pump(s, &mut err, None))
                .await
                .unwrap_or(Ok(())),
            None => Ok(()),
        }
    };
    let (answer, r_err) = tokio::join!(call, read_err);
    r_err?;
    conclude(spec, answer, out, Some(err), started).await
}

/// List the stdio server's tools (a discovery on a cluster): started as for a call, then
/// `initialize` and every page of `tools/list`, written as `{"serverInfo": {"version"}, "tools"}`
/// to the `tools` artifact (what `toolgate_core::mcp` reads) within the deadline.
pub(crate) async fn run_discover(
    spec: &ExecSpec,
    credentials: &[Credential],
    credentials_dir: &std::path::Path,
    store: &ArtifactStore,
    redactor: &Redactor,
) -> Result<CallResult, ExecError> {
    let Some((program, rest)) = spec.execution.argv.split_first() else {
        return Err(ExecError::Unrunnable(
            "execution.argv is empty: a discovery names the server's command".into(),
        ));
    };
    let cmd = tool_process(spec, credentials, credentials_dir, program, rest)?;
    let mut out = open_output(spec, store, redactor, "tools", "application/json").await?;
    let started = Instant::now();
    let (transport, _) = match TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(p) => p,
        Err(e) => {
            let o = out.finish(None).await?;
            return Ok(failure(
                ResultStatus::Error,
                "spawn-failed",
                &format!("cannot start the MCP server {program:?}: {e}"),
                false,
                vec![o.artifact],
                started,
            ));
        }
    };
    let pid = transport.id();
    let timeout = Duration::from_millis(spec.limits.timeout_ms);
    let listed = tokio::time::timeout(timeout, crate::discover::list_over(transport)).await;
    kill_group(pid);
    let listed = match listed {
        Ok(Ok(l)) => l,
        Ok(Err(message)) => {
            let o = out.finish(None).await?;
            return Ok(failure(
                ResultStatus::Error,
                "mcp-protocol",
                &message,
                true,
                vec![o.artifact],
                started,
            ));
        }
        Err(_) => {
            let o = out.finish(None).await?;
            return Ok(failure(
                ResultStatus::Error,
                "timeout",
                &format!(
                    "no answer to initialize and tools/list within {} s",
                    spec.limits.timeout_ms.div_ceil(1000)
                ),
                true,
                vec![o.artifact],
                started,
            ));
        }
    };
    let body = serde_json::json!({
        "serverInfo": {"version": listed.version},
        "tools": listed.tools,
    });
    out.write(body.to_string().as_bytes()).await?;
    let o = out
        .finish(Some(format!("{} tool(s) listed", listed.tools.len())))
        .await?;
    Ok(assemble(spec, o, None, Ended::code(0), None, started))
}

/// The one `tools/call` of a call.
struct Request {
    tool: String,
    arguments: Option<serde_json::Map<String, serde_json::Value>>,
    traceparent: Option<String>,
}

/// `initialize`, then the `tools/call`, over either transport.
async fn exchange<T, E, A>(transport: T, request: &Request) -> Result<CallToolResult, NoAnswer>
where
    T: rmcp::transport::IntoTransport<rmcp::RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let tool = &request.tool;
    let client = ()
        .serve(transport)
        .await
        .map_err(|e| NoAnswer::Protocol(format!("the MCP server did not initialize: {e}")))?;
    let mut params = CallToolRequestParams::new(tool.clone());
    if let Some(arguments) = request.arguments.clone() {
        params = params.with_arguments(arguments);
    }
    if let Some(tp) = &request.traceparent {
        let mut meta = rmcp::model::MetaObject::default();
        meta.0.insert("traceparent".into(), tp.clone().into());
        params.meta = Some(rmcp::model::RequestMetaObject(meta));
    }
    let answer = client
        .call_tool(params)
        .await
        .map_err(|e| NoAnswer::Protocol(format!("tools/call {tool}: {e}")));
    let _ = client.cancel().await;
    answer
}

/// The server's standard error artifact, when it ran as a process.
async fn finish_stderr(
    err: Option<crate::sink::Sink<'_>>,
) -> Result<Option<crate::sink::SinkOutcome>, crate::sink::SinkError> {
    match err {
        Some(e) => e
            .finish(Some("the MCP server's standard error".into()))
            .await
            .map(Some),
        None => Ok(None),
    }
}

/// The call's result from the server's answer (or its absence).
async fn conclude(
    spec: &ExecSpec,
    answer: Result<CallToolResult, NoAnswer>,
    mut out: crate::sink::Sink<'_>,
    err: Option<crate::sink::Sink<'_>>,
    started: Instant,
) -> Result<CallResult, ExecError> {
    let answer = match answer {
        Ok(a) => a,
        Err(NoAnswer::TimedOut) => {
            let o = out.finish(Some("MCP tool output".into())).await?;
            let e = finish_stderr(err).await?;
            return Ok(assemble(
                spec,
                o,
                e,
                Ended {
                    code: None,
                    signal: None,
                    timed_out: true,
                },
                None,
                started,
            ));
        }
        Err(NoAnswer::Protocol(message)) => {
            let o = out.finish(None).await?;
            let e = finish_stderr(err).await?;
            let mut artifacts = vec![o.artifact];
            artifacts.extend(e.map(|e| e.artifact));
            return Ok(failure(
                ResultStatus::Error,
                "mcp-protocol",
                &message,
                true,
                artifacts,
                started,
            ));
        }
    };
    let mut first_text = None;
    for block in &answer.content {
        let line = match block {
            ContentBlock::Text(t) => {
                first_text.get_or_insert_with(|| t.text.clone());
                t.text.clone()
            }
            // Images, audio, resources: kept in full in the artifact, as JSON.
            other => serde_json::to_string(other).unwrap_or_default(),
        };
        out.write(line.as_bytes()).await?;
        if !line.ends_with('\n') {
            out.write(b"\n").await?;
        }
    }
    let o = out.finish(Some("MCP tool output".into())).await?;
    let e = finish_stderr(err).await?;
    if answer.is_error == Some(true) {
        let mut artifacts = vec![o.artifact];
        artifacts.extend(e.map(|e| e.artifact));
        return Ok(failure(
            ResultStatus::Error,
            "mcp-tool-error",
            &format!(
                "the MCP server reported an error: {}",
                first_text.as_deref().unwrap_or("(no message)")
            ),
            false,
            artifacts,
            started,
        ));
    }
    let structured = answer
        .structured_content
        .as_ref()
        .and_then(|v| serde_json::to_vec(v).ok());
    Ok(assemble(spec, o, e, Ended::code(0), structured, started))
}
