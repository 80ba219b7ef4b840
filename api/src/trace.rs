//! OpenTelemetry traces of calls, written once for both runtimes: a span per call (`execute_tool
//! <tool>`, after the OTel GenAI conventions) under the span the agent sent in `traceparent`, a
//! child span per recorded step of the causal chain, and two that last as long as what they name:
//! `toolgate.decide` (from the proposal to the policy's decision) and `toolgate.sandbox.run`
//! (from the executor's start to its end), timed from the call's condition times. Attributes
//! carry names, tiers, decisions and reason codes — never argument values, messages or
//! credentials.
//!
//! A call's span ids are derived from its uid, so every replica and every restart of a runtime
//! names the same span without storing it; what a runtime keeps is only the agent's
//! `traceparent` (the operator in an annotation, `toolgate local` in its store).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks,
    SpanProcessor,
};
use sha2::{Digest, Sha256};
use toolgate_core::lifecycle::{Step, is_terminal, phase_name};
use toolgate_crds::conditions::{FINISHED, POLICY_CHECKED, STARTED, TOOL_CALL_REQUESTED};
use toolgate_crds::{ConditionStatus, ToolCallStatus};

/// The annotation a ToolCall carries its agent's W3C `traceparent` in (a `kubectl apply` may set
/// it too: the call then joins that trace).
pub const TRACEPARENT_ANNOTATION: &str = "toolgate.dev/traceparent";

/// The gRPC metadata key the trace context travels in.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// Why tracing cannot start.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The endpoint is not an `http://` or `https://` URL.
    #[error("--otlp-endpoint: expected an http:// or https:// URL, got {0:?}")]
    Endpoint(String),
    /// The exporter could not be built.
    #[error("--otlp-endpoint {endpoint}: {message}")]
    Exporter {
        /// The endpoint.
        endpoint: String,
        /// What failed.
        message: String,
    },
}

/// Where call spans go: nowhere (the default), or an OTLP/gRPC collector. Spans are built here
/// (a call's span ids are its own, not a tracer's) and handed to a batch processor that exports
/// on a thread of its own: an unreachable collector costs a log line, never a call.
#[derive(Clone, Default)]
pub struct CallTracer {
    otlp: Option<Arc<BatchSpanProcessor>>,
}

impl std::fmt::Debug for CallTracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallTracer")
            .field("exporting", &self.otlp.is_some())
            .finish()
    }
}

/// The call a span is about.
#[derive(Debug, Clone, Copy)]
pub struct TracedCall<'a> {
    /// Unique for the call's whole life (the object's uid, or the local call id).
    pub uid: &'a str,
    /// The call's name (its id).
    pub name: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// The tool it calls.
    pub tool: &'a str,
    /// The agent's `traceparent`, when it sent one.
    pub traceparent: Option<&'a str>,
    /// When the call was created.
    pub created: SystemTime,
}

impl CallTracer {
    /// Export call spans to the OTLP/gRPC collector at `endpoint` as `service`. Must be called
    /// inside a Tokio runtime (the exporter's channel lives there); connecting is lazy.
    pub fn otlp(endpoint: &str, service: &'static str) -> Result<Self, TraceError> {
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(TraceError::Endpoint(endpoint.into()));
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| TraceError::Exporter {
                endpoint: endpoint.into(),
                message: e.to_string(),
            })?;
        let mut processor = BatchSpanProcessor::builder(exporter).build();
        processor.set_resource(
            &opentelemetry_sdk::Resource::builder()
                .with_service_name(service)
                .build(),
        );
        Ok(CallTracer {
            otlp: Some(Arc::new(processor)),
        })
    }

    /// Send what is buffered and stop (at shutdown).
    pub fn shutdown(&self) {
        if let Some(p) = &self.otlp
            && let Err(e) = p.shutdown()
        {
            tracing::warn!(error = %e, "flushing call spans");
        }
    }

    /// Trace steps a runtime has just made durable (`began`: when it started recording them):
    /// one span per step, and the call's own span when they end it.
    pub fn record(
        &self,
        call: &TracedCall<'_>,
        status: &ToolCallStatus,
        steps: &[Step],
        began: SystemTime,
    ) {
        let Some(processor) = &self.otlp else {
            return;
        };
        let ids = CallIds::of(call);
        let call_context = ids.call_context();
        // The agent's sampling decision holds for everything under its span.
        if steps.is_empty() || !call_context.is_sampled() {
            return;
        }
        let now = SystemTime::now();
        for step in steps {
            let mut attributes = vec![
                KeyValue::new("gen_ai.tool.call.id", call.name.to_string()),
                KeyValue::new("toolgate.step", step.kind),
                KeyValue::new("toolgate.step.status", step.status.as_str()),
                KeyValue::new("toolgate.step.reason", step.reason.clone()),
            ];
            if let Some(phase) = step.phase {
                attributes.push(KeyValue::new("toolgate.phase", phase_name(Some(phase))));
            }
            let status = if step.status == ConditionStatus::False {
                Status::error(step.reason.clone())
            } else {
                Status::Unset
            };
            processor.on_end(span(
                SpanContext::new(
                    ids.trace,
                    RandomIdGenerator::default().new_span_id(),
                    call_context.trace_flags(),
                    false,
                    call_context.trace_state().clone(),
                ),
                (ids.call, false),
                format!("toolgate.step {}", step.kind),
                (began.min(now), now),
                attributes,
                status,
            ));
        }
        for span in timed_spans(call, &ids, status, steps, now) {
            processor.on_end(span);
        }
        let ended = steps
            .iter()
            .any(|s| s.phase.is_some_and(|p| is_terminal(Some(p))))
            && is_terminal(status.phase);
        if ended {
            processor.on_end(call_span(call, &ids, status, steps, now));
        }
    }
}

/// The spans that last as long as what they name, for the steps that end it: the decision
/// (`PolicyChecked`: since the proposal) and the sandbox's run (`Finished`: since `Started`).
fn timed_spans(
    call: &TracedCall<'_>,
    ids: &CallIds,
    status: &ToolCallStatus,
    steps: &[Step],
    now: SystemTime,
) -> Vec<SpanData> {
    let since = |kind: &str| {
        toolgate_crds::conditions::transition_time(&status.conditions, kind)
            .map(|t| SystemTime::try_from(t).unwrap_or(now).min(now))
    };
    let mut out = Vec::new();
    for step in steps {
        let (name, from, mut attributes) = match step.kind {
            POLICY_CHECKED => {
                let mut a = Vec::new();
                if let Some(auth) = &status.authorization {
                    a.push(KeyValue::new(
                        "toolgate.risk_tier",
                        auth.risk_tier.to_string(),
                    ));
                    if let Some(d) = serde_json::to_value(auth.decision)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                    {
                        a.push(KeyValue::new("toolgate.decision", d));
                    }
                }
                ("toolgate.decide", since(TOOL_CALL_REQUESTED), a)
            }
            FINISHED => {
                let mut a = Vec::new();
                if let Some(code) = status.result.as_ref().and_then(|r| r.exit_code) {
                    a.push(KeyValue::new("process.exit.code", i64::from(code)));
                }
                ("toolgate.sandbox.run", since(STARTED), a)
            }
            _ => continue,
        };
        let Some(from) = from else { continue };
        attributes.push(KeyValue::new("gen_ai.tool.call.id", call.name.to_string()));
        let span_status = if step.status == ConditionStatus::False {
            Status::error(step.reason.clone())
        } else {
            Status::Unset
        };
        let context = ids.call_context();
        out.push(span(
            SpanContext::new(
                ids.trace,
                RandomIdGenerator::default().new_span_id(),
                context.trace_flags(),
                false,
                context.trace_state().clone(),
            ),
            (ids.call, false),
            name.to_string(),
            (from, now),
            attributes,
            span_status,
        ));
    }
    out
}

fn call_span(
    call: &TracedCall<'_>,
    ids: &CallIds,
    status: &ToolCallStatus,
    steps: &[Step],
    now: SystemTime,
) -> SpanData {
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
        KeyValue::new("gen_ai.tool.name", call.tool.to_string()),
        KeyValue::new("gen_ai.tool.call.id", call.name.to_string()),
        KeyValue::new("gen_ai.tool.type", "function"),
        KeyValue::new("toolgate.namespace", call.namespace.to_string()),
        KeyValue::new("toolgate.phase", phase_name(status.phase)),
    ];
    if let Some(a) = &status.authorization {
        attributes.push(KeyValue::new("toolgate.risk_tier", a.risk_tier.to_string()));
        if let Some(decision) = serde_json::to_value(a.decision)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
        {
            attributes.push(KeyValue::new("toolgate.decision", decision));
        }
        let codes: Vec<opentelemetry::StringValue> =
            a.reasons.iter().map(|r| r.code.clone().into()).collect();
        attributes.push(KeyValue::new(
            "toolgate.reason_codes",
            opentelemetry::Value::Array(codes.into()),
        ));
    }
    let outcome = phase_name(status.phase);
    let mut span_status = Status::Unset;
    if outcome != "Succeeded" {
        let why = steps
            .iter()
            .rev()
            .find(|s| s.status == ConditionStatus::False)
            .map(|s| s.reason.clone())
            .unwrap_or_else(|| outcome.to_string());
        attributes.push(KeyValue::new("error.type", why.clone()));
        span_status = Status::error(why);
    }
    // With no agent span, the call roots its own trace (named from its uid).
    let parent = ids
        .parent
        .as_ref()
        .map(|p| (p.span_id(), true))
        .unwrap_or((SpanId::INVALID, false));
    span(
        ids.call_context(),
        parent,
        format!("execute_tool {}", call.tool),
        (call.created.min(now), now),
        attributes,
        span_status,
    )
}

fn span(
    span_context: SpanContext,
    (parent_span_id, parent_span_is_remote): (SpanId, bool),
    name: String,
    (start_time, end_time): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    status: Status,
) -> SpanData {
    SpanData {
        span_context,
        parent_span_id,
        parent_span_is_remote,
        span_kind: SpanKind::Internal,
        name: Cow::Owned(name),
        start_time,
        end_time,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: InstrumentationScope::builder("toolgate")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
}

tokio::task_local! {
    /// The checked `traceparent` of the request being served (OTel's context, per request).
    static REQUEST_TRACEPARENT: Option<String>;
}

/// Run `f` as serving a request sent under `traceparent` (already checked).
pub async fn with_traceparent<F: std::future::Future>(
    traceparent: Option<String>,
    f: F,
) -> F::Output {
    REQUEST_TRACEPARENT.scope(traceparent, f).await
}

/// The `traceparent` of the request being served, if it sent one.
pub fn request_traceparent() -> Option<String> {
    REQUEST_TRACEPARENT.try_with(|t| t.clone()).ok().flatten()
}

/// The `traceparent` of gRPC metadata: a malformed one is logged and left out (a call is never
/// refused or slowed for its trace context).
pub fn from_metadata(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
    let value = metadata.get(TRACEPARENT_HEADER)?;
    let checked = match value.to_str() {
        Ok(v) => parse_traceparent(Some(v)),
        Err(_) => Err("traceparent: expected ASCII".to_string()),
    };
    checked.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "ignoring the request's trace context");
        None
    })
}

/// The `traceparent` a call hands on (to its executor and the tool's process): the call's span.
pub fn call_traceparent(call: &TracedCall<'_>) -> String {
    let ids = CallIds::of(call);
    let flags = ids.call_context().trace_flags();
    format!("00-{}-{}-{:02x}", ids.trace, ids.call, flags.to_u8())
}

/// A W3C `traceparent`, checked: `Ok(None)` when absent, an error saying what is wrong (the call
/// goes on without it; a malformed header never refuses a call).
pub fn parse_traceparent(value: Option<&str>) -> Result<Option<String>, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if v.len() > 256 {
        return Err(format!(
            "traceparent: expected at most 256 bytes, got {}",
            v.len()
        ));
    }
    match remote_parent(v) {
        Some(_) => Ok(Some(v.to_string())),
        None => Err(format!(
            "traceparent: expected `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>` (W3C \
             Trace Context), got {v:?}"
        )),
    }
}

fn remote_parent(traceparent: &str) -> Option<SpanContext> {
    let carrier = HashMap::from([(TRACEPARENT_HEADER.to_string(), traceparent.to_string())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// The ids of a call's spans: its trace (the agent's, or one of its own), its span, its parent.
struct CallIds {
    trace: TraceId,
    call: SpanId,
    parent: Option<SpanContext>,
}

impl CallIds {
    fn of(call: &TracedCall<'_>) -> CallIds {
        let parent = call.traceparent.and_then(remote_parent);
        let trace = match &parent {
            Some(p) => p.trace_id(),
            None => TraceId::from_bytes(digest16(b"toolgate-trace/", call.uid)),
        };
        let span = digest16(b"toolgate-span/", call.uid);
        let mut call_span = [0u8; 8];
        call_span.copy_from_slice(&span[..8]);
        CallIds {
            trace,
            call: SpanId::from_bytes(call_span),
            parent,
        }
    }

    /// The call's span as a parent for its steps: sampled as the agent's span was.
    fn call_context(&self) -> SpanContext {
        let flags = self
            .parent
            .as_ref()
            .map(|p| p.trace_flags())
            .unwrap_or(TraceFlags::SAMPLED);
        let state = self
            .parent
            .as_ref()
            .map(|p| p.trace_state().clone())
            .unwrap_or_default();
        SpanContext::new(self.trace, self.call, flags, true, state)
    }
}

fn digest16(domain: &[u8], uid: &str) -> [u8; 16] {
    let d = Sha256::new()
        .chain_update(domain)
        .chain_update(uid.as_bytes())
        .finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&d[..16]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(traceparent: Option<&str>) -> TracedCall<'_> {
        TracedCall {
            uid: "u-1",
            name: "c-1",
            namespace: "ns",
            tool: "t",
            traceparent,
            created: SystemTime::now(),
        }
    }

    #[test]
    fn a_call_continues_the_agents_trace() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let tp = call_traceparent(&call(Some(parent)));
        assert!(
            tp.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
            "{tp}"
        );
        assert!(
            !tp.contains("b7ad6b7169203331"),
            "the call has a span of its own: {tp}"
        );
        assert_eq!(
            tp,
            call_traceparent(&call(Some(parent))),
            "stable across passes"
        );
        assert!(tp.ends_with("-01"));
    }

    #[test]
    fn a_call_without_an_agent_span_roots_its_own_trace() {
        let tp = call_traceparent(&call(None));
        assert!(remote_parent(&tp).is_some(), "{tp}");
        assert_ne!(
            tp,
            call_traceparent(&TracedCall {
                uid: "u-2",
                ..call(None)
            })
        );
    }

    #[test]
    fn malformed_traceparents_are_named_not_fatal() {
        assert_eq!(parse_traceparent(None), Ok(None));
        assert_eq!(parse_traceparent(Some(" ")), Ok(None));
        for bad in [
            "garbage",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            let e = parse_traceparent(Some(bad)).unwrap_err();
            assert!(e.starts_with("traceparent: expected"), "{e}");
        }
        assert!(parse_traceparent(Some(&"0".repeat(300))).is_err());
    }
}
