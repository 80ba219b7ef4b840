//! What the embedded runtime's end-to-end suites share (here, and the command line's suite in
//! `cli/tests`): manifests, a workspace and tokens in a temporary folder, the real
//! `toolgate local` binary as a server process, and the generated gRPC client.
#![allow(dead_code)]

use std::io::BufRead;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use tonic::transport::Channel;
use toolgate_proto::v1 as pb;
use toolgate_proto::v1::toolgate_client::ToolgateClient;

pub use toolgate_testkit::api::authorized as req;

pub const AGENT: &str = "agent-token-0123456789abcdef";
pub const REVIEWER: &str = "reviewer-token-0123456789abcdef";
pub const OTHER: &str = "other-agent-token-0123456789abcdef";
/// The events of an allowed call that runs, in order (the chain without an approval's steps).
pub const ALLOWED_CALL_EVENTS: [&str; 10] = [
    "ToolCallRequested",
    "ArgsValidated",
    "PolicyChecked",
    "SandboxPrepared",
    "CredentialsBound",
    "Started",
    "Finished",
    "ResultValidated",
    "ArtifactPersisted",
    "StateUpdated",
];

pub const CANARY: &str = "canary-credential-5d1e77b2";

/// The `toolgate` binary: cargo's own when these suites are the command line's, else the one
/// built beside the test binaries (`cargo test --workspace`, which tests/run.sh runs, builds
/// it). It runs `toolgate local` by exec of the `toolgate-full` beside it. Either binary older
/// than a source it is built from is refused: the suite would test old code.
pub fn toolgate_binary() -> PathBuf {
    if let Some(p) = option_env!("CARGO_BIN_EXE_toolgate") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("the test binary");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    // The client binary links the client and the API's types; the full one all of it.
    let client = [
        "clients/rust/src",
        "cli/src/client_main.rs",
        "proto",
        "core/src",
        "crds/src",
    ];
    refuse_older(&dir.join("toolgate"), &client);
    let runtime = [
        "cli/src",
        "local/src",
        "api/src",
        "sandbox/src",
        "executor/src",
        "broker/src",
        "artifacts/src",
    ];
    refuse_older(
        &dir.join("toolgate-full"),
        &[&client[..], &runtime].concat(),
    );
    dir.join("toolgate")
}

/// Panics when `bin` is missing or older than a file under `sources` (relative to the
/// workspace).
fn refuse_older(bin: &Path, sources: &[&str]) {
    let built = std::fs::metadata(bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: build it first (cargo build -p toolgate; tests/run.sh does)",
                bin.display()
            )
        });
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut todo: Vec<PathBuf> = sources.iter().map(|d| root.join(d)).collect();
    while let Some(d) = todo.pop() {
        if d.is_file() {
            if std::fs::metadata(&d)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t > built)
            {
                panic!(
                    "{} is older than {}: rebuild it (cargo build -p toolgate) so the suite tests this code",
                    bin.display(),
                    d.display()
                );
            }
            continue;
        }
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            todo.push(e.path());
        }
    }
}

pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

pub fn write_private(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .expect("private file");
    std::io::Write::write_all(&mut f, text.as_bytes()).expect("write");
}

#[allow(unused_imports, reason = "not every suite builds its own tools")]
pub use toolgate_testkit::fixtures::Tool;

/// The test grant of the suites: the standard test tools for the fixer agent.
pub fn test_grant() -> String {
    toolgate_testkit::fixtures::grant(
        "team-a",
        "test-tools",
        &toolgate_testkit::fixtures::STANDARD_TOOLS,
    )
}

/// A folder with manifests (the examples' policies and tools plus test tools), a workspace,
/// tokens and secrets.
pub fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let m = root.join("manifests");
    std::fs::create_dir_all(m.join("tools")).expect("manifests");
    for f in [
        "grants.yaml",
        "sandbox-policies.yaml",
        "credential-bindings.yaml",
    ] {
        std::fs::copy(examples().join(f), m.join(f)).expect("copy");
    }
    for entry in std::fs::read_dir(examples().join("tools")).expect("tools") {
        let p = entry.expect("entry").path();
        std::fs::copy(&p, m.join("tools").join(p.file_name().expect("name"))).expect("copy tool");
    }
    std::fs::write(m.join("test-grant.yaml"), test_grant()).expect("grant");
    for tool in toolgate_testkit::fixtures::standard_tools() {
        let text = tool.yaml("team-a");
        let name = text
            .lines()
            .find_map(|l| l.strip_prefix("  canonicalName: "))
            .unwrap_or("test")
            .replace('.', "-");
        std::fs::write(m.join(format!("tools/{name}.yaml")), text).expect("tool");
    }
    let ws = root.join("workspace");
    std::fs::create_dir_all(ws.join("src")).expect("ws");
    std::fs::write(ws.join("src/a.ts"), "export const a = 1;\n").expect("src");
    std::fs::write(ws.join(".env"), format!("TOKEN={CANARY}\n")).expect(".env");
    write_private(
        &root.join("tokens.yaml"),
        &format!(
            "- {{token: {AGENT}, principal: \"system:serviceaccount:team-a:fixer\"}}\n\
             - {{token: {OTHER}, principal: \"system:serviceaccount:team-a:other\"}}\n\
             - {{token: {REVIEWER}, principal: alice@example.com, groups: [team-a-reviewers], approverIn: [team-a]}}\n"
        ),
    );
    write_private(
        &root.join("secrets.yaml"),
        &format!("secret/team-a/github-issues-bot: {{token: {CANARY}}}\n"),
    );
    dir
}

/// `toolgate local` on `root`'s manifests and tokens, with this data folder and workspace.
pub fn local_command(root: &Path, data: &Path, workspace: &Path) -> Command {
    local_command_of(&toolgate_binary(), root, data, workspace)
}

/// The same, run from this `toolgate` binary.
pub fn local_command_of(binary: &Path, root: &Path, data: &Path, workspace: &Path) -> Command {
    let mut c = Command::new(binary);
    c.arg("local")
        .arg("--manifests")
        .arg(root.join("manifests"))
        .arg("--data")
        .arg(data)
        .arg("--workspace")
        .arg(workspace)
        .arg("--tokens")
        .arg(root.join("tokens.yaml"));
    c
}

pub struct Server {
    pub child: Child,
    pub addr: String,
}

impl Server {
    pub fn start(root: &Path) -> Server {
        Server::start_in(root, &root.join("data"), &root.join("workspace"))
    }

    /// A server on `root`'s manifests, tokens and secrets with its data folder and workspace
    /// where the test says.
    pub fn start_in(root: &Path, data: &Path, workspace: &Path) -> Server {
        Server::start_with(root, data, workspace, &["--listen", "127.0.0.1:0"])
    }

    /// A server with these arguments added (`--listen` among them).
    pub fn start_with(root: &Path, data: &Path, workspace: &Path, extra: &[&str]) -> Server {
        Server::start_logged(root, data, workspace, extra, None)
    }

    /// A server with these arguments, its log (stderr, at `info`) in `log` when given. The
    /// secrets file is passed unless the arguments name Vault.
    pub fn start_logged(
        root: &Path,
        data: &Path,
        workspace: &Path,
        extra: &[&str],
        log: Option<&Path>,
    ) -> Server {
        let mut command = local_command(root, data, workspace);
        if !extra.contains(&"--vault-addr") {
            command.arg("--secrets").arg(root.join("secrets.yaml"));
        }
        command.args(extra);
        Server::spawn(command, log)
    }

    /// Start `command` (a `toolgate local`), its log (stderr, at `info`) in `log` when given,
    /// and read the address it serves on from its first line.
    pub fn spawn(mut command: Command, log: Option<&Path>) -> Server {
        let stderr = match log {
            Some(path) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("log file"),
            ),
            None => Stdio::inherit(),
        };
        let mut child = command
            .env("RUST_LOG", if log.is_some() { "info" } else { "warn" })
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("toolgate local starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("first line");
        let addr = line
            .split("serving toolgate.v1 on ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap_or_else(|| {
                let log = log
                    .map(|p| std::fs::read_to_string(p).unwrap_or_default())
                    .unwrap_or_default();
                panic!("unexpected first line: {line:?}\n{log}")
            })
            .to_string();
        Server { child, addr }
    }

    /// Stop the server the way Ctrl-C does, and wait for it.
    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub async fn client(&self) -> ToolgateClient<Channel> {
        let channel = Channel::from_shared(format!("http://{}", self.addr))
            .expect("url")
            .connect()
            .await
            .expect("connect");
        ToolgateClient::new(channel)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn propose(tool: &str, args: serde_json::Value, action: &str) -> pb::ProposeCallRequest {
    pb::ProposeCallRequest {
        namespace: String::new(),
        tool: tool.into(),
        tool_digest: String::new(),
        args_json: args.to_string(),
        intent: Some(pb::Intent {
            user_goal: "test toolgate".into(),
            current_task: format!("call {tool}"),
            action_type: action.into(),
            rationale_summary: "end-to-end test".into(),
            evidence_refs: vec![],
        }),
        idempotency_key: String::new(),
        dry_run: false,
        session_id: String::new(),
    }
}

pub async fn get(c: &mut ToolgateClient<Channel>, id: &str) -> pb::Call {
    c.get_call(req(AGENT, pb::GetCallRequest { id: id.into() }))
        .await
        .expect("get")
        .into_inner()
}

/// ExplainCall of a call, as the agent.
pub async fn explain(c: &mut ToolgateClient<Channel>, id: &str) -> pb::Explanation {
    explain_as(c, AGENT, id).await
}

/// ExplainCall of a call, as `token`'s caller: the reviewer (an approver, the person running the
/// runtime) is shown the whole sandbox plan, host paths included; an agent its own view of it.
pub async fn explain_as(c: &mut ToolgateClient<Channel>, token: &str, id: &str) -> pb::Explanation {
    c.explain_call(req(token, pb::ExplainCallRequest { id: id.into() }))
        .await
        .expect("explain")
        .into_inner()
}

pub async fn wait_phase(c: &mut ToolgateClient<Channel>, id: &str, phases: &[&str]) -> pb::Call {
    toolgate_testkit::api::wait_call(c, AGENT, id, phases).await
}

pub async fn watch(c: &mut ToolgateClient<Channel>, token: &str, id: &str) -> Vec<pb::CallEvent> {
    toolgate_testkit::api::watch_events(c, token, id).await
}

/// An artifact's bytes, read through the API as the agent.
pub async fn artifact_bytes(
    c: &mut ToolgateClient<Channel>,
    call: &str,
    artifact: &str,
) -> Vec<u8> {
    use futures::StreamExt as _;
    let mut s = c
        .get_artifact(req(
            AGENT,
            pb::GetArtifactRequest {
                call_id: call.into(),
                artifact_id: artifact.into(),
            },
        ))
        .await
        .expect("artifact")
        .into_inner();
    let mut bytes = Vec::new();
    while let Some(chunk) = s.next().await {
        bytes.extend(chunk.expect("chunk").data);
    }
    bytes
}

/// Propose a call as the agent; it must be accepted (decided, maybe denied).
pub async fn submit(
    c: &mut ToolgateClient<Channel>,
    tool: &str,
    args: serde_json::Value,
    action: &str,
) -> pb::Call {
    c.propose_call(req(AGENT, propose(tool, args, action)))
        .await
        .expect("proposed")
        .into_inner()
}

/// The event log on disk of a team-a call of the server whose root is `root`.
pub fn event_log(root: &Path, id: &str) -> String {
    std::fs::read_to_string(root.join("data/calls/team-a").join(id).join("events.jsonl"))
        .expect("the call's event log")
}

/// Propose a call as the agent and wait for its end, which must be success; the ended call.
pub async fn succeed(
    c: &mut ToolgateClient<Channel>,
    tool: &str,
    args: serde_json::Value,
    action: &str,
) -> pb::Call {
    let call = submit(c, tool, args, action).await;
    let done = wait_phase(c, &call.id, &["Succeeded", "Failed", "Denied", "Cancelled"]).await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    done
}

/// An approval of what `call` shows.
pub fn approval_of(call: &pb::Call) -> pb::ApproveCallRequest {
    pb::ApproveCallRequest {
        id: call.id.clone(),
        args_digest: call.args_digest.clone(),
        tool_digest: call.tool_digest.clone(),
        for_session: false,
        ttl_seconds: 60,
        comment: String::new(),
    }
}

pub fn code_of(s: &tonic::Status) -> String {
    toolgate_api::error::status_code_and_field(s).0
}
