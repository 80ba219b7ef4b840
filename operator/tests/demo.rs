//! The demo scenario of `toolgate demo`, on the test cluster with the example manifests: an
//! agent reads, searches and fixes a file in the team's workspace volume (its `.env` refused), a
//! destructive call is refused without a pod, and an issue is filed only after a reviewer
//! approves it — once through kubectl (the operator a process here), once through the gRPC API of
//! the operator `helm install` put in the cluster, through its Service. Every call that runs is a pod
//! of its own, scheduled to the real node and run by its kubelet in a container of the executor
//! image, its NetworkPolicy enforced; the full output lands in a real S3 bucket (moto) and
//! `toolgate artifact` fetches it through the operator. The workspace is a hostPath
//! PersistentVolume bound to a claim the example sandbox policies name, owned by the image's
//! user; the issue tracker is an HTTP service on this machine's end of the node's link standing
//! in for api.github.com (no internet here), as in `toolgate demo`.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use support::{
    authorized as req, have_cluster, jsonpath, kubectl, ok, operator_log, prepare, root, token_of,
    wait_call, wait_for,
};
use support::{helm, node};
use toolgate_proto::v1 as pb;
use toolgate_testkit::moto::Moto;

const BUCKET: &str = "demo-artifacts";

/// In the workspace's `.env`: must never leave the pod.
const DOTENV_CANARY: &str = "canary-workspace-dotenv-51b7";
/// The GitHub token the credential broker hands out: must reach the tracker and nothing else.
const TOKEN_CANARY: &str = "ghp_canary_cluster_demo_93ce";
const SERIALIZER_TS: &str = "export function formatDate(d: Date): string {\n  // BUG: local time\n  return `${d.getFullYear()}-${d.getMonth() + 1}-${d.getDate()}`;\n}\n";
const FIXED: &str =
    "export function formatDate(d: Date): string {\n  return d.toISOString().slice(0, 10);\n}\n";

/// What the stand-in tracker received: (path, authorization header, body).
type Requests = Arc<Mutex<Vec<(String, String, String)>>>;

/// A minimal HTTP service answering `POST /repos/{owner}/{repo}/issues` with a created issue, on
/// `host` (the machine's end of the node's link, which pods reach).
fn start_tracker(host: &str) -> (String, Requests) {
    let listener = std::net::TcpListener::bind((host, 0)).expect("tracker");
    let addr = listener.local_addr().expect("addr").to_string();
    let seen: Requests = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string();
            let (mut auth, mut length) = (String::new(), 0usize);
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
                let (name, value) = h.split_once(':').unwrap_or_default();
                match name.to_ascii_lowercase().as_str() {
                    "authorization" => auth = value.trim().to_string(),
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let number = {
                let mut l = log.lock().expect("lock");
                l.push((
                    path.clone(),
                    auth,
                    String::from_utf8_lossy(&body).into_owned(),
                ));
                l.len()
            };
            let reply = format!(
                r#"{{"number": {number}, "html_url": "https://github.com/acme/web-app/issues/{number}"}}"#
            );
            let mut stream = reader.into_inner();
            let _ = write!(
                stream,
                "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (addr, seen)
}

/// The examples as a platform team would adapt them to this cluster: in the test's namespace,
/// the workspace policies naming the claim, every policy's calls on the test node (its
/// RuntimeClass), GitHub's API replaced by the tracker at `tracker` (an address of this machine,
/// hence private).
fn example_manifests(ns: &str, tracker: &str) -> String {
    let examples = [
        "examples/tools",
        "examples/grants.yaml",
        "examples/sandbox-policies.yaml",
        "examples/credential-bindings.yaml",
    ]
    .map(|path| toolgate_testkit::manifests(path, ns))
    .join("\n---\n")
    .replace(
        "    cwd: workspace\n",
        "    cwd: workspace\n    workspaceClaimName: workspace\n",
    )
    .replace(
        "https://api.github.com/repos/",
        &format!("http://{tracker}/repos/"),
    )
    .replace(
        "allowDomains: [api.github.com]\n    denyPrivateNetworks: true",
        &format!("allowDomains: [\"{tracker}\"]\n    denyPrivateNetworks: false"),
    );
    node::on_the_node(&examples)
}

/// How the demo's operator runs.
enum Operator<'a> {
    /// A process on this machine, with these extra arguments.
    Process(&'a [&'a str]),
    /// In the cluster, as `helm install` puts it, with these extra values (YAML); the credential
    /// broker reads the file from a Secret of the release's namespace.
    Helm(&'a str),
}

/// The operator of a demo, as it runs (held until the demo ends).
enum Running {
    Process(#[allow(dead_code, reason = "kept running until dropped")] support::Operator),
    Helm(helm::Release),
}

/// The chart's broker file (`credentials.secretsFileSecret`), in the release's namespace.
const SECRETS_SECRET: &str = "demo-credentials";

/// One at a time: the release takes over (and, uninstalled, deletes) the cluster-wide objects
/// the other run's operator needs.
static ONE_DEMO_AT_A_TIME: Mutex<()> = Mutex::new(());

/// One namespace with the examples, a workspace volume, the artifact bucket and the operator.
struct Demo {
    ns: String,
    workspace: tempfile::TempDir,
    tracker: Requests,
    store: Moto,
    operator: Running,
    _secrets: tempfile::TempDir,
    _volume: node::WorkspaceVolume,
    _one: std::sync::MutexGuard<'static, ()>,
}

impl Drop for Demo {
    fn drop(&mut self) {
        if std::thread::panicking() {
            support::dump(&self.ns, "toolgate,pods,pvc,networkpolicies,events");
        }
        if matches!(self.operator, Running::Helm(_)) {
            let _ = kubectl(
                &[
                    "delete",
                    "secret",
                    SECRETS_SECRET,
                    "-n",
                    helm::RELEASE_NS,
                    "--wait=false",
                ],
                None,
            );
        }
    }
}

impl Demo {
    fn start(prefix: &str, operator: Operator<'_>) -> Option<Demo> {
        if !have_cluster() || !node::have_node() {
            return None;
        }
        let one = ONE_DEMO_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ns = prepare(prefix);
        node::install_runtime_class();
        // The team's repository, on a volume the sandbox policies name.
        let workspace = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("workspace");
        let w = workspace.path();
        std::fs::create_dir_all(w.join("src")).expect("src");
        std::fs::write(w.join("src/serializer.ts"), SERIALIZER_TS).expect("ts");
        std::fs::write(
            w.join("src/serializer.test.ts"),
            "import { formatDate } from './serializer';\n",
        )
        .expect("test");
        std::fs::write(
            w.join(".env"),
            format!("DATABASE_PASSWORD={DOTENV_CANARY}\n"),
        )
        .expect(".env");
        // A git repository, as a team's checkout is (git.diff reads it).
        for args in [
            &["init", "-q"][..],
            &["add", "-A"],
            &[
                "-c",
                "user.email=ci@example.com",
                "-c",
                "user.name=ci",
                "commit",
                "-qm",
                "start",
            ],
        ] {
            let status = std::process::Command::new("git")
                .args(args)
                .current_dir(w)
                .status()
                .expect("git");
            assert!(status.success(), "git {args:?}");
        }
        let volume = node::workspace_volume(&ns, "workspace", w);
        let host = node::host_ip();
        let (tracker_addr, tracker) = start_tracker(&host);
        ok(
            &["apply", "-f", "-"],
            Some(&example_manifests(&ns, &tracker_addr)),
        );
        support::apply_agent_access(&ns);
        let (secrets, secrets_arg) = support::secrets_file(TOKEN_CANARY);
        let store = node::artifact_store(BUCKET);
        let operator = match operator {
            Operator::Process(extra) => {
                let mut args = vec!["--secrets", secrets_arg.as_str()];
                args.extend_from_slice(extra);
                Running::Process(node::operator_for(&ns, &store, BUCKET, &args))
            }
            Operator::Helm(extra) => {
                let file = std::fs::read_to_string(&secrets_arg).expect("the broker's file");
                let secret = serde_json::json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": SECRETS_SECRET, "namespace": helm::RELEASE_NS},
                    "stringData": {"secrets.yaml": file},
                });
                ok(&["apply", "-f", "-"], Some(&secret.to_string()));
                let values =
                    format!("credentials: {{secretsFileSecret: {SECRETS_SECRET}}}\n{extra}");
                Running::Helm(helm::install(&ns, &store, BUCKET, &values))
            }
        };
        for tool in [
            "file.read",
            "code.search",
            "file.write",
            "github.create-issue",
        ] {
            support::eventually(
                &ns,
                &format!("tooldescriptor/{tool}"),
                "{.status.lifecycle}",
                "enabled",
            );
        }
        Some(Demo {
            ns,
            workspace,
            tracker,
            store,
            operator,
            _secrets: secrets,
            _volume: volume,
            _one: one,
        })
    }

    fn file(&self, rel: &str) -> String {
        std::fs::read_to_string(self.workspace.path().join(rel)).expect("workspace file")
    }

    /// The call's stdout as its artifact in the bucket, checked against the hash its status
    /// records.
    fn stdout_in_bucket(&self, call: &str) -> Vec<u8> {
        let object = format!("toolcall/{call}");
        let stdout = "{.status.result.artifacts[?(@.artifactId==\"stdout\")]";
        let uri = jsonpath(&self.ns, &object, &format!("{stdout}.uri}}"));
        let hash = jsonpath(&self.ns, &object, &format!("{stdout}.contentHash}}"));
        let key = uri
            .strip_prefix(&format!("s3://{BUCKET}/"))
            .unwrap_or_else(|| panic!("{call}: not an artifact of the bucket: {uri:?}"));
        let body = self.store.object(BUCKET, key);
        assert_eq!(
            hash,
            format!("sha256:{}", hex::encode(Sha256::digest(&body))),
            "{call}"
        );
        body
    }

    /// Every object of the bucket (the calls' full output, what a model may be shown).
    fn bucket(&self) -> String {
        self.store
            .keys(BUCKET)
            .iter()
            .map(|k| String::from_utf8_lossy(&self.store.object(BUCKET, k)).into_owned())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// What the operator logged.
    fn operator_log(&self) -> String {
        match &self.operator {
            Running::Process(_) => operator_log(),
            Running::Helm(release) => {
                kubectl(&["logs", "-n", helm::RELEASE_NS, &release.pod], None).1
            }
        }
    }

    /// Everything a model-facing or operator-facing surface shows about the namespace.
    fn surfaces(&self) -> String {
        let ns = self.ns.as_str();
        format!(
            "{}\n{}\n{}\n{}\n{}",
            kubectl(&["get", "toolcalls", "-n", ns, "-o", "yaml"], None).1,
            kubectl(&["get", "events", "-n", ns, "-o", "yaml"], None).1,
            kubectl(&["describe", "toolcalls", "-n", ns], None).1,
            self.operator_log(),
            self.bucket()
        )
    }
}

/// A ToolCall from the agent, with an intent like the examples'.
fn agent_call(ns: &str, name: &str, tool: &str, args: &str, action: &str) -> String {
    format!(
        "apiVersion: toolgate.dev/v1alpha1\nkind: ToolCall\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  toolRef: {{name: {tool}}}\n  principal: system:serviceaccount:team-a:fixer\n  args: {args}\n  intent: {{userGoal: fix the failing test and verify, currentTask: {name}, actionType: {action}, rationaleSummary: the demo scenario}}\n  sessionId: sess-demo\n"
    )
}

fn as_agent(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut a = vec!["--context", "agent"];
    a.extend_from_slice(args);
    kubectl(&a, stdin)
}

/// The agent creates a call; RBAC and admission take a moment to reach the API server.
fn propose(doc: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (created, _, err) = as_agent(&["create", "-f", "-"], Some(doc));
        if created {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the agent could not propose: {err}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn the_demo_through_kubectl() {
    let jaeger =
        toolgate_testkit::jaeger::have_jaeger().then(toolgate_testkit::jaeger::TestJaeger::start);
    let args: Vec<&str> = match &jaeger {
        Some(j) => vec!["--otlp-endpoint", j.otlp.as_str()],
        None => vec![],
    };
    let Some(d) = Demo::start("tg-demo-kubectl", Operator::Process(&args)) else {
        return;
    };
    let ns = d.ns.as_str();

    // 1. An allowed read (L0): the example call file as written, pinned digest and all, with
    // the trace context a traced pipeline would add as an annotation.
    let example = std::fs::read_to_string(root().join("examples/calls/01-read-serializer.yaml"))
        .expect("example call")
        .replace(
            "namespace: team-a}",
            &format!(
                "namespace: {ns}, annotations: {{toolgate.dev/traceparent: \"00-{KUBECTL_TRACE}-{AGENT_SPAN}-01\"}}}}"
            ),
        );
    propose(&example);
    ok(
        &[
            "wait",
            "--for=condition=Finished",
            "toolcall/read-serializer-1",
            "-n",
            ns,
            "--timeout=90s",
        ],
        None,
    );
    wait_for(
        ns,
        "toolcall/read-serializer-1",
        "{.status.phase}",
        &["Succeeded"],
    );
    let preview = jsonpath(
        ns,
        "toolcall/read-serializer-1",
        "{.status.result.outputPreview}",
    );
    assert!(preview.contains("BUG: local time"), "{preview}");
    let full = d.stdout_in_bucket("read-serializer-1");
    assert!(
        String::from_utf8_lossy(&full).starts_with(&preview),
        "{preview}"
    );

    // 2. The blocked .env: refused inside the pod, its content nowhere.
    propose(&agent_call(
        ns,
        "read-dotenv",
        "file.read",
        "{path: .env}",
        "read",
    ));
    wait_for(ns, "toolcall/read-dotenv", "{.status.phase}", &["Failed"]);
    let message = jsonpath(
        ns,
        "toolcall/read-dotenv",
        "{.status.conditions[?(@.type==\"Finished\")].message}",
    );
    assert!(message.contains("Permission denied"), "{message}");

    // 3. A search in src.
    propose(&agent_call(
        ns,
        "search-formatdate",
        "code.search",
        "{text: formatDate, path: src}",
        "search",
    ));
    wait_for(
        ns,
        "toolcall/search-formatdate",
        "{.status.phase}",
        &["Succeeded"],
    );
    let found = jsonpath(
        ns,
        "toolcall/search-formatdate",
        "{.status.result.outputPreview}",
    );
    assert!(
        found.contains("src/serializer.ts:1:export function formatDate"),
        "{found}"
    );

    // 4. The fix (L2 workspace write): the example call, applied to the volume.
    let fix = std::fs::read_to_string(root().join("examples/calls/03-fix-serializer.yaml"))
        .expect("example call")
        .replace("namespace: team-a}", &format!("namespace: {ns}}}"));
    propose(&fix);
    wait_for(
        ns,
        "toolcall/fix-serializer-3",
        "{.status.phase}",
        &["Succeeded"],
    );
    assert_eq!(
        d.file("src/serializer.ts"),
        "export function formatDate(d: Date): string {\n  return d.toISOString();\n}\n"
    );
    let effects = jsonpath(
        ns,
        "toolcall/fix-serializer-3",
        "{.status.result.effectsObserved.writes}",
    );
    assert!(
        effects.contains("/workspace/src/serializer.ts"),
        "{effects}"
    );

    // The change as git sees it, through the git tool's own policy (git must read its config).
    propose(&agent_call(
        ns,
        "diff-serializer",
        "git.diff",
        "{path: src/serializer.ts}",
        "inspect",
    ));
    wait_for(
        ns,
        "toolcall/diff-serializer",
        "{.status.phase}",
        &["Succeeded"],
    );
    let diff = jsonpath(
        ns,
        "toolcall/diff-serializer",
        "{.status.result.outputPreview}",
    );
    assert!(diff.contains("+  return d.toISOString();"), "{diff}");

    // 5. A destructive call on .git is refused before any pod exists.
    let git_config = d.file(".git/config");
    propose(&agent_call(
        ns,
        "delete-git-config",
        "file.delete",
        "{path: .git/config}",
        "delete",
    ));
    wait_for(
        ns,
        "toolcall/delete-git-config",
        "{.status.phase}",
        &["Failed", "Denied"],
    );
    assert_eq!(
        kubectl(
            &[
                "get",
                "pods",
                "-n",
                ns,
                "-l",
                "toolgate.dev/call=delete-git-config",
                "-o",
                "name"
            ],
            None
        )
        .1,
        ""
    );
    assert_eq!(d.file(".git/config"), git_config);

    // 6. An external write (L4) waits for a human, who approves exactly what is shown.
    propose(&agent_call(
        ns,
        "report-flaky-tz",
        "github.create-issue",
        "{owner: acme, repo: web-app, title: \"date tests depend on the time zone\", body: \"formatDate used local time.\", labels: [flaky-test]}",
        "external_send",
    ));
    wait_for(
        ns,
        "toolcall/report-flaky-tz",
        "{.status.phase}",
        &["AwaitingApproval"],
    );
    assert!(d.tracker.lock().expect("lock").is_empty(), "ran unapproved");
    let args = jsonpath(ns, "toolcall/report-flaky-tz", "{.status.argsDigest}");
    let tool = jsonpath(ns, "toolcall/report-flaky-tz", "{.status.toolDigest}");
    let approval =
        std::fs::read_to_string(root().join("examples/calls/06-approve-create-issue.yaml"))
            .expect("example approval")
            .replace("namespace: team-a}", &format!("namespace: {ns}}}"))
            .lines()
            .map(|l| {
                if l.starts_with("  argsDigest:") {
                    format!("  argsDigest: \"{args}\"")
                } else if l.starts_with("  toolDigest:") {
                    format!("  toolDigest: \"{tool}\"")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
    let (self_approved, _, _) = as_agent(&["create", "-f", "-"], Some(&approval));
    assert!(!self_approved, "the agent created an approval");
    let (approved, _, err) = kubectl(
        &["--context", "reviewer", "create", "-f", "-"],
        Some(&approval),
    );
    assert!(approved, "{err}");
    wait_for(
        ns,
        "toolcall/report-flaky-tz",
        "{.status.phase}",
        &["Succeeded"],
    );
    let filed = d.tracker.lock().expect("lock").clone();
    assert_eq!(filed.len(), 1, "{filed:?}");
    assert_eq!(filed[0].0, "/repos/acme/web-app/issues");
    assert_eq!(filed[0].1, format!("Bearer {TOKEN_CANARY}"));
    assert!(filed[0].2.contains("date tests depend on the time zone"));
    let structured = jsonpath(
        ns,
        "toolcall/report-flaky-tz",
        "{.status.result.structuredOutput.number}",
    );
    assert_eq!(structured, "1");
    let described = ok(&["describe", "toolcall", "report-flaky-tz", "-n", ns], None);
    for step in ["ApprovalGranted", "CredentialsBound", "Finished"] {
        assert!(
            described.contains(step),
            "describe lacks {step}: {described}"
        );
    }

    node::ran_on_the_node(
        &d.ns,
        &[
            "read-serializer-1",
            "read-dotenv",
            "search-formatdate",
            "fix-serializer-3",
            "diff-serializer",
            "report-flaky-tz",
        ],
        &["delete-git-config"],
    );
    let everything = d.surfaces();
    assert!(
        !everything.contains(DOTENV_CANARY),
        "the blocked .env leaked"
    );
    assert!(!everything.contains(TOKEN_CANARY), "the credential leaked");

    // The annotated call joined the trace it named.
    if let Some(j) = jaeger {
        let spans = j.wait_for(KUBECTL_TRACE, |s| {
            s.iter().any(|s| s.name == "execute_tool file.read")
        });
        let root = spans
            .iter()
            .find(|s| s.name == "execute_tool file.read")
            .expect("call span");
        assert_eq!(root.parent.as_deref(), Some(AGENT_SPAN), "{root:#?}");
        assert_eq!(root.tag("gen_ai.tool.call.id"), Some("read-serializer-1"));
    }
}

const KUBECTL_TRACE: &str = "6bf92f3577b34da6a3ce929d0e0e4738";

/// The agent's intent in the gRPC run.
const INTENT: &str =
    "fix the failing serializer test: read the code, search for formatDate, patch it";
/// Phases in which a call has ended.
const ENDED: &[&str] = &["Succeeded", "Failed"];

/// Propose a call as the agent over gRPC and wait until it is in one of `phases`.
async fn run(
    api: &mut toolgate_proto::v1::toolgate_client::ToolgateClient<tonic::transport::Channel>,
    agent: &str,
    ns: &str,
    tool: &str,
    args: serde_json::Value,
    action: &str,
    phases: &[&str],
) -> pb::Call {
    run_traced(api, agent, ns, tool, args, action, phases, None).await
}

/// [`run`], proposed under the agent's `traceparent` when given.
#[allow(clippy::too_many_arguments)]
async fn run_traced(
    api: &mut toolgate_proto::v1::toolgate_client::ToolgateClient<tonic::transport::Channel>,
    agent: &str,
    ns: &str,
    tool: &str,
    args: serde_json::Value,
    action: &str,
    phases: &[&str],
    traceparent: Option<&str>,
) -> pb::Call {
    let proposal = pb::ProposeCallRequest {
        namespace: ns.into(),
        tool: tool.into(),
        args_json: args.to_string(),
        intent: Some(pb::Intent {
            user_goal: "fix the failing serializer test".into(),
            current_task: format!("{action} with {tool}"),
            action_type: action.into(),
            rationale_summary: "the demo scenario".into(),
            evidence_refs: vec![],
        }),
        session_id: "sess-demo".into(),
        ..Default::default()
    };
    let mut request = req(agent, proposal);
    if let Some(tp) = traceparent {
        request
            .metadata_mut()
            .insert("traceparent", tp.parse().expect("ascii"));
    }
    let call = api
        .propose_call(request)
        .await
        .unwrap_or_else(|e| panic!("proposing {tool}: {e}"))
        .into_inner();
    wait_call(api, agent, &call.id, phases).await
}

#[test]
fn the_demo_through_grpc() {
    if !have_cluster() || !node::have_node() {
        return;
    }
    // The operator's spans go to a real collector, which its pod reaches on the machine's end of
    // the node's link; the issue call is traced below.
    let jaeger = toolgate_testkit::jaeger::have_jaeger()
        .then(|| toolgate_testkit::jaeger::TestJaeger::start_on(&node::host_ip()));
    let tracing = jaeger
        .as_ref()
        .map(|j| format!("tracing: {{otlpEndpoint: \"{}\"}}\n", j.otlp))
        .unwrap_or_default();
    // The operator as users install it; the agent reaches it through its Service.
    let Some(d) = Demo::start("tg-demo-grpc", Operator::Helm(&tracing)) else {
        return;
    };
    let ca = helm::grpc_ca();
    let ns = d.ns.clone();
    let (agent, reviewer) = (token_of("agent"), token_of("reviewer"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("rt");
    let mut shown = String::new();
    // The calls that ran (each a pod), and the one refused before any.
    let (mut ran, mut refused_id) = (Vec::new(), String::new());
    rt.block_on(async {
        let mut api = helm::grpc_client(ca.path()).await;
        // 1. The tool view for the intent.
        let view = api
            .get_tool_view(req(
                &agent,
                pb::GetToolViewRequest {
                    namespace: ns.clone(),
                    intent: INTENT.into(),
                    format: pb::ViewFormat::Openai as i32,
                    max_tools: 5,
                    action_type: String::new(),
                    explain: true,
                },
            ))
            .await
            .expect("view")
            .into_inner();
        for tool in ["file.read", "file.write"] {
            assert!(view.exposed.iter().any(|t| t.name == tool), "{view:?}");
        }

        // 2. Read, 3. search, 4. fix: each a pod on the cluster, the workspace volume mounted.
        let path = serde_json::json!({"path": "src/serializer.ts"});
        let read = run(&mut api, &agent, &ns, "file.read", path, "read", ENDED).await;
        assert_eq!(read.phase, "Succeeded", "{read:?}");
        assert!(read.output_preview.contains("BUG: local time"), "{read:?}");
        // Its full output, fetched through the operator, is the bucket's object.
        let fetched = helm::toolgate(ca.path(), &["artifact", &read.id, "stdout"]);
        assert!(
            fetched.status.success(),
            "{}",
            String::from_utf8_lossy(&fetched.stderr)
        );
        let name = read.id.rsplit('/').next().expect("a call name");
        assert_eq!(fetched.stdout, d.stdout_in_bucket(name));
        let path = serde_json::json!({"path": ".env"});
        let dotenv = run(&mut api, &agent, &ns, "file.read", path, "read", ENDED).await;
        assert_eq!(dotenv.phase, "Failed", "{dotenv:?}");
        let text = serde_json::json!({"text": "formatDate", "path": "src"});
        let search = run(&mut api, &agent, &ns, "code.search", text, "search", ENDED).await;
        assert!(
            search.output_preview.contains("src/serializer.ts:1:"),
            "{search:?}"
        );
        let content = serde_json::json!({"path": "src/serializer.ts", "content": FIXED});
        let fix = run(&mut api, &agent, &ns, "file.write", content, "write", ENDED).await;
        assert_eq!(fix.phase, "Succeeded", "{fix:?}");

        // 5. Refused: a destructive call on .git.
        let path = serde_json::json!({"path": ".git/config"});
        let refused = &["Failed", "Denied"];
        let delete = run(
            &mut api,
            &agent,
            &ns,
            "file.delete",
            path,
            "delete",
            refused,
        )
        .await;
        assert!(
            delete.conditions.iter().any(|c| c.status == "False"),
            "{delete:?}"
        );

        // 6. The issue waits for alice; the agent cannot approve it itself.
        let issue = serde_json::json!({
            "owner": "acme",
            "repo": "web-app",
            "title": "serializer.test.ts fails across time zones",
            "body": "formatDate used local time; fixed in the same session.",
        });
        let waits = &["AwaitingApproval"];
        let waiting = run_traced(
            &mut api,
            &agent,
            &ns,
            "github.create-issue",
            issue,
            "external_send",
            waits,
            Some(&format!("00-{AGENT_TRACE}-{AGENT_SPAN}-01")),
        )
        .await;
        let issue = waiting.clone();
        let approve = pb::ApproveCallRequest {
            id: waiting.id.clone(),
            args_digest: waiting.args_digest.clone(),
            tool_digest: waiting.tool_digest.clone(),
            for_session: false,
            ttl_seconds: 600,
            comment: "fine to file".into(),
        };
        let e = api
            .approve_call(req(&agent, approve.clone()))
            .await
            .expect_err("self-approval");
        assert_eq!(
            toolgate_api::error::status_code_and_field(&e).0,
            "approval-self"
        );
        api.approve_call(req(&reviewer, approve))
            .await
            .expect("approved");
        let kinds = support::watch_to_end(&mut api, &agent, &issue.id).await;
        assert!(kinds.iter().any(|k| k == "ApprovalGranted"), "{kinds:?}");
        let done = wait_call(&mut api, &agent, &issue.id, &["Succeeded", "Failed"]).await;
        assert_eq!(done.phase, "Succeeded", "{done:?}");
        let x = api
            .explain_call(req(
                &reviewer,
                pb::ExplainCallRequest {
                    id: issue.id.clone(),
                },
            ))
            .await
            .expect("explain")
            .into_inner();
        assert_eq!(x.approver, "alice@example.com");
        shown = format!(
            "{view:?} {read:?} {dotenv:?} {search:?} {fix:?} {delete:?} {done:?} {x:?} {kinds:?}"
        );
        ran = vec![read.id, dotenv.id, search.id, fix.id, done.id];
        refused_id = delete.id;
    });
    assert_eq!(d.file("src/serializer.ts"), FIXED);
    let filed = d.tracker.lock().expect("lock").clone();
    assert_eq!(filed.len(), 1, "{filed:?}");
    assert_eq!(filed[0].1, format!("Bearer {TOKEN_CANARY}"));
    let names: Vec<String> = ran
        .iter()
        .map(|id| id.rsplit('/').next().expect("a call name").to_string())
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let refused = refused_id.rsplit('/').next().expect("a call name");
    node::ran_on_the_node(&d.ns, &names, &[refused]);
    let everything = format!("{shown}\n{}", d.surfaces());
    assert!(
        !everything.contains(DOTENV_CANARY),
        "the blocked .env leaked"
    );
    assert!(!everything.contains(TOKEN_CANARY), "the credential leaked");
    // The issue call's spans, on the collector, under the agent's span; no canary in any.
    let Some(jaeger) = jaeger else { return };
    let spans = jaeger.wait_for(AGENT_TRACE, |s| {
        s.iter()
            .any(|s| s.name == "execute_tool github.create-issue")
    });
    let root = spans
        .iter()
        .find(|s| s.name == "execute_tool github.create-issue")
        .expect("call span");
    assert_eq!(root.parent.as_deref(), Some(AGENT_SPAN), "{root:#?}");
    assert_eq!(root.service, "toolgate-operator");
    assert_eq!(root.tag("gen_ai.operation.name"), Some("execute_tool"));
    // Decided again once approved: allowed, by the approval.
    assert_eq!(root.tag("toolgate.decision"), Some("allow"));
    assert_eq!(root.tag("toolgate.phase"), Some("Succeeded"));
    for step in [
        "PolicyChecked",
        "ApprovalGranted",
        "CredentialsBound",
        "Finished",
    ] {
        let s = spans
            .iter()
            .find(|s| s.name == format!("toolgate.step {step}"))
            .unwrap_or_else(|| panic!("no {step} span in {spans:#?}"));
        assert_eq!(s.parent.as_deref(), Some(root.span_id.as_str()), "{s:#?}");
    }
    for s in &spans {
        for (k, v) in &s.tags {
            assert!(
                !v.contains(TOKEN_CANARY)
                    && !v.contains(DOTENV_CANARY)
                    && !k.contains(TOKEN_CANARY),
                "canary in {s:#?}"
            );
        }
    }
}

const AGENT_TRACE: &str = "5bf92f3577b34da6a3ce929d0e0e4737";
const AGENT_SPAN: &str = "10f067aa0ba902b8";
