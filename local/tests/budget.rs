//! Grant budgets in `toolgate local`, end to end: the real binary, concurrent proposals over
//! gRPC, and a restart in between — a unit is spent exactly once per authorized call and given
//! back when the call ends before it started.

mod support;

use support::*;
use toolgate_proto::v1 as pb;

/// Replace the suites' test grant with one that has `budget` (YAML flow map) and also covers a
/// tool that needs a credential, and add that tool.
fn budgeted(root: &std::path::Path, budget: &str) {
    let m = root.join("manifests");
    let grant = toolgate_testkit::fixtures::grant(
        "team-a",
        "test-tools",
        &[
            "test.echo",
            "test.sleep",
            "test.sleep-idempotent",
            "test.gated",
            "test.secret",
        ],
    )
    .replace(
        "scopes: [\"workspace:read\"]",
        "scopes: [\"workspace:read\", \"github:issues:write\"]",
    );
    std::fs::write(
        m.join("test-grant.yaml"),
        format!("{grant}  budget: {budget}\n"),
    )
    .expect("grant");
    std::fs::write(
        m.join("tools/test-secret.yaml"),
        Tool::test("test.secret")
            .binding("github-issues-bot")
            .yaml("team-a"),
    )
    .expect("tool");
}

fn reason_of(call: &pb::Call, kind: &str) -> String {
    call.conditions
        .iter()
        .find(|c| c.r#type == kind)
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

fn message_of(call: &pb::Call, kind: &str) -> String {
    call.conditions
        .iter()
        .find(|c| c.r#type == kind)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_concurrent_proposals_spend_exactly_the_budget_across_a_restart() {
    let dir = setup();
    budgeted(dir.path(), "{maxCalls: 10}");
    let mut server = Server::start(dir.path());
    let c = server.client().await;
    let propose_many = |n: usize, c: toolgate_proto::v1::toolgate_client::ToolgateClient<_>| {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let mut c = c.clone();
                tokio::spawn(async move {
                    submit(
                        &mut c,
                        "test.echo",
                        serde_json::json!({"msg": format!("call {i}")}),
                        "execute",
                    )
                    .await
                })
            })
            .collect();
        futures::future::join_all(tasks)
    };
    // Half the burst, a restart, the other half: the ledger is the store's, not the process's.
    let first: Vec<pb::Call> = propose_many(50, c.clone())
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    server.stop();
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let second: Vec<pb::Call> = propose_many(50, c.clone())
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    let mut ran = 0;
    let mut refused = 0;
    for call in first.iter().chain(&second) {
        let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed", "Denied"]).await;
        match done.phase.as_str() {
            "Succeeded" => ran += 1,
            "Denied" => {
                assert_eq!(
                    reason_of(&done, "PolicyChecked"),
                    "BudgetExhausted",
                    "{:#?}",
                    done.conditions
                );
                let why = message_of(&done, "PolicyChecked");
                assert!(
                    why.contains("maxCalls") || why.contains("10 calls"),
                    "{why}"
                );
                refused += 1;
            }
            other => panic!("call {} ended {other}: {:#?}", done.id, done.conditions),
        }
    }
    assert_eq!(ran, 10, "exactly the budget ran");
    assert_eq!(refused, 90);
    // The view says why the tool is gone, and so does a new proposal.
    let view = c
        .get_tool_view(req(
            AGENT,
            pb::GetToolViewRequest {
                intent: "echo a message".into(),
                explain: true,
                ..Default::default()
            },
        ))
        .await
        .expect("view")
        .into_inner();
    assert!(
        view.exposed.iter().all(|t| t.name != "test.echo"),
        "{view:#?}"
    );
    let hidden = view
        .hidden
        .iter()
        .find(|h| h.name == "test.echo")
        .expect("test.echo hidden");
    assert_eq!(hidden.code, "budget-exhausted", "{hidden:#?}");
    assert!(hidden.reason.contains("budget.maxCalls"), "{hidden:#?}");
    let late = submit(
        &mut c,
        "test.echo",
        serde_json::json!({"msg": "late"}),
        "execute",
    )
    .await;
    assert_eq!(late.phase, "Denied");
    assert_eq!(reason_of(&late, "PolicyChecked"), "BudgetExhausted");
}

/// A call started in its proposal's write (a sandbox was waiting) is charged once, like one
/// started in a second write: with a budget of three, three calls run, at least one of them
/// started at once, and the fourth is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_started_in_its_proposals_write_spends_one_unit() {
    let dir = setup();
    budgeted(dir.path(), "{maxCalls: 3}");
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let mut at_once = 0;
    for i in 0..3 {
        let call = submit(
            &mut c,
            "test.echo",
            serde_json::json!({"msg": format!("call {i}")}),
            "execute",
        )
        .await;
        if call.phase == "Running" {
            at_once += 1;
        }
        let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed", "Denied"]).await;
        assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
        // Time for the pool to start a sandbox for the next call.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    assert!(at_once >= 1, "no call found a sandbox waiting for it");
    let fourth = submit(
        &mut c,
        "test.echo",
        serde_json::json!({"msg": "one too many"}),
        "execute",
    )
    .await;
    assert_eq!(fourth.phase, "Denied", "{:#?}", fourth.conditions);
    assert_eq!(reason_of(&fourth, "PolicyChecked"), "BudgetExhausted");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_fails_before_it_starts_gives_its_unit_back() {
    let dir = setup();
    budgeted(dir.path(), "{maxCalls: 2}");
    // No secret for the binding: the broker fails the credential step, before anything runs.
    write_private(
        &dir.path().join("secrets.yaml"),
        "secret/team-a/other: {token: x}\n",
    );
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    for _ in 0..3 {
        let call = submit(
            &mut c,
            "test.secret",
            serde_json::json!({"msg": "hi"}),
            "execute",
        )
        .await;
        let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed", "Denied"]).await;
        assert_eq!(done.phase, "Failed", "{:#?}", done.conditions);
        assert_eq!(reason_of(&done, "CredentialsBound"), "BrokerFailed");
    }
    // Three calls failed before they started: both units are still there.
    for i in 0..2 {
        let call = submit(
            &mut c,
            "test.echo",
            serde_json::json!({"msg": format!("{i}")}),
            "execute",
        )
        .await;
        let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed", "Denied"]).await;
        assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    }
    let spent = submit(
        &mut c,
        "test.echo",
        serde_json::json!({"msg": "third"}),
        "execute",
    )
    .await;
    assert_eq!(spent.phase, "Denied", "{:#?}", spent.conditions);
    assert_eq!(reason_of(&spent, "PolicyChecked"), "BudgetExhausted");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_hourly_window_refuses_with_when_it_frees_up() {
    let dir = setup();
    budgeted(dir.path(), "{maxCallsPerHour: 3}");
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    for i in 0..3 {
        let call = submit(
            &mut c,
            "test.echo",
            serde_json::json!({"msg": format!("{i}")}),
            "execute",
        )
        .await;
        let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed", "Denied"]).await;
        assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    }
    let fourth = submit(
        &mut c,
        "test.echo",
        serde_json::json!({"msg": "4"}),
        "execute",
    )
    .await;
    assert_eq!(fourth.phase, "Denied");
    assert_eq!(reason_of(&fourth, "PolicyChecked"), "BudgetExhausted");
    let why = message_of(&fourth, "PolicyChecked");
    assert!(why.contains("hour"), "{why}");
}
