//! `toolgate local` attacked as an agent and as a local user would: each test is one finding of
//! the hardening review, run against the real binary, its store and its sandbox.

mod support;

use support::*;
use toolgate_proto::v1 as pb;

fn field_of(s: &tonic::Status) -> Option<String> {
    toolgate_api::error::status_code_and_field(s).1
}

#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_that_is_a_path_is_refused_before_anything_touches_disk() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let target = dir.path().join("planted");
    let depth = dir.path().join("data/calls").components().count();
    let dotdot = format!("{}{}", "../".repeat(depth), target.join("dotdot").display());
    let hostile = [
        target.join("absns").display().to_string(),
        dotdot,
        "team-a/../team-b".to_string(),
        "team\0a".to_string(),
        "Team-A".to_string(),
        "x".repeat(300),
    ];
    for ns in &hostile {
        let mut p = propose(
            "file.read",
            serde_json::json!({"path": "README.md"}),
            "read",
        );
        p.namespace = ns.clone();
        let e = c
            .propose_call(req(AGENT, p))
            .await
            .expect_err("a namespace that is not a DNS label");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{ns:?}: {e}");
        assert_eq!(field_of(&e).as_deref(), Some("namespace"), "{ns:?}: {e}");
        assert!(
            !e.message()
                .contains(&dir.path().join("data").display().to_string()),
            "the server's paths are not shown: {}",
            e.message()
        );
        // The same namespace as a view or a list filter.
        let e = c
            .get_tool_view(req(
                AGENT,
                pb::GetToolViewRequest {
                    namespace: ns.clone(),
                    ..Default::default()
                },
            ))
            .await
            .expect_err("view");
        assert_eq!(field_of(&e).as_deref(), Some("namespace"));
    }
    assert!(
        !target.exists(),
        "something was written outside the data folder"
    );
    let calls = dir.path().join("data/calls");
    let namespaces: Vec<String> = std::fs::read_dir(&calls)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(namespaces.is_empty(), "{namespaces:?}");
    // Ids that are paths are refused the same way.
    for id in ["../../etc/passwd", "/abs", "a/b/c", "call\0x"] {
        let e = c
            .get_call(req(AGENT, pb::GetCallRequest { id: id.into() }))
            .await
            .expect_err("a call id that is a path");
        assert_eq!(field_of(&e).as_deref(), Some("id"), "{id:?}");
        let e = c
            .get_artifact(req(
                AGENT,
                pb::GetArtifactRequest {
                    call_id: "call-20261201-000000-000000".into(),
                    artifact_id: "../../toolgate.redb".into(),
                },
            ))
            .await
            .expect_err("an artifact id that is a path");
        assert_eq!(field_of(&e).as_deref(), Some("artifact_id"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_string_has_a_bound_and_one_call_cannot_break_listing_for_everyone() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    // A call that waits for a human: the approver must always be able to list it.
    let pending = submit(
        &mut c,
        "test.gated",
        serde_json::json!({"msg": "hi"}),
        "execute",
    )
    .await;
    assert_eq!(pending.phase, "AwaitingApproval");
    let huge = "x".repeat(1 << 20);
    let mut p = propose("test.echo", serde_json::json!({"msg": "a"}), "execute");
    p.tool = huge.clone();
    let e = c.propose_call(req(AGENT, p)).await.expect_err("1 MiB tool");
    assert_eq!(field_of(&e).as_deref(), Some("tool"));
    assert!(e.message().len() < 1024, "the value is not echoed whole");
    for (field, edit) in [
        (
            "intent.user_goal",
            Box::new(|p: &mut pb::ProposeCallRequest| {
                p.intent.as_mut().expect("intent").user_goal = "g".repeat(4096)
            }) as Box<dyn Fn(&mut pb::ProposeCallRequest)>,
        ),
        (
            "intent.evidence_refs",
            Box::new(|p: &mut pb::ProposeCallRequest| {
                p.intent.as_mut().expect("intent").evidence_refs = vec!["r".into(); 1000]
            }),
        ),
        (
            "session_id",
            Box::new(|p: &mut pb::ProposeCallRequest| p.session_id = "s".repeat(1000)),
        ),
        (
            "args_json",
            Box::new(|p: &mut pb::ProposeCallRequest| {
                p.args_json = format!("{{\"msg\": \"{}\"}}", "a".repeat(300 * 1024))
            }),
        ),
    ] {
        let mut p = propose("test.echo", serde_json::json!({"msg": "a"}), "execute");
        edit(&mut p);
        let e = c.propose_call(req(AGENT, p)).await.expect_err(field);
        assert_eq!(field_of(&e).as_deref(), Some(field), "{e}");
    }
    // Calls as large as the bounds allow (args just under 256 KiB each, denied by the tool's
    // schema but recorded) still list, page by page, under the client's 4 MiB limit.
    for _ in 0..24 {
        let mut p = propose("test.echo", serde_json::json!({}), "execute");
        p.args_json = format!("{{\"msg\": \"{}\"}}", "a".repeat(250 * 1024));
        let call = c
            .propose_call(req(AGENT, p))
            .await
            .expect("recorded")
            .into_inner();
        assert_eq!(call.phase, "Denied");
    }
    let mut token = String::new();
    let mut seen = Vec::new();
    loop {
        let page = c
            .list_calls(req(
                REVIEWER,
                pb::ListCallsRequest {
                    page_size: 500,
                    page_token: token.clone(),
                    ..Default::default()
                },
            ))
            .await
            .expect("a page always fits the client's limit")
            .into_inner();
        assert!(!page.calls.is_empty(), "every page moves forward");
        seen.extend(page.calls.iter().map(|c| c.id.clone()));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen.len(), 25, "no call lost or repeated");
    assert!(seen.contains(&pending.id), "the pending approval is listed");
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(unique.len(), seen.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn list_filters_and_page_tokens_are_checked() {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    for (field, r) in [
        (
            "phase",
            pb::ListCallsRequest {
                phase: "Exploded".into(),
                ..Default::default()
            },
        ),
        (
            "page_token",
            pb::ListCallsRequest {
                page_token: "%%not a token%%".into(),
                ..Default::default()
            },
        ),
        (
            "tool",
            pb::ListCallsRequest {
                tool: "../x".into(),
                ..Default::default()
            },
        ),
    ] {
        let e = c.list_calls(req(AGENT, r)).await.expect_err(field);
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert_eq!(field_of(&e).as_deref(), Some(field), "{e}");
    }
    let e = c
        .cancel_call(req(
            AGENT,
            pb::CancelCallRequest {
                id: "call-20261201-000000-000000".into(),
                reason: "\u{1b}[2J repaint the reviewer's terminal".into(),
            },
        ))
        .await
        .expect_err("an escape sequence");
    assert_eq!(field_of(&e).as_deref(), Some("reason"));
}

/// The README's own setup once put the data folder inside the workspace: a read tool saw other
/// calls' artifacts and the store, a write tool replaced the store. Wherever the data folder is,
/// no sandbox sees it.
#[tokio::test(flavor = "multi_thread")]
async fn the_data_folder_is_never_reachable_from_a_tool_even_inside_the_workspace() {
    let dir = setup();
    let ws = dir.path().join("workspace");
    let data = ws.join(".toolgate");
    let mut server = Server::start_in(dir.path(), &data, &ws);
    let mut c = server.client().await;
    let marker = "zz-artifact-marker-4471";
    let echo = submit(
        &mut c,
        "test.echo",
        serde_json::json!({"msg": marker}),
        "execute",
    )
    .await;
    let echo = wait_phase(&mut c, &echo.id, &["Succeeded", "Failed"]).await;
    assert_eq!(echo.phase, "Succeeded", "{:#?}", echo.conditions);
    assert!(data.join("artifacts/team-a").join(&echo.id).exists());

    let search = submit(
        &mut c,
        "code.search",
        serde_json::json!({"text": marker, "path": "."}),
        "search",
    )
    .await;
    let search = wait_phase(&mut c, &search.id, &["Succeeded", "Failed"]).await;
    assert!(
        !search.output_preview.contains(marker),
        "a search saw another call's artifact: {}",
        search.output_preview
    );
    for path in [
        ".toolgate/toolgate.redb".to_string(),
        format!(".toolgate/calls/team-a/{}/events.jsonl", echo.id),
        format!(".toolgate/artifacts/team-a/{}/stdout", echo.id),
    ] {
        let read = submit(
            &mut c,
            "file.read",
            serde_json::json!({"path": path}),
            "read",
        )
        .await;
        let read = wait_phase(&mut c, &read.id, &["Succeeded", "Failed", "Denied"]).await;
        assert_ne!(read.phase, "Succeeded", "{path} was readable: {read:#?}");
        assert!(!read.output_preview.contains(marker), "{path}");
    }
    let write = submit(
        &mut c,
        "file.write",
        serde_json::json!({"path": ".toolgate/toolgate.redb", "content": "evil"}),
        "write",
    )
    .await;
    let write = wait_phase(&mut c, &write.id, &["Succeeded", "Failed", "Denied"]).await;
    assert_ne!(write.phase, "Succeeded", "{:#?}", write.conditions);
    // The store is intact: a restart finds every call.
    server.kill9();
    drop(c);
    let server = Server::start_in(dir.path(), &data, &ws);
    let mut c = server.client().await;
    assert_eq!(get(&mut c, &echo.id).await.phase, "Succeeded");
}

/// A store changed outside toolgate is refused at start with a way forward, never a panic.
#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_store_gives_a_clear_error_and_a_way_forward() {
    let dir = setup();
    let mut server = Server::start(dir.path());
    let mut c = server.client().await;
    let call = submit(
        &mut c,
        "test.echo",
        serde_json::json!({"msg": "hi"}),
        "execute",
    )
    .await;
    wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    server.stop();
    let store = dir.path().join("data/toolgate.redb");
    let mut bytes = std::fs::read(&store).expect("store");
    for b in bytes.iter_mut().skip(512).step_by(3) {
        *b ^= 0xff;
    }
    std::fs::write(&store, bytes).expect("damage");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("local")
        .arg("--manifests")
        .arg(dir.path().join("manifests"))
        .arg("--data")
        .arg(dir.path().join("data"))
        .arg("--workspace")
        .arg(dir.path().join("workspace"))
        .arg("--tokens")
        .arg(dir.path().join("tokens.yaml"))
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_BACKTRACE", "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if started.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            panic!("toolgate local started on a damaged store");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("is damaged"), "{stderr}");
    assert!(stderr.contains("Move it aside (mv "), "{stderr}");
}

/// Bearer tokens never cross a network in clear: a non-loopback address is refused.
#[test]
fn local_refuses_to_listen_beyond_loopback_without_tls() {
    let dir = setup();
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .arg("local")
            .arg("--manifests")
            .arg(dir.path().join("manifests"))
            .arg("--data")
            .arg(dir.path().join("data"))
            .arg("--workspace")
            .arg(dir.path().join("workspace"))
            .arg("--tokens")
            .arg(dir.path().join("tokens.yaml"))
            .args(["--listen", listen])
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{listen}: {stderr}");
        assert!(stderr.contains("not a loopback address"), "{stderr}");
    }
}
