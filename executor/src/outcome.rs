//! The call's result: its output streamed to the artifact store (with the preview the context
//! policy allows), and the bounded, verified result built from how the tool ended. Shared by
//! every adapter.

use std::time::Instant;

use serde_json::Value;
use toolgate_contract::exec::ExecSpec;
use toolgate_contract::redact::Redactor;
use toolgate_crds::{
    ArtifactKind, CallError, CallResult, CheckResult, ExecutionAdapter, OutputExposure,
    ResultStatus, Usage, Verifier, VerifierCheck, VerifierStatus,
};

use crate::result::cut;
use crate::sink::{Sink, SinkError, SinkOutcome, SinkTarget};
use toolgate_artifacts::ArtifactStore;

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

/// The `stderr` log artifact of a process the executor starts (a CLI tool, an MCP server).
pub(crate) async fn open_stderr<'r>(
    spec: &ExecSpec,
    store: &ArtifactStore,
    redactor: &'r Redactor,
) -> Result<Sink<'r>, SinkError> {
    let t = target(
        spec,
        "stderr",
        ArtifactKind::Log,
        "text/plain; charset=utf-8",
        spec.limits.max_stderr_bytes,
        1024,
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
            egress_gate_ms: None,
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
        let (check, output) = output_schema_check(spec, schema, &raw);
        structured_output = output;
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
    let error = call_error(spec, &ended, ok_code, err.as_ref());
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
            egress_gate_ms: None,
        }),
    }
}

/// The output-schema check of a tool's structured output, and the output itself when it passes
/// and the descriptor exposes it to the model.
fn output_schema_check(
    spec: &ExecSpec,
    schema: &Value,
    raw: &[u8],
) -> (VerifierCheck, Option<Value>) {
    let mut structured_output = None;
    let check = match serde_json::from_slice::<Value>(raw) {
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
    (check, structured_output)
}

/// Why the call failed, when it did: its time limit, or its exit code, status or signal with the
/// head of what it said on stderr.
fn call_error(
    spec: &ExecSpec,
    ended: &Ended,
    ok_code: bool,
    err: Option<&SinkOutcome>,
) -> Option<CallError> {
    let Ended {
        code: exit_code,
        signal,
        timed_out,
    } = *ended;
    let http = spec.execution.adapter == ExecutionAdapter::Http;
    if timed_out {
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
    }
}
