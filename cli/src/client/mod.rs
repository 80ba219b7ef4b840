//! The command-line client commands (`call`, `get`, `list`, `watch`, `approve`, `deny`, `cancel`,
//! `explain`, `artifact`, `skill` and the delegation commands) over the Rust client
//! (`toolgate-client`). The `toolgate` binary is these commands alone (a process an agent's shell
//! starts for every call starts small); every other command is the full binary's.

pub mod exit;
pub mod out;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use futures::StreamExt;
use toolgate_client::{Client, Tls};
use toolgate_proto::v1 as pb;

use crate::client::out::Format;
use crate::{out, outln};

/// How to reach the server.
#[derive(Debug, Clone, clap::Args)]
pub struct Conn {
    /// The server: `http://host:port`, `https://host:port`, or `host:port` for plain http
    /// (`toolgate local` prints it).
    #[arg(
        long,
        env = "TOOLGATE_SERVER",
        default_value = "http://127.0.0.1:7070",
        global = true
    )]
    pub server: String,
    /// Bearer token (from the server's tokens file).
    #[arg(long, env = "TOOLGATE_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// CA bundle (PEM) the server's certificate must chain to, for an `https://` server
    /// (default: the system's roots).
    #[arg(long, env = "TOOLGATE_CA", global = true)]
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM), for a server that requires one (mutual TLS).
    #[arg(
        long,
        env = "TOOLGATE_CLIENT_CERT",
        global = true,
        requires = "client_key"
    )]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(
        long,
        env = "TOOLGATE_CLIENT_KEY",
        global = true,
        requires = "client_cert"
    )]
    pub client_key: Option<PathBuf>,
    /// The name the server's certificate must be valid for, when `--server` names another (an
    /// address, a port-forward): e.g. `toolgate-operator.toolgate-system.svc`, which the chart's
    /// certificate lists.
    #[arg(long, env = "TOOLGATE_TLS_SERVER_NAME", global = true)]
    pub tls_server_name: Option<String>,
}

/// Connect with the command line's options.
pub async fn connect(conn: &Conn) -> anyhow::Result<Client> {
    let token = conn
        .token
        .as_deref()
        .context("no token: pass --token or set TOOLGATE_TOKEN")?;
    Ok(connect_without_token(conn).await?.with_token(token))
}

/// Connect with the command line's server and TLS options, acting for nobody yet
/// ([`Client::with_token`] names the caller of each request).
pub async fn connect_without_token(conn: &Conn) -> anyhow::Result<Client> {
    let tls = Tls {
        ca: conn.ca.clone(),
        identity: conn.client_cert.clone().zip(conn.client_key.clone()),
        server_name: conn.tls_server_name.clone(),
    };
    Ok(Client::connect(&conn.server, "", &tls).await?)
}

/// One line per event, as `watch` and `call --watch` print them.
pub fn event_line(e: &pb::CallEvent) -> String {
    let mark = match e.status.as_str() {
        "True" => "✓",
        "False" => "✗",
        _ => "·",
    };
    format!("  {mark} {:<18} {:<20} {}", e.r#type, e.reason, e.message)
}

/// A call in a few lines: what it is, how it stands and, when it was stopped, why.
pub fn call_summary(c: &pb::Call) -> String {
    let mut s = format!("{}  {}  {}  phase={}", c.id, c.tool, c.principal, c.phase);
    if !c.decision.is_empty() {
        s.push_str(&format!(" decision={}", c.decision));
    }
    if !c.risk_tier.is_empty() {
        s.push_str(&format!(" risk={}", c.risk_tier));
    }
    // The step that stopped it (StateUpdated only repeats that the call ended).
    if let Some(stop) = c
        .conditions
        .iter()
        .rev()
        .find(|x| x.status == "False" && x.r#type != toolgate_crds::conditions::STATE_UPDATED)
    {
        s.push_str(&format!(
            "\n  why: {} {}: {}",
            stop.r#type, stop.reason, stop.message
        ));
    }
    if !c.output_preview.is_empty() {
        s.push_str(&format!(
            "\n  preview: {}",
            c.output_preview.trim_end().replace('\n', "\n           ")
        ));
    }
    for a in &c.artifacts {
        s.push_str(&format!(
            "\n  artifact {} {} ({} bytes, {})",
            a.artifact_id, a.uri, a.size_bytes, a.content_hash
        ));
    }
    s
}

/// A call as `-o json|yaml` prints it: what it is, its args, and its whole status (the ToolCall
/// object's, the same on both runtimes).
pub fn call_object(c: &pb::Call) -> serde_json::Value {
    let parse = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap_or_default();
    serde_json::json!({
        "id": c.id, "namespace": c.namespace, "tool": c.tool, "toolDigest": c.tool_digest,
        "principal": c.principal, "argsDigest": c.args_digest, "args": parse(&c.args_json),
        "phase": c.phase, "decision": c.decision, "riskTier": c.risk_tier,
        "createdAt": c.created_at, "dryRun": c.dry_run, "parentCall": c.parent_call,
        "exitCode": c.exit_code, "outputPreview": c.output_preview,
        "reasons": c.reasons.iter().map(|r| serde_json::json!({"code": r.code, "message": r.message})).collect::<Vec<_>>(),
        "artifacts": c.artifacts.iter().map(|a| serde_json::json!({
            "id": a.artifact_id, "kind": a.kind, "uri": a.uri, "contentHash": a.content_hash, "sizeBytes": a.size_bytes,
        })).collect::<Vec<_>>(),
        "status": parse(&c.status_json),
    })
}

/// An event of a call's causal chain as `-o json|yaml` prints it.
pub fn event_object(e: &pb::CallEvent) -> serde_json::Value {
    serde_json::json!({
        "callId": e.call_id, "sequence": e.sequence, "type": e.r#type, "status": e.status,
        "reason": e.reason, "message": e.message, "time": e.time, "phase": e.phase,
        "terminal": e.terminal,
    })
}

/// An explanation as `-o json|yaml` prints it.
pub fn explanation_object(x: &pb::Explanation) -> serde_json::Value {
    let parse = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap_or_default();
    let split = |text: &str| -> Vec<String> {
        text.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect()
    };
    serde_json::json!({
        "call": x.call.as_ref().map(call_object),
        "view": x.view.as_ref().map(|v| serde_json::json!({
            "exposed": v.exposed.iter().map(|t| serde_json::json!({
                "name": t.name, "providerName": t.provider_name, "digest": t.digest, "riskTier": t.risk_tier,
                "needsApproval": t.needs_approval, "reason": t.reason, "grant": t.grant,
            })).collect::<Vec<_>>(),
            "hidden": v.hidden.iter().map(|h| serde_json::json!({"name": h.name, "code": h.code, "reason": h.reason})).collect::<Vec<_>>(),
        })),
        "events": x.events.iter().map(event_object).collect::<Vec<_>>(),
        "approvals": split(&x.approval), "approvers": split(&x.approver),
        "sandboxPolicy": x.sandbox_policy, "credentialBinding": x.credential_binding,
        "sandbox": parse(&x.sandbox_json), "effects": parse(&x.effects_json), "verifier": parse(&x.verifier_json),
        "children": x.children,
    })
}

/// A call in the form `-o` asks for: its summary as text, else the object.
fn print_call(c: &pb::Call, format: Format) {
    match format {
        Format::Text => outln!("{}", call_summary(c)),
        other => crate::client::out::object(&call_object(c), other),
    }
}

/// What a call's phase means as an exit code, the same codes as `toolgate check`: 0 it runs or
/// ran, 3 it waits for an approval, 4 it was denied, 1 it failed or was cancelled.
pub fn phase_exit_code(phase: &str) -> ExitCode {
    match phase {
        "AwaitingApproval" => ExitCode::from(crate::client::exit::EXIT_APPROVAL),
        "Denied" => ExitCode::from(crate::client::exit::EXIT_DENY),
        "Failed" | "Cancelled" => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    }
}

/// How long ago `created` (RFC 3339) was, as kubectl's AGE column says it: `45s`, `12m`, `5h`,
/// `3d`; `<unknown>` when it does not parse.
pub fn age(created: &str, now: jiff::Timestamp) -> String {
    let Ok(t) = created.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let seconds = now.duration_since(t).as_secs().max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// How long `call --watch` waits while a call awaits approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Until it ends.
    Forever,
    /// At most this long.
    For(std::time::Duration),
}

/// A duration as people write it: `30s`, `10m`, `1h30m`, `500ms` (or ISO 8601, `PT10M`).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let d: jiff::SignedDuration = text
        .trim()
        .parse()
        .map_err(|e| format!("expected a duration such as 30s, 10m or 1h30m, got {text:?}: {e}"))?;
    std::time::Duration::try_from(d)
        .map_err(|_| format!("expected a positive duration, got {text:?}"))
}

fn parse_wait(text: &str) -> Result<Wait, String> {
    match text {
        "forever" => Ok(Wait::Forever),
        _ => parse_duration(text).map(Wait::For),
    }
}

/// How a watch ended.
enum Watched {
    /// The call ended; its last state.
    Ended(Option<Box<pb::Call>>),
    /// It waits for approval and the caller does not wait.
    AwaitsApproval,
    /// The time ran out.
    TimedOut(String),
}

/// Follow a call's events, printing each as `events` says (none: silently), until it ends, it
/// awaits approval while `approval` says not to wait (any longer), or `timeout` passes.
async fn follow(
    c: &mut Client,
    id: &str,
    approval: Option<Wait>,
    timeout: Option<std::time::Duration>,
    events: Option<Format>,
) -> Result<Watched, tonic::Status> {
    use tokio::time::Instant;
    let r = c.req(pb::WatchCallRequest { id: id.into() });
    let mut stream = c.api().watch_call(r).await?.into_inner();
    let far = Instant::now() + std::time::Duration::from_secs(100 * 365 * 24 * 3600);
    let deadline = timeout.map_or(far, |t| Instant::now() + t);
    let mut approval_deadline = far;
    let mut last = None;
    loop {
        let until = deadline.min(approval_deadline);
        let next = tokio::select! {
            e = stream.next() => e,
            () = tokio::time::sleep_until(until) => {
                let what = if until == approval_deadline { "no approval came" } else { "the call has not ended" };
                return Ok(Watched::TimedOut(what.into()));
            }
        };
        let Some(e) = next else {
            return Ok(Watched::Ended(last));
        };
        let e = e?;
        match events {
            Some(Format::Text) => outln!("{}", event_line(&e)),
            // One document per event: a JSON object per line, or YAML documents.
            Some(Format::Json) => {
                crate::client::out::write_raw(format!("{}\n", event_object(&e)).as_bytes())
            }
            Some(Format::Yaml) => {
                crate::client::out::write_raw(b"---\n");
                crate::client::out::object(&event_object(&e), Format::Yaml);
            }
            None => {}
        }
        if e.phase == "AwaitingApproval" {
            match approval {
                None => return Ok(Watched::AwaitsApproval),
                Some(Wait::For(d)) if approval_deadline == far => {
                    approval_deadline = Instant::now() + d;
                }
                _ => {}
            }
        } else {
            approval_deadline = far;
        }
        if let Some(call) = e.call {
            last = Some(Box::new(call));
        }
    }
}

/// The line `call --watch` and `watch` end on when they stop before the call does.
fn stopped_watching(id: &str, why: &Watched) -> (String, ExitCode) {
    match why {
        Watched::AwaitsApproval => (
            format!(
                "waiting for approval of {id}: a reviewer runs `toolgate approve {id}`; follow it with `toolgate watch {id}` (or `call --watch --wait-approval`)"
            ),
            ExitCode::from(crate::client::exit::EXIT_APPROVAL),
        ),
        Watched::TimedOut(what) => (
            format!("stopped watching {id}: {what} in time; it goes on (`toolgate watch {id}`)"),
            ExitCode::from(crate::client::exit::EXIT_TIMEOUT),
        ),
        Watched::Ended(_) => (String::new(), ExitCode::SUCCESS),
    }
}

/// Client commands.
#[derive(Debug, clap::Subcommand)]
pub enum ClientCommand {
    /// Propose a call.
    Call {
        /// The tool (name from the view).
        tool: String,
        /// Args as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// The action type (`read`, `write`, `external_send`, …); default: the tool's, when it
        /// declares exactly one.
        #[arg(long, default_value = "")]
        action: String,
        /// The current task, in words.
        #[arg(long)]
        task: String,
        /// The user's goal (default: the task).
        #[arg(long)]
        goal: Option<String>,
        /// Why this call (default: the task).
        #[arg(long)]
        rationale: Option<String>,
        /// Namespace (default: the caller's service-account namespace).
        #[arg(long, default_value = "")]
        namespace: String,
        /// Idempotency key.
        #[arg(long, default_value = "")]
        idempotency_key: String,
        /// Ask for a dry run.
        #[arg(long)]
        dry_run: bool,
        /// Follow the call through its chain until it ends; a call that waits for a human
        /// returns at once (exit 3, with the command that approves it) unless `--wait-approval`.
        #[arg(long)]
        watch: bool,
        /// With `--watch`: keep waiting while the call awaits approval, for at most DURATION
        /// (`30s`, `10m`, `1h`) when given, else until it ends.
        #[arg(long, value_name = "DURATION", num_args = 0..=1, require_equals = true, default_missing_value = "forever", value_parser = parse_wait)]
        wait_approval: Option<Wait>,
        /// With `--watch`: stop watching after DURATION (exit 5; the call goes on).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        timeout: Option<std::time::Duration>,
        /// Output: `text` (the call, then each event with `--watch`), or the call as `json` or
        /// `yaml` (with `--watch`, as it ended or stood when the watch stopped).
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Format,
    },
    /// Print a skill's instructions (SKILL.md): what to do, not a permission; its scripts run
    /// only as the tools it declares, when a grant allows them.
    Skill {
        /// The skill's name (the view lists the skills an intent matches).
        name: String,
        /// Namespace (default: the caller's service-account namespace).
        #[arg(long, default_value = "")]
        namespace: String,
        /// Output: `text` (its instructions), or the skill as `json` or `yaml`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Format,
    },
    /// Fetch the token a running delegation (a call of a subagent tool) hands its subagent:
    /// once, as the delegation's principal. Prints the token and the handoff as JSON; start the
    /// subagent with TOOLGATE_TOKEN set to it.
    DelegationToken {
        /// The delegation's call id.
        id: String,
        /// Output: the token and handoff as `json` (also for `text`) or `yaml`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Format,
    },
    /// As a subagent (TOOLGATE_TOKEN is its delegation token): end the delegation with a
    /// summary and a result.
    CompleteDelegation {
        /// What was found and done (at most 4 KiB): the delegation's output preview.
        #[arg(long)]
        summary: String,
        /// The result as JSON (checked against the delegation tool's output schema).
        #[arg(long, default_value = "")]
        result: String,
        /// The task failed.
        #[arg(long)]
        failed: bool,
        /// Tokens spent (checked against the delegation's maxTokens).
        #[arg(long, default_value_t = 0)]
        tokens_used: u64,
        /// Output: `text`, or the object as `json` or `yaml`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Format,
    },
    /// Show a call.
    Get {
        /// Call id.
        id: String,
        /// Output: `text`, or the object as `json` or `yaml`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Format,
    },
    /// List calls.
    List {
        /// Only this namespace.
        #[arg(long, short = 'n', default_value = "")]
        namespace: String,
        /// Only this phase.
        #[arg(long, default_value = "")]
        phase: String,
        /// Only this tool.
        #[arg(long, default_value = "")]
        tool: String,
        /// Output: a table (`text`), or `{"items": [calls]}` as `json` or `yaml`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Format,
    },
    /// Follow a call's events until it ends.
    Watch {
        /// Call id.
        id: String,
        /// Stop watching after DURATION (`30s`, `10m`; exit 5; the call goes on).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        timeout: Option<std::time::Duration>,
        /// Output: a line per event (`text`), a JSON object per line (`json`), or a YAML
        /// document per event (`yaml`).
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Format,
    },
    /// Approve a call, bound to the args and tool version shown.
    Approve {
        /// Call id.
        id: String,
        /// Approve the session, not only this call.
        #[arg(long)]
        session: bool,
        /// Seconds the approval stays valid.
        #[arg(long, default_value_t = 900)]
        ttl: u32,
        /// A note.
        #[arg(long, default_value = "")]
        comment: String,
        /// Output: `text`, or the object as `json` or `yaml`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Format,
    },
    /// Deny a call.
    Deny {
        /// Call id.
        id: String,
        /// Why.
        #[arg(long, default_value = "")]
        comment: String,
        /// Output: `text`, or the object as `json` or `yaml`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Format,
    },
    /// Cancel a call.
    Cancel {
        /// Call id.
        id: String,
        /// Why.
        #[arg(long, default_value = "")]
        reason: String,
        /// Output: `text`, or the object as `json` or `yaml`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Format,
    },
    /// Explain a call: view, decision, approval, sandbox, credential (by name), events.
    Explain {
        /// Call id.
        id: String,
        /// Output: `text`, or the object as `json` or `yaml`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Format,
    },
    /// Fetch an artifact's content to stdout (or a file).
    Artifact {
        /// Call id.
        call: String,
        /// Artifact id (`stdout`).
        artifact: String,
        /// Write here instead of stdout.
        #[arg(short = 'o', long)]
        out: Option<std::path::PathBuf>,
    },
}

/// A failed request as one line: the status, its stable code and field, and what broke
/// ([`toolgate_client::Error`] says it).
pub fn status_error(e: impl Into<toolgate_client::Error>) -> anyhow::Error {
    anyhow::Error::new(e.into())
}

/// Run a client command: one arm per command, each a request and its output (its length is the
/// number of commands).
pub fn run(conn: &Conn, cmd: ClientCommand) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut c = connect(conn).await?;
        match cmd {
            ClientCommand::Call { tool, args, action, task, goal, rationale, namespace, idempotency_key, dry_run, watch, wait_approval, timeout, output } => {
                let call = c
                    .propose(pb::ProposeCallRequest {
                        namespace,
                        tool,
                        tool_digest: String::new(),
                        args_json: args,
                        intent: Some(pb::Intent {
                            user_goal: goal.unwrap_or_else(|| task.clone()),
                            rationale_summary: rationale.unwrap_or_else(|| task.clone()),
                            current_task: task,
                            action_type: action,
                            evidence_refs: vec![],
                        }),
                        idempotency_key,
                        dry_run,
                        session_id: String::new(),
                    })
                    .await
                    .map_err(status_error)?;
                if !watch {
                    print_call(&call, output);
                    return Ok(phase_exit_code(&call.phase));
                }
                if output == Format::Text {
                    outln!("{}", call_summary(&call));
                }
                let watched = if call.phase == "AwaitingApproval" && wait_approval.is_none() {
                    Watched::AwaitsApproval
                } else {
                    let events = (output == Format::Text).then_some(Format::Text);
                    follow(&mut c, &call.id, wait_approval, timeout, events).await.map_err(status_error)?
                };
                let end = match watched {
                    // The last event carries the call as it ended (a server before it did not).
                    Watched::Ended(Some(end)) => *end,
                    Watched::Ended(None) => c.get(&call.id).await.map_err(status_error)?,
                    stopped => {
                        let (line, code) = stopped_watching(&call.id, &stopped);
                        if output == Format::Text {
                            outln!("{line}");
                        } else {
                            // The object on stdout, as the call stands; the line for people.
                            eprintln!("{line}");
                            print_call(&c.get(&call.id).await.map_err(status_error)?, output);
                        }
                        return Ok(code);
                    }
                };
                print_call(&end, output);
                return Ok(phase_exit_code(&end.phase));
            }
            ClientCommand::DelegationToken { id, output } => {
                let r = c.req(pb::GetDelegationTokenRequest { call_id: id });
                let d = c.api().get_delegation_token(r).await.map_err(status_error)?.into_inner();
                let handoff: serde_json::Value = serde_json::from_str(&d.handoff_json).unwrap_or_default();
                crate::client::out::object(&serde_json::json!({
                    "token": d.token, "expiresAt": d.expires_at, "handoff": handoff,
                }), output);
            }
            ClientCommand::CompleteDelegation { summary, result, failed, tokens_used, output } => {
                let r = c.req(pb::CompleteDelegationRequest { summary, result_json: result, failed, tokens_used });
                let call = c.api().complete_delegation(r).await.map_err(status_error)?.into_inner();
                print_call(&call, output);
            }
            ClientCommand::Skill { name, namespace, output } => {
                let r = c.req(pb::GetSkillRequest { namespace, name });
                let skill = c.api().get_skill(r).await.map_err(status_error)?.into_inner();
                if output != Format::Text {
                    crate::client::out::object(&serde_json::json!({
                        "name": skill.name, "description": skill.description, "instructionsDigest": skill.instructions_digest,
                        "tools": skill.tools, "instructions": skill.instructions,
                    }), output);
                } else {
                    outln!("# skill {} ({}): {}
# its tools: {}

{}", skill.name, skill.instructions_digest, skill.description,
                        if skill.tools.is_empty() { "none".to_string() } else { skill.tools.join(", ") }, skill.instructions);
                }
            }
            ClientCommand::Get { id, output } => {
                let call = c.get(&id).await.map_err(status_error)?;
                if output != Format::Text {
                    crate::client::out::object(&call_object(&call), output);
                } else {
                    outln!("{}", call_summary(&call));
                    for cond in &call.conditions {
                        outln!("  {:<18} {:<6} {:<20} {}", cond.r#type, cond.status, cond.reason, cond.message);
                    }
                }
            }
            ClientCommand::List { namespace, phase, tool, output } => {
                let mut token = String::new();
                let now = jiff::Timestamp::now();
                let mut items = Vec::new();
                if output == Format::Text {
                    outln!("{:<32} {:<22} {:<18} {:<16} {:<6} PRINCIPAL", "ID", "TOOL", "PHASE", "DECISION", "AGE");
                }
                loop {
                    let r = c.req(pb::ListCallsRequest { namespace: namespace.clone(), phase: phase.clone(), tool: tool.clone(), principal: String::new(), page_size: 100, page_token: token.clone() });
                    let page = c.api().list_calls(r).await.map_err(status_error)?.into_inner();
                    for call in &page.calls {
                        if output == Format::Text {
                            outln!("{:<32} {:<22} {:<18} {:<16} {:<6} {}", call.id, call.tool, call.phase, call.decision, age(&call.created_at, now), call.principal);
                        } else {
                            items.push(call_object(call));
                        }
                    }
                    if page.next_page_token.is_empty() { break; }
                    token = page.next_page_token;
                }
                if output != Format::Text {
                    crate::client::out::object(&serde_json::json!({"items": items}), output);
                }
            }
            ClientCommand::Watch { id, timeout, output } => {
                let watched = follow(&mut c, &id, Some(Wait::Forever), timeout, Some(output)).await.map_err(status_error)?;
                if let Watched::TimedOut(_) = watched {
                    let (line, code) = stopped_watching(&id, &watched);
                    if output == Format::Text { outln!("{line}"); } else { eprintln!("{line}"); }
                    return Ok(code);
                }
            }
            ClientCommand::Approve { id, session, ttl, comment, output } => {
                let call = c.get(&id).await.map_err(status_error)?;
                if output == Format::Text {
                    outln!("approving {} ({}) for {}: args {} tool {} risk {}", call.id, call.tool, call.principal, call.args_digest, call.tool_digest, call.risk_tier);
                    outln!("  args: {}", call.args_json);
                }
                let call = c.approve(&call, session, ttl, &comment).await.map_err(status_error)?;
                print_call(&call, output);
            }
            ClientCommand::Deny { id, comment, output } => {
                let r = c.req(pb::DenyCallRequest { id, comment });
                let call = c.api().deny_call(r).await.map_err(status_error)?.into_inner();
                print_call(&call, output);
            }
            ClientCommand::Cancel { id, reason, output } => {
                let r = c.req(pb::CancelCallRequest { id, reason });
                let call = c.api().cancel_call(r).await.map_err(status_error)?.into_inner();
                print_call(&call, output);
            }
            ClientCommand::Explain { id, output } => {
                let x = c.explain(&id).await.map_err(status_error)?;
                match output {
                    Format::Text => out!("{}", explanation_text(&x)),
                    other => crate::client::out::object(&explanation_object(&x), other),
                }
            }
            ClientCommand::Artifact { call, artifact, out } => {
                let (data, hash) = c.artifact(&call, &artifact).await.map_err(status_error)?;
                let got = format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&data)));
                if !hash.is_empty() && got != hash {
                    anyhow::bail!("artifact content hash {got} does not match the recorded {hash}");
                }
                match out {
                    Some(p) => std::fs::write(&p, &data).with_context(|| format!("writing {}", p.display()))?,
                    None => std::io::Write::write_all(&mut std::io::stdout(), &data)?,
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// An explanation as text.
pub fn explanation_text(x: &pb::Explanation) -> String {
    let mut s = String::new();
    if let Some(c) = &x.call {
        s.push_str(&format!("call {} — {} by {}\n", c.id, c.tool, c.principal));
        s.push_str(&format!(
            "  tool version {}\n  args digest  {}\n",
            c.tool_digest, c.args_digest
        ));
        s.push_str(&format!(
            "  decision: {} (risk {})\n",
            c.decision, c.risk_tier
        ));
        for r in &c.reasons {
            s.push_str(&format!("    - {} [{}]\n", r.message, r.code));
        }
    }
    if let Some(v) = &x.view {
        s.push_str("  what the model could see for this intent:\n");
        for t in &v.exposed {
            s.push_str(&format!("    + {:<22} {}\n", t.name, t.reason));
        }
        for h in &v.hidden {
            s.push_str(&format!("    - {:<22} {} [{}]\n", h.name, h.reason, h.code));
        }
    }
    if !x.approval.is_empty() {
        s.push_str(&format!("  approval: {} by {}\n", x.approval, x.approver));
    }
    if let Some(c) = &x.call
        && !c.parent_call.is_empty()
    {
        s.push_str(&format!(
            "  a subagent's call, of delegation {}\n",
            c.parent_call
        ));
    }
    if !x.children.is_empty() {
        s.push_str(&format!(
            "  its subagent's calls: {}\n",
            x.children.join(", ")
        ));
    }
    if !x.sandbox_policy.is_empty() {
        s.push_str(&format!("  sandbox policy: {}\n", x.sandbox_policy));
    }
    if !x.credential_binding.is_empty() {
        s.push_str(&format!(
            "  credential binding: {} (value never shown)\n",
            x.credential_binding
        ));
    }
    if !x.effects_json.is_empty() {
        s.push_str(&format!("  observed effects: {}\n", x.effects_json));
    }
    s.push_str("  events:\n");
    for e in &x.events {
        s.push_str(&format!("  {} {}\n", e.time, event_line(e).trim_start()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::{age, parse_duration};

    #[test]
    fn ages_read_as_kubectl_writes_them() {
        let now: jiff::Timestamp = "2026-12-07T12:00:00Z".parse().expect("now");
        for (created, shown) in [
            ("2026-12-07T11:59:15Z", "45s"),
            ("2026-12-07T11:48:00Z", "12m"),
            ("2026-12-07T07:00:00Z", "5h"),
            ("2026-12-04T12:00:00Z", "3d"),
            ("2026-12-07T12:00:05Z", "0s"),
            ("yesterday", "<unknown>"),
        ] {
            assert_eq!(age(created, now), shown, "{created}");
        }
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(
            parse_duration("30s"),
            Ok(std::time::Duration::from_secs(30))
        );
        assert_eq!(
            parse_duration("1h30m"),
            Ok(std::time::Duration::from_secs(5400))
        );
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-5s").is_err());
    }
}
