//! Running one call: load the spec and credentials, run the adapter, store the output, build
//! the bounded result.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use toolgate_contract::exec::ExecSpec;
use toolgate_contract::redact::Redactor;
use toolgate_contract::text::neutralise;
use toolgate_crds::{ArtifactKind, CallResult, ExecutionAdapter, ObservedEffects, ResultStatus};

use crate::effects;
use crate::outcome::{Ended, assemble, failure, open_output, open_stderr, target};
use crate::process::{PIPE_GRACE, kill_group, pump, tool_process};
use crate::render::{render_argv, render_text};
use crate::result::bound;
use crate::sink::Sink;
pub use crate::spec::{Credential, ExecError, load_credentials, load_spec};
use toolgate_artifacts::ArtifactStore;

/// Run a call and return its bounded result.
pub async fn execute(
    spec: &ExecSpec,
    credentials: &[Credential],
    credentials_dir: &Path,
) -> Result<CallResult, ExecError> {
    // Nothing of the tool's runs before its NetworkPolicy is in force.
    let gate_wait = match &spec.egress_gate {
        Some(gate) => {
            let took = crate::egress_gate::wait_until_enforced(gate).await?;
            eprintln!(
                "toolgate-executor: the call's NetworkPolicy is in force ({} refused after {} ms)",
                gate.refused.len(),
                took.as_millis()
            );
            Some(u64::try_from(took.as_millis()).unwrap_or(u64::MAX))
        }
        None => None,
    };
    if let Some(socket) = &spec.egress_proxy {
        crate::egress::start(socket).await?;
    }
    if let Some(ca) = &spec.egress_ca {
        crate::egress::trust_ca(ca)?;
    }
    // A placeholder is not a secret: the tool may show it, and its words are not redacted.
    let redactor = Redactor::new(
        credentials
            .iter()
            .filter(|c| !c.file.placeholder)
            .map(|c| c.value.as_bytes()),
    );
    let store = ArtifactStore::open(&spec.artifacts)?;
    let started = Instant::now();
    let before = (!spec.write_roots.is_empty()).then(|| effects::snapshot(&spec.write_roots));
    let mut result = match spec.execution.adapter {
        ExecutionAdapter::Cli => {
            run_cli(spec, credentials, credentials_dir, &store, &redactor).await?
        }
        ExecutionAdapter::Http => {
            crate::http::run_http(spec, credentials, &store, &redactor).await?
        }
        ExecutionAdapter::Builtin => run_builtin(spec, &store, &redactor).await?,
        ExecutionAdapter::Mcp if spec.discover => {
            crate::mcp::run_discover(spec, credentials, credentials_dir, &store, &redactor).await?
        }
        ExecutionAdapter::Mcp => {
            crate::mcp::run_mcp(spec, credentials, credentials_dir, &store, &redactor).await?
        }
        // A delegation runs nowhere: its subagent reports to the runtime.
        ExecutionAdapter::Subagent => {
            return Err(ExecError::Unrunnable(
                "a subagent tool is a delegation; no executor runs it".into(),
            ));
        }
    };
    if let Some(before) = before {
        let changes = effects::compare(&before, &effects::snapshot(&spec.write_roots));
        if !changes.diff.is_empty() {
            let target = target(
                spec,
                "workspace.diff",
                ArtifactKind::Diff,
                "text/x-diff",
                u64::MAX,
                0,
            );
            let mut sink = Sink::open(&store, target, &redactor).await?;
            sink.write(changes.diff.as_bytes()).await?;
            let summary = format!(
                "{} written, {} deleted",
                changes.writes.len(),
                changes.deletes.len()
            );
            result
                .artifacts
                .push(sink.finish(Some(summary)).await?.artifact);
        }
        let observed = result
            .effects_observed
            .get_or_insert_with(ObservedEffects::default);
        observed.writes = changes.writes;
        observed.deletes = changes.deletes;
    }
    if let Some(u) = result.usage.as_mut() {
        u.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        u.egress_gate_ms = gate_wait;
    }
    // Belt and braces: nothing model-visible leaves without a last redaction pass; what people
    // and models read shows escape sequences and hiding characters instead of running them (the
    // artifact keeps the bytes).
    // Shown characters take more bytes than the controls they stand for: the preview's bound
    // holds after.
    result.output_preview = result.output_preview.map(|p| {
        toolgate_contract::text::cut(
            &neutralise(&redactor.redact_str(&p)),
            spec.context.preview_bytes(),
        )
    });
    result.structured_output = result.structured_output.map(|v| redact_value(&redactor, v));
    if let Some(e) = result.error.as_mut() {
        e.message = neutralise(&redactor.redact_str(&e.message)).into_owned();
    }
    Ok(bound(result))
}

/// Redact every string (and key) of a JSON value; numbers and structure stay.
fn redact_value(redactor: &Redactor, v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(redactor.redact_str(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(|x| redact_value(redactor, x)).collect()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, x)| (redactor.redact_str(&k), redact_value(redactor, x)))
                .collect(),
        ),
        other => other,
    }
}

async fn run_cli(
    spec: &ExecSpec,
    credentials: &[Credential],
    credentials_dir: &Path,
    store: &ArtifactStore,
    redactor: &Redactor,
) -> Result<CallResult, ExecError> {
    let mut argv = render_argv(&spec.execution.argv, &spec.args)?;
    // A skill's script: written into this sandbox's private /tmp, run by its interpreter with
    // the rendered argv as its arguments. Kept until the call ends (the folder goes with it).
    let _script_dir = match &spec.execution.script {
        Some(script) => {
            let (dir, path) = write_script(script)?;
            let mut full = script.interpreter.clone();
            full.push(path.display().to_string());
            full.append(&mut argv);
            argv = full;
            Some(dir)
        }
        None => None,
    };
    let Some((program, rest)) = argv.split_first() else {
        return Err(ExecError::Unrunnable(
            "execution.argv is empty: a cli tool needs a program".into(),
        ));
    };
    let stdin = spec
        .execution
        .stdin
        .as_deref()
        .map(|t| render_text(t, "execution.stdin", &spec.args))
        .transpose()?;
    let mut cmd = tool_process(spec, credentials, credentials_dir, program, rest)?;
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());

    let mut out = open_output(spec, store, redactor, "stdout", "text/plain; charset=utf-8").await?;
    let mut err = open_stderr(spec, store, redactor).await?;
    let started = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let o = out.finish(None).await?;
            let _ = err.finish(None).await?;
            return Ok(failure(
                ResultStatus::Error,
                "spawn-failed",
                &format!("cannot start {program:?}: {e}"),
                false,
                vec![o.artifact],
                started,
            ));
        }
    };
    let pid = child.id();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut stdin_pipe = child.stdin.take();
    let timeout = Duration::from_millis(spec.limits.timeout_ms);
    let mut structured = spec.output_schema.as_ref().map(|_| Vec::new());

    let feed = async {
        if let (Some(pipe), Some(text)) = (stdin_pipe.as_mut(), stdin.as_deref()) {
            let _ = pipe.write_all(text.as_bytes()).await;
        }
        drop(stdin_pipe.take());
    };
    let wait = async {
        match tokio::time::timeout(timeout, child.wait()).await {
            // Past the deadline is a timeout even when the process ended on its own: a fork bomb
            // can starve the timer until its processes die, and its exit 0 proves nothing.
            Ok(status) => (status.ok(), started.elapsed() >= timeout),
            Err(_) => {
                kill_group(pid);
                (child.wait().await.ok(), true)
            }
        }
    };
    let read_out = async {
        match stdout {
            Some(s) => {
                tokio::time::timeout(timeout + PIPE_GRACE, pump(s, &mut out, structured.as_mut()))
                    .await
                    .unwrap_or(Ok(()))
            }
            None => Ok(()),
        }
    };
    let read_err = async {
        match stderr {
            Some(s) => tokio::time::timeout(timeout + PIPE_GRACE, pump(s, &mut err, None))
                .await
                .unwrap_or(Ok(())),
            None => Ok(()),
        }
    };
    let (_, (status, timed_out), r_out, r_err) = tokio::join!(feed, wait, read_out, read_err);
    // Whatever the tool left running in its group goes too.
    kill_group(pid);
    r_out?;
    r_err?;
    let out = out.finish(Some("standard output".into())).await?;
    let err = err.finish(Some("standard error".into())).await?;
    use std::os::unix::process::ExitStatusExt;
    Ok(assemble(
        spec,
        out,
        Some(err),
        Ended {
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            timed_out,
        },
        structured,
        started,
    ))
}

/// Write a skill's script into a fresh private folder of the temporary directory, readable and
/// executable by this user only.
fn write_script(
    script: &toolgate_crds::ScriptExecution,
) -> Result<(tempfile::TempDir, std::path::PathBuf), ExecError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let unrunnable = |e: std::io::Error| {
        ExecError::Unrunnable(format!(
            "cannot write the skill's script {}: {e}",
            script.path
        ))
    };
    let name = std::path::Path::new(&script.path)
        .file_name()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ExecError::Unrunnable(format!(
                "execution.script.path {:?} names no file",
                script.path
            ))
        })?;
    let dir = tempfile::Builder::new()
        .prefix("toolgate-script-")
        .tempdir()
        .map_err(unrunnable)?;
    let path = dir.path().join(name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o500)
        .open(&path)
        .map_err(unrunnable)?;
    file.write_all(script.content.as_bytes())
        .map_err(unrunnable)?;
    Ok((dir, path))
}

async fn run_builtin(
    spec: &ExecSpec,
    store: &ArtifactStore,
    redactor: &Redactor,
) -> Result<CallResult, ExecError> {
    let Some(op) = spec.execution.builtin else {
        return Err(ExecError::Unrunnable(
            "execution.builtin is missing: a builtin tool names its operation".into(),
        ));
    };
    let started = Instant::now();
    let mut out = open_output(spec, store, redactor, "stdout", "text/plain; charset=utf-8").await?;
    match crate::builtin::run(spec, op) {
        Ok(message) => {
            out.write(format!("{message}\n").as_bytes()).await?;
            let out = out.finish(Some("operation report".into())).await?;
            Ok(assemble(spec, out, None, Ended::code(0), None, started))
        }
        Err(e) => {
            let o = out.finish(None).await?;
            Ok(failure(
                ResultStatus::Error,
                e.code(),
                &e.to_string(),
                false,
                vec![o.artifact],
                started,
            ))
        }
    }
}
