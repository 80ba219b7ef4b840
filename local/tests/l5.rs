//! L5 in `toolgate local`, end to end over gRPC with the real binary and sandbox: an approved
//! destructive call runs only with its second confirmation — a successful dry run of the same
//! args, or a second approver — and every way around it is refused with its reason.

mod support;

use support::*;
use toolgate_proto::v1 as pb;

const BOB: &str = "bob-reviewer-token-0123456789abcdef";

/// Add a second approver (bob) to the tokens.
fn with_bob(root: &std::path::Path) {
    let tokens = root.join("tokens.yaml");
    let mut text = std::fs::read_to_string(&tokens).expect("tokens");
    text.push_str(&format!(
        "- {{token: {BOB}, principal: bob@example.com, approverIn: [team-a]}}\n"
    ));
    write_private(&tokens, &text);
}

/// Make the example file.delete ask for `confirmation`.
fn confirm_with(root: &std::path::Path, confirmation: &str) {
    let path = root.join("manifests/tools/file-delete.yaml");
    let text = std::fs::read_to_string(&path).expect("file.delete");
    let edited = text.replace(
        "requiredScopes: [\"workspace:write\"]}",
        &format!("requiredScopes: [\"workspace:write\"], strongConfirmation: {confirmation}}}"),
    );
    assert_ne!(edited, text, "the example's permissions line changed");
    std::fs::write(path, edited).expect("write");
}

fn delete(path: &str, dry_run: bool) -> pb::ProposeCallRequest {
    pb::ProposeCallRequest {
        dry_run,
        ..propose("file.delete", serde_json::json!({"path": path}), "delete")
    }
}

fn condition<'c>(call: &'c pb::Call, kind: &str) -> Option<&'c pb::Condition> {
    call.conditions.iter().find(|c| c.r#type == kind)
}

fn codes(call: &pb::Call) -> Vec<&str> {
    call.reasons.iter().map(|r| r.code.as_str()).collect()
}

async fn approve_as(
    c: &mut toolgate_proto::v1::toolgate_client::ToolgateClient<tonic::transport::Channel>,
    token: &str,
    call: &pb::Call,
) -> Result<pb::Call, tonic::Status> {
    c.approve_call(req(token, approval_of(call)))
        .await
        .map(tonic::Response::into_inner)
}

async fn view_confirmation(
    c: &mut toolgate_proto::v1::toolgate_client::ToolgateClient<tonic::transport::Channel>,
) -> String {
    let view = c
        .get_tool_view(req(
            AGENT,
            pb::GetToolViewRequest {
                intent: "delete a stale file".into(),
                max_tools: 32,
                ..Default::default()
            },
        ))
        .await
        .expect("view")
        .into_inner();
    let tool = view
        .exposed
        .iter()
        .find(|t| t.name == "file.delete")
        .expect("file.delete in the view");
    assert!(tool.needs_approval);
    assert!(
        view.payload_json.contains("Two different humans")
            || view
                .payload_json
                .contains("as a dry run (`dry_run` in the API, `--dry-run` on the command line)"),
        "the model is told: {}",
        view.payload_json
    );
    tool.confirmation.clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_approver_must_be_another_person_and_both_are_used_up() {
    let dir = setup();
    with_bob(dir.path());
    confirm_with(dir.path(), "second_approver");
    let ws = dir.path().join("workspace");
    std::fs::write(ws.join("src/old.snap"), "stale\n").expect("file");
    let mut server = Server::start(dir.path());
    let mut c = server.client().await;
    assert_eq!(view_confirmation(&mut c).await, "second_approver");

    let call = c
        .propose_call(req(AGENT, delete("src/old.snap", false)))
        .await
        .expect("proposed")
        .into_inner();
    assert_eq!(call.phase, "AwaitingApproval");
    let asked = condition(&call, "ApprovalRequested").expect("asked");
    assert!(
        asked.message.contains("a second, different approver"),
        "{}",
        asked.message
    );

    // The first approval: accepted, the call keeps waiting and says for whom.
    let once = approve_as(&mut c, REVIEWER, &call).await.expect("alice");
    assert_eq!(once.phase, "AwaitingApproval");
    let granted = condition(&once, "ApprovalGranted").expect("condition");
    assert_eq!(
        (granted.status.as_str(), granted.reason.as_str()),
        ("False", "AwaitingConfirmation")
    );
    assert!(
        granted.message.contains("second approver"),
        "{}",
        granted.message
    );

    // A restart keeps the first approval.
    server.stop();
    let server = Server::start(dir.path());
    let mut c = server.client().await;

    // The same approver again, and the principal itself: refused, each with its reason.
    let again = approve_as(&mut c, REVIEWER, &call)
        .await
        .expect_err("twice");
    assert_eq!(again.code(), tonic::Code::FailedPrecondition);
    assert_eq!(code_of(&again), "approval-same-approver", "{again:?}");
    let own = approve_as(&mut c, AGENT, &call).await.expect_err("self");
    assert_eq!(code_of(&own), "approval-self", "{own:?}");
    assert_eq!(get(&mut c, &call.id).await.phase, "AwaitingApproval");
    assert!(ws.join("src/old.snap").exists(), "nothing ran yet");

    // Another approver: it runs.
    approve_as(&mut c, BOB, &call).await.expect("bob");
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed", "Denied"]).await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    assert!(!ws.join("src/old.snap").exists(), "the file was deleted");
    let granted = condition(&done, "ApprovalGranted").expect("granted");
    assert!(
        granted.message.contains("bob@example.com approved too"),
        "{}",
        granted.message
    );
    let status: serde_json::Value = serde_json::from_str(&done.status_json).expect("status");
    assert_eq!(
        status["authorization"]["confirmation"]["kind"],
        "second_approver"
    );
    let explained = c
        .explain_call(req(
            AGENT,
            pb::ExplainCallRequest {
                id: call.id.clone(),
            },
        ))
        .await
        .expect("explain")
        .into_inner();
    let text = format!("{explained:?}");
    assert!(
        text.contains("alice@example.com") && text.contains("bob@example.com"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_of_the_same_args_confirms_and_one_of_other_args_does_not() {
    let dir = setup();
    let ws = dir.path().join("workspace");
    std::fs::write(ws.join("src/old.snap"), "stale\n").expect("file");
    std::fs::write(ws.join("src/other.snap"), "keep\n").expect("file");
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    // file.delete supports dry runs and names no confirmation: a dry run it is.
    assert_eq!(view_confirmation(&mut c).await, "dry_run");

    let call = c
        .propose_call(req(AGENT, delete("src/old.snap", false)))
        .await
        .expect("proposed")
        .into_inner();
    assert_eq!(call.phase, "AwaitingApproval");
    let asked = condition(&call, "ApprovalRequested").expect("asked");
    assert!(
        asked.message.contains("a successful dry run"),
        "{}",
        asked.message
    );
    let once = approve_as(&mut c, REVIEWER, &call).await.expect("approve");
    assert_eq!(once.phase, "AwaitingApproval");
    assert_eq!(
        condition(&once, "ApprovalGranted").map(|c| c.reason.as_str()),
        Some("AwaitingConfirmation")
    );
    assert!(
        codes(&once).contains(&"dry-run-required"),
        "{:?}",
        once.reasons
    );

    // A dry run of other args (file.delete asks for an approval even for dry runs): it
    // succeeds, deletes nothing, and does not confirm the call.
    let other = c
        .propose_call(req(AGENT, delete("src/other.snap", true)))
        .await
        .expect("dry run")
        .into_inner();
    if other.phase == "AwaitingApproval" {
        approve_as(&mut c, REVIEWER, &other)
            .await
            .expect("approve the dry run");
    }
    let other = wait_phase(&mut c, &other.id, &["Succeeded", "Failed", "Denied"]).await;
    assert_eq!(other.phase, "Succeeded", "{:#?}", other.conditions);
    assert!(
        ws.join("src/other.snap").exists(),
        "a dry run deletes nothing"
    );
    // The runtime looks again once a dry run ends; the call still waits, saying why.
    let mut waiting = get(&mut c, &call.id).await;
    for _ in 0..100 {
        if codes(&waiting).contains(&"dry-run-other-args") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        waiting = get(&mut c, &call.id).await;
    }
    assert_eq!(waiting.phase, "AwaitingApproval");
    assert!(
        codes(&waiting).contains(&"dry-run-other-args"),
        "{:?}",
        waiting.reasons
    );
    let message = &condition(&waiting, "ApprovalGranted").expect("c").message;
    assert!(message.contains(&other.id), "names the dry run: {message}");
    // Approving again does not move it either.
    let again = approve_as(&mut c, REVIEWER, &waiting)
        .await
        .expect_err("still needs the dry run");
    assert_eq!(code_of(&again), "approval-not-binding", "{again:?}");
    assert!(again.message().contains("dry run"), "{}", again.message());
    assert!(ws.join("src/old.snap").exists());

    // A dry run of the same args: the approved call runs on its own, naming the dry run.
    let same = c
        .propose_call(req(AGENT, delete("src/old.snap", true)))
        .await
        .expect("dry run")
        .into_inner();
    if same.phase == "AwaitingApproval" {
        approve_as(&mut c, REVIEWER, &same)
            .await
            .expect("approve the dry run");
    }
    let same = wait_phase(&mut c, &same.id, &["Succeeded", "Failed", "Denied"]).await;
    assert_eq!(same.phase, "Succeeded", "{:#?}", same.conditions);
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed", "Denied"]).await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    assert!(!ws.join("src/old.snap").exists());
    assert!(ws.join("src/other.snap").exists());
    let granted = condition(&done, "ApprovalGranted").expect("granted");
    assert!(
        granted.message.contains(&format!("dry run {}", same.id)),
        "{}",
        granted.message
    );
}
