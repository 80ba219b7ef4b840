//! Running one call: load the spec and credentials, run the adapter, store the output, build
//! the bounded result.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use toolgate_core::exec::{EXEC_SPEC_VERSION, ExecSpec};
use toolgate_core::redact::Redactor;
use toolgate_crds::{
    ArtifactKind, CallError, CallResult, CheckResult, ExecutionAdapter, ObservedEffects,
    OutputExposure, ResultStatus, Usage, Verifier, VerifierCheck, VerifierStatus,
};

use crate::effects;
use crate::render::{RenderError, render_argv, render_text};
use crate::result::{bound, cut};
use crate::sink::{Sink, SinkError, SinkOutcome, SinkTarget};
use crate::store::{ArtifactStore, StoreError};

/// Structured output is parsed from at most this much stdout.
const STRUCTURED_LIMIT: usize = 1024 * 1024;
/// How long output pipes may stay open after the process group was killed.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Why the executor could not run a call. Each has its own exit code.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The spec file is missing or unreadable.
    #[error("spec {path}: {source}")]
    SpecUnreadable {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The spec is not valid JSON of the expected shape.
    #[error("spec {path}: {message}")]
    SpecInvalid {
        /// The file.
        path: String,
        /// What serde said, with the field path.
        message: String,
    },
    /// The spec is of another version.
    #[error(
        "spec {path}: apiVersion {found:?} is not supported; this executor reads {EXEC_SPEC_VERSION:?}"
    )]
    SpecVersion {
        /// The file.
        path: String,
        /// The version found.
        found: String,
    },
    /// A credential file is missing or unreadable.
    #[error("credential {file} (CredentialBinding {binding}): {source}")]
    Credential {
        /// The CredentialBinding.
        binding: String,
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// A template cannot be rendered from the args.
    #[error(transparent)]
    Template(#[from] RenderError),
    /// The spec is inconsistent (an http tool without a request template, a URL outside the
    /// allowed domains, …).
    #[error("{0}")]
    Unrunnable(String),
    /// The artifact store cannot be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Storing an artifact failed.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// The spec asks for filesystem confinement and the kernel cannot give it.
    #[error("confinement: {0}")]
    Confinement(#[from] toolgate_sandbox::confine::ConfineError),
}

impl ExecError {
    /// The process exit code for this error (documented in executor/README.md).
    pub fn exit_code(&self) -> u8 {
        match self {
            ExecError::SpecUnreadable { .. } => 66,
            ExecError::SpecInvalid { .. } => 67,
            ExecError::SpecVersion { .. } => 68,
            ExecError::Credential { .. } => 71,
            ExecError::Template(_) => 65,
            ExecError::Unrunnable(_) => 72,
            ExecError::Store(_) | ExecError::Sink(_) => 69,
            ExecError::Confinement(_) => 73,
        }
    }

    /// Stable code for the result's error.
    pub fn code(&self) -> &'static str {
        match self {
            ExecError::SpecUnreadable { .. } => "spec-unreadable",
            ExecError::SpecInvalid { .. } => "spec-invalid",
            ExecError::SpecVersion { .. } => "spec-version",
            ExecError::Credential { .. } => "credential-unreadable",
            ExecError::Template(_) => "template",
            ExecError::Unrunnable(_) => "unrunnable",
            ExecError::Store(_) => "artifact-store",
            ExecError::Sink(_) => "artifact-upload",
            ExecError::Confinement(_) => "confinement",
        }
    }
}

/// Read and check a spec file.
pub fn load_spec(path: &Path) -> Result<ExecSpec, ExecError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ExecError::SpecUnreadable {
        path: p.clone(),
        source,
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| ExecError::SpecInvalid {
        path: p.clone(),
        message: e.to_string(),
    })?;
    match value.get("apiVersion").and_then(Value::as_str) {
        Some(EXEC_SPEC_VERSION) => {}
        other => {
            return Err(ExecError::SpecVersion {
                path: p,
                found: other.unwrap_or("<missing>").into(),
            });
        }
    }
    serde_path_to_error::deserialize(&value).map_err(|e| ExecError::SpecInvalid {
        path: p,
        message: format!("{}: {}", e.path(), e.inner()),
    })
}

/// A credential value, read from its file. Never printed.
pub struct Credential {
    /// Where it goes.
    pub file: toolgate_core::exec::CredentialFile,
    /// The path of the file.
    pub path: PathBuf,
    /// The value.
    pub value: String,
}

/// Read the credentials a spec names from `dir`.
pub fn load_credentials(spec: &ExecSpec, dir: &Path) -> Result<Vec<Credential>, ExecError> {
    spec.credentials
        .iter()
        .map(|c| {
            let path = dir.join(&c.file_name);
            let value = std::fs::read_to_string(&path).map_err(|source| ExecError::Credential {
                binding: c.binding.clone(),
                file: path.display().to_string(),
                source,
            })?;
            Ok(Credential {
                file: c.clone(),
                path,
                value: value.trim_end_matches(['\n', '\r']).to_string(),
            })
        })
        .collect()
}

/// Run a call and return its bounded result.
pub async fn execute(
    spec: &ExecSpec,
    credentials: &[Credential],
    credentials_dir: &Path,
) -> Result<CallResult, ExecError> {
    let redactor = Redactor::new(credentials.iter().map(|c| c.value.as_bytes()));
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
        other => {
            return Err(ExecError::Unrunnable(format!(
                "execution.adapter {other:?} is not run by this executor build"
            )));
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
    }
    // Belt and braces: nothing model-visible leaves without a last redaction pass.
    result.output_preview = result.output_preview.map(|p| redactor.redact_str(&p));
    result.structured_output = result.structured_output.map(|v| redact_value(&redactor, v));
    if let Some(e) = result.error.as_mut() {
        e.message = redactor.redact_str(&e.message);
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

/// The tool's main output (stdout, a response body, an operation report), with the preview the
/// context policy allows.
pub(crate) async fn open_output<'r>(
    spec: &ExecSpec,
    store: &ArtifactStore,
    redactor: &'r Redactor,
    id: &str,
    content_type: &'static str,
) -> Result<Sink<'r>, SinkError> {
    let t = target(
        spec,
        id,
        ArtifactKind::ToolOutput,
        content_type,
        spec.limits.max_stdout_bytes,
        spec.context.preview_bytes(),
    );
    Sink::open(store, t, redactor).await
}

pub(crate) fn target<'a>(
    spec: &'a ExecSpec,
    id: &'a str,
    kind: ArtifactKind,
    content_type: &'static str,
    cap: u64,
    preview: usize,
) -> SinkTarget<'a> {
    SinkTarget {
        namespace: &spec.call.namespace,
        call: &spec.call.name,
        event_id: &spec.call.event_id,
        artifact_id: id,
        kind,
        content_type,
        cap,
        preview_limit: preview,
    }
}

async fn pump<R: AsyncRead + Unpin>(
    mut from: R,
    sink: &mut Sink<'_>,
    keep: Option<&mut Vec<u8>>,
) -> Result<(), SinkError> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut keep = keep;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return Ok(()),
            Ok(n) => n,
        };
        if let Some(k) = keep.as_deref_mut()
            && k.len() < STRUCTURED_LIMIT
        {
            let take = (STRUCTURED_LIMIT - k.len()).min(n);
            k.extend_from_slice(&buf[..take]);
        }
        sink.write(&buf[..n]).await?;
    }
}

fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

async fn run_cli(
    spec: &ExecSpec,
    credentials: &[Credential],
    credentials_dir: &Path,
    store: &ArtifactStore,
    redactor: &Redactor,
) -> Result<CallResult, ExecError> {
    let argv = render_argv(&spec.execution.argv, &spec.args)?;
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
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(rest).env_clear();
    for name in &spec.env.inherit {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    cmd.envs(&spec.env.set);
    if credentials.iter().any(|c| c.file.env_name.is_none()) {
        cmd.env("TOOLGATE_CREDENTIALS_DIR", credentials_dir);
    }
    for c in credentials {
        if let Some(name) = &c.file.env_name {
            cmd.env(name, &c.value);
        }
    }
    if spec.dry_run {
        cmd.env("TOOLGATE_DRY_RUN", "1");
    }
    if let Some(dir) = &spec.working_dir {
        cmd.current_dir(dir);
    }
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0)
    .kill_on_drop(true);
    // The sandbox's seccomp filters on the tool itself: in a pod nothing else refuses setuid
    // modes, device nodes and FIFOs (in the embedded sandbox they stack on bubblewrap's copy).
    toolgate_sandbox::seccomp::apply_in_child(cmd.as_std_mut())
        .map_err(|e| ExecError::Unrunnable(e.to_string()))?;
    if let Some(rules) = &spec.confinement {
        let mut rules = toolgate_sandbox::confine::with_system(rules.clone());
        if credentials.iter().any(|c| c.file.env_name.is_none()) {
            rules.read.push(credentials_dir.to_path_buf());
        }
        // Built here, applied in the child: the tool loses what the executor keeps for itself
        // (the spec, the result file, the artifact folder).
        toolgate_sandbox::confine::Confinement::prepare(&rules)?.apply_in_child(cmd.as_std_mut());
    }

    let mut out = open_output(spec, store, redactor, "stdout", "text/plain; charset=utf-8").await?;
    let mut err = Sink::open(
        store,
        target(
            spec,
            "stderr",
            ArtifactKind::Log,
            "text/plain; charset=utf-8",
            spec.limits.max_stderr_bytes,
            1024,
        ),
        redactor,
    )
    .await?;
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

/// A result for a call that failed before producing output.
pub(crate) fn failure(
    status: ResultStatus,
    code: &str,
    message: &str,
    retryable: bool,
    artifacts: Vec<toolgate_crds::ArtifactRef>,
    started: Instant,
) -> CallResult {
    CallResult {
        status,
        exit_code: None,
        output_preview: None,
        structured_output: None,
        artifacts,
        effects_observed: None,
        verifier: None,
        error: Some(CallError {
            code: code.into(),
            message: message.into(),
            retryable,
            safe_to_show_user: false,
        }),
        usage: Some(Usage {
            latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            output_bytes: 0,
            tokens_added_to_context: None,
        }),
    }
}

/// How a process (or request) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    /// The exit code, or the HTTP status.
    pub code: Option<i32>,
    /// The signal that ended the process.
    pub signal: Option<i32>,
    /// It ran past its deadline (and was killed, or ended late).
    pub timed_out: bool,
}

impl Ended {
    /// Ended with a code, in time.
    pub(crate) fn code(code: i32) -> Ended {
        Ended {
            code: Some(code),
            signal: None,
            timed_out: false,
        }
    }
}

/// `SIGKILL (9)`.
fn signal_name(signal: i32) -> String {
    match nix::sys::signal::Signal::try_from(signal) {
        Ok(s) => format!("{} ({signal})", s.as_str()),
        Err(_) => format!("signal {signal}"),
    }
}

/// Build the result from what the streams produced. `ended.code` is the process exit code or
/// the HTTP status.
pub(crate) fn assemble(
    spec: &ExecSpec,
    out: SinkOutcome,
    err: Option<SinkOutcome>,
    ended: Ended,
    structured: Option<Vec<u8>>,
    started: Instant,
) -> CallResult {
    let Ended {
        code: exit_code,
        signal,
        timed_out,
    } = ended;
    let http = spec.execution.adapter == ExecutionAdapter::Http;
    let ok_code = match exit_code {
        Some(c) if http => (200..300).contains(&c),
        Some(c) => c == 0,
        None => false,
    };
    let truncated = out.truncated || err.as_ref().is_some_and(|e| e.truncated);
    let mut checks = vec![VerifierCheck {
        name: if http {
            "http-status".into()
        } else {
            "exit-code".into()
        },
        result: if ok_code {
            CheckResult::Pass
        } else {
            CheckResult::Fail
        },
        message: Some(match exit_code {
            Some(c) if http => format!("HTTP {c}"),
            Some(c) if timed_out => format!(
                "exit code {c}, past the {} ms limit",
                spec.limits.timeout_ms
            ),
            Some(c) => format!("exit code {c}"),
            None if timed_out => format!("killed after {} ms", spec.limits.timeout_ms),
            None => format!(
                "killed by {}",
                signal.map_or_else(|| "a signal".into(), signal_name)
            ),
        }),
    }];
    checks.push(VerifierCheck {
        name: "size".into(),
        result: if truncated {
            CheckResult::Warn
        } else {
            CheckResult::Pass
        },
        message: Some(format!(
            "{} bytes produced, {} kept",
            out.produced + err.as_ref().map_or(0, |e| e.produced),
            out.artifact.size_bytes + err.as_ref().map_or(0, |e| e.artifact.size_bytes)
        )),
    });
    let mut structured_output = None;
    if let (Some(schema), Some(raw)) = (&spec.output_schema, structured) {
        let check = match serde_json::from_slice::<Value>(&raw) {
            Err(e) => VerifierCheck {
                name: "output-schema".into(),
                result: CheckResult::Fail,
                message: Some(format!("output is not JSON: {e}")),
            },
            Ok(v) => match jsonschema::validator_for(schema) {
                Err(e) => VerifierCheck {
                    name: "output-schema".into(),
                    result: CheckResult::Fail,
                    message: Some(format!("output schema does not compile: {e}")),
                },
                Ok(validator) => {
                    let errors: Vec<String> = validator
                        .iter_errors(&v)
                        .map(|e| format!("{} at {}", e, e.instance_path().as_str()))
                        .collect();
                    if errors.is_empty() {
                        if matches!(
                            spec.context.expose_output_to_model,
                            OutputExposure::Structured | OutputExposure::Full
                        ) {
                            structured_output = Some(v);
                        }
                        VerifierCheck {
                            name: "output-schema".into(),
                            result: CheckResult::Pass,
                            message: None,
                        }
                    } else {
                        VerifierCheck {
                            name: "output-schema".into(),
                            result: CheckResult::Fail,
                            message: Some(errors.join("; ")),
                        }
                    }
                }
            },
        };
        checks.push(check);
    }
    let failed = checks.iter().any(|c| c.result == CheckResult::Fail);
    let status = if timed_out || !ok_code {
        ResultStatus::Error
    } else if truncated || failed {
        ResultStatus::Partial
    } else {
        ResultStatus::Success
    };
    let error = if timed_out {
        Some(CallError {
            code: "timeout".into(),
            message: format!(
                "the tool ran past its {} ms limit; its process group was killed",
                spec.limits.timeout_ms
            ),
            retryable: true,
            safe_to_show_user: true,
        })
    } else if !ok_code {
        let stderr_head = err
            .as_ref()
            .map(|e| String::from_utf8_lossy(&e.preview).into_owned())
            .unwrap_or_default();
        let (code, retryable, what) = match exit_code {
            Some(c) if http => (
                format!("http-{c}"),
                c == 429 || c >= 500,
                format!("HTTP {c}"),
            ),
            Some(c) => ("exit-nonzero".into(), false, format!("exit code {c}")),
            None => (
                "signal".into(),
                false,
                format!(
                    "killed by {}",
                    signal.map_or_else(|| "a signal".into(), signal_name)
                ),
            ),
        };
        let stderr_head = stderr_head.trim();
        Some(CallError {
            code,
            // Name what happened; the tool's own words follow when it said any.
            message: if stderr_head.is_empty() {
                what
            } else {
                cut(&format!("{what}: {stderr_head}"), 512)
            },
            retryable,
            safe_to_show_user: false,
        })
    } else {
        None
    };
    let preview_limit = spec.context.preview_bytes();
    let output_preview =
        (preview_limit > 0).then(|| cut(&String::from_utf8_lossy(&out.preview), preview_limit));
    let output_bytes = out.produced + err.as_ref().map_or(0, |e| e.produced);
    let mut artifacts = vec![out.artifact];
    if let Some(e) = err
        && (e.produced > 0 || !ok_code)
    {
        artifacts.push(e.artifact);
    }
    CallResult {
        status,
        exit_code,
        output_preview: output_preview.clone(),
        structured_output,
        artifacts,
        effects_observed: None,
        verifier: Some(Verifier {
            status: if failed {
                VerifierStatus::Failed
            } else {
                VerifierStatus::Passed
            },
            checks,
        }),
        error,
        usage: Some(Usage {
            latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            output_bytes,
            tokens_added_to_context: output_preview.map(|p| (p.len() as u64).div_ceil(4)),
        }),
    }
}
