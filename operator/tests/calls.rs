//! The ToolCall pipeline end to end on the test cluster: the operator (its own identity, the
//! shipped least-privilege role) decides, waits for approvals, creates one hardened pod with its
//! NetworkPolicy, ConfigMap and Secret per call, and records the executor's result. Every pod is
//! scheduled to the real node and run by its kubelet in a container of the executor image, its
//! NetworkPolicy enforced by kube-router; artifacts go to a real S3 bucket (moto). What ran is
//! read from the kubelet's `Started` events.

mod support;

use std::time::{Duration, Instant};

use futures::StreamExt;

use support::node;
use support::{
    have_cluster, http_get, jsonpath, kubectl, ok, operator_log, prepare, root, token_of,
    wait_call, wait_for,
};
use toolgate_testkit::moto::Moto;

use toolgate_testkit::fixtures::Tool;

const CANARY: &str = "canary-cluster-credential-4c1d";
const BUCKET: &str = "calls-artifacts";

fn tool(ns: &str, name: &str, argv: &str, approval: &str, binding: Option<&str>) -> String {
    let mut t = Tool::test(name)
        .argv(argv)
        .approval(approval)
        .summary("A tool for the operator's end-to-end tests.");
    if let Some(b) = binding {
        t = t.binding(b);
    }
    t.yaml(ns)
}

fn call(ns: &str, name: &str, tool: &str, args: &str, principal_ns: &str) -> String {
    toolgate_testkit::fixtures::call(ns, name, tool, args, principal_ns)
}

struct Cluster {
    ns: String,
    _operator: support::Operator,
    store: Moto,
    _secrets: tempfile::TempDir,
}

impl Cluster {
    /// Another operator for the namespace, its calls on the node like the first's (a restart,
    /// a standby, a replica).
    fn operator(&self, args: &[&str]) -> support::Operator {
        node::operator_for(&self.ns, &self.store, BUCKET, args)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            support::dump(
                &self.ns,
                "toolgate,pods,secrets,configmaps,networkpolicies,events",
            );
        }
    }
}

fn cluster(prefix: &str) -> Option<Cluster> {
    cluster_with(prefix, &[])
}

fn cluster_with(prefix: &str, extra: &[&str]) -> Option<Cluster> {
    if !have_cluster() || !node::have_node() {
        return None;
    }
    let ns = prepare(prefix);
    let mut docs: Vec<String> = [
        "examples/sandbox-policies.yaml",
        "examples/credential-bindings.yaml",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(root().join(f)).expect("read"))
    .collect();
    docs.push(tool(
        "team-a",
        "test.echo",
        "[echo, \"{{msg}}\"]",
        "never",
        None,
    ));
    docs.push(tool(
        "team-a",
        "test.sleep",
        "[sleep, \"{{seconds}}\"]",
        "never",
        None,
    ));
    docs.push(tool(
        "team-a",
        "test.gated",
        "[echo, \"{{msg}}\"]",
        "always",
        None,
    ));
    docs.push(tool(
        "team-a",
        "test.secret",
        "[cat, /var/run/toolgate/credentials/github-token]",
        "never",
        Some("github-issues-bot"),
    ));
    docs.push("apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {name: tests, namespace: team-a}\nspec:\n  subjects: [{kind: ServiceAccount, name: fixer, namespace: team-a}]\n  tools: {names: [test.echo, test.sleep, test.gated, test.secret]}\n  scopes: [\"workspace:read\"]\n".into());
    let yaml = node::on_the_node(
        &docs
            .join("\n---\n")
            .replace("namespace: team-a", &format!("namespace: {ns}")),
    );
    ok(&["apply", "-f", "-"], Some(&yaml));
    let (secrets, secrets_arg) = support::secrets_file(CANARY);
    let mut args = vec![
        "--secrets",
        secrets_arg.as_str(),
        "--keep-failed-pods-seconds",
        "0",
    ];
    args.extend_from_slice(extra);
    let (operator, store) = node::start_operator(&ns, BUCKET, &args);
    Some(Cluster {
        ns,
        _operator: operator,
        store,
        _secrets: secrets,
    })
}

fn children(ns: &str, call: &str) -> String {
    kubectl(
        &[
            "get",
            "pods,secrets,configmaps,networkpolicies",
            "-n",
            ns,
            "-l",
            &format!("toolgate.dev/call={call}"),
            "-o",
            "name",
        ],
        None,
    )
    .1
}

#[test]
fn a_call_runs_in_its_own_pod_and_reports_in_status() {
    let Some(c) = cluster("tg-calls") else { return };
    let ns = &c.ns;
    ok(
        &["apply", "-f", "-"],
        Some(&call(ns, "echo-1", "test.echo", "{msg: hello}", ns)),
    );
    wait_for(ns, "toolcall/echo-1", "{.status.phase}", &["Succeeded"]);
    assert_eq!(
        jsonpath(ns, "toolcall/echo-1", "{.status.result.outputPreview}"),
        "hello\n"
    );
    let types = jsonpath(ns, "toolcall/echo-1", "{.status.conditions[*].type}");
    assert_eq!(
        types,
        "ToolCallRequested ArgsValidated PolicyChecked SandboxPrepared CredentialsBound Started Finished ResultValidated ArtifactPersisted StateUpdated"
    );
    // kubectl wait and describe show what a user expects.
    ok(
        &[
            "wait",
            "--for=condition=Finished",
            "toolcall/echo-1",
            "-n",
            ns,
            "--timeout=30s",
        ],
        None,
    );
    let described = ok(&["describe", "toolcall", "echo-1", "-n", ns], None);
    assert!(
        described.contains("ExecutorStarted") && described.contains("Completed"),
        "{described}"
    );
    let row = ok(&["get", "toolcall", "echo-1", "-n", ns], None);
    assert!(row.contains("Succeeded") && row.contains("allow"), "{row}");
    // Children are gone once the result is recorded.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !children(ns, "echo-1").trim().is_empty() {
        assert!(
            Instant::now() < deadline,
            "children left: {}",
            children(ns, "echo-1")
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let ran = node::starts_of(ns, "tg-echo-1", 1);
    assert_eq!(ran.len(), 1, "exactly one pod: {ran:?}");
}

#[test]
fn denied_and_invalid_calls_create_no_pod() {
    let Some(c) = cluster("tg-denied") else {
        return;
    };
    let ns = &c.ns;
    ok(
        &["apply", "-f", "-"],
        Some(&call(ns, "nobody", "test.echo", "{msg: hi}", "elsewhere")),
    );
    ok(
        &["apply", "-f", "-"],
        Some(&call(
            ns,
            "bad-args",
            "test.echo",
            "{msg: hi, extra: 1}",
            ns,
        )),
    );
    wait_for(ns, "toolcall/nobody", "{.status.phase}", &["Denied"]);
    wait_for(ns, "toolcall/bad-args", "{.status.phase}", &["Denied"]);
    assert_eq!(
        jsonpath(
            ns,
            "toolcall/bad-args",
            "{.status.conditions[?(@.type==\"ArgsValidated\")].reason}"
        ),
        "ArgsInvalid"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(children(ns, "nobody").trim(), "");
    assert_eq!(children(ns, "bad-args").trim(), "");
    assert_eq!(node::pods_started(ns), vec![], "a pod ran");
}

#[test]
fn an_approval_bound_to_the_call_lets_it_run_once() {
    let Some(c) = cluster("tg-approve") else {
        return;
    };
    let ns = &c.ns;
    ok(
        &["apply", "-f", "-"],
        Some(&call(ns, "gated-1", "test.gated", "{msg: approved}", ns)),
    );
    wait_for(
        ns,
        "toolcall/gated-1",
        "{.status.phase}",
        &["AwaitingApproval"],
    );
    let args = jsonpath(ns, "toolcall/gated-1", "{.status.argsDigest}");
    let tool = jsonpath(ns, "toolcall/gated-1", "{.status.toolDigest}");
    let approval = |name: &str, args: &str| {
        format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolApproval\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  callRef: {{name: gated-1}}\n  argsDigest: \"{args}\"\n  toolDigest: \"{tool}\"\n  riskTier: L1\n  scopes: [\"workspace:read\"]\n  principal: system:serviceaccount:{ns}:fixer\n  approver: alice@example.com\n  decision: allowOnce\n  expiresAt: \"2099-01-01T00:00:00Z\"\n"
        )
    };
    // An approval of other args does not bind: the call keeps waiting and no pod appears.
    ok(
        &["apply", "-f", "-"],
        Some(&approval(
            "wrong-args",
            &format!("sha256:{}", "0".repeat(64)),
        )),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        jsonpath(ns, "toolcall/gated-1", "{.status.phase}"),
        "AwaitingApproval"
    );
    assert_eq!(children(ns, "gated-1").trim(), "");
    ok(&["apply", "-f", "-"], Some(&approval("right", &args)));
    wait_for(ns, "toolcall/gated-1", "{.status.phase}", &["Succeeded"]);
    assert_eq!(
        jsonpath(
            ns,
            "toolcall/gated-1",
            "{.status.authorization.approvalRef.name}"
        ),
        "right"
    );
    assert_eq!(
        jsonpath(ns, "toolcall/gated-1", "{.status.result.outputPreview}"),
        "approved\n"
    );
    wait_for(ns, "toolapproval/right", "{.status.state}", &["Consumed"]);
}

#[test]
fn the_credential_reaches_the_pod_as_a_file_and_nothing_else() {
    let Some(c) = cluster("tg-secret") else {
        return;
    };
    let ns = &c.ns;
    ok(
        &["apply", "-f", "-"],
        Some(&call(ns, "secret-1", "test.secret", "{}", ns)),
    );
    wait_for(
        ns,
        "toolcall/secret-1",
        "{.status.phase}",
        &["Succeeded", "Failed"],
    );
    let status = jsonpath(ns, "toolcall/secret-1", "{.status}");
    assert!(
        !status.contains(CANARY),
        "the credential reached status: {status}"
    );
    assert!(
        status.contains("github-issues-bot"),
        "the binding is named: {status}"
    );
    let events = ok(&["get", "events", "-n", ns, "-o", "yaml"], None);
    assert!(!events.contains(CANARY), "the credential reached an event");
    assert_eq!(
        jsonpath(ns, "toolcall/secret-1", "{.status.phase}"),
        "Succeeded",
        "{status}"
    );
    // The executor read the file (it redacts the value it was given).
    assert!(
        jsonpath(ns, "toolcall/secret-1", "{.status.result.outputPreview}").contains("REDACTED")
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while kubectl(&["get", "secret", "tg-secret-1", "-n", ns], None).0 {
        assert!(
            Instant::now() < deadline,
            "the credential Secret outlived its call"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        !operator_log().contains(CANARY),
        "the credential reached the operator's log"
    );
}

#[test]
fn a_restarted_operator_never_makes_a_second_pod_and_deleting_a_call_cleans_up() {
    let Some(mut c) = cluster("tg-restart") else {
        return;
    };
    let ns = c.ns.clone();
    ok(
        &["apply", "-f", "-"],
        Some(&call(&ns, "sleepy", "test.sleep", "{seconds: \"4\"}", &ns)),
    );
    wait_for(&ns, "toolcall/sleepy", "{.status.phase}", &["Running"]);
    let uid = jsonpath(&ns, "pod/tg-sleepy", "{.metadata.uid}");
    // SIGKILL the operator mid-call and start another.
    let next = c.operator(&["--keep-failed-pods-seconds", "0"]);
    drop(std::mem::replace(&mut c._operator, next));
    wait_for(&ns, "toolcall/sleepy", "{.status.phase}", &["Succeeded"]);
    let pods = node::starts_of(&ns, "tg-sleepy", 1);
    assert_eq!(pods, vec![uid], "one pod per call");

    // Deleting a running call removes its children through the finalizer.
    ok(
        &["apply", "-f", "-"],
        Some(&call(&ns, "doomed", "test.sleep", "{seconds: \"30\"}", &ns)),
    );
    wait_for(&ns, "toolcall/doomed", "{.status.phase}", &["Running"]);
    ok(
        &[
            "delete",
            "toolcall",
            "doomed",
            "-n",
            &ns,
            "--wait=true",
            "--timeout=60s",
        ],
        None,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !children(&ns, "doomed").trim().is_empty() {
        assert!(
            Instant::now() < deadline,
            "children left: {}",
            children(&ns, "doomed")
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn health_metrics_and_leader_election() {
    let Some(mut c) = cluster("tg-ops") else {
        return;
    };
    let ns = c.ns.clone();
    let first = c._operator.health_port;
    let deadline = Instant::now() + Duration::from_secs(60);
    while http_get(first, "/readyz").0 != 200 {
        assert!(Instant::now() < deadline, "the operator never became ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(http_get(first, "/livez").0, 200);
    ok(
        &["apply", "-f", "-"],
        Some(&call(&ns, "counted", "test.echo", "{msg: one}", &ns)),
    );
    ok(
        &["apply", "-f", "-"],
        Some(&call(
            &ns,
            "refused",
            "test.echo",
            "{msg: one}",
            "elsewhere",
        )),
    );
    wait_for(&ns, "toolcall/counted", "{.status.phase}", &["Succeeded"]);
    wait_for(&ns, "toolcall/refused", "{.status.phase}", &["Denied"]);
    let (code, metrics) = http_get(first, "/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("toolgate_call_phase_transitions_total{phase=\"Succeeded\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("toolgate_call_decisions_total{decision=\"deny\",tier=\"L1\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "toolgate_reconcile_duration_seconds_count{controller=\"toolcall\",result=\"ok\"}"
        ),
        "{metrics}"
    );
    // The durations, calls in flight and the build: the same module as `toolgate local`'s.
    for want in [
        "toolgate_call_duration_seconds_count{tool=\"test.echo\",outcome=\"Succeeded\"} 1",
        "toolgate_call_duration_seconds_count{tool=\"test.echo\",outcome=\"Denied\"} 1",
        "toolgate_call_start_seconds_count{tool=\"test.echo\"} 1",
        "toolgate_calls_in_flight 0",
        "runtime=\"operator\"} 1",
    ] {
        assert!(metrics.contains(want), "missing {want:?} in:\n{metrics}");
    }
    assert_eq!(http_get(first, "/healthz").0, 200);
    assert!(
        !metrics.contains("counted") && !metrics.contains(&ns),
        "no unbounded labels"
    );

    // A second replica waits on the lease and is not ready; it takes over when the first dies.
    let standby = c.operator(&[]);
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        http_get(standby.health_port, "/readyz").0,
        503,
        "two leaders"
    );
    ok(
        &["apply", "-f", "-"],
        Some(&call(&ns, "during", "test.echo", "{msg: two}", &ns)),
    );
    wait_for(&ns, "toolcall/during", "{.status.phase}", &["Succeeded"]);
    drop(std::mem::replace(&mut c._operator, standby));
    let second = c._operator.health_port;
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(second, "/readyz").0 != 200 {
        assert!(Instant::now() < deadline, "the standby never took over");
        std::thread::sleep(Duration::from_millis(200));
    }
    ok(
        &["apply", "-f", "-"],
        Some(&call(&ns, "after", "test.echo", "{msg: three}", &ns)),
    );
    wait_for(&ns, "toolcall/after", "{.status.phase}", &["Succeeded"]);
    let holder = ok(
        &[
            "get",
            "lease",
            &format!("toolgate-operator-{ns}"),
            "-n",
            "toolgate-system",
            "-o",
            "jsonpath={.spec.leaseTransitions}",
        ],
        None,
    );
    assert_eq!(holder, "1", "one transition: the standby took over once");
}

/// The scenario through kubectl, each person as themselves: the agent proposes (admission checks
/// the principal), cannot approve, read Secrets or pod logs; the reviewer approves; the operator
/// runs the call.
#[test]
fn agents_and_reviewers_act_through_kubectl_as_themselves() {
    let Some(c) = cluster("tg-people") else {
        return;
    };
    let ns = &c.ns;
    support::apply_agent_access(ns);
    // The real agent identity is system:serviceaccount:team-a:fixer: grant it the tools here.
    ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {{name: agent, namespace: {ns}}}\nspec:\n  subjects: [{{kind: ServiceAccount, name: fixer, namespace: team-a}}]\n  tools: {{names: [test.gated]}}\n  scopes: [\"workspace:read\"]\n"
        )),
    );
    let as_agent = |args: &[&str], stdin: Option<&str>| {
        let mut a = vec!["--context", "agent"];
        a.extend_from_slice(args);
        kubectl(&a, stdin)
    };
    let proposal = call(
        ns,
        "by-agent",
        "test.gated",
        "{msg: from the agent}",
        "team-a",
    );
    // RBAC and admission take a moment to apply; retry the proposal until it is accepted.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (created, _, err) = as_agent(&["create", "-f", "-"], Some(&proposal));
        if created {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent could not propose: {err}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    wait_for(
        ns,
        "toolcall/by-agent",
        "{.status.phase}",
        &["AwaitingApproval"],
    );
    // The admission policy takes a moment to reach the API server's admission plugin: retry the
    // spoof (removing what slipped through) until it is refused.
    let spoofed = call(ns, "spoofed", "test.gated", "{msg: x}", "other");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (created, _, err) = as_agent(&["create", "-f", "-"], Some(&spoofed));
        if !created {
            assert!(
                err.contains("spec.principal must be your own identity"),
                "{err}"
            );
            break;
        }
        ok(
            &["delete", "toolcall", "spoofed", "-n", ns, "--wait=false"],
            None,
        );
        assert!(
            Instant::now() < deadline,
            "a spoofed principal was accepted"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    for forbidden in [
        vec!["get", "secrets", "-n", ns.as_str()],
        vec!["get", "pods", "-n", ns.as_str()],
        vec!["logs", "tg-by-agent", "-n", ns.as_str()],
        vec!["create", "-f", "-"],
    ] {
        let approval_doc = format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolApproval\nmetadata: {{name: self, namespace: {ns}}}\nspec: {{callRef: {{name: by-agent}}, argsDigest: \"sha256:{z}\", toolDigest: \"sha256:{z}\", riskTier: L1, principal: \"system:serviceaccount:team-a:fixer\", approver: \"system:serviceaccount:team-a:fixer\", decision: allowOnce, expiresAt: \"2099-01-01T00:00:00Z\"}}\n",
            z = "0".repeat(64)
        );
        let stdin = (forbidden[0] == "create").then_some(approval_doc.as_str());
        let (allowed, _, err) = as_agent(&forbidden, stdin);
        assert!(!allowed, "the agent could {forbidden:?}");
        assert!(
            err.contains("forbidden") || err.contains("Forbidden"),
            "{forbidden:?}: {err}"
        );
    }
    // The reviewer approves exactly what the call shows, as alice.
    let args = jsonpath(ns, "toolcall/by-agent", "{.status.argsDigest}");
    let tool = jsonpath(ns, "toolcall/by-agent", "{.status.toolDigest}");
    let approval = format!(
        "apiVersion: toolgate.dev/v1alpha1\nkind: ToolApproval\nmetadata: {{name: by-alice, namespace: {ns}}}\nspec:\n  callRef: {{name: by-agent}}\n  argsDigest: \"{args}\"\n  toolDigest: \"{tool}\"\n  riskTier: L1\n  scopes: [\"workspace:read\"]\n  principal: system:serviceaccount:team-a:fixer\n  approver: alice@example.com\n  decision: allowOnce\n  expiresAt: \"2099-01-01T00:00:00Z\"\n"
    );
    let (approved, _, err) = kubectl(
        &["--context", "reviewer", "create", "-f", "-"],
        Some(&approval),
    );
    assert!(approved, "{err}");
    wait_for(ns, "toolcall/by-agent", "{.status.phase}", &["Succeeded"]);
    let (read, out, _) = as_agent(
        &[
            "get",
            "toolcall",
            "by-agent",
            "-n",
            ns,
            "-o",
            "jsonpath={.status.result.outputPreview}",
        ],
        None,
    );
    assert!(read);
    assert_eq!(out, "from the agent\n");
}

/// The operator SIGKILLed at random moments while 50 calls run: every call finishes, exactly one
/// pod per call ever ran, and no Secret outlives its call.
#[test]
fn fifty_calls_survive_an_operator_killed_at_random() {
    let Some(mut c) = cluster("tg-chaos") else {
        return;
    };
    let ns = c.ns.clone();
    let names: Vec<String> = (0..50).map(|i| format!("chaos-{i:02}")).collect();
    let docs: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if i % 5 == 0 {
                call(&ns, n, "test.secret", "{}", &ns)
            } else if i % 5 == 1 {
                // Long enough that the operator dies while pods run, however fast it decides.
                call(&ns, n, "test.sleep", "{seconds: \"3\"}", &ns)
            } else {
                call(&ns, n, "test.echo", &format!("{{msg: \"{n}\"}}"), &ns)
            }
        })
        .collect();
    ok(&["apply", "-f", "-"], Some(&docs.join("\n---\n")));
    let secrets = c._secrets.path().join("secrets.yaml").display().to_string();
    let kills = support::finish_while_killing(
        &ns,
        names.len(),
        Duration::from_secs(240),
        (100, 700),
        8,
        || {
            let next = c.operator(&["--secrets", &secrets, "--keep-failed-pods-seconds", "0"]);
            drop(std::mem::replace(&mut c._operator, next))
        },
    );
    assert!(kills >= 3, "the operator was killed only {kills} times");
    let phases = support::call_phases(&ns);
    assert_eq!(
        phases
            .split_whitespace()
            .filter(|p| *p == "Succeeded")
            .count(),
        50,
        "{phases}"
    );
    for n in &names {
        let pods = node::starts_of(&ns, &format!("tg-{n}"), 1);
        assert_eq!(pods.len(), 1, "{n} ran in pods {pods:?}");
    }
    support::wait_children_gone(&ns, Duration::from_secs(60));
}

/// The agent API served by the operator: the same gRPC API as `toolgate local`, backed by the
/// cluster, callers authenticated by TokenReview, approvers authorized by RBAC.
#[test]
fn the_agent_api_on_the_cluster() {
    use toolgate_proto::v1 as pb;
    let port = support::free_port();
    let grpc = format!("127.0.0.1:{port}");
    // The agent API over TLS, as the chart serves it.
    let tls = toolgate_testkit::api::TestTls::get().operator_args(&grpc);
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let Some(c) = cluster_with("tg-grpc", &tls) else {
        return;
    };
    let ns = c.ns.clone();
    ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {{name: agent, namespace: {ns}}}\nspec:\n  subjects: [{{kind: ServiceAccount, name: fixer, namespace: team-a}}]\n  tools: {{names: [test.echo, test.gated, test.sleep]}}\n  scopes: [\"workspace:read\"]\n"
        )),
    );
    support::apply_agent_access(&ns);
    let (agent, reviewer) = (token_of("agent"), token_of("reviewer"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let mut api = toolgate_testkit::api::grpc_tls_client(&grpc).await;
        // Plain text is refused: no token crosses in clear.
        assert!(
            toolgate_testkit::api::plain_call_fails(&grpc, &agent).await,
            "the agent API answered over plain text"
        );
        use support::authorized as req;
        let proposal = |tool: &str, args: &str, key: &str| pb::ProposeCallRequest {
            namespace: ns.clone(),
            tool: tool.into(),
            args_json: args.into(),
            intent: Some(pb::Intent {
                user_goal: "test the cluster API".into(),
                current_task: format!("call {tool}"),
                action_type: "execute".into(),
                rationale_summary: "end-to-end test".into(),
                evidence_refs: vec![],
            }),
            idempotency_key: key.into(),
            ..Default::default()
        };
        // Unauthenticated callers get nowhere.
        let e = api
            .propose_call(tonic::Request::new(proposal("test.echo", "{}", "")))
            .await
            .expect_err("no token");
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        let e = api
            .propose_call(req("not-a-token", proposal("test.echo", "{}", "")))
            .await
            .expect_err("bad token");
        assert_eq!(e.code(), tonic::Code::Unauthenticated);

        // The tool view on the cluster: what the agent's grants and the intent expose.
        let view = api
            .get_tool_view(req(
                &agent,
                pb::GetToolViewRequest {
                    namespace: ns.clone(),
                    intent: "echo a message for the test".into(),
                    format: pb::ViewFormat::Mcp as i32,
                    max_tools: 2,
                    action_type: "execute".into(),
                    explain: true,
                },
            ))
            .await
            .expect("view")
            .into_inner();
        assert_eq!(view.exposed.len(), 2, "{view:?}");
        assert!(
            view.exposed.iter().any(|t| t.name == "test.echo"),
            "{view:?}"
        );
        assert!(
            view.hidden
                .iter()
                .any(|h| h.code == "ranked-out" || h.code == "no-grant"),
            "{view:?}"
        );
        let payload: serde_json::Value = serde_json::from_str(&view.payload_json).expect("json");
        assert!(
            payload[0]["inputSchema"].is_object(),
            "MCP tools/list entries: {payload}"
        );

        // Propose, watch to the end, read the artifact.
        let call = api
            .propose_call(req(
                &agent,
                proposal("test.echo", r#"{"msg": "from grpc"}"#, "echo-once"),
            ))
            .await
            .expect("proposed")
            .into_inner();
        assert_eq!(
            call.principal, "system:serviceaccount:team-a:fixer",
            "the principal is the authenticated one"
        );
        let again = api
            .propose_call(req(
                &agent,
                proposal("test.echo", r#"{"msg": "from grpc"}"#, "echo-once"),
            ))
            .await
            .expect("again")
            .into_inner();
        assert_eq!(again.id, call.id, "the idempotency key names the same call");
        let kinds = support::watch_to_end(&mut api, &agent, &call.id).await;
        assert_eq!(kinds.first().map(String::as_str), Some("ToolCallRequested"));
        assert_eq!(kinds.last().map(String::as_str), Some("StateUpdated"));
        let done = api
            .get_call(req(
                &agent,
                pb::GetCallRequest {
                    id: call.id.clone(),
                },
            ))
            .await
            .expect("get")
            .into_inner();
        assert_eq!(
            (done.phase.as_str(), done.output_preview.as_str()),
            ("Succeeded", "from grpc\n")
        );
        let mut chunks = api
            .get_artifact(req(
                &agent,
                pb::GetArtifactRequest {
                    call_id: call.id.clone(),
                    artifact_id: "stdout".into(),
                },
            ))
            .await
            .expect("artifact")
            .into_inner();
        let mut data = Vec::new();
        while let Some(ch) = chunks.next().await {
            data.extend(ch.expect("chunk").data);
        }
        assert_eq!(data, b"from grpc\n");

        // Approval: never by the principal; by a reviewer RBAC allows, bound to what was shown.
        let gated = api
            .propose_call(req(
                &agent,
                proposal("test.gated", r#"{"msg": "approved over grpc"}"#, ""),
            ))
            .await
            .expect("gated")
            .into_inner();
        let shown = wait_call(&mut api, &reviewer, &gated.id, &["AwaitingApproval"]).await;
        let approve = |c: &pb::Call| pb::ApproveCallRequest {
            id: c.id.clone(),
            args_digest: c.args_digest.clone(),
            tool_digest: c.tool_digest.clone(),
            for_session: false,
            ttl_seconds: 600,
            comment: String::new(),
        };
        let e = api
            .approve_call(req(&agent, approve(&shown)))
            .await
            .expect_err("self");
        assert_eq!(
            toolgate_api::error::status_code_and_field(&e).0,
            "approval-self"
        );
        let mut wrong = approve(&shown);
        wrong.args_digest = format!("sha256:{}", "0".repeat(64));
        let e = api
            .approve_call(req(&reviewer, wrong))
            .await
            .expect_err("wrong args");
        assert_eq!(
            toolgate_api::error::status_code_and_field(&e).0,
            "approval-args-changed"
        );
        api.approve_call(req(&reviewer, approve(&shown)))
            .await
            .expect("approved");
        wait_call(&mut api, &agent, &gated.id, &["Succeeded"]).await;
        let x = api
            .explain_call(req(
                &reviewer,
                pb::ExplainCallRequest {
                    id: gated.id.clone(),
                },
            ))
            .await
            .expect("explain")
            .into_inner();
        assert_eq!(x.approver, "alice@example.com");
        assert_eq!(x.sandbox_policy, "read-only");
        assert!(
            x.view
                .is_some_and(|v| v.exposed.iter().any(|t| t.name == "test.gated"))
        );

        // A session approval covers the same args in the same session, and nothing else.
        let in_session = |msg: &str, session: &str| {
            let mut p = proposal("test.gated", &format!(r#"{{"msg": "{msg}"}}"#), "");
            p.session_id = session.into();
            p
        };
        let first = api
            .propose_call(req(&agent, in_session("session", "s-1")))
            .await
            .expect("first")
            .into_inner();
        let shown = wait_call(&mut api, &reviewer, &first.id, &["AwaitingApproval"]).await;
        let mut for_session = approve(&shown);
        for_session.for_session = true;
        api.approve_call(req(&reviewer, for_session))
            .await
            .expect("approved for the session");
        wait_call(&mut api, &agent, &first.id, &["Succeeded"]).await;
        let second = api
            .propose_call(req(&agent, in_session("session", "s-1")))
            .await
            .expect("second")
            .into_inner();
        wait_call(&mut api, &agent, &second.id, &["Succeeded"]).await;
        let elsewhere = api
            .propose_call(req(&agent, in_session("session", "s-2")))
            .await
            .expect("other session")
            .into_inner();
        wait_call(&mut api, &agent, &elsewhere.id, &["AwaitingApproval"]).await;

        // Cancel a running call: the pod goes, the call says so.
        let sleepy = api
            .propose_call(req(
                &agent,
                proposal("test.sleep", r#"{"seconds": "30"}"#, ""),
            ))
            .await
            .expect("sleep")
            .into_inner();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = api
                .get_call(req(
                    &agent,
                    pb::GetCallRequest {
                        id: sleepy.id.clone(),
                    },
                ))
                .await
                .expect("get")
                .into_inner();
            if s.phase == "Running" {
                break;
            }
            assert!(Instant::now() < deadline, "never ran: {}", s.phase);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        api.cancel_call(req(
            &agent,
            pb::CancelCallRequest {
                id: sleepy.id.clone(),
                reason: "enough".into(),
            },
        ))
        .await
        .expect("cancel");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = api
                .get_call(req(
                    &agent,
                    pb::GetCallRequest {
                        id: sleepy.id.clone(),
                    },
                ))
                .await
                .expect("get")
                .into_inner();
            if s.phase == "Cancelled" {
                break;
            }
            assert!(Instant::now() < deadline, "not cancelled: {}", s.phase);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Others' calls are not even found.
        let listed = api
            .list_calls(req(&reviewer, pb::ListCallsRequest::default()))
            .await
            .expect("list")
            .into_inner();
        assert!(
            listed.calls.len() >= 3,
            "a reviewer lists the namespace's calls"
        );
        let scoped = api
            .list_calls(req(
                &reviewer,
                pb::ListCallsRequest {
                    namespace: ns.clone(),
                    ..Default::default()
                },
            ))
            .await
            .expect("list one namespace")
            .into_inner();
        assert_eq!(scoped.calls.len(), listed.calls.len());
        let e = api
            .list_calls(req(
                &reviewer,
                pb::ListCallsRequest {
                    namespace: "kube-system".into(),
                    ..Default::default()
                },
            ))
            .await
            .expect_err("a namespace this operator does not serve");
        assert_eq!(
            toolgate_api::error::status_code_and_field(&e).0,
            "namespace-not-served"
        );
    });
}

/// An approval of the tool version the approver saw is void once the descriptor changes: the
/// call does not run, and the approval says why.
#[test]
fn a_changed_descriptor_voids_the_approval_and_the_call_does_not_run() {
    let Some(c) = cluster("tg-voided") else {
        return;
    };
    let ns = &c.ns;
    ok(
        &["apply", "-f", "-"],
        Some(&call(ns, "gated-2", "test.gated", "{msg: stale}", ns)),
    );
    wait_for(
        ns,
        "toolcall/gated-2",
        "{.status.phase}",
        &["AwaitingApproval"],
    );
    let args = jsonpath(ns, "toolcall/gated-2", "{.status.argsDigest}");
    let seen = jsonpath(ns, "toolcall/gated-2", "{.status.toolDigest}");
    // The platform team changes the tool while the call waits.
    ok(
        &[
            "patch",
            "tooldescriptor",
            "test.gated",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"description":{"summary":"A changed tool."}}}"#,
        ],
        None,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while jsonpath(ns, "tooldescriptor/test.gated", "{.status.digest}") == seen {
        assert!(
            Instant::now() < deadline,
            "the descriptor was not re-registered"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let approval = format!(
        "apiVersion: toolgate.dev/v1alpha1\nkind: ToolApproval\nmetadata: {{name: stale, namespace: {ns}}}\nspec:\n  callRef: {{name: gated-2}}\n  argsDigest: \"{args}\"\n  toolDigest: \"{seen}\"\n  riskTier: L1\n  scopes: [\"workspace:read\"]\n  principal: system:serviceaccount:{ns}:fixer\n  approver: alice@example.com\n  decision: allowOnce\n  expiresAt: \"2099-01-01T00:00:00Z\"\n"
    );
    ok(&["apply", "-f", "-"], Some(&approval));
    wait_for(ns, "toolapproval/stale", "{.status.state}", &["Voided"]);
    assert!(
        jsonpath(ns, "toolapproval/stale", "{.status.voidReason}")
            .starts_with("approval-tool-changed")
    );
    // As in the embedded runtime: what an approver would see is not what the proposer saw, so
    // the call ends (propose it again) instead of waiting for an approval of another version.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        jsonpath(ns, "toolcall/gated-2", "{.status.phase}"),
        "Denied"
    );
    assert_eq!(
        jsonpath(
            ns,
            "toolcall/gated-2",
            "{.status.conditions[?(@.type==\"ApprovalRequested\")].reason}"
        ),
        "ToolChanged"
    );
    assert_eq!(
        children(ns, "gated-2").trim(),
        "",
        "a voided approval started nothing"
    );
}

/// ToolGrant subjects of kind Group match the groups a call records, and a person may record
/// only groups they are in.
#[test]
fn grants_to_a_group_match_the_callers_groups() {
    let Some(c) = cluster("tg-groups") else {
        return;
    };
    let ns = c.ns.as_str();
    support::apply_agent_access(ns);
    ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {{name: reviewers-echo, namespace: {ns}}}\nspec:\n  subjects: [{{kind: Group, name: team-a-reviewers}}]\n  tools: {{names: [test.echo]}}\n  scopes: [\"workspace:read\"]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: reviewers-propose, namespace: {ns}}}\nrules: [{{apiGroups: [toolgate.dev], resources: [toolcalls], verbs: [create]}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: reviewers-propose, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reviewers-propose}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: Group, name: team-a-reviewers}}]\n"
        )),
    );
    let by_alice = |name: &str, groups: &str| {
        format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolCall\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  toolRef: {{name: test.echo}}\n  principal: alice@example.com\n{groups}  args: {{msg: from a reviewer}}\n  intent: {{userGoal: test groups, currentTask: echo, actionType: execute, rationaleSummary: end-to-end test}}\n"
        )
    };
    let as_alice = |doc: &str| kubectl(&["--context", "reviewer", "create", "-f", "-"], Some(doc));
    // RBAC and admission take a moment to apply.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (created, _, err) = as_alice(&by_alice(
            "with-group",
            "  principalGroups: [team-a-reviewers]\n",
        ));
        if created {
            break;
        }
        assert!(Instant::now() < deadline, "alice could not propose: {err}");
        std::thread::sleep(Duration::from_millis(300));
    }
    wait_for(ns, "toolcall/with-group", "{.status.phase}", &["Succeeded"]);
    assert_eq!(
        jsonpath(ns, "toolcall/with-group", "{.status.result.outputPreview}"),
        "from a reviewer\n"
    );
    // Without the group, no grant names alice.
    let (created, _, err) = as_alice(&by_alice("without-group", ""));
    assert!(created, "{err}");
    wait_for(ns, "toolcall/without-group", "{.status.phase}", &["Denied"]);
    // A group alice is not in is refused at admission.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (created, _, err) = as_alice(&by_alice(
            "claimed-group",
            "  principalGroups: [cluster-admins]\n",
        ));
        if !created {
            assert!(
                err.contains("spec.principalGroups may list only your own groups: cluster-admins"),
                "{err}"
            );
            break;
        }
        ok(
            &[
                "delete",
                "toolcall",
                "claimed-group",
                "-n",
                ns,
                "--wait=false",
            ],
            None,
        );
        assert!(Instant::now() < deadline, "a claimed group was accepted");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The read-only example policy as `policy` in `ns`, changed by `edit`, an echo tool `tool` on
/// it and a grant of the tool to the suite's agent.
fn echo_on_policy(
    ns: &str,
    policy: &str,
    tool_name: &str,
    edit: impl Fn(String) -> String,
) -> String {
    let policy_doc = std::fs::read_to_string(root().join("examples/sandbox-policies.yaml"))
        .expect("policies")
        .split("\n---\n")
        .find(|d| d.contains("name: read-only,"))
        .expect("read-only policy")
        .replace(
            "name: read-only, namespace: team-a",
            &format!("name: {policy}, namespace: {ns}"),
        );
    let tool = tool(ns, tool_name, "[echo, \"{{msg}}\"]", "never", None).replace(
        "sandboxPolicyRef: {name: read-only}",
        &format!("sandboxPolicyRef: {{name: {policy}}}"),
    );
    let grant = toolgate_testkit::fixtures::grant(ns, policy, &[tool_name])
        .replace("namespace: team-a", &format!("namespace: {ns}"));
    format!(
        "{}\n---\n{tool}\n---\n{grant}",
        node::on_the_node(&edit(policy_doc))
    )
}

/// A policy naming a workspace claim that does not exist fails the call before any pod: the pod
/// would stay Pending and the call Running forever.
#[test]
fn a_missing_workspace_claim_fails_the_call_without_a_pod() {
    let Some(c) = cluster("tg-noclaim") else {
        return;
    };
    let ns = c.ns.as_str();
    ok(
        &["apply", "-f", "-"],
        Some(&echo_on_policy(ns, "on-claim", "test.onclaim", |p| {
            p.replace(
                "    cwd: workspace\n",
                "    cwd: workspace\n    workspaceClaimName: nowhere\n",
            )
        })),
    );
    support::eventually(
        ns,
        "tooldescriptor/test.onclaim",
        "{.status.lifecycle}",
        "enabled",
    );
    // The policy says so before any call does.
    support::eventually(
        ns,
        "sandboxpolicy/on-claim",
        "{.status.conditions[?(@.type==\"Ready\")].reason}",
        "WorkspaceClaimMissing",
    );
    ok(
        &["apply", "-f", "-"],
        Some(&call(ns, "onclaim-1", "test.onclaim", "{msg: hi}", ns)),
    );
    wait_for(ns, "toolcall/onclaim-1", "{.status.phase}", &["Failed"]);
    let message = jsonpath(
        ns,
        "toolcall/onclaim-1",
        "{.status.conditions[?(@.type==\"SandboxPrepared\")].message}",
    );
    assert!(
        message.contains("PersistentVolumeClaim nowhere does not exist"),
        "{message}"
    );
    assert_eq!(children(ns, "onclaim-1"), "");
}

/// A call's NetworkPolicy is in force before its tool starts: with `--egress-gate-ms` the
/// executor first tries addresses the policy refuses (the API server, private under
/// `denyPrivateNetworks`) and starts the tool only once they are refused, which kube-router's
/// enforcement makes them; the pod's SandboxPrepared condition says what was promised. A call
/// with no network at all passes the same gate. (Failing closed when they are not refused is
/// the executor's own suite: `the_tool_starts_only_once_the_gate_addresses_refuse`.)
#[test]
fn a_call_starts_its_tool_only_once_its_network_policy_is_in_force() {
    let Some(c) = cluster_with("tg-gate", &["--egress-gate-ms", "5000"]) else {
        return;
    };
    let ns = c.ns.as_str();
    ok(
        &["apply", "-f", "-"],
        Some(&echo_on_policy(ns, "public-only", "test.public", |p| {
            p.replace(
                "network: {egress: none}",
                "network: {egress: open, denyPrivateNetworks: true}",
            )
        })),
    );
    support::eventually(
        ns,
        "tooldescriptor/test.public",
        "{.status.lifecycle}",
        "enabled",
    );
    ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "{}\n---\n{}",
            call(ns, "filtered", "test.public", "{msg: contained}", ns),
            call(ns, "no-network", "test.echo", "{msg: hello}", ns)
        )),
    );
    wait_for(ns, "toolcall/filtered", "{.status.phase}", &["Succeeded"]);
    assert_eq!(
        jsonpath(ns, "toolcall/filtered", "{.status.result.outputPreview}"),
        "contained\n"
    );
    let api = support::api_server();
    let prepared = jsonpath(
        ns,
        "toolcall/filtered",
        "{.status.conditions[?(@.type==\"SandboxPrepared\")].message}",
    );
    assert!(
        prepared.contains(&format!("in force before the tool starts: {api} refused")),
        "{prepared}"
    );
    wait_for(ns, "toolcall/no-network", "{.status.phase}", &["Succeeded"]);
    assert_eq!(
        jsonpath(ns, "toolcall/no-network", "{.status.result.outputPreview}"),
        "hello\n"
    );
}

/// A grant's budget on a cluster: 100 ToolCalls waiting against `maxCalls: 10`, decided at once
/// by two replicas without leader election beside the elected one (the worst case a failed
/// hand-over can produce), one of them killed and restarted in the middle, run exactly 10; the other 90 are denied saying which limit, and the grant's status and printer columns
/// say 10 of 10.
#[test]
fn a_hundred_calls_against_a_budget_of_ten_run_exactly_ten() {
    let Some(mut c) = cluster("tg-budget") else {
        return;
    };
    let ns = c.ns.clone();
    let tool = tool(&ns, "test.metered", "[echo, \"{{msg}}\"]", "never", None);
    let grant = format!(
        "apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {{name: metered, namespace: {ns}}}\nspec:\n  subjects: [{{kind: ServiceAccount, name: fixer, namespace: {ns}}}]\n  tools: {{names: [test.metered]}}\n  scopes: [\"workspace:read\"]\n  budget: {{maxCalls: 10}}\n"
    );
    ok(
        &["apply", "-f", "-"],
        Some(&format!("{tool}\n---\n{grant}")),
    );
    support::eventually(
        &ns,
        "tooldescriptor/test.metered",
        "{.status.lifecycle}",
        "enabled",
    );
    let secrets = c._secrets.path().join("secrets.yaml").display().to_string();
    let unelected = [
        "--secrets",
        secrets.as_str(),
        "--keep-failed-pods-seconds",
        "0",
        "--no-leader-election",
    ];
    // The calls exist before any replica runs, so the replicas start on all 100 at once.
    let _ = c._operator.child.kill();
    let _ = c._operator.child.wait();
    let names: Vec<String> = (0..100).map(|i| format!("metered-{i:03}")).collect();
    let docs: Vec<String> = names
        .iter()
        .map(|n| call(&ns, n, "test.metered", &format!("{{msg: \"{n}\"}}"), &ns))
        .collect();
    ok(&["apply", "-f", "-"], Some(&docs.join("\n---\n")));
    let elected = [
        "--secrets",
        secrets.as_str(),
        "--keep-failed-pods-seconds",
        "0",
    ];
    let mut second = c.operator(&unelected);
    let _third = c.operator(&unelected);
    c._operator = c.operator(&elected);
    // Kill one replica while the burst is being decided, and start it again.
    std::thread::sleep(Duration::from_millis(400));
    drop(std::mem::replace(&mut second, c.operator(&unelected)));
    let deadline = Instant::now() + Duration::from_secs(240);
    let phases = loop {
        let phases = ok(
            &[
                "get",
                "toolcalls",
                "-n",
                &ns,
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.status.phase}{\"\\n\"}{end}",
            ],
            None,
        );
        let ended = phases
            .lines()
            .filter(|l| {
                l.starts_with("metered-")
                    && ["=Succeeded", "=Denied", "=Failed"]
                        .iter()
                        .any(|p| l.ends_with(p))
            })
            .count();
        if ended == names.len() {
            break phases;
        }
        assert!(
            Instant::now() < deadline,
            "{ended} of 100 calls ended:\n{phases}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let count = |p: &str| phases.lines().filter(|l| l.ends_with(p)).count();
    // Ten started; without leader election two replicas can disagree about a pod (one may see
    // it gone and fail the call), which is why a deployment elects a leader; what the budget
    // promises holds either way.
    let started = ok(
        &[
            "get",
            "toolcalls",
            "-n",
            &ns,
            "-o",
            "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Started\")].status}{\"\\n\"}{end}",
        ],
        None,
    );
    assert_eq!(
        started.lines().filter(|s| *s == "True").count(),
        10,
        "{phases}"
    );
    assert_eq!(count("=Succeeded") + count("=Failed"), 10, "{phases}");
    assert_eq!(count("=Denied"), 90, "{phases}");
    let refusals = ok(
        &[
            "get",
            "toolcalls",
            "-n",
            &ns,
            "-o",
            "jsonpath={range .items[?(@.status.phase==\"Denied\")]}{.status.conditions[?(@.type==\"PolicyChecked\")].reason}|{.status.conditions[?(@.type==\"PolicyChecked\")].message}{\"\\n\"}{end}",
        ],
        None,
    );
    let said = refusals
        .lines()
        .filter(|l| {
            l.starts_with("BudgetExhausted|")
                && l.contains("grant metered used its 10 calls (budget.maxCalls)")
        })
        .count();
    assert_eq!(said, 90, "{refusals}");
    let ran = node::pods_started(&ns);
    let metered = ran
        .iter()
        .filter(|(p, _)| p.starts_with("tg-metered-"))
        .map(|(p, _)| p.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert_eq!(metered, 10, "calls that had pods: {ran:?}");
    assert_eq!(
        jsonpath(&ns, "toolgrant/metered", "{.status.callsUsed}"),
        "10"
    );
    support::eventually(&ns, "toolgrant/metered", "{.status.state}", "Exhausted");
    let table = ok(&["get", "toolgrants", "metered", "-n", &ns], None);
    // Columns by where the header puts them (an empty column leaves only blanks).
    let (header, row) = (
        table.lines().next().unwrap_or(""),
        table.lines().nth(1).unwrap_or(""),
    );
    let column = |name: &str| {
        let at = header.find(name).expect("column");
        row.get(at..)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(
        (column("USED"), column("LIMIT")),
        ("10".to_string(), "10".to_string()),
        "{table}"
    );
}

#[test]
fn an_l5_call_runs_only_with_its_second_confirmation() {
    let Some(c) = cluster("tg-l5") else {
        return;
    };
    let ns = &c.ns;
    let purge = Tool::test("test.purge")
        .approval("on_risk")
        .destructive("second_approver")
        .yaml(ns);
    let drop = Tool::test("test.drop")
        .approval("on_risk")
        .destructive("dry_run")
        .yaml(ns);
    let grant = format!(
        "apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {{name: l5, namespace: {ns}}}\nspec:\n  subjects: [{{kind: ServiceAccount, name: fixer, namespace: {ns}}}]\n  tools: {{names: [test.purge, test.drop]}}\n  scopes: [\"workspace:read\"]\n"
    );
    ok(
        &["apply", "-f", "-"],
        Some(&format!("{purge}\n---\n{drop}\n---\n{grant}")),
    );
    for t in ["test.purge", "test.drop"] {
        support::eventually(
            ns,
            &format!("tooldescriptor/{t}"),
            "{.status.lifecycle}",
            "enabled",
        );
    }
    let dry_call = |name: &str, tool: &str, msg: &str| {
        format!(
            "{}  dryRun: true\n",
            call(ns, name, tool, &format!("{{msg: {msg}}}"), ns)
        )
    };
    let approval = |name: &str, call: &str, approver: &str| {
        let args = jsonpath(ns, &format!("toolcall/{call}"), "{.status.argsDigest}");
        let tool = jsonpath(ns, &format!("toolcall/{call}"), "{.status.toolDigest}");
        format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolApproval\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  callRef: {{name: {call}}}\n  argsDigest: \"{args}\"\n  toolDigest: \"{tool}\"\n  riskTier: L5\n  scopes: [\"workspace:read\"]\n  principal: system:serviceaccount:{ns}:fixer\n  approver: {approver}\n  decision: allowOnce\n  expiresAt: \"2099-01-01T00:00:00Z\"\n"
        )
    };
    let granted = |call: &str| {
        jsonpath(
            ns,
            &format!("toolcall/{call}"),
            "{.status.conditions[?(@.type==\"ApprovalGranted\")].reason}",
        )
    };
    let reasons = |call: &str| {
        jsonpath(
            ns,
            &format!("toolcall/{call}"),
            "{.status.authorization.reasons[*].code}",
        )
    };
    let eventually_reason = |call: &str, code: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !reasons(call).split(' ').any(|c| c == code) {
            assert!(
                Instant::now() < deadline,
                "{call}: no {code} in {}",
                reasons(call)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    };

    // Second approver: one approval waits, the same approver again does not count, another
    // approver lets it run and both approvals are used up.
    ok(
        &["apply", "-f", "-"],
        Some(&call(ns, "purge-1", "test.purge", "{msg: purged}", ns)),
    );
    wait_for(
        ns,
        "toolcall/purge-1",
        "{.status.phase}",
        &["AwaitingApproval"],
    );
    let asked = jsonpath(
        ns,
        "toolcall/purge-1",
        "{.status.conditions[?(@.type==\"ApprovalRequested\")].message}",
    );
    assert!(asked.contains("a second, different approver"), "{asked}");
    ok(
        &["apply", "-f", "-"],
        Some(&approval("purge-alice", "purge-1", "alice@example.com")),
    );
    eventually_reason("purge-1", "second-approver-required");
    assert_eq!(granted("purge-1"), "AwaitingConfirmation");
    ok(
        &["apply", "-f", "-"],
        Some(&approval("purge-alice-2", "purge-1", "alice@example.com")),
    );
    eventually_reason("purge-1", "approval-same-approver");
    assert_eq!(
        jsonpath(ns, "toolcall/purge-1", "{.status.phase}"),
        "AwaitingApproval"
    );
    assert_eq!(children(ns, "purge-1").trim(), "");
    ok(
        &["apply", "-f", "-"],
        Some(&approval("purge-bob", "purge-1", "bob@example.com")),
    );
    wait_for(ns, "toolcall/purge-1", "{.status.phase}", &["Succeeded"]);
    assert_eq!(
        jsonpath(
            ns,
            "toolcall/purge-1",
            "{.status.authorization.confirmation.name}"
        ),
        "purge-bob"
    );
    wait_for(
        ns,
        "toolapproval/purge-alice",
        "{.status.state}",
        &["Consumed"],
    );
    wait_for(
        ns,
        "toolapproval/purge-bob",
        "{.status.state}",
        &["Consumed"],
    );

    // Dry run: approved, the call waits for a dry run; one of other args does not confirm it,
    // one of the same args does, and the call then runs on its own.
    ok(
        &["apply", "-f", "-"],
        Some(&call(ns, "drop-1", "test.drop", "{msg: dropped}", ns)),
    );
    wait_for(
        ns,
        "toolcall/drop-1",
        "{.status.phase}",
        &["AwaitingApproval"],
    );
    ok(
        &["apply", "-f", "-"],
        Some(&approval("drop-alice", "drop-1", "alice@example.com")),
    );
    eventually_reason("drop-1", "dry-run-required");
    ok(
        &["apply", "-f", "-"],
        Some(&dry_call("drop-dry-other", "test.drop", "other")),
    );
    wait_for(
        ns,
        "toolcall/drop-dry-other",
        "{.status.phase}",
        &["Succeeded"],
    );
    eventually_reason("drop-1", "dry-run-other-args");
    assert_eq!(
        jsonpath(ns, "toolcall/drop-1", "{.status.phase}"),
        "AwaitingApproval"
    );
    ok(
        &["apply", "-f", "-"],
        Some(&dry_call("drop-dry-same", "test.drop", "dropped")),
    );
    wait_for(
        ns,
        "toolcall/drop-dry-same",
        "{.status.phase}",
        &["Succeeded"],
    );
    wait_for(ns, "toolcall/drop-1", "{.status.phase}", &["Succeeded"]);
    assert_eq!(
        jsonpath(
            ns,
            "toolcall/drop-1",
            "{.status.authorization.confirmation.name}"
        ),
        "drop-dry-same"
    );
    // Field selectors the CRD declares work for people too.
    let dry_runs = ok(
        &[
            "get",
            "toolcalls",
            "-n",
            ns,
            "--field-selector",
            "spec.toolRef.name=test.drop,spec.dryRun=true",
            "-o",
            "name",
        ],
        None,
    );
    assert_eq!(
        dry_runs.split_whitespace().collect::<Vec<_>>(),
        vec![
            "toolcall.toolgate.dev/drop-dry-other",
            "toolcall.toolgate.dev/drop-dry-same"
        ]
    );
}

#[test]
fn tool_policies_narrow_calls_on_the_cluster_and_report_their_state() {
    let Some(c) = cluster("tg-cedar") else {
        return;
    };
    let ns = &c.ns;
    let policy = |name: &str, mode: &str, text: &str| {
        let indented: String = text.lines().map(|l| format!("    {l}\n")).collect();
        format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  mode: {mode}\n  policies: |\n{indented}"
        )
    };
    ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "{}\n---\n{}",
            policy(
                "echo-bounds",
                "enforce",
                "@id(\"no-secrets\")\n@reason(\"messages never carry secrets\")\nforbid (principal, action == Action::\"test.echo\", resource)\nwhen { context.args has msg && context.args.msg like \"*secret*\" };"
            ),
            policy(
                "echo-trial",
                "shadow",
                "@id(\"no-drafts\")\nforbid (principal, action == Action::\"test.echo\", resource)\nwhen { context.args has msg && context.args.msg like \"draft*\" };"
            )
        )),
    );
    for p in ["echo-bounds", "echo-trial"] {
        wait_for(
            ns,
            &format!("toolpolicy/{p}"),
            "{.status.conditions[?(@.type==\"Ready\")].status}",
            &["True"],
        );
    }
    let listed = ok(&["get", "toolpolicies", "-n", ns], None);
    assert!(
        listed.contains("MODE") && listed.contains("POLICIES") && listed.contains("shadow"),
        "{listed}"
    );
    // The policy cache sees them before calls are decided against them.
    std::thread::sleep(Duration::from_secs(1));
    ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "{}---\n{}---\n{}",
            call(ns, "fine", "test.echo", "{msg: hello}", ns),
            call(ns, "leak", "test.echo", "{msg: my secret}", ns),
            call(ns, "draft", "test.echo", "{msg: draft one}", ns)
        )),
    );
    wait_for(ns, "toolcall/fine", "{.status.phase}", &["Succeeded"]);
    wait_for(ns, "toolcall/leak", "{.status.phase}", &["Denied"]);
    wait_for(ns, "toolcall/draft", "{.status.phase}", &["Succeeded"]);
    assert_eq!(
        jsonpath(
            ns,
            "toolcall/leak",
            "{.status.conditions[?(@.type==\"PolicyChecked\")].reason}"
        ),
        "PolicyForbidden"
    );
    assert_eq!(
        children(ns, "leak").trim(),
        "",
        "a forbidden call makes no pod"
    );
    assert_eq!(
        jsonpath(
            ns,
            "toolcall/draft",
            "{.status.authorization.shadowForbids[0].policy}"
        ),
        "echo-trial/no-drafts"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = ok(
            &[
                "get",
                "events.events.k8s.io",
                "-n",
                ns,
                "--field-selector",
                "regarding.name=draft,reason=ShadowForbid",
                "-o",
                "name",
            ],
            None,
        );
        if !events.trim().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "no ShadowForbid event");
        std::thread::sleep(Duration::from_millis(250));
    }
    let (_, metrics) = http_get(c._operator.health_port, "/metrics");
    assert!(
        metrics.contains(&format!(
            "toolgate_shadow_forbids_total{{tool_policy=\"{ns}/echo-trial\"}} 1"
        )),
        "{metrics}"
    );

    // A policy that does not type-check: Ready=False with its line and column, and the calls it
    // names are refused until it is fixed.
    ok(
        &["apply", "-f", "-"],
        Some(&policy(
            "echo-bounds",
            "enforce",
            "forbid (principal, action == Action::\"test.echo\", resource)\nwhen { context.args.msg > 3 };",
        )),
    );
    wait_for(
        ns,
        "toolpolicy/echo-bounds",
        "{.status.conditions[?(@.type==\"Ready\")].reason}",
        &["PolicyInvalid"],
    );
    let message = jsonpath(
        ns,
        "toolpolicy/echo-bounds",
        "{.status.conditions[?(@.type==\"Ready\")].message}",
    );
    assert!(message.contains("cedar-type: line 2, column "), "{message}");
    std::thread::sleep(Duration::from_secs(1));
    ok(
        &["apply", "-f", "-"],
        Some(&call(ns, "closed", "test.echo", "{msg: hello}", ns)),
    );
    wait_for(ns, "toolcall/closed", "{.status.phase}", &["Denied"]);
    let why = jsonpath(
        ns,
        "toolcall/closed",
        "{.status.conditions[?(@.type==\"PolicyChecked\")].message}",
    );
    assert!(why.contains("does not compile"), "{why}");
}

/// Mutual TLS on the operator's agent API (`--grpc-tls-client-ca`, the chart's
/// `grpc.tls.clientCaSecretName`): a caller without a client certificate is refused before its
/// token is read; with one, the API serves it; the command line's client does the same.
#[test]
fn the_agent_api_requires_client_certificates_when_told() {
    use toolgate_proto::v1 as pb;
    let port = support::free_port();
    let grpc = format!("127.0.0.1:{port}");
    let identity = toolgate_testkit::api::ClientIdentity::default();
    let mut args = toolgate_testkit::api::TestTls::get().operator_args(&grpc);
    args.extend([
        "--grpc-tls-client-ca".into(),
        identity.cert.display().to_string(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(c) = cluster_with("tg-mtls", &args) else {
        return;
    };
    let ns = c.ns.clone();
    support::apply_agent_access(&ns);
    let agent = token_of("agent");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        // Once it serves at all (the operator takes a moment to start)...
        let _ = toolgate_testkit::api::grpc_tls_client(&grpc).await;
        let list = || {
            support::authorized(
                &agent,
                pb::ListCallsRequest {
                    namespace: ns.clone(),
                    ..Default::default()
                },
            )
        };
        let anonymous = async {
            let mut c = toolgate_testkit::api::tls_client_with(&grpc, None)
                .await
                .map_err(|e| e.to_string())?;
            c.list_calls(list()).await.map_err(|e| e.to_string())?;
            Ok::<(), String>(())
        };
        assert!(
            anonymous.await.is_err(),
            "served a caller without a client certificate"
        );
        let mut c = toolgate_testkit::api::tls_client_with(&grpc, Some(&identity))
            .await
            .expect("mTLS connects");
        c.list_calls(list())
            .await
            .expect("served with a client certificate");
    });
    let cli = |with_identity: bool| {
        let mut cmd = std::process::Command::new(support::toolgate_cli());
        cmd.args([
            "--server",
            &format!("https://localhost:{port}"),
            "--token",
            &agent,
        ])
        .arg("--ca")
        .arg(&toolgate_testkit::api::TestTls::get().cert);
        if with_identity {
            cmd.arg("--client-cert")
                .arg(&identity.cert)
                .arg("--client-key")
                .arg(&identity.key);
        }
        cmd.args(["list", "--namespace", &ns])
            .output()
            .expect("toolgate")
    };
    let refused = cli(false);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("requires a client certificate"), "{err}");
    let served = cli(true);
    assert!(
        served.status.success(),
        "{}",
        String::from_utf8_lossy(&served.stderr)
    );
}

/// `toolgate mcp serve --listen` in front of the operator's agent API (TLS, Kubernetes tokens):
/// the official Python MCP SDK lists the agent's tools, calls one through a pod, sees an
/// approval-needing call answer at once, and gets its result after the reviewer approves over
/// gRPC — the same session as against `toolgate local`.
#[test]
fn an_mcp_client_works_through_mcp_serve_against_the_operator() {
    use std::io::{BufRead, Write};
    use std::process::Command;
    use toolgate_proto::v1 as pb;
    let Some(venv) = std::env::var_os("TOOLGATE_MCP_SERVERS").map(std::path::PathBuf::from) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "no MCP SDK: tests/run.sh installs it"
        );
        return;
    };
    let port = support::free_port();
    let grpc = format!("127.0.0.1:{port}");
    let tls = toolgate_testkit::api::TestTls::get().operator_args(&grpc);
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let Some(c) = cluster_with("tg-mcp-serve", &tls) else {
        return;
    };
    let ns = c.ns.clone();
    // The agent's grant (the suite's own names the namespace's fixer).
    ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {{name: agent, namespace: {ns}}}\nspec:\n  subjects: [{{kind: ServiceAccount, name: fixer, namespace: team-a}}]\n  tools: {{names: [test.echo, test.gated]}}\n  scopes: [\"workspace:read\"]\n"
        )),
    );
    support::apply_agent_access(&ns);
    for tool in ["test.echo", "test.gated"] {
        wait_for(
            &ns,
            &format!("tooldescriptor/{tool}"),
            "{.status.lifecycle}",
            &["enabled"],
        );
    }
    let (agent, reviewer) = (token_of("agent"), token_of("reviewer"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("rt");
    let mut api = rt.block_on(toolgate_testkit::api::grpc_tls_client(&grpc));
    /// Killed when the test ends, however it ends.
    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut gateway = Command::new(support::toolgate_cli())
        .args(["--server", &format!("https://localhost:{port}")])
        .arg("--ca")
        .arg(&toolgate_testkit::api::TestTls::get().cert)
        .args([
            "mcp",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--namespace",
            &ns,
        ])
        // No intent: the client is offered every tool the caller may use.
        .args(["--wait-seconds", "60"])
        .env_remove("TOOLGATE_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(support::log_file())
        .spawn()
        .expect("mcp serve");
    let stdout = gateway.stdout.take().expect("stdout");
    let _gateway = Reaped(gateway);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("line");
    let url = line
        .split("streamable HTTP on ")
        .nth(1)
        .unwrap_or_else(|| panic!("{line:?}"))
        .trim()
        .to_string();
    let mut client_process = Command::new(venv.join("bin/python"))
        .arg(root().join("local/tests/support/mcp_client.py"))
        .env("MCP_URL", &url)
        .env("TOOLGATE_TOKEN", &agent)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the Python MCP client");
    let mut to_client = client_process.stdin.take().expect("stdin");
    let from_client = client_process.stdout.take().expect("stdout");
    let mut client = Reaped(client_process);
    let mut lines = std::io::BufReader::new(from_client).lines();
    let mut next = |want: &str| -> serde_json::Value {
        let l = lines
            .next()
            .unwrap_or_else(|| panic!("the client ended before {want}"))
            .expect("line");
        let v: serde_json::Value = serde_json::from_str(&l).expect("json line");
        assert_eq!(v["event"], want, "{v}");
        v
    };
    let tools = next("tools");
    assert!(tools["names"].to_string().contains("test.echo"), "{tools}");
    let echo = next("echo");
    assert_eq!(echo["isError"], false, "{echo}");
    assert!(
        echo["text"].to_string().contains("hello over mcp"),
        "{echo}"
    );
    let gated = next("gated");
    assert_eq!(
        gated["state"]["phase"], "AwaitingApproval",
        "{gated}\nthe tools listed: {tools}"
    );
    let id = gated["state"]["callId"].as_str().expect("id").to_string();
    rt.block_on(async {
        let shown = wait_call(&mut api, &agent, &id, &["AwaitingApproval"]).await;
        api.approve_call(support::authorized(
            &reviewer,
            pb::ApproveCallRequest {
                id: shown.id.clone(),
                args_digest: shown.args_digest.clone(),
                tool_digest: shown.tool_digest.clone(),
                for_session: false,
                ttl_seconds: 300,
                comment: "over MCP".into(),
            },
        ))
        .await
        .expect("approved");
    });
    writeln!(to_client, "approved").expect("tell the client");
    let approved = next("approved");
    assert_eq!(approved["isError"], false, "{approved}");
    assert!(
        approved["text"]
            .to_string()
            .contains("after a human said yes"),
        "{approved}"
    );
    assert_eq!(next("bad")["isError"], true);
    assert_eq!(next("unknown")["isError"], true);
    drop(to_client);
    assert!(client.0.wait().expect("client").success());
}
