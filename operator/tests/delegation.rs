//! Delegation to a subagent on the cluster, end to end with the real API server and the
//! operator's agent API: a delegation call opens without a pod; its principal fetches the
//! subagent's token once; the subagent (the test, with that token) sees and calls only the
//! allowed tool, each call in its own pod on the real node, with the delegator's grants, three calls and the fourth
//! refused; its calls carry the parent (label and spec) and ExplainCall of the parent lists them;
//! its report ends the parent with a summary and a result; the token dies with it. A ToolCall
//! claiming a delegation from kubectl is refused by admission.

mod support;

use std::time::Duration;

use support::node;
use support::{kubectl, ok, prepare};
use tonic::transport::Channel;
use toolgate_proto::v1 as pb;
use toolgate_proto::v1::toolgate_client::ToolgateClient;

async fn wait(
    api: &mut ToolgateClient<Channel>,
    token: &str,
    id: &str,
    phases: &[&str],
) -> pb::Call {
    toolgate_testkit::api::wait_call(api, token, id, phases).await
}

#[test]
fn a_delegation_on_the_cluster_lets_its_subagent_make_three_calls_in_pods() {
    if !toolgate_testkit::have_cluster() || !node::have_node() {
        return;
    }
    let port = support::free_port();
    let grpc = format!("127.0.0.1:{port}");
    let tls = toolgate_testkit::api::TestTls::get().operator_args(&grpc);
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let ns = prepare("tg-deleg");
    let mut docs = vec![
        node::example_policies(&ns),
        toolgate_testkit::fixtures::delegation_tool(&ns, "helper.delegate", 3, 600_000),
        toolgate_testkit::fixtures::grant(
            &ns,
            "delegations",
            &["helper.delegate", "test.echo", "test.sleep"],
        ),
    ];
    docs.extend(
        toolgate_testkit::fixtures::standard_tools()
            .iter()
            .map(|t| t.yaml(&ns)),
    );
    ok(&["apply", "-f", "-"], Some(&docs.join("\n---\n")));
    support::apply_agent_access(&ns);
    let _operator = node::start_operator(&ns, "delegation-artifacts", &tls);
    let agent = support::token_of("agent");

    // kubectl cannot claim a delegation: spec.delegation is the agent API's alone.
    let forged = toolgate_testkit::fixtures::call(
        &ns,
        "forged",
        "test.echo",
        "{msg: hi}",
        "team-a",
    ) + &format!(
        "  delegation: {{parentCall: nothing, delegator: system:serviceaccount:{ns}:fixer}}\n"
    );
    // (A changed admission policy takes a moment to reach the API server's admission chain.)
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let err = loop {
        let (created, _, err) =
            kubectl(&["--context", "agent", "create", "-f", "-"], Some(&forged));
        if !created {
            break err;
        }
        ok(
            &["delete", "toolcall", "forged", "-n", &ns, "--wait=false"],
            None,
        );
        assert!(
            std::time::Instant::now() < deadline,
            "a forged delegation is still admitted"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(err.contains("spec.delegation"), "{err}");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        use support::authorized as req;
        let mut api = toolgate_testkit::api::grpc_tls_client(&grpc).await;
        let propose = |tool: &str, args: &str, action: &str| pb::ProposeCallRequest {
            namespace: ns.clone(),
            tool: tool.into(),
            args_json: args.into(),
            intent: Some(pb::Intent {
                user_goal: "test delegation on the cluster".into(),
                current_task: format!("call {tool}"),
                action_type: action.into(),
                rationale_summary: "end-to-end test".into(),
                evidence_refs: vec![],
            }),
            ..Default::default()
        };
        let parent = api
            .propose_call(req(
                &agent,
                propose(
                    "helper.delegate",
                    r#"{"task": "echo three things"}"#,
                    "subagent_delegate",
                ),
            ))
            .await
            .expect("proposed")
            .into_inner();
        let parent = wait(
            &mut api,
            &agent,
            &parent.id,
            &["Running", "Failed", "Denied"],
        )
        .await;
        assert_eq!(parent.phase, "Running", "{}", parent.status_json);
        let pods = kubectl(
            &[
                "get",
                "pods",
                "-n",
                &ns,
                "-l",
                &format!(
                    "toolgate.dev/call={}",
                    parent.id.rsplit('/').next().unwrap_or_default()
                ),
                "-o",
                "name",
            ],
            None,
        )
        .1;
        assert!(pods.trim().is_empty(), "a delegation runs no pod: {pods}");

        let issued = api
            .get_delegation_token(req(
                &agent,
                pb::GetDelegationTokenRequest {
                    call_id: parent.id.clone(),
                },
            ))
            .await
            .expect("token")
            .into_inner();
        let again = api
            .get_delegation_token(req(
                &agent,
                pb::GetDelegationTokenRequest {
                    call_id: parent.id.clone(),
                },
            ))
            .await
            .expect_err("once");
        assert_eq!(
            toolgate_api::error::status_code_and_field(&again).0,
            "delegation-token-issued"
        );
        let token = issued.token;

        let view = api
            .get_tool_view(req(
                &token,
                pb::GetToolViewRequest {
                    intent: "echo or sleep".into(),
                    max_tools: 32,
                    ..Default::default()
                },
            ))
            .await
            .expect("view")
            .into_inner();
        let exposed: Vec<&str> = view.exposed.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(exposed, vec!["test.echo"], "{view:?}");

        let mut children = Vec::new();
        let outside = api
            .propose_call(req(
                &token,
                propose("test.sleep", r#"{"seconds": "1"}"#, "execute"),
            ))
            .await
            .expect("proposed")
            .into_inner();
        let outside = wait(
            &mut api,
            &token,
            &outside.id,
            &["Succeeded", "Failed", "Denied"],
        )
        .await;
        assert_eq!(outside.phase, "Denied", "{}", outside.status_json);
        assert!(
            outside
                .reasons
                .iter()
                .any(|r| r.code == "delegation-tool-not-allowed")
        );
        children.push(outside.id);
        for i in 0..4 {
            let child = api
                .propose_call(req(
                    &token,
                    propose("test.echo", r#"{"msg": "from the subagent"}"#, "execute"),
                ))
                .await
                .expect("proposed")
                .into_inner();
            let child = wait(
                &mut api,
                &token,
                &child.id,
                &["Succeeded", "Failed", "Denied"],
            )
            .await;
            if i < 3 {
                assert_eq!(child.phase, "Succeeded", "call {i}: {}", child.status_json);
                assert_eq!(child.output_preview, "from the subagent\n");
            } else {
                assert_eq!(child.phase, "Denied", "{}", child.status_json);
                assert!(
                    child
                        .reasons
                        .iter()
                        .any(|r| r.code == "delegation-budget-exhausted"),
                    "{:?}",
                    child.reasons
                );
            }
            assert_eq!(child.parent_call, parent.id);
            children.push(child.id);
        }

        let done = api
            .complete_delegation(req(
                &token,
                pb::CompleteDelegationRequest {
                    summary: "echoed three things".into(),
                    result_json: r#"{"echoed": 3}"#.into(),
                    ..Default::default()
                },
            ))
            .await
            .expect("reported")
            .into_inner();
        let done = wait(&mut api, &agent, &done.id, &["Succeeded", "Failed"]).await;
        assert_eq!(done.phase, "Succeeded", "{}", done.status_json);
        assert_eq!(done.output_preview, "echoed three things");
        assert!(
            !done.status_json.contains("from the subagent"),
            "{}",
            done.status_json
        );

        let explained = api
            .explain_call(req(
                &agent,
                pb::ExplainCallRequest {
                    id: parent.id.clone(),
                },
            ))
            .await
            .expect("explain")
            .into_inner();
        let names: Vec<String> = children
            .iter()
            .map(|c| c.rsplit('/').next().unwrap_or_default().to_string())
            .collect();
        assert_eq!(explained.children, names);

        // The token died with the delegation (its Secret went with the call's children).
        let mut dead = false;
        for _ in 0..50 {
            if api
                .get_tool_view(req(&token, pb::GetToolViewRequest::default()))
                .await
                .is_err_and(|e| e.code() == tonic::Code::Unauthenticated)
            {
                dead = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(dead, "the token outlived its delegation");
    });
}
