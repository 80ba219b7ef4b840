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
use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::transport::TokioChildProcess;
use toolgate_artifacts::ArtifactStore;
use toolgate_core::exec::ExecSpec;
use toolgate_core::redact::Redactor;
use toolgate_crds::{CallResult, ResultStatus};

use crate::outcome::{Ended, assemble, failure, open_output, open_stderr};
use crate::run::{Credential, ExecError, tool_process};

/// How long the server's stderr may stay open after its process group was killed.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Why the exchange with the server ended without an answer.
enum NoAnswer {
    /// Past the deadline.
    TimedOut,
    /// The server broke the protocol, exited, or refused.
    Protocol(String),
}

/// Run one `tools/call` on the tool's stdio server.
pub(crate) async fn run_mcp(
    spec: &ExecSpec,
    credentials: &[Credential],
    credentials_dir: &std::path::Path,
    store: &ArtifactStore,
    redactor: &Redactor,
) -> Result<CallResult, ExecError> {
    let Some(tool) = spec.execution.mcp.as_ref().map(|m| m.tool.clone()) else {
        return Err(ExecError::Unrunnable(
            "execution.mcp.tool is missing: an mcp tool names its tool on the server".into(),
        ));
    };
    let Some((program, rest)) = spec.execution.argv.split_first() else {
        return Err(ExecError::Unrunnable(
            "execution.argv is empty: an mcp tool names the command of its server".into(),
        ));
    };
    let cmd = tool_process(spec, credentials, credentials_dir, program, rest)?;
    let mut out = open_output(spec, store, redactor, "stdout", "text/plain; charset=utf-8").await?;
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
    let timeout = Duration::from_millis(spec.limits.timeout_ms);
    let arguments = spec.args.as_object().cloned();
    // The call's trace context, where MCP carries it (`_meta.traceparent`).
    let traceparent = spec
        .env
        .set
        .get(toolgate_core::exec::TRACEPARENT_ENV)
        .cloned();
    let exchange = async {
        let client = ()
            .serve(transport)
            .await
            .map_err(|e| NoAnswer::Protocol(format!("the MCP server did not initialize: {e}")))?;
        let mut params = CallToolRequestParams::new(tool.clone());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        if let Some(tp) = traceparent {
            let mut meta = rmcp::model::MetaObject::default();
            meta.0.insert("traceparent".into(), tp.into());
            params.meta = Some(rmcp::model::RequestMetaObject(meta));
        }
        let answer = client
            .call_tool(params)
            .await
            .map_err(|e| NoAnswer::Protocol(format!("tools/call {tool}: {e}")));
        let _ = client.cancel().await;
        answer
    };
    let call = async {
        let answer = match tokio::time::timeout(timeout, exchange).await {
            Ok(a) => a,
            Err(_) => Err(NoAnswer::TimedOut),
        };
        // Whatever the server left running goes with it.
        crate::run::kill_group(pid);
        answer
    };
    let read_err = async {
        match stderr {
            Some(s) => {
                tokio::time::timeout(timeout + PIPE_GRACE, crate::run::pump(s, &mut err, None))
                    .await
                    .unwrap_or(Ok(()))
            }
            None => Ok(()),
        }
    };
    let (answer, r_err) = tokio::join!(call, read_err);
    r_err?;
    let answer = match answer {
        Ok(a) => a,
        Err(NoAnswer::TimedOut) => {
            let o = out.finish(Some("MCP tool output".into())).await?;
            let e = err
                .finish(Some("the MCP server's standard error".into()))
                .await?;
            return Ok(assemble(
                spec,
                o,
                Some(e),
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
            let e = err
                .finish(Some("the MCP server's standard error".into()))
                .await?;
            return Ok(failure(
                ResultStatus::Error,
                "mcp-protocol",
                &message,
                true,
                vec![o.artifact, e.artifact],
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
    let e = err
        .finish(Some("the MCP server's standard error".into()))
        .await?;
    if answer.is_error == Some(true) {
        return Ok(failure(
            ResultStatus::Error,
            "mcp-tool-error",
            &format!(
                "the MCP server reported an error: {}",
                first_text.as_deref().unwrap_or("(no message)")
            ),
            false,
            vec![o.artifact, e.artifact],
            started,
        ));
    }
    let structured = answer
        .structured_content
        .as_ref()
        .and_then(|v| serde_json::to_vec(v).ok());
    Ok(assemble(
        spec,
        o,
        Some(e),
        Ended::code(0),
        structured,
        started,
    ))
}
