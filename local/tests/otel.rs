//! OpenTelemetry, end to end with the real binary and a real collector (Jaeger, built by
//! tests/jaeger/build.sh): a call's span arrives under the span the agent sent in `traceparent`,
//! with a child per step and the GenAI attributes; the trace context reaches the tool's process;
//! no credential canary is in any attribute; a malformed `traceparent` and an unreachable
//! collector cost the call nothing.

mod support;

use support::*;
use toolgate_testkit::jaeger::{Span, TestJaeger, have_jaeger};

const AGENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const AGENT_SPAN: &str = "00f067aa0ba902b7";

/// The test tools plus one that prints its trace context and one that reads a credential.
fn traced_setup() -> tempfile::TempDir {
    let dir = setup();
    let m = dir.path().join("manifests");
    let grant = toolgate_testkit::fixtures::grant(
        "team-a",
        "test-tools",
        &["test.echo", "test.traceparent", "test.secret"],
    )
    .replace(
        "scopes: [\"workspace:read\"]",
        "scopes: [\"workspace:read\", \"github:issues:write\"]",
    );
    std::fs::write(m.join("test-grant.yaml"), grant).expect("grant");
    std::fs::write(
        m.join("tools/test-traceparent.yaml"),
        // A second of work first: the sandbox's run span must be at least that long.
        Tool::test("test.traceparent")
            .argv("[sh, -c, \"sleep 1; printenv TRACEPARENT\"]")
            .yaml("team-a"),
    )
    .expect("tool");
    std::fs::write(
        m.join("tools/test-secret.yaml"),
        Tool::test("test.secret")
            .binding("github-issues-bot")
            .yaml("team-a"),
    )
    .expect("tool");
    dir
}

async fn propose_traced(
    c: &mut toolgate_proto::v1::toolgate_client::ToolgateClient<tonic::transport::Channel>,
    tool: &str,
    traceparent: &str,
) -> toolgate_proto::v1::Call {
    let mut r = req(
        AGENT,
        propose(tool, serde_json::json!({"msg": "hi"}), "execute"),
    );
    r.metadata_mut()
        .insert("traceparent", traceparent.parse().expect("ascii"));
    c.propose_call(r).await.expect("proposed").into_inner()
}

fn named<'a>(spans: &'a [Span], name: &str) -> Option<&'a Span> {
    spans.iter().find(|s| s.name == name)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_calls_spans_arrive_under_the_agents_span_and_its_context_reaches_the_tool() {
    if !have_jaeger() {
        return;
    }
    let jaeger = TestJaeger::start();
    let dir = traced_setup();
    let server = Server::start_with(
        dir.path(),
        &dir.path().join("data"),
        &dir.path().join("workspace"),
        &["--listen", "127.0.0.1:0", "--otlp-endpoint", &jaeger.otlp],
    );
    let mut c = server.client().await;
    let traceparent = format!("00-{AGENT_TRACE}-{AGENT_SPAN}-01");
    let call = propose_traced(&mut c, "test.traceparent", &traceparent).await;
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Succeeded", "{done:#?}");

    let spans = jaeger.wait_for(AGENT_TRACE, |s| {
        named(s, "execute_tool test.traceparent").is_some()
    });
    let root = named(&spans, "execute_tool test.traceparent").expect("call span");
    assert_eq!(
        root.parent.as_deref(),
        Some(AGENT_SPAN),
        "under the agent's span: {root:#?}"
    );
    assert_eq!(root.service, "toolgate-local");
    assert_eq!(root.tag("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(root.tag("gen_ai.tool.name"), Some("test.traceparent"));
    assert_eq!(root.tag("gen_ai.tool.call.id"), Some(call.id.as_str()));
    assert_eq!(root.tag("toolgate.decision"), Some("allow"));
    assert_eq!(root.tag("toolgate.phase"), Some("Succeeded"));
    assert!(root.tag("toolgate.risk_tier").is_some(), "{root:#?}");
    // One child per step of the chain, each under the call's span.
    for step in [
        "ToolCallRequested",
        "ArgsValidated",
        "PolicyChecked",
        "SandboxPrepared",
        "Started",
        "Finished",
        "ArtifactPersisted",
    ] {
        let s = named(&spans, &format!("toolgate.step {step}"))
            .unwrap_or_else(|| panic!("no {step} span in {spans:#?}"));
        assert_eq!(s.parent.as_deref(), Some(root.span_id.as_str()), "{s:#?}");
        assert_eq!(s.tag("gen_ai.tool.call.id"), Some(call.id.as_str()));
    }
    // The decision and the sandbox's run, each a span as long as it took, under the call's.
    for name in ["toolgate.decide", "toolgate.sandbox.run"] {
        let s = named(&spans, name).unwrap_or_else(|| panic!("no {name} span in {spans:#?}"));
        assert_eq!(s.parent.as_deref(), Some(root.span_id.as_str()), "{s:#?}");
        assert!(s.duration <= root.duration, "{s:#?} within {root:#?}");
    }
    let run = named(&spans, "toolgate.sandbox.run").expect("run");
    assert!(
        run.duration >= std::time::Duration::from_secs(1),
        "as long as the tool ran: {run:#?}"
    );
    assert_eq!(
        named(&spans, "toolgate.decide").and_then(|s| s.tag("toolgate.decision")),
        Some("allow")
    );
    assert_eq!(
        named(&spans, "toolgate.sandbox.run").and_then(|s| s.tag("process.exit.code")),
        Some("0")
    );
    // The tool's process got the call's context: the agent's trace, the call's span.
    let out = &done.output_preview;
    assert!(
        out.contains(&format!("00-{AGENT_TRACE}-{}-01", root.span_id)),
        "TRACEPARENT in the tool: {out:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_credential_reaches_a_span_and_bad_trace_context_costs_the_call_nothing() {
    if !have_jaeger() {
        return;
    }
    let jaeger = TestJaeger::start();
    let dir = traced_setup();
    let server = Server::start_with(
        dir.path(),
        &dir.path().join("data"),
        &dir.path().join("workspace"),
        &["--listen", "127.0.0.1:0", "--otlp-endpoint", &jaeger.otlp],
    );
    let mut c = server.client().await;
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let call = propose_traced(
        &mut c,
        "test.secret",
        &format!("00-{trace}-b7ad6b7169203331-01"),
    )
    .await;
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Succeeded", "{done:#?}");
    let spans = jaeger.wait_for(trace, |s| named(s, "execute_tool test.secret").is_some());
    assert!(
        spans
            .iter()
            .any(|s| s.name == "toolgate.step CredentialsBound"),
        "{spans:#?}"
    );
    for s in &spans {
        for (k, v) in &s.tags {
            assert!(
                !v.contains(CANARY) && !k.contains(CANARY),
                "canary in {s:#?}"
            );
        }
    }

    // A malformed traceparent: the call runs, in a trace of its own.
    for bad in [
        "garbage",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    ] {
        let call = propose_traced(&mut c, "test.echo", bad).await;
        let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
        assert_eq!(done.phase, "Succeeded", "{bad}: {done:#?}");
    }
    // An unsampled agent span: the call runs and toolgate exports nothing under it.
    let unsampled = "11111111111111111111111111111111";
    let call = propose_traced(
        &mut c,
        "test.echo",
        &format!("00-{unsampled}-b7ad6b7169203331-00"),
    )
    .await;
    wait_phase(&mut c, &call.id, &["Succeeded"]).await;
    let later = propose_traced(
        &mut c,
        "test.echo",
        &format!("00-{trace}-b7ad6b7169203332-01"),
    )
    .await;
    wait_phase(&mut c, &later.id, &["Succeeded"]).await;
    jaeger.wait_for(trace, |s| {
        s.iter()
            .filter(|s| s.name == "execute_tool test.echo")
            .count()
            == 1
    });
    assert!(
        jaeger.spans(unsampled).is_empty(),
        "the agent's sampling decision holds"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_collector_never_blocks_a_call() {
    let dir = traced_setup();
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut server = Server::start_with(
        dir.path(),
        &dir.path().join("data"),
        &dir.path().join("workspace"),
        &["--listen", "127.0.0.1:0", "--otlp-endpoint", &endpoint],
    );
    let mut c = server.client().await;
    for i in 0..5 {
        let call = propose_traced(
            &mut c,
            "test.echo",
            &format!("00-{AGENT_TRACE}-{AGENT_SPAN}-01"),
        )
        .await;
        let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
        assert_eq!(done.phase, "Succeeded", "call {i}: {done:#?}");
    }
    // And it still stops when asked (the last batch is given up on, not waited for forever).
    server.stop();
    assert!(server.child.try_wait().expect("status").is_some());

    // A collector address that is not a URL is refused at start, saying what is expected.
    let out = local_command(
        dir.path(),
        &dir.path().join("data2"),
        &dir.path().join("workspace"),
    )
    .args([
        "--listen",
        "127.0.0.1:0",
        "--otlp-endpoint",
        "127.0.0.1:4317",
    ])
    .output()
    .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "--otlp-endpoint: expected an http:// or https:// URL, got \"127.0.0.1:4317\""
        ),
        "{err}"
    );
}
