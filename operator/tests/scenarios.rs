//! One scenario suite, written once, run on both backends through the gRPC API: the embedded
//! runtime (`toolgate local`) and the operator on the test cluster (each call a pod on its real
//! node, artifacts in a real S3 bucket). Each scenario records the call's steps (condition type, status and reason, in
//! order, as WatchCall tells them); the suite fails when the two backends disagree on any of them.
//! This is the test that keeps the two runtimes one lifecycle.

mod support;

use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};

use futures::StreamExt;
use support::node;
use support::{authorized as req, have_cluster, ok, prepare, root, token_of};
use tonic::transport::Channel;
use toolgate_proto::v1 as pb;
use toolgate_proto::v1::toolgate_client::ToolgateClient;
use toolgate_testkit::fixtures::{STANDARD_TOOLS, Tool, delegation_tool, grant, standard_tools};

const LOCAL_AGENT: &str = "scenario-agent-0123456789abcdef";
const LOCAL_REVIEWER: &str = "scenario-reviewer-0123456789abcdef";
const LOCAL_STRANGER: &str = "scenario-stranger-0123456789abcdef";

/// One backend, as an agent and a reviewer reach it.
struct Backend {
    name: &'static str,
    client: ToolgateClient<Channel>,
    /// The agent: proposes, and reads every call of its namespace (the example RBAC's `get` on
    /// toolcalls; `readerIn` locally) without answering for others'.
    agent: String,
    /// An approver of the namespace, who also proposes calls of her own.
    reviewer: String,
    /// Authenticated, and allowed nothing.
    stranger: String,
    namespace: String,
    _keep: Box<dyn std::any::Any>,
}

/// A step as both runtimes must tell it.
type Steps = Vec<(String, String, String)>;

/// What the egress scenarios reach: an HTTP server on a test host of the machine, and a DNS
/// server that answers two names with its address — one the scenario policy allows, one it
/// does not. Both runtimes' proxies run on this machine and resolve with it.
struct EgressHosts {
    _dns: toolgate_testkit::dns::DnsServer,
    nameserver: String,
    /// The test host's address.
    host: String,
    /// The server's port.
    port: u16,
}

impl EgressHosts {
    async fn start() -> EgressHosts {
        let (host, _) = node::test_hosts();
        let upstream = toolgate_testkit::upstream::start(&host)
            .await
            .expect("an upstream on a test host");
        let ip: std::net::IpAddr = host.parse().expect("test host address");
        let dns = toolgate_testkit::dns::DnsServer::start(vec![
            ("allowed.test", vec![ip]),
            ("denied.test", vec![ip]),
        ])
        .await
        .expect("dns");
        EgressHosts {
            nameserver: dns.addr().to_string(),
            _dns: dns,
            host,
            port: upstream.port(),
        }
    }

    fn url(&self, name: &str) -> String {
        format!("http://{name}:{}/hello", self.port)
    }
}

/// The manifests both backends run: the examples' sandbox policies and credential bindings, the
/// standard test tools and a grant for them, in `ns`.
fn manifests(ns: &str, egress: &EgressHosts) -> String {
    let mut docs: Vec<String> = [
        "examples/sandbox-policies.yaml",
        "examples/credential-bindings.yaml",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(root().join(f)).expect("read"))
    .collect();
    docs.extend(standard_tools().iter().map(|t| t.yaml("team-a")));
    docs.push(grant("team-a", "scenario-tools", &STANDARD_TOOLS));
    // An L5 tool that asks for a dry run as its second confirmation.
    docs.push(
        Tool::test("test.purge")
            .destructive("dry_run")
            .approval("always")
            .summary("Purge after approval and a dry run.")
            .yaml("team-a"),
    );
    docs.push(grant("team-a", "scenario-purge", &["test.purge"]));
    // A tool whose grant allows one call in all.
    docs.push(
        Tool::test("test.metered")
            .summary("Echo, metered.")
            .yaml("team-a"),
    );
    docs.push(format!(
        "{}  budget: {{maxCalls: 1}}\n",
        grant("team-a", "scenario-metered", &["test.metered"])
    ));
    // A fetch by name through the call's egress proxy (Python's own HTTP client, on the host
    // locally and in the executor image on the node).
    docs.push(format!(
        "apiVersion: toolgate.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {{name: scenario-egress, namespace: team-a}}\nspec:\n  mode: read_only\n  filesystem: {{readRoots: [], writeRoots: []}}\n  network: {{egress: allowlist, allowDomains: [\"allowed.test:{port}\"], allowCidrs: [\"{host}/32\"]}}\n  environment: {{inheritedEnv: [PATH, LANG]}}\n  process: {{timeoutMs: 20000, maxMemoryMb: 256, maxProcesses: 16, maxStdoutBytes: 65536, maxStderrBytes: 65536}}\n  audit: {{}}\n",
        port = egress.port,
        host = egress.host,
    ));
    docs.push(
        Tool::test("test.fetch")
            .argv("[python3, -c, \"import sys, urllib.request as u; print(u.urlopen(sys.argv[1]).read().decode())\", \"{{msg}}\"]")
            .policy("scenario-egress")
            .summary("Fetch a URL through the call's egress proxy.")
            .yaml("team-a"),
    );
    docs.push(grant("team-a", "scenario-egress", &["test.fetch"]));
    // A delegation to a subagent allowed `test.echo` once.
    docs.push(delegation_tool("team-a", "helper.delegate", 1, 600_000));
    docs.push(grant("team-a", "scenario-delegation", &["helper.delegate"]));
    // The reviewer's own grant: she proposes too (and cannot approve her own calls).
    docs.push(
        "apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {name: scenario-reviewer, namespace: team-a}\nspec:\n  subjects: [{kind: User, name: alice@example.com}]\n  tools: {names: [test.gated]}\n  scopes: [\"workspace:read\"]\n  reason: the reviewer proposes too\n"
            .into(),
    );
    docs.join("\n---\n")
        .replace("namespace: team-a}", &format!("namespace: {ns}}}"))
        .replace(
            &format!("{{kind: ServiceAccount, name: fixer, namespace: {ns}}}"),
            "{kind: ServiceAccount, name: fixer, namespace: team-a}",
        )
}

/// The server process, and its folder (removed once it is gone).
struct LocalServer(
    Child,
    #[allow(dead_code, reason = "kept until the server stops")] tempfile::TempDir,
);

impl Drop for LocalServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn local(egress: &EgressHosts) -> Backend {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::create_dir_all(root.join("manifests")).expect("manifests");
    std::fs::create_dir_all(root.join("workspace")).expect("workspace");
    std::fs::write(root.join("manifests/all.yaml"), manifests("team-a", egress)).expect("write");
    let tokens = root.join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "- {{token: {LOCAL_AGENT}, principal: \"system:serviceaccount:team-a:fixer\", readerIn: [team-a]}}\n\
             - {{token: {LOCAL_REVIEWER}, principal: alice@example.com, approverIn: [team-a]}}\n\
             - {{token: {LOCAL_STRANGER}, principal: mallory@example.com}}\n"
        ),
    )
    .expect("tokens");
    let mut perms = std::fs::metadata(&tokens).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
    std::fs::set_permissions(&tokens, perms).expect("chmod");
    let mut child = Command::new(support::toolgate_cli())
        .arg("local")
        .arg("--manifests")
        .arg(root.join("manifests"))
        .arg("--data")
        .arg(root.join("data"))
        .arg("--workspace")
        .arg(root.join("workspace"))
        .arg("--tokens")
        .arg(&tokens)
        .args(["--listen", "127.0.0.1:0"])
        .args(["--egress-nameserver", &egress.nameserver])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("toolgate local starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("first line");
    let addr = line
        .split("serving toolgate.v1 on ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string();
    Backend {
        name: "local",
        client: support::grpc_client(&addr).await,
        agent: LOCAL_AGENT.into(),
        reviewer: LOCAL_REVIEWER.into(),
        stranger: LOCAL_STRANGER.into(),
        namespace: "team-a".into(),
        _keep: Box::new(LocalServer(child, dir)),
    }
}

async fn cluster(egress: &EgressHosts) -> Option<Backend> {
    let ns = prepare("tg-scenarios");
    ok(
        &["apply", "-f", "-"],
        Some(&node::on_the_node(&manifests(&ns, egress))),
    );
    support::apply_agent_access(&ns);
    // The reviewer proposes calls of her own in the scenario namespace.
    ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: scenario-reviewer-proposes, namespace: {ns}}}\nrules: [{{apiGroups: [toolgate.dev], resources: [toolcalls], verbs: [create]}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: scenario-reviewer-proposes, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: scenario-reviewer-proposes}}\nsubjects: [{{kind: User, apiGroup: rbac.authorization.k8s.io, name: alice@example.com}}]\n"
        )),
    );
    let grpc = format!("127.0.0.1:{}", support::free_port());
    let mut args = toolgate_testkit::api::TestTls::get().operator_args(&grpc);
    args.extend([
        "--egress-proxy-address".to_string(),
        node::host_ip(),
        "--egress-nameserver".to_string(),
        egress.nameserver.clone(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let on_node = node::start_operator(&ns, "scenario-artifacts", &args);
    Some(Backend {
        name: "cluster",
        client: toolgate_testkit::api::grpc_tls_client(&grpc).await,
        agent: token_of("agent"),
        reviewer: token_of("reviewer"),
        stranger: token_of("stranger"),
        namespace: ns,
        _keep: Box::new(on_node),
    })
}

fn proposal(b: &Backend, tool: &str, args: &str) -> pb::ProposeCallRequest {
    pb::ProposeCallRequest {
        namespace: b.namespace.clone(),
        tool: tool.into(),
        args_json: args.into(),
        intent: Some(pb::Intent {
            user_goal: "compare the runtimes".into(),
            current_task: format!("call {tool}"),
            action_type: "execute".into(),
            rationale_summary: "the scenario suite".into(),
            evidence_refs: vec![],
        }),
        ..Default::default()
    }
}

async fn propose(b: &mut Backend, tool: &str, args: &str) -> pb::Call {
    let r = req(&b.agent, proposal(b, tool, args));
    b.client
        .propose_call(r)
        .await
        .expect("proposed")
        .into_inner()
}

/// WatchCall to the end: each step as (type, status, reason).
async fn steps(b: &mut Backend, id: &str) -> Steps {
    let mut s = b
        .client
        .watch_call(req(&b.agent, pb::WatchCallRequest { id: id.into() }))
        .await
        .expect("watch")
        .into_inner();
    let mut out = Vec::new();
    let mut end = None;
    while let Some(e) = s.next().await {
        let e = e.expect("event");
        out.push((e.r#type.clone(), e.status.clone(), e.reason.clone()));
        if e.terminal {
            end = Some(e.call.expect("the last event carries the call as it ended"));
            break;
        }
        assert!(
            e.call.is_none(),
            "only the last event carries the call: {e:?}"
        );
    }
    // The same as GetCall says, once it has ended.
    let end = end.expect("a last event");
    let got = b
        .client
        .get_call(req(&b.agent, pb::GetCallRequest { id: id.into() }))
        .await
        .expect("get")
        .into_inner();
    assert_eq!(
        (
            &end.id,
            &end.phase,
            &end.output_preview,
            &end.exit_code,
            &end.artifacts,
            &end.conditions
        ),
        (
            &got.id,
            &got.phase,
            &got.output_preview,
            &got.exit_code,
            &got.artifacts,
            &got.conditions
        )
    );
    out
}

async fn waiting(b: &mut Backend, id: &str) -> pb::Call {
    support::wait_call(&mut b.client, &b.agent, id, &["AwaitingApproval"]).await
}

/// Until the call says its approval bound it and it waits for its second confirmation (the
/// runtime has seen the approval).
async fn confirmation_awaited(b: &mut Backend, id: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let c = b
            .client
            .get_call(req(&b.agent, pb::GetCallRequest { id: id.into() }))
            .await
            .expect("get")
            .into_inner();
        if c.conditions
            .iter()
            .any(|k| k.reason == "AwaitingConfirmation")
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}: {id} never awaited its confirmation: {:#?}",
            b.name,
            c.conditions
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Every scenario on one backend: its steps by name, and what else must agree.
async fn play(b: &mut Backend, egress: &EgressHosts) -> BTreeMap<&'static str, Steps> {
    let mut out = BTreeMap::new();
    let mut ids = Vec::new();

    // Egress by name: an allowed name through the call's proxy, and one the policy does not
    // list, refused by it; what each call reached or was refused is in its effects.
    for (scenario, name) in [
        ("egress-allowed", "allowed.test"),
        ("egress-refused", "denied.test"),
    ] {
        let args = serde_json::json!({ "msg": egress.url(name) }).to_string();
        let call = propose(b, "test.fetch", &args).await;
        out.insert(scenario, steps(b, &call.id).await);
        let x = b
            .client
            .explain_call(req(
                &b.agent,
                pb::ExplainCallRequest {
                    id: call.id.clone(),
                },
            ))
            .await
            .expect("explain")
            .into_inner();
        let expected = match scenario {
            "egress-allowed" => format!("GET allowed.test:{}/hello", egress.port),
            _ => format!("GET denied.test:{}/hello (domain-not-allowed)", egress.port),
        };
        assert!(
            x.effects_json.contains(&expected),
            "{}: {scenario}: {}",
            b.name,
            x.effects_json
        );
        ids.push(call.id);
    }

    let call = propose(b, "test.echo", r#"{"msg": "hi"}"#).await;
    out.insert("allowed", steps(b, &call.id).await);
    ids.push(call.id);

    // No action type named: the tool's own, since it declares one; none for a tool that is not
    // registered, refused with the field to fill.
    let mut unnamed = proposal(b, "test.echo", r#"{"msg": "no action named"}"#);
    if let Some(i) = unnamed.intent.as_mut() {
        i.action_type = String::new();
    }
    let call = b
        .client
        .propose_call(req(&b.agent, unnamed.clone()))
        .await
        .expect("the tool's action type")
        .into_inner();
    out.insert("allowed-action-from-the-tool", steps(b, &call.id).await);
    ids.push(call.id);
    unnamed.tool = "no.such.tool".into();
    let e = b
        .client
        .propose_call(req(&b.agent, unnamed))
        .await
        .expect_err("no tool to take it from");
    assert_eq!(
        toolgate_api::error::status_code_and_field(&e),
        (
            "invalid-argument".to_string(),
            Some("intent.action_type".to_string())
        ),
        "{}: {e}",
        b.name
    );

    let call = propose(b, "test.gated", r#"{"msg": "approve me"}"#).await;
    let shown = waiting(b, &call.id).await;
    // An approval bound to other args is refused, with the same code on both runtimes.
    let mut stale = pb::ApproveCallRequest {
        id: shown.id.clone(),
        args_digest: format!("sha256:{}", "0".repeat(64)),
        tool_digest: shown.tool_digest.clone(),
        ttl_seconds: 300,
        ..Default::default()
    };
    let e = b
        .client
        .approve_call(req(&b.reviewer, stale.clone()))
        .await
        .expect_err("stale digests");
    assert_eq!(
        toolgate_api::error::status_code_and_field(&e).0,
        "approval-args-changed",
        "{}: {e}",
        b.name
    );
    // The proposer cannot approve their own call.
    stale.args_digest = shown.args_digest.clone();
    let e = b
        .client
        .approve_call(req(&b.agent, stale.clone()))
        .await
        .expect_err("self approval");
    assert_eq!(
        toolgate_api::error::status_code_and_field(&e).0,
        "approval-self",
        "{}: {e}",
        b.name
    );
    b.client
        .approve_call(req(&b.reviewer, stale))
        .await
        .expect("approved");
    out.insert("approved", steps(b, &call.id).await);
    let approved = call.id.clone();
    ids.push(call.id);

    let call = propose(b, "test.gated", r#"{"msg": "deny me"}"#).await;
    waiting(b, &call.id).await;
    b.client
        .deny_call(req(
            &b.reviewer,
            pb::DenyCallRequest {
                id: call.id.clone(),
                comment: "not today".into(),
            },
        ))
        .await
        .expect("denied");
    out.insert("denied-by-approver", steps(b, &call.id).await);
    ids.push(call.id);

    let call = propose(b, "test.gated", r#"{"msg": "cancel me"}"#).await;
    waiting(b, &call.id).await;
    b.client
        .cancel_call(req(
            &b.agent,
            pb::CancelCallRequest {
                id: call.id.clone(),
                reason: "changed my mind".into(),
            },
        ))
        .await
        .expect("cancelled");
    out.insert("cancelled-while-waiting", steps(b, &call.id).await);
    ids.push(call.id);

    let call = propose(b, "test.echo", r#"{"msg": 42}"#).await;
    out.insert("args-invalid", steps(b, &call.id).await);
    ids.push(call.id);

    let call = propose(b, "no.such.tool", "{}").await;
    out.insert("unknown-tool", steps(b, &call.id).await);
    ids.push(call.id);

    let mut dry = proposal(b, "test.echo", r#"{"msg": "dry"}"#);
    dry.dry_run = true;
    let call = b
        .client
        .propose_call(req(&b.agent, dry))
        .await
        .expect("dry run")
        .into_inner();
    out.insert("dry-run-without-support", steps(b, &call.id).await);
    ids.push(call.id);

    // An approval that would change nothing is refused on both runtimes: an L5 call approved
    // once waits for its dry run, which a second approval cannot stand in for.
    let call = propose(b, "test.purge", r#"{"msg": "purge"}"#).await;
    let shown = waiting(b, &call.id).await;
    let approval = pb::ApproveCallRequest {
        id: shown.id.clone(),
        args_digest: shown.args_digest.clone(),
        tool_digest: shown.tool_digest.clone(),
        ttl_seconds: 300,
        ..Default::default()
    };
    b.client
        .approve_call(req(&b.reviewer, approval.clone()))
        .await
        .expect("the first approval binds");
    confirmation_awaited(b, &call.id).await;
    let e = b
        .client
        .approve_call(req(&b.reviewer, approval))
        .await
        .expect_err("a second approval changes nothing");
    assert_eq!(
        toolgate_api::error::status_code_and_field(&e).0,
        "approval-not-binding",
        "{}: {e}",
        b.name
    );
    assert!(e.message().contains("dry-run-required"), "{}: {e}", b.name);
    b.client
        .deny_call(req(
            &b.reviewer,
            pb::DenyCallRequest {
                id: call.id.clone(),
                comment: "no dry run came".into(),
            },
        ))
        .await
        .expect("denied");
    // Its conditions as they ended (WatchCall on the embedded runtime also tells the replaced
    // AwaitingConfirmation step; the conditions are the same on both).
    let ended = support::wait_call(&mut b.client, &b.agent, &call.id, &["Denied"]).await;
    out.insert(
        "l5-approved-then-denied",
        ended
            .conditions
            .iter()
            .map(|k| (k.r#type.clone(), k.status.clone(), k.reason.clone()))
            .collect(),
    );
    // ExplainCall names every approval the call was given, in order, on both runtimes.
    let x = b
        .client
        .explain_call(req(
            &b.reviewer,
            pb::ExplainCallRequest {
                id: call.id.clone(),
            },
        ))
        .await
        .expect("explain")
        .into_inner();
    assert_eq!(x.approval.split(", ").count(), 2, "{}: {x:?}", b.name);
    assert_eq!(
        x.approver, "alice@example.com, alice@example.com",
        "{}",
        b.name
    );
    ids.push(call.id);

    // Who may see a call and who may answer for it: the reviewer proposes; the agent reads the
    // namespace's calls but answers for none but its own; a stranger is told nothing exists.
    let mine = b
        .client
        .propose_call(req(
            &b.reviewer,
            proposal(b, "test.gated", r#"{"msg": "the reviewer's own"}"#),
        ))
        .await
        .expect("the reviewer proposes")
        .into_inner();
    let shown =
        support::wait_call(&mut b.client, &b.reviewer, &mine.id, &["AwaitingApproval"]).await;
    let mut answers: Steps = Vec::new();
    let code = |r: Result<(), tonic::Status>| match r {
        Ok(()) => "ok".to_string(),
        Err(e) => format!(
            "{:?}/{}",
            e.code(),
            toolgate_api::error::status_code_and_field(&e).0
        ),
    };
    let approval = pb::ApproveCallRequest {
        id: shown.id.clone(),
        args_digest: shown.args_digest.clone(),
        tool_digest: shown.tool_digest.clone(),
        ttl_seconds: 300,
        ..Default::default()
    };
    let get = |id: &str| pb::GetCallRequest { id: id.into() };
    let cancel = |id: &str| pb::CancelCallRequest {
        id: id.into(),
        reason: "not mine".into(),
    };
    let deny = |id: &str| pb::DenyCallRequest {
        id: id.into(),
        comment: "not mine".into(),
    };
    for who in ["reader", "stranger"] {
        let token = if who == "reader" {
            b.agent.clone()
        } else {
            b.stranger.clone()
        };
        let r = b.client.get_call(req(&token, get(&mine.id))).await;
        answers.push((who.into(), "get".into(), code(r.map(drop))));
        let r = b.client.cancel_call(req(&token, cancel(&mine.id))).await;
        answers.push((who.into(), "cancel".into(), code(r.map(drop))));
        let r = b.client.deny_call(req(&token, deny(&mine.id))).await;
        answers.push((who.into(), "deny".into(), code(r.map(drop))));
        let r = b.client.approve_call(req(&token, approval.clone())).await;
        answers.push((who.into(), "approve".into(), code(r.map(drop))));
    }
    let r = b.client.approve_call(req(&b.reviewer, approval)).await;
    answers.push(("proposer".into(), "approve".into(), code(r.map(drop))));
    let r = b
        .client
        .cancel_call(req(&b.reviewer, cancel(&mine.id)))
        .await;
    answers.push(("proposer".into(), "cancel".into(), code(r.map(drop))));
    out.insert("answered-for-by-whom", answers);
    out.insert("cancelled-by-its-proposer", steps(b, &mine.id).await);
    ids.push(mine.id);

    // A grant's budget is spent once per call that runs: the second call is refused.
    let first = propose(b, "test.metered", r#"{"msg": "one"}"#).await;
    out.insert("budget-spent", steps(b, &first.id).await);
    let second = propose(b, "test.metered", r#"{"msg": "two"}"#).await;
    out.insert("budget-exhausted", steps(b, &second.id).await);
    ids.extend([first.id, second.id]);

    out.extend(delegation(b).await);

    // Explain says the same things: the sandbox policy, the approver, a view.
    let x = b
        .client
        .explain_call(req(&b.reviewer, pb::ExplainCallRequest { id: approved }))
        .await
        .expect("explain")
        .into_inner();
    assert_eq!(x.sandbox_policy, "read-only", "{}", b.name);
    assert_eq!(x.approver, "alice@example.com", "{}", b.name);
    let sandbox: serde_json::Value = serde_json::from_str(&x.sandbox_json).expect("sandbox json");
    assert_eq!(sandbox["policy"], "read-only", "{}: {sandbox}", b.name);
    assert!(x.view.is_some(), "{}", b.name);

    // List finds every call of the scenario in the namespace.
    let listed = b
        .client
        .list_calls(req(
            &b.reviewer,
            pb::ListCallsRequest {
                namespace: b.namespace.clone(),
                page_size: 500,
                ..Default::default()
            },
        ))
        .await
        .expect("list")
        .into_inner();
    let listed: Vec<&str> = listed.calls.iter().map(|c| c.id.as_str()).collect();
    for id in &ids {
        assert!(listed.contains(&id.as_str()), "{}: {id} not listed", b.name);
    }
    out
}

/// A delegation on one backend: the subagent's view, its calls inside and outside what the
/// delegation allows, a report the tool's output schema refuses, then one that ends the parent.
async fn delegation(b: &mut Backend) -> BTreeMap<&'static str, Steps> {
    let mut out = BTreeMap::new();
    let mut p = proposal(b, "helper.delegate", r#"{"task": "echo once"}"#);
    if let Some(i) = p.intent.as_mut() {
        i.action_type = "subagent_delegate".into();
    }
    let parent = b
        .client
        .propose_call(req(&b.agent, p))
        .await
        .expect("delegation proposed")
        .into_inner();
    support::wait_call(&mut b.client, &b.agent, &parent.id, &["Running"]).await;
    let token = b
        .client
        .get_delegation_token(req(
            &b.agent,
            pb::GetDelegationTokenRequest {
                call_id: parent.id.clone(),
            },
        ))
        .await
        .expect("the delegator fetches the token")
        .into_inner()
        .token;

    let view = b
        .client
        .get_tool_view(req(
            &token,
            pb::GetToolViewRequest {
                intent: "echo or sleep".into(),
                max_tools: 32,
                explain: true,
                ..Default::default()
            },
        ))
        .await
        .expect("the subagent's view")
        .into_inner();
    let mut seen: Steps = view
        .exposed
        .iter()
        .map(|t| ("exposed".into(), t.name.clone(), String::new()))
        .collect();
    seen.extend(
        view.hidden
            .iter()
            .map(|h| ("hidden".into(), h.name.clone(), h.code.clone())),
    );
    seen.sort();
    out.insert("delegation-view", seen);

    let mut children: Steps = Vec::new();
    for tool in ["test.sleep", "test.echo", "test.echo"] {
        let call = b
            .client
            .propose_call(req(
                &token,
                proposal(b, tool, r#"{"msg": "from the subagent"}"#),
            ))
            .await
            .expect("the subagent proposes")
            .into_inner();
        let ended = support::wait_call(
            &mut b.client,
            &token,
            &call.id,
            &["Succeeded", "Failed", "Denied"],
        )
        .await;
        assert_eq!(ended.parent_call, parent.id, "{}", b.name);
        let codes: Vec<String> = ended.reasons.iter().map(|r| r.code.clone()).collect();
        children.push((tool.into(), ended.phase, codes.join(",")));
    }
    out.insert("delegation-children", children);

    let mut report: Steps = Vec::new();
    let bad = b
        .client
        .complete_delegation(req(
            &token,
            pb::CompleteDelegationRequest {
                summary: "done".into(),
                result_json: r#"{"echoed": "one"}"#.into(),
                ..Default::default()
            },
        ))
        .await
        .expect_err("a result its output schema refuses");
    let (code, field) = toolgate_api::error::status_code_and_field(&bad);
    report.push((
        format!("{:?}", bad.code()),
        code.to_string(),
        field.unwrap_or_default(),
    ));
    let done = b
        .client
        .complete_delegation(req(
            &token,
            pb::CompleteDelegationRequest {
                summary: "echoed once; token ghp_0123456789abcdefghijABCDEFGHIJ0123456789".into(),
                result_json: r#"{"echoed": 1}"#.into(),
                failed: false,
                tokens_used: 42,
            },
        ))
        .await
        .expect("the report ends the delegation")
        .into_inner();
    report.push(("ended".into(), done.phase, done.output_preview));
    out.insert("delegation-report", report);
    out.insert("delegation", steps(b, &parent.id).await);
    out
}

#[test]
fn both_runtimes_tell_every_scenario_the_same_way() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        if !have_cluster() || !node::have_node() {
            return;
        }
        let egress = EgressHosts::start().await;
        let Some(mut on_cluster) = cluster(&egress).await else {
            return;
        };
        let mut embedded = local(&egress).await;
        let local_steps = play(&mut embedded, &egress).await;
        let cluster_steps = play(&mut on_cluster, &egress).await;
        assert_eq!(
            local_steps.keys().collect::<Vec<_>>(),
            cluster_steps.keys().collect::<Vec<_>>()
        );
        for (scenario, steps) in &local_steps {
            assert_eq!(
                steps, &cluster_steps[scenario],
                "scenario {scenario}: the embedded runtime (left) and the operator (right) differ"
            );
            assert!(!steps.is_empty(), "{scenario} recorded nothing");
        }
        // The steps themselves, so a change to both at once is a visible change here too.
        let kinds = |s: &str| -> Vec<String> {
            local_steps[s]
                .iter()
                .map(|(k, st, r)| format!("{k}={st}/{r}"))
                .collect()
        };
        assert_eq!(
            kinds("approved"),
            [
                "ToolCallRequested=True/Accepted",
                "ArgsValidated=True/SchemaOk",
                "PolicyChecked=True/ApprovalRequired",
                "ApprovalRequested=True/AwaitingApproval",
                "ApprovalGranted=True/Approved",
                "SandboxPrepared=True/Resolved",
                "CredentialsBound=True/NotRequired",
                "Started=True/ExecutorStarted",
                "Finished=True/Completed",
                "ResultValidated=True/Verified",
                "ArtifactPersisted=True/Stored",
                "StateUpdated=True/Succeeded",
            ]
        );
        assert_eq!(
            kinds("egress-allowed").last().map(String::as_str),
            Some("StateUpdated=True/Succeeded")
        );
        assert_eq!(
            kinds("egress-refused").last().map(String::as_str),
            Some("StateUpdated=False/Failed")
        );
        assert_eq!(
            kinds("denied-by-approver")[4..],
            [
                "ApprovalGranted=False/DeniedByApprover",
                "StateUpdated=False/Denied"
            ]
        );
        assert_eq!(
            kinds("cancelled-while-waiting").last().map(String::as_str),
            Some("Cancelled=True/CancelledByUser")
        );
        // A reader sees and answers for nothing; a stranger is told nothing exists; the
        // proposer may not approve her own call but may cancel it.
        assert_eq!(
            kinds("answered-for-by-whom"),
            [
                "reader=get/ok",
                "reader=cancel/PermissionDenied/not-an-approver",
                "reader=deny/PermissionDenied/not-an-approver",
                "reader=approve/PermissionDenied/not-an-approver",
                "stranger=get/NotFound/not-found",
                "stranger=cancel/NotFound/not-found",
                "stranger=deny/NotFound/not-found",
                "stranger=approve/NotFound/not-found",
                "proposer=approve/PermissionDenied/approval-self",
                "proposer=cancel/ok",
            ]
        );
        assert_eq!(
            kinds("budget-exhausted")[2],
            "PolicyChecked=False/BudgetExhausted"
        );
        assert_eq!(
            kinds("delegation-children"),
            [
                "test.sleep=Denied/delegation-tool-not-allowed",
                "test.echo=Succeeded/delegation-admits,args-valid,tool-version-pinned,grant-matched,approval-not-required",
                "test.echo=Denied/delegation-budget-exhausted",
            ]
        );
        assert_eq!(
            kinds("delegation-report")[0],
            "InvalidArgument=invalid-argument/result_json"
        );
        assert!(
            kinds("delegation-report")[1]
                .starts_with("ended=Succeeded/echoed once; token [REDACTED:github-token]"),
            "{:?}",
            kinds("delegation-report")
        );
    });
}
