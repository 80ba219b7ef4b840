//! `toolgate demo`: the embedded runtime on the examples, and an agent fixing a failing test
//! through the gRPC API — every step really runs (sandboxes, approvals, artifacts), on this
//! machine, without internet.

use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use toolgate_api::{Authenticator, Caller, TokenFile};
use toolgate_core::principal::Principal;
use toolgate_local::broker::{CredentialBroker, FileBroker};
use toolgate_proto::v1 as pb;

use crate::client::{call_summary, event_line, explanation_text};
use crate::outln;
use toolgate_client::Client;

/// The example manifests, built into the binary so the demo runs from anywhere.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "tools/code-search.yaml",
        include_str!("../../examples/tools/code-search.yaml"),
    ),
    (
        "tools/file-delete.yaml",
        include_str!("../../examples/tools/file-delete.yaml"),
    ),
    (
        "tools/file-read.yaml",
        include_str!("../../examples/tools/file-read.yaml"),
    ),
    (
        "tools/file-write.yaml",
        include_str!("../../examples/tools/file-write.yaml"),
    ),
    (
        "tools/git-diff.yaml",
        include_str!("../../examples/tools/git-diff.yaml"),
    ),
    (
        "tools/github-create-issue.yaml",
        include_str!("../../examples/tools/github-create-issue.yaml"),
    ),
    (
        "tools/test-run.yaml",
        include_str!("../../examples/tools/test-run.yaml"),
    ),
    (
        "tools/web-fetch.yaml",
        include_str!("../../examples/tools/web-fetch.yaml"),
    ),
    (
        "tools/review-delegate.yaml",
        include_str!("../../examples/tools/review-delegate.yaml"),
    ),
    ("skills.yaml", include_str!("../../examples/skills.yaml")),
    (
        "skills/fix-failing-test/SKILL.md",
        include_str!("../../examples/skills/fix-failing-test/SKILL.md"),
    ),
    (
        "skills/fix-failing-test/toolgate.yaml",
        include_str!("../../examples/skills/fix-failing-test/toolgate.yaml"),
    ),
    (
        "skills/fix-failing-test/scripts/locate_test.py",
        include_str!("../../examples/skills/fix-failing-test/scripts/locate_test.py"),
    ),
    (
        "skills/fix-failing-test/scripts/reset_workspace.sh",
        include_str!("../../examples/skills/fix-failing-test/scripts/reset_workspace.sh"),
    ),
    (
        "skills/fix-failing-test/references/checklist.md",
        include_str!("../../examples/skills/fix-failing-test/references/checklist.md"),
    ),
    ("grants.yaml", include_str!("../../examples/grants.yaml")),
    (
        "tool-policies.yaml",
        include_str!("../../examples/tool-policies.yaml"),
    ),
    (
        "sandbox-policies.yaml",
        include_str!("../../examples/sandbox-policies.yaml"),
    ),
    (
        "credential-bindings.yaml",
        include_str!("../../examples/credential-bindings.yaml"),
    ),
];

const FIXER: &str = "system:serviceaccount:team-a:fixer";
const REVIEWER: &str = "alice@example.com";

const SERIALIZER_TS: &str = "export function formatDate(d: Date): string {\n  // BUG: local time, so the test fails outside UTC\n  return `${d.getFullYear()}-${d.getMonth() + 1}-${d.getDate()}`;\n}\n";
const SERIALIZER_FIXED: &str =
    "export function formatDate(d: Date): string {\n  return d.toISOString().slice(0, 10);\n}\n";
const SERIALIZER_TEST: &str = "import { formatDate } from './serializer';\ntest('ISO dates', () => {\n  expect(formatDate(new Date(Date.UTC(2026, 10, 30, 23, 30)))).toBe('2026-11-30');\n});\n";

/// What the stand-in issue tracker saw.
#[derive(Default)]
struct Tracker {
    issues: Vec<(String, bool)>,
}

fn random_token() -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(jiff::Timestamp::now().as_nanosecond().to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(format!("{:p}", &h as *const _).as_bytes());
    hex::encode(&h.finalize()[..16])
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    std::io::Write::write_all(&mut f, text.as_bytes())?;
    Ok(())
}

/// Adapt the examples to a machine without internet: GitHub's API becomes a local HTTP service.
fn demo_manifests(dir: &Path, tracker: &str) -> anyhow::Result<()> {
    for (name, text) in EXAMPLES {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let text = match *name {
            "tools/github-create-issue.yaml" => text.replace(
                "https://api.github.com/repos/",
                &format!("http://{tracker}/repos/"),
            ),
            "sandbox-policies.yaml" => text.replace(
                "allowDomains: [api.github.com]\n    denyPrivateNetworks: true",
                &format!("allowDomains: [\"{tracker}\"]\n    denyPrivateNetworks: false"),
            ),
            _ => (*text).to_string(),
        };
        std::fs::write(&path, text)?;
    }
    Ok(())
}

async fn start_tracker(state: Arc<Mutex<Tracker>>, expected: String) -> anyhow::Result<String> {
    use axum::extract::{Path as UrlPath, State};
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::post;
    type S = (Arc<Mutex<Tracker>>, String);
    async fn create(
        State((state, expected)): State<S>,
        UrlPath((owner, repo)): UrlPath<(String, String)>,
        headers: HeaderMap,
        body: String,
    ) -> (StatusCode, String) {
        let authorized = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == format!("Bearer {expected}"));
        let title = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["title"].as_str().map(String::from))
            .unwrap_or_default();
        let n = {
            let mut t = state.lock().unwrap_or_else(|p| p.into_inner());
            t.issues.push((title, authorized));
            t.issues.len()
        };
        if !authorized {
            return (
                StatusCode::UNAUTHORIZED,
                "{\"message\":\"Bad credentials\"}".into(),
            );
        }
        (
            StatusCode::CREATED,
            serde_json::json!({"number": n, "html_url": format!("http://tracker.local/{owner}/{repo}/issues/{n}")}).to_string(),
        )
    }
    let app = axum::Router::new()
        .route("/repos/{owner}/{repo}/issues", post(create))
        .with_state((state, expected));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

fn intent(task: &str, action: &str) -> Option<pb::Intent> {
    Some(pb::Intent {
        user_goal: "fix the failing serializer test and verify".into(),
        current_task: task.into(),
        action_type: action.into(),
        rationale_summary: task.into(),
        evidence_refs: vec![],
    })
}

fn propose(
    tool: &str,
    args: serde_json::Value,
    task: &str,
    action: &str,
) -> pb::ProposeCallRequest {
    pb::ProposeCallRequest {
        namespace: String::new(),
        tool: tool.into(),
        tool_digest: String::new(),
        args_json: args.to_string(),
        intent: intent(task, action),
        idempotency_key: String::new(),
        dry_run: false,
        session_id: "demo-session".into(),
    }
}

struct Story {
    seen: Vec<String>,
}

impl Story {
    fn say(&mut self, text: &str) {
        outln!("{text}");
        self.seen.push(text.to_string());
    }
    fn step(&mut self, n: u32, title: &str) {
        self.say(&format!("\n── {n}. {title}"));
    }
}

async fn run_and_watch(
    story: &mut Story,
    agent: &mut Client,
    call: &pb::Call,
) -> anyhow::Result<pb::Call> {
    story.say(&format!(
        "   proposed {} → {} ({})",
        call.tool, call.id, call.phase
    ));
    let mut lines = Vec::new();
    agent.watch(&call.id, |e| lines.push(event_line(e))).await?;
    for l in lines {
        story.say(&l);
    }
    let end = agent.get(&call.id).await?;
    story.say(&format!("   {}", call_summary(&end).replace('\n', "\n   ")));
    Ok(end)
}

/// `toolgate demo`.
pub fn run(keep: bool) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(play(keep))
}

/// The demo's story, told in order on one running `toolgate local`: one function so the story
/// reads top to bottom as it prints, each step a few lines.
async fn play(keep: bool) -> anyhow::Result<ExitCode> {
    let dir = tempfile::Builder::new()
        .prefix("toolgate-demo-")
        .tempdir()?;
    let root = dir.path().to_path_buf();
    let (manifests, data, workspace) = (
        root.join("manifests"),
        root.join("data"),
        root.join("workspace"),
    );
    std::fs::create_dir_all(workspace.join("src"))?;
    std::fs::write(workspace.join("src/serializer.ts"), SERIALIZER_TS)?;
    std::fs::write(workspace.join("src/serializer.test.ts"), SERIALIZER_TEST)?;
    std::fs::write(workspace.join(".env"), "DATABASE_PASSWORD=never-shown\n")?;

    let secret = format!("ghp_demo{}", random_token());
    let tracker_state = Arc::new(Mutex::new(Tracker::default()));
    let tracker = start_tracker(tracker_state.clone(), secret.clone()).await?;
    demo_manifests(&manifests, &tracker)?;
    let secrets = root.join("secrets.yaml");
    write_private(
        &secrets,
        &format!("secret/team-a/github-issues-bot:\n  token: {secret}\n"),
    )?;
    let broker: Arc<dyn CredentialBroker> = Arc::new(FileBroker::load(&secrets)?);
    let (agent_token, reviewer_token) = (random_token(), random_token());
    let mut tokens = TokenFile::default();
    tokens.insert(
        &agent_token,
        Caller {
            principal: Principal::new(FIXER),
            approver_in: vec![],
            reader_in: vec![],
            delegation: None,
        },
    );
    tokens.insert(
        &reviewer_token,
        Caller {
            principal: Principal::new(REVIEWER).with_groups(["team-a-reviewers"]),
            approver_in: vec!["team-a".into()],
            reader_in: vec![],
            delegation: None,
        },
    );
    let auth: Arc<dyn Authenticator> = Arc::new(tokens);

    let started = crate::local_cmd::start(crate::local_cmd::Setup {
        manifests: &manifests,
        data: &data,
        workspace: &workspace,
        listen: "127.0.0.1:0",
        tls: false,
        broker,
        tracer: Default::default(),
        warm_sandboxes: 2,
        executor: &crate::local_cmd::ExecutorChoice::Default,
        egress: &Default::default(),
    })
    .await?;
    let addr = started.addr;
    let auth = started.runtime.authenticator(auth);
    let runtime = Arc::new(started.runtime);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(toolgate_api::serve(
        runtime,
        auth,
        started.listener,
        None,
        async {
            let _ = stop_rx.await;
        },
    ));
    let url = format!("http://{addr}");
    let plain = toolgate_client::Tls::default();
    let mut agent = Client::connect(&url, &agent_token, &plain).await?;
    let mut reviewer = Client::connect(&url, &reviewer_token, &plain).await?;
    let mut story = Story { seen: Vec::new() };

    story.say(&format!("toolgate demo — an agent fixes a failing test\n  runtime: toolgate local on {addr} (gRPC), data in {}\n  agent:   {FIXER}\n  human:   {REVIEWER} (may approve calls in team-a)\n  The scenario files an issue on GitHub; there is no internet here, so a local HTTP service on {tracker} stands in for api.github.com, and the demo's copy of the github-api sandbox policy allows {tracker} instead.", data.display()));

    story.step(1, "The agent asks for its tool view");
    let view = agent
        .view(pb::GetToolViewRequest {
            namespace: String::new(),
            intent:
                "fix the failing serializer test: read the code, search for formatDate, patch it"
                    .into(),
            format: pb::ViewFormat::Openai as i32,
            max_tools: 5,
            action_type: String::new(),
            explain: true,
        })
        .await?;
    for t in &view.exposed {
        story.say(&format!(
            "   + {:<20} {:<4} {}",
            t.name, t.risk_tier, t.reason
        ));
    }
    for h in &view.hidden {
        story.say(&format!(
            "   - {:<20} hidden: {} [{}]",
            h.name, h.reason, h.code
        ));
    }
    story.say(&format!(
        "   (the model receives {} bytes of OpenAI tool JSON; nothing else)",
        view.payload_json.len()
    ));

    story.step(2, "An allowed read (L0, read-only sandbox, .env hidden)");
    let call = agent
        .propose(propose(
            "file.read",
            serde_json::json!({"path": "src/serializer.ts"}),
            "read the serializer",
            "read",
        ))
        .await?;
    let read = run_and_watch(&mut story, &mut agent, &call).await?;

    story.step(3, "A search");
    let call = agent
        .propose(propose(
            "code.search",
            serde_json::json!({"text": "formatDate", "path": "src"}),
            "find where formatDate is used",
            "search",
        ))
        .await?;
    run_and_watch(&mut story, &mut agent, &call).await?;

    story.step(
        4,
        "The fix: a workspace write (L2, allowed by the grant's workspace:write scope)",
    );
    let call = agent
        .propose(propose(
            "file.write",
            serde_json::json!({"path": "src/serializer.ts", "content": SERIALIZER_FIXED}),
            "correct the date format in serializer.ts",
            "write",
        ))
        .await?;
    run_and_watch(&mut story, &mut agent, &call).await?;
    let now = std::fs::read_to_string(workspace.join("src/serializer.ts"))?;
    story.say(&format!(
        "   the workspace file now reads: {:?}",
        now.lines().nth(1).unwrap_or_default().trim()
    ));

    story.step(5, "A destructive call that is refused");
    let call = agent
        .propose(propose(
            "file.delete",
            serde_json::json!({"path": ".git/config"}),
            "remove the git config",
            "delete",
        ))
        .await?;
    story.say(&format!(
        "   file.delete .git/config → {} ({})",
        call.phase, call.decision
    ));
    for c in call.conditions.iter().filter(|c| c.status == "False") {
        story.say(&format!("   ✗ {} {}: {}", c.r#type, c.reason, c.message));
    }

    story.step(6, "An external write waits for a human (L4)");
    let mut req = propose(
        "github.create-issue",
        serde_json::json!({"owner": "acme", "repo": "web-app", "title": "serializer.test.ts fails across time zones", "body": "formatDate used local time; fixed in the same session."}),
        "file an issue about the flaky date test",
        "external_send",
    );
    req.idempotency_key = "issue-flaky-date-test".into();
    let issue = agent.propose(req.clone()).await?;
    story.say(&format!(
        "   {} → {} ({}): {}",
        issue.tool,
        issue.id,
        issue.phase,
        issue
            .conditions
            .last()
            .map(|c| c.message.as_str())
            .unwrap_or_default()
    ));
    let again = agent.propose(req).await?;
    story.say(&format!(
        "   proposing again with the same idempotency key returns the same call: {}",
        again.id == issue.id
    ));
    match agent.approve(&issue, false, 600, "").await {
        Ok(_) => bail!("the agent approved its own call"),
        Err(e) => story.say(&format!(
            "   the agent tries to approve its own call: {} ({})",
            e.status().map(tonic::Status::message).unwrap_or_default(),
            e.reason().unwrap_or_default()
        )),
    }

    story.step(
        7,
        "The reviewer approves exactly what was shown; the call runs in its sandbox",
    );
    let shown = reviewer.get(&issue.id).await?;
    story.say(&format!(
        "   {REVIEWER} sees args {} and tool version {}",
        shown.args_digest, shown.tool_digest
    ));
    reviewer.approve(&shown, false, 600, "ok to file").await?;
    let done = run_and_watch(&mut story, &mut agent, &issue).await?;
    let filed = tracker_state
        .lock()
        .map(|t| t.issues.clone())
        .unwrap_or_default();
    story.say(&format!(
        "   the tracker received {} issue(s); the request carried the brokered token: {}",
        filed.len(),
        filed.first().is_some_and(|(_, ok)| *ok)
    ));

    story.step(8, "The full output is an artifact, verified by hash");
    if let Some(a) = read.artifacts.first() {
        let (bytes, hash) = agent.artifact(&read.id, &a.artifact_id).await?;
        use sha2::Digest;
        let got = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)));
        story.say(&format!(
            "   {} of {}: {} bytes, hash {} ({})",
            a.artifact_id,
            read.id,
            bytes.len(),
            got,
            if got == hash {
                "matches the record"
            } else {
                "MISMATCH"
            }
        ));
    }

    story.step(9, "Why did that happen? ExplainCall");
    let x = reviewer.explain(&done.id).await?;
    for line in explanation_text(&x).lines() {
        story.say(&format!("   {line}"));
    }

    let leaked = story.seen.iter().any(|l| l.contains(&secret));
    story.say(&format!(
        "\nThe credential value appeared in {} of {} lines the API returned above (views, calls, events, previews, explanations).",
        usize::from(leaked),
        story.seen.len()
    ));
    let _ = stop_tx.send(());
    let _ = server.await;
    if keep {
        let kept = dir.keep();
        outln!("kept the demo's folder: {}", kept.display());
    }
    let ok = done.phase == "Succeeded" && !leaked && read.phase == "Succeeded";
    if !ok {
        outln!(
            "the demo did not end as expected: the issue call is {}",
            done.phase
        );
        return Ok(ExitCode::from(1));
    }
    outln!("demo finished: every call above ran through toolgate's chain on this machine.");
    Ok(ExitCode::SUCCESS)
}
