//! End-to-end tests of `toolgate local`: the real binary as a server process, real sandboxes,
//! and nothing but the generated gRPC client to talk to it.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use support::*;
use tonic::transport::Channel;
use toolgate_proto::v1 as pb;

#[tokio::test(flavor = "multi_thread")]
async fn an_allowed_read_runs_in_the_sandbox_and_the_watch_tells_the_whole_chain() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let call = submit(
        &mut c,
        "file.read",
        serde_json::json!({"path": "src/a.ts"}),
        "read",
    )
    .await;
    assert_eq!(call.principal, "system:serviceaccount:team-a:fixer");
    assert!(
        call.tool_digest.starts_with("sha256:"),
        "the version is pinned"
    );
    let events = watch(&mut c, AGENT, &call.id).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.r#type.as_str()).collect();
    assert_eq!(kinds, ALLOWED_CALL_EVENTS);
    let seqs: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, (1..=10).collect::<Vec<u64>>());
    assert!(events.last().expect("last").terminal);
    let done = get(&mut c, &call.id).await;
    assert_eq!(done.phase, "Succeeded");
    assert_eq!(
        events.last().and_then(|e| e.call.as_ref()),
        Some(&done),
        "the last event carries the call as it ended"
    );
    assert_eq!(done.output_preview, "export const a = 1;\n");
    let stdout = done
        .artifacts
        .iter()
        .find(|a| a.artifact_id == "stdout")
        .expect("stdout artifact");
    assert!(
        stdout.event_id.starts_with(&done.id),
        "the artifact names its call and event"
    );
    // The artifact streams back, and its hash is the recorded one.
    let mut s = c
        .get_artifact(req(
            AGENT,
            pb::GetArtifactRequest {
                call_id: done.id.clone(),
                artifact_id: "stdout".into(),
            },
        ))
        .await
        .expect("artifact")
        .into_inner();
    let mut data = Vec::new();
    let mut hash = String::new();
    while let Some(chunk) = s.next().await {
        let chunk = chunk.expect("chunk");
        if hash.is_empty() {
            hash = chunk.content_hash.clone();
        }
        data.extend(chunk.data);
    }
    use sha2::Digest;
    assert_eq!(
        hash,
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(&data)))
    );
    assert_eq!(data, b"export const a = 1;\n");
    // The event log on disk tells the same story.
    assert_eq!(event_log(dir.path(), &done.id).lines().count(), 10);
}

/// A call that needs no credential, proposed while a sandbox of its plan waits, starts in the
/// proposal's own durable write: ProposeCall answers Running with the steps up to Started, and
/// the chain, its numbering and the event log on disk are those of a call started in a second
/// write; it ends as any other.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_with_a_sandbox_waiting_starts_in_the_proposals_write() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    // The first call of a plan makes its sandbox then; after it, the pool starts others ahead
    // of demand, once each call's end is recorded.
    let mut at_once = None;
    for _ in 0..20 {
        let call = submit(
            &mut c,
            "file.read",
            serde_json::json!({"path": "src/a.ts"}),
            "read",
        )
        .await;
        let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
        assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
        assert_eq!(done.output_preview, "export const a = 1;\n");
        if call.phase == "Running" {
            at_once = Some(call);
            break;
        }
        assert_eq!(call.phase, "Authorized", "{:#?}", call.conditions);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let call = at_once.expect("no proposal found a sandbox waiting for its plan");
    for step in [
        "PolicyChecked",
        "SandboxPrepared",
        "CredentialsBound",
        "Started",
    ] {
        assert!(
            call.conditions
                .iter()
                .any(|c| c.r#type == step && c.status == "True"),
            "{step} in the proposal's answer: {:#?}",
            call.conditions
        );
    }
    let events = watch(&mut c, AGENT, &call.id).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.r#type.as_str()).collect();
    assert_eq!(kinds, ALLOWED_CALL_EVENTS);
    let seqs: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, (1..=10).collect::<Vec<u64>>());
    let done = get(&mut c, &call.id).await;
    let stdout = done
        .artifacts
        .iter()
        .find(|a| a.artifact_id == "stdout")
        .expect("stdout artifact");
    // The executor was told the event that started it: the sixth.
    assert_eq!(stdout.event_id, format!("{}/6", call.id));
    assert_eq!(event_log(dir.path(), &call.id).lines().count(), 10);
}

#[tokio::test(flavor = "multi_thread")]
async fn blocked_paths_stay_hidden_and_credentials_never_reach_the_api() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let call = submit(
        &mut c,
        "code.search",
        serde_json::json!({"text": "TOKEN", "path": "."}),
        "search",
    )
    .await;
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    let x = c
        .explain_call(req(
            AGENT,
            pb::ExplainCallRequest {
                id: call.id.clone(),
            },
        ))
        .await
        .expect("explain")
        .into_inner();
    let everything = format!("{done:?} {x:?}");
    assert!(!everything.contains(CANARY), "the blocked .env leaked");
    // grep found nothing: bubblewrap covers the blocked .env with an empty file.
    assert_eq!(done.exit_code, Some(1), "{done:?}");
    let read = submit(
        &mut c,
        "file.read",
        serde_json::json!({"path": ".env"}),
        "read",
    )
    .await;
    let read = wait_phase(&mut c, &read.id, &["Succeeded", "Failed"]).await;
    assert_eq!(read.phase, "Succeeded", "{read:?}");
    assert_eq!(read.output_preview, "", "{read:?}");
    assert!(!format!("{read:?}").contains(CANARY), "{read:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn auth_failures_are_refused() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let p = propose("file.read", serde_json::json!({"path": "src/a.ts"}), "read");
    let e = c
        .propose_call(tonic::Request::new(p.clone()))
        .await
        .expect_err("no token");
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let e = c
        .propose_call(req("not-a-known-token-at-all", p.clone()))
        .await
        .expect_err("bad token");
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let mut bad = tonic::Request::new(p.clone());
    bad.metadata_mut()
        .insert("authorization", "Basic abc".parse().expect("h"));
    assert_eq!(
        c.propose_call(bad).await.expect_err("basic").code(),
        tonic::Code::Unauthenticated
    );
    // Another agent cannot see, approve or cancel the call.
    let call = submit(
        &mut c,
        "test.gated",
        serde_json::json!({"msg": "hi"}),
        "execute",
    )
    .await;
    assert_eq!(call.phase, "AwaitingApproval");
    let e = c
        .get_call(req(
            OTHER,
            pb::GetCallRequest {
                id: call.id.clone(),
            },
        ))
        .await
        .expect_err("other");
    assert_eq!(e.code(), tonic::Code::NotFound);
    let e = c
        .cancel_call(req(
            OTHER,
            pb::CancelCallRequest {
                id: call.id.clone(),
                reason: String::new(),
            },
        ))
        .await
        .expect_err("other cancel");
    assert_eq!(e.code(), tonic::Code::NotFound);
    // The principal cannot approve its own call; an agent is no approver.
    let approve = approval_of(&call);
    let e = c
        .approve_call(req(AGENT, approve.clone()))
        .await
        .expect_err("self approval");
    assert_eq!(
        (e.code(), code_of(&e).as_str()),
        (tonic::Code::PermissionDenied, "approval-self")
    );
    // Another agent does not even learn the call exists.
    let e = c
        .approve_call(req(OTHER, approve))
        .await
        .expect_err("not an approver");
    assert_eq!(e.code(), tonic::Code::NotFound);
    let listed = c
        .list_calls(req(OTHER, pb::ListCallsRequest::default()))
        .await
        .expect("list")
        .into_inner();
    assert!(listed.calls.is_empty(), "others' calls are not listed");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_says_what_and_where() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let mut p = propose("file.read", serde_json::json!({}), "read");
    p.args_json = "[1,2".into();
    let e = c
        .propose_call(req(AGENT, p.clone()))
        .await
        .expect_err("bad json");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        toolgate_api::error::status_code_and_field(&e).1.as_deref(),
        Some("args_json")
    );
    p.args_json = "[1,2]".into();
    let e = c
        .propose_call(req(AGENT, p.clone()))
        .await
        .expect_err("not an object");
    assert!(
        e.message().starts_with("args_json: expected a JSON object"),
        "{}",
        e.message()
    );
    let mut p = propose("file.read", serde_json::json!({"path": "a"}), "fly");
    let e = c
        .propose_call(req(AGENT, p.clone()))
        .await
        .expect_err("action");
    assert_eq!(
        toolgate_api::error::status_code_and_field(&e).1.as_deref(),
        Some("intent.action_type")
    );
    p.intent = None;
    let e = c.propose_call(req(AGENT, p)).await.expect_err("intent");
    assert_eq!(
        toolgate_api::error::status_code_and_field(&e).1.as_deref(),
        Some("intent")
    );
    // Args that break the tool's schema: the call is recorded and denied before the policy.
    let call = submit(
        &mut c,
        "file.read",
        serde_json::json!({"path": "/etc/passwd"}),
        "read",
    )
    .await;
    assert_eq!(call.phase, "Denied");
    let args = call
        .conditions
        .iter()
        .find(|c| c.r#type == "ArgsValidated")
        .expect("ArgsValidated");
    assert_eq!(
        (args.status.as_str(), args.reason.as_str()),
        ("False", "ArgsInvalid")
    );
    assert!(args.message.starts_with("/path:"), "{}", args.message);
    assert!(!call.conditions.iter().any(|c| c.r#type == "Started"));
    // A tool that does not exist.
    let call = submit(&mut c, "no.such.tool", serde_json::json!({}), "read").await;
    assert_eq!(call.phase, "Denied");
    let e = c
        .list_calls(req(
            AGENT,
            pb::ListCallsRequest {
                page_size: 9999,
                ..Default::default()
            },
        ))
        .await
        .expect_err("page size");
    assert_eq!(
        toolgate_api::error::status_code_and_field(&e).1.as_deref(),
        Some("page_size")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotency_keys_return_the_same_call() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let mut p = propose("test.echo", serde_json::json!({"msg": "once"}), "execute");
    p.idempotency_key = "echo-once".into();
    let a = c
        .propose_call(req(AGENT, p.clone()))
        .await
        .expect("first")
        .into_inner();
    let b = c
        .propose_call(req(AGENT, p.clone()))
        .await
        .expect("second")
        .into_inner();
    assert_eq!(a.id, b.id);
    wait_phase(&mut c, &a.id, &["Succeeded"]).await;
    let c2 = c
        .propose_call(req(AGENT, p.clone()))
        .await
        .expect("after it ran")
        .into_inner();
    assert_eq!(c2.id, a.id);
    p.args_json = serde_json::json!({"msg": "twice"}).to_string();
    let e = c
        .propose_call(req(AGENT, p.clone()))
        .await
        .expect_err("different args");
    assert_eq!(
        (e.code(), code_of(&e).as_str()),
        (tonic::Code::AlreadyExists, "idempotency-key-reused")
    );
    // The same key from another principal is another call.
    p.args_json = serde_json::json!({"msg": "once"}).to_string();
    let listed = c
        .list_calls(req(
            AGENT,
            pb::ListCallsRequest {
                tool: "test.echo".into(),
                ..Default::default()
            },
        ))
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.calls.len(), 1, "exactly one call ran");
    for (namespace, found) in [("team-a", 1), ("team-b", 0)] {
        let listed = c
            .list_calls(req(
                AGENT,
                pb::ListCallsRequest {
                    namespace: namespace.into(),
                    tool: "test.echo".into(),
                    ..Default::default()
                },
            ))
            .await
            .expect("list")
            .into_inner();
        assert_eq!(listed.calls.len(), found, "calls in {namespace}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn approvals_bind_to_the_args_and_tool_version_shown() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let call = submit(
        &mut c,
        "test.gated",
        serde_json::json!({"msg": "approved"}),
        "execute",
    )
    .await;
    assert_eq!(call.phase, "AwaitingApproval");
    let mut approve = pb::ApproveCallRequest {
        id: call.id.clone(),
        args_digest: format!("sha256:{}", "0".repeat(64)),
        tool_digest: call.tool_digest.clone(),
        for_session: false,
        ttl_seconds: 60,
        comment: String::new(),
    };
    let e = c
        .approve_call(req(REVIEWER, approve.clone()))
        .await
        .expect_err("args changed");
    assert_eq!(
        (e.code(), code_of(&e).as_str()),
        (tonic::Code::FailedPrecondition, "approval-args-changed")
    );
    approve.args_digest = call.args_digest.clone();
    approve.tool_digest = format!("sha256:{}", "1".repeat(64));
    let e = c
        .approve_call(req(REVIEWER, approve.clone()))
        .await
        .expect_err("tool changed");
    assert_eq!(code_of(&e), "approval-tool-changed");
    approve.tool_digest = call.tool_digest.clone();
    let ok = c
        .approve_call(req(REVIEWER, approve.clone()))
        .await
        .expect("approved")
        .into_inner();
    assert_eq!(ok.phase, "Authorized");
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    assert_eq!(done.output_preview, "approved\n");
    let e = c
        .approve_call(req(REVIEWER, approve))
        .await
        .expect_err("twice");
    assert_eq!(code_of(&e), "not-awaiting-approval");
    // A denial ends the call without running it.
    let call = submit(
        &mut c,
        "test.gated",
        serde_json::json!({"msg": "no"}),
        "execute",
    )
    .await;
    let denied = c
        .deny_call(req(
            REVIEWER,
            pb::DenyCallRequest {
                id: call.id.clone(),
                comment: "not now".into(),
            },
        ))
        .await
        .expect("denied")
        .into_inner();
    assert_eq!(denied.phase, "Denied");
    assert!(!denied.conditions.iter().any(|c| c.r#type == "Started"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_descriptor_voids_the_pending_approval() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let call = submit(
        &mut c,
        "test.gated",
        serde_json::json!({"msg": "x"}),
        "execute",
    )
    .await;
    assert_eq!(call.phase, "AwaitingApproval");
    let path = dir.path().join("manifests/tools/test-gated.yaml");
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(
        &path,
        text.replace(
            "Echo a message after approval.",
            "Echo a message after an approval.",
        ),
    )
    .expect("rewrite");
    let ended = wait_phase(&mut c, &call.id, &["Denied"]).await;
    let cond = ended
        .conditions
        .iter()
        .find(|c| c.r#type == "ApprovalRequested")
        .expect("condition");
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "ToolChanged")
    );
    let e = c
        .approve_call(req(REVIEWER, approval_of(&call)))
        .await
        .expect_err("voided");
    assert_eq!(code_of(&e), "not-awaiting-approval");
    // A manifest change that does not lint keeps the previous manifests.
    std::fs::write(
        dir.path().join("manifests/broken.yaml"),
        "kind: ToolGrant\napiVersion: toolgate.dev/v1alpha1\nmetadata: {name: x}\nspec: {}\n",
    )
    .expect("broken");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let call = submit(
        &mut c,
        "test.echo",
        serde_json::json!({"msg": "still"}),
        "execute",
    )
    .await;
    assert_eq!(
        wait_phase(&mut c, &call.id, &["Succeeded", "Failed"])
            .await
            .phase,
        "Succeeded"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_stops_a_running_sandbox_and_a_waiting_call() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let call = submit(
        &mut c,
        "test.sleep",
        serde_json::json!({"seconds": "30"}),
        "execute",
    )
    .await;
    wait_phase(&mut c, &call.id, &["Running"]).await;
    let started = Instant::now();
    c.cancel_call(req(
        AGENT,
        pb::CancelCallRequest {
            id: call.id.clone(),
            reason: "changed my mind".into(),
        },
    ))
    .await
    .expect("cancel");
    let done = wait_phase(&mut c, &call.id, &["Cancelled"]).await;
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(done.conditions.iter().any(|c| c.r#type == "Cancelled"));
    let e = c
        .cancel_call(req(
            AGENT,
            pb::CancelCallRequest {
                id: call.id.clone(),
                reason: String::new(),
            },
        ))
        .await
        .expect_err("ended");
    assert_eq!(code_of(&e), "call-ended");
    let waiting = submit(
        &mut c,
        "test.gated",
        serde_json::json!({"msg": "x"}),
        "execute",
    )
    .await;
    let cancelled = c
        .cancel_call(req(
            REVIEWER,
            pb::CancelCallRequest {
                id: waiting.id.clone(),
                reason: String::new(),
            },
        ))
        .await
        .expect("cancel")
        .into_inner();
    assert_eq!(cancelled.phase, "Cancelled");
    // The watch of an ended call replays its events and ends.
    let events = watch(&mut c, AGENT, &waiting.id).await;
    assert_eq!(events.last().map(|e| e.r#type.as_str()), Some("Cancelled"));
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_loses_no_call_and_never_runs_a_non_idempotent_call_twice() {
    let dir = setup();
    let mut server = Server::start(dir.path());
    let mut c = server.client().await;
    let once = submit(
        &mut c,
        "test.sleep",
        serde_json::json!({"seconds": "30"}),
        "execute",
    )
    .await;
    let again = submit(
        &mut c,
        "test.sleep-idempotent",
        serde_json::json!({"seconds": "1"}),
        "execute",
    )
    .await;
    let waiting = submit(
        &mut c,
        "test.gated",
        serde_json::json!({"msg": "survived"}),
        "execute",
    )
    .await;
    wait_phase(&mut c, &once.id, &["Running"]).await;
    wait_phase(&mut c, &again.id, &["Running"]).await;
    server.kill9();
    // The sandboxes die with their parent, the running ones and those waiting for a call:
    // nothing of the old process runs on (the kernel
    // delivers the parent-death signal promptly, but a loaded machine may take a moment to
    // reap; the tool would sleep for far longer).
    let leftovers = |dir: &std::path::Path| {
        Command::new("pgrep")
            .args(["-f", &format!("{}/data/slots/", dir.display())])
            .output()
            .expect("pgrep")
            .stdout
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !leftovers(dir.path()).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = leftovers(dir.path());
    assert!(
        left.is_empty(),
        "sandbox outlived the runtime: {}",
        String::from_utf8_lossy(&left)
    );

    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let failed = get(&mut c, &once.id).await;
    assert_eq!(failed.phase, "Failed");
    let fin = failed
        .conditions
        .iter()
        .find(|c| c.r#type == "Finished")
        .expect("Finished");
    assert_eq!(fin.reason, "Interrupted");
    let retried = wait_phase(&mut c, &again.id, &["Succeeded", "Failed"]).await;
    assert_eq!(retried.phase, "Succeeded", "{:#?}", retried.conditions);
    let status: serde_json::Value = serde_json::from_str(&retried.status_json).expect("status");
    assert_eq!(status["phase"], "Succeeded");
    let w = get(&mut c, &waiting.id).await;
    assert_eq!(w.phase, "AwaitingApproval", "pending approvals survive");
    c.approve_call(req(REVIEWER, approval_of(&w)))
        .await
        .expect("approve after restart");
    assert_eq!(
        wait_phase(&mut c, &w.id, &["Succeeded", "Failed"])
            .await
            .output_preview,
        "survived\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn views_come_in_provider_formats_and_the_server_speaks_health() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let v = c
        .get_tool_view(req(
            AGENT,
            pb::GetToolViewRequest {
                namespace: String::new(),
                intent: "read a source file".into(),
                format: pb::ViewFormat::Openai as i32,
                max_tools: 3,
                action_type: "read".into(),
                explain: true,
            },
        ))
        .await
        .expect("view")
        .into_inner();
    assert!(v.exposed.iter().any(|t| t.name == "file.read"));
    let payload: serde_json::Value = serde_json::from_str(&v.payload_json).expect("json");
    assert_eq!(payload[0]["type"], "function");
    assert!(
        !v.payload_json.contains("digest"),
        "provider payloads carry no internal fields"
    );
    let e = c
        .get_tool_view(req(
            AGENT,
            pb::GetToolViewRequest {
                format: 9,
                ..Default::default()
            },
        ))
        .await
        .expect_err("format");
    assert_eq!(
        toolgate_api::error::status_code_and_field(&e).1.as_deref(),
        Some("format")
    );
    let channel = Channel::from_shared(format!("http://{}", server.addr))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let h = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "toolgate.v1.Toolgate".into(),
        })
        .await
        .expect("health")
        .into_inner();
    assert_eq!(
        h.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

#[test]
fn local_refuses_to_start_on_bad_manifests_and_lists_every_error() {
    let dir = setup();
    std::fs::write(dir.path().join("manifests/bad.yaml"), "apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {name: a, namespace: team-a}\nspec: {subjects: []}\n---\napiVersion: toolgate.dev/v1alpha1\nkind: Nope\nmetadata: {name: b}\n").expect("bad");
    let out = local_command(
        dir.path(),
        &dir.path().join("data"),
        &dir.path().join("workspace"),
    )
    .args(["--listen", "127.0.0.1:0"])
    .output()
    .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml") && err.contains("error(s)"),
        "{err}"
    );
    assert!(
        err.lines().filter(|l| l.contains("bad.yaml")).count() >= 2,
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn reflection_lists_the_services() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let dir = setup();
    let server = Server::start(dir.path());
    let channel = Channel::from_shared(format!("http://{}", server.addr))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let mut client = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = client
        .server_reflection_info(futures::stream::iter([request]))
        .await
        .expect("reflection")
        .into_inner();
    let first = responses.next().await.expect("a response").expect("ok");
    let Some(MessageResponse::ListServicesResponse(list)) = first.message_response else {
        panic!("unexpected response {first:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"toolgate.v1.Toolgate".to_string()),
        "{names:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_approval_covers_the_same_args_in_the_same_session_only() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let in_session = |msg: &str, session: &str| {
        let mut p = propose("test.gated", serde_json::json!({"msg": msg}), "execute");
        p.session_id = session.into();
        p
    };
    let first = c
        .propose_call(req(AGENT, in_session("same", "sess-1")))
        .await
        .expect("first")
        .into_inner();
    assert_eq!(first.phase, "AwaitingApproval");
    let mut approval = approval_of(&first);
    approval.for_session = true;
    c.approve_call(req(REVIEWER, approval))
        .await
        .expect("approved for the session");
    assert_eq!(
        wait_phase(&mut c, &first.id, &["Succeeded", "Failed"])
            .await
            .phase,
        "Succeeded"
    );
    // The same args in the same session run without asking again.
    let second = c
        .propose_call(req(AGENT, in_session("same", "sess-1")))
        .await
        .expect("second")
        .into_inner();
    // Authorized, and started in the proposal's own write when a sandbox was waiting for it.
    assert!(
        matches!(second.phase.as_str(), "Authorized" | "Running"),
        "{} {:?}",
        second.phase,
        second.reasons
    );
    assert!(
        second.reasons.iter().any(|r| r.code == "approval-granted"),
        "{:?}",
        second.reasons
    );
    assert_eq!(
        wait_phase(&mut c, &second.id, &["Succeeded", "Failed"])
            .await
            .phase,
        "Succeeded"
    );
    // Other args, or another session, wait for a human again.
    let other_args = c
        .propose_call(req(AGENT, in_session("different", "sess-1")))
        .await
        .expect("other args")
        .into_inner();
    assert_eq!(other_args.phase, "AwaitingApproval");
    let other_session = c
        .propose_call(req(AGENT, in_session("same", "sess-2")))
        .await
        .expect("other session")
        .into_inner();
    assert_eq!(other_session.phase, "AwaitingApproval");
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_runs_report_without_acting_and_lists_page() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    // file.delete (L5) says `approvalPolicy: always`: even its dry run waits for a human, and
    // once approved, the dry run reports and deletes nothing.
    let mut p = propose(
        "file.delete",
        serde_json::json!({"path": "src/a.ts"}),
        "delete",
    );
    p.dry_run = true;
    let call = c
        .propose_call(req(AGENT, p))
        .await
        .expect("proposed")
        .into_inner();
    assert!(call.dry_run);
    assert_eq!(call.phase, "AwaitingApproval");
    c.approve_call(req(REVIEWER, approval_of(&call)))
        .await
        .expect("approved");
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    assert!(
        dir.path().join("workspace/src/a.ts").exists(),
        "a dry run deleted the file"
    );

    for i in 0..3 {
        submit(
            &mut c,
            "test.echo",
            serde_json::json!({"msg": format!("page {i}")}),
            "execute",
        )
        .await;
    }
    let page = |token: String| pb::ListCallsRequest {
        tool: "test.echo".into(),
        page_size: 2,
        page_token: token,
        ..Default::default()
    };
    let first = c
        .list_calls(req(AGENT, page(String::new())))
        .await
        .expect("page 1")
        .into_inner();
    assert_eq!(first.calls.len(), 2);
    assert!(!first.next_page_token.is_empty());
    let second = c
        .list_calls(req(AGENT, page(first.next_page_token.clone())))
        .await
        .expect("page 2")
        .into_inner();
    assert_eq!(second.calls.len(), 1);
    assert!(second.next_page_token.is_empty());
    let ids: std::collections::BTreeSet<String> = first
        .calls
        .iter()
        .chain(&second.calls)
        .map(|c| c.id.clone())
        .collect();
    assert_eq!(ids.len(), 3, "no call twice, none missing");
}

/// Clients that speak only the older reflection protocol (grpcurl before 1.8, Python's
/// grpc_requests) list the services too.
#[tokio::test(flavor = "multi_thread")]
async fn reflection_v1alpha_lists_the_services_too() {
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
    let dir = setup();
    let server = Server::start(dir.path());
    let channel = Channel::from_shared(format!("http://{}", server.addr))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let mut client = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = client
        .server_reflection_info(futures::stream::iter([request]))
        .await
        .expect("v1alpha reflection")
        .into_inner();
    let first = responses.next().await.expect("a response").expect("ok");
    let Some(MessageResponse::ListServicesResponse(list)) = first.message_response else {
        panic!("unexpected response {first:?}");
    };
    assert!(
        list.service
            .iter()
            .any(|s| s.name == "toolgate.v1.Toolgate"),
        "{list:?}"
    );
}
