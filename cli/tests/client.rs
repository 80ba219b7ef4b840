//! The command line against a running `toolgate local`: what a person types — the demo, the
//! client driving a call through approval, and exit codes that say the outcome.

#[path = "../../local/tests/support/mod.rs"]
mod support;

use std::process::Command;

use support::*;

/// `toolgate ARGS` against the server at `url` as the holder of a token: exit code, stdout,
/// stderr.
fn cli(url: &str) -> impl Fn(&str, &[&str]) -> (Option<i32>, String, String) + '_ {
    move |token, args| {
        let out = Command::new(toolgate_binary())
            .args(args)
            .env("TOOLGATE_SERVER", url)
            .env("TOOLGATE_TOKEN", token)
            .output()
            .expect("toolgate runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// `TOOLGATE_SERVER` as the Python client takes it, `host:port` without a scheme, is plain http.
#[test]
fn the_server_is_taken_with_or_without_a_scheme() {
    let dir = setup();
    let server = Server::start(dir.path());
    for url in [server.addr.clone(), format!("http://{}", server.addr)] {
        let (code, out, err) = cli(&url)(AGENT, &["list"]);
        assert_eq!(code, Some(0), "TOOLGATE_SERVER={url}: {out}{err}");
    }
    let (code, _, err) = cli(&format!("ftp://{}", server.addr))(AGENT, &["list"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("expected host:port, http://host:port or https://host:port"),
        "{err}"
    );
}

#[test]
fn the_demo_plays_the_whole_scenario() {
    let out = Command::new(toolgate_binary())
        .arg("demo")
        .output()
        .expect("demo runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "── 2. An allowed read",
        "ArgsInvalid",
        "AwaitingApproval",
        "approval-self",
        "ApprovalGranted    Approved",
        "the request carried the brokered token: true",
        "matches the record",
        "credential binding: github-issues-bot (value never shown)",
        "The credential value appeared in 0 of",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

/// The command-line client against the server: what a person types.
#[test]
fn the_command_line_client_drives_a_call_through_approval() {
    let dir = setup();
    let server = Server::start(dir.path());
    let url = format!("http://{}", server.addr);
    let toolgate = cli(&url);
    let (code, out, err) = toolgate(
        AGENT,
        &[
            "view",
            "--intent",
            "read a source file",
            "--format",
            "anthropic",
            "--max-tools",
            "2",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\"input_schema\""), "{out}");
    let (code, out, err) = toolgate(
        AGENT,
        &[
            "call",
            "file.read",
            "--args",
            r#"{"path": "src/a.ts"}"#,
            "--action",
            "read",
            "--task",
            "read a.ts",
            "--watch",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("✓ StateUpdated") && out.contains("phase=Succeeded"),
        "{out}"
    );
    let (_, out, err) = toolgate(
        AGENT,
        &[
            "call",
            "test.gated",
            "--args",
            r#"{"msg": "from the cli"}"#,
            "--action",
            "execute",
            "--task",
            "echo",
        ],
    );
    let id = out.split_whitespace().next().expect("call id").to_string();
    assert!(out.contains("phase=AwaitingApproval"), "{out}{err}");
    // An agent's shell never hangs on a human: `--watch` returns at the approval wait, saying so.
    let gated = |extra: &[&str]| {
        let mut args = vec![
            "call",
            "test.gated",
            "--args",
            r#"{"msg": "watched"}"#,
            "--action",
            "execute",
            "--task",
            "echo",
            "--watch",
        ];
        args.extend_from_slice(extra);
        toolgate(AGENT, &args)
    };
    let (code, out, err) = gated(&[]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(
        out.contains("waiting for approval of") && out.contains("toolgate approve"),
        "{out}"
    );
    let (code, out, err) = gated(&["--wait-approval=1s"]);
    assert_eq!(code, Some(5), "{out}{err}");
    assert!(out.contains("no approval came in time"), "{out}");
    let waiting = out.split_whitespace().next().expect("call id").to_string();
    let (code, out, err) = toolgate(AGENT, &["watch", &waiting, "--timeout", "1s"]);
    assert_eq!(code, Some(5), "{out}{err}");
    assert!(out.contains("it goes on"), "{out}");
    let (code, _, err) = toolgate(
        AGENT,
        &["call", "test.gated", "--watch", "--timeout", "soon"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("expected a duration such as 30s"), "{err}");
    let (code, _, err) = toolgate(AGENT, &["approve", &id]);
    assert_eq!(code, Some(1));
    assert!(err.contains("[approval-self]"), "{err}");
    let (code, out, err) = toolgate(REVIEWER, &["approve", &id, "--comment", "fine"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("args sha256:"), "{out}");
    let (code, out, _) = toolgate(AGENT, &["watch", &id]);
    assert_eq!(code, Some(0));
    assert!(out.contains("StateUpdated"), "{out}");
    let (_, out, _) = toolgate(AGENT, &["list", "--phase", "Succeeded"]);
    // A header, then the two calls that succeeded, each with its age.
    assert_eq!(out.lines().count(), 3, "{out}");
    let header: Vec<&str> = out
        .lines()
        .next()
        .expect("header")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["ID", "TOOL", "PHASE", "DECISION", "AGE", "PRINCIPAL"],
        "{out}"
    );
    assert!(
        out.lines().skip(1).all(|l| l
            .split_whitespace()
            .nth(4)
            .is_some_and(|a| a.ends_with('s'))),
        "{out}"
    );
    let (_, out, _) = toolgate(REVIEWER, &["explain", &id]);
    assert!(
        out.contains("approval:") && out.contains("by alice@example.com"),
        "{out}"
    );
    let (code, out, _) = toolgate(AGENT, &["artifact", &id, "stdout"]);
    assert_eq!((code, out.as_str()), (Some(0), "from the cli\n"));
    // Without --action: the tool's own (file.read only reads).
    let (code, out, err) = toolgate(
        AGENT,
        &[
            "call",
            "file.read",
            "--args",
            r#"{"path": "src/a.ts"}"#,
            "--task",
            "read a.ts",
            "--watch",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("phase=Succeeded"), "{out}");
    // kubectl's -o: the same objects for programs, as JSON and as YAML.
    let (code, out, err) = toolgate(AGENT, &["get", &id, "-o", "yaml"]);
    assert_eq!(code, Some(0), "{err}");
    let call: serde_json::Value = serde_norway::from_str(&out).expect("yaml");
    assert_eq!(call["id"], id.as_str(), "{out}");
    assert_eq!(call["phase"], "Succeeded");
    assert_eq!(
        call["status"]["phase"], "Succeeded",
        "the whole status: {out}"
    );
    let (_, out, _) = toolgate(AGENT, &["list", "--phase", "Succeeded", "-o", "json"]);
    let listed: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(3), "{out}");
    let (_, out, _) = toolgate(REVIEWER, &["explain", &id, "-o", "json"]);
    let explained: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(explained["approvers"][0], "alice@example.com", "{out}");
    assert_eq!(explained["call"]["id"], id.as_str());
    // A watch as a stream of documents: a JSON object per line, the last one terminal.
    let (_, out, _) = toolgate(AGENT, &["watch", &id, "-o", "json"]);
    let events: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(
        events.first().map(|e| e["type"].clone()),
        Some("ToolCallRequested".into())
    );
    assert_eq!(
        events.last().map(|e| e["terminal"].clone()),
        Some(true.into())
    );
    // `call --watch -o json` prints the call once, as it ended; waiting for a person, as it
    // stands, the line for people on stderr.
    let (code, out, err) = toolgate(
        AGENT,
        &[
            "call",
            "file.read",
            "--args",
            r#"{"path": "src/a.ts"}"#,
            "--task",
            "read",
            "--watch",
            "-o",
            "json",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let ended: serde_json::Value = serde_json::from_str(&out).expect("one object");
    assert_eq!(ended["phase"], "Succeeded");
    let (code, out, err) = gated(&["-o", "yaml"]);
    assert_eq!(code, Some(3), "{out}{err}");
    let waiting: serde_json::Value = serde_norway::from_str(&out).expect("yaml");
    assert_eq!(waiting["phase"], "AwaitingApproval");
    assert!(err.contains("waiting for approval of"), "{err}");
    let (code, _, err) = toolgate("wrong-token-wrong-token", &["list"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("Unauthenticated"), "{err}");
    let (code, _, err) = toolgate(
        AGENT,
        &[
            "call",
            "file.read",
            "--args",
            "{",
            "--action",
            "read",
            "--task",
            "x",
        ],
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("(field args_json)"), "{err}");
}

/// `toolgate call` says the outcome in its exit code (as `check` does) and says why a call
/// was stopped.
#[test]
fn the_call_command_exits_with_the_outcome_and_says_why() {
    let dir = setup();
    let server = Server::start(dir.path());
    let url = format!("http://{}", server.addr);
    let call = |tool: &str, args: &str, action: &str| {
        let out = std::process::Command::new(toolgate_binary())
            .args([
                "call", tool, "--args", args, "--action", action, "--task", "t",
            ])
            .env("TOOLGATE_SERVER", &url)
            .env("TOOLGATE_TOKEN", AGENT)
            .output()
            .expect("toolgate runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = call("file.read", r#"{"path": "/etc/passwd"}"#, "read");
    assert_eq!(code, Some(4), "{out}");
    assert!(
        out.contains("why: ArgsValidated ArgsInvalid: /path:"),
        "{out}"
    );
    let (code, out) = call("no.such.tool", "{}", "read");
    assert_eq!(code, Some(4), "{out}");
    assert!(out.contains("why: PolicyChecked ToolNotFound"), "{out}");
    assert!(!out.contains("decision= "), "{out}");
    let (code, out) = call("test.gated", r#"{"msg": "hi"}"#, "execute");
    assert_eq!(code, Some(3), "{out}");
    let (code, out) = call("test.echo", r#"{"msg": "hi"}"#, "execute");
    assert_eq!(code, Some(0), "{out}");
}

/// A skill and a delegation from the command line: the skill's instructions, the subagent's
/// token, the subagent's call with it, its report ending the delegation.
#[test]
fn a_skill_and_a_subagent_from_the_command_line() {
    let dir = setup();
    let m = dir.path().join("manifests");
    std::fs::copy(examples().join("skills.yaml"), m.join("skills.yaml")).expect("skills");
    for f in [
        "SKILL.md",
        "toolgate.yaml",
        "scripts/locate_test.py",
        "scripts/reset_workspace.sh",
    ] {
        let to = m.join("skills/fix-failing-test").join(f);
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        std::fs::copy(examples().join("skills/fix-failing-test").join(f), to).expect("copy");
    }
    let server = Server::start(dir.path());
    let url = format!("http://{}", server.addr);
    let toolgate = cli(&url);
    let (code, out, err) = toolgate(AGENT, &["skill", "fix-failing-test"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("# Fixing a failing test") && out.contains("fix-failing-test.locate-test"),
        "{out}"
    );
    let (code, _, err) = toolgate(AGENT, &["skill", "nope"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("NotFound"), "{err}");

    let (_, out, err) = toolgate(
        AGENT,
        &[
            "call",
            "review.delegate",
            "--args",
            r#"{"question": "is it right?"}"#,
            "--action",
            "subagent_delegate",
            "--task",
            "ask the reviewer",
        ],
    );
    let id = out.split_whitespace().next().expect("call id").to_string();
    assert!(!id.is_empty(), "{out}{err}");
    let mut running = false;
    for _ in 0..100 {
        if toolgate(AGENT, &["get", &id]).1.contains("phase=Running") {
            running = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(running, "the delegation opens");
    let (code, out, err) = toolgate(AGENT, &["delegation-token", &id]);
    assert_eq!(code, Some(0), "{err}");
    let handed: serde_json::Value = serde_json::from_str(&out).expect("json");
    let token = handed["token"].as_str().expect("token").to_string();
    assert_eq!(handed["handoff"]["args"]["question"], "is it right?");
    let (code, out, err) = toolgate(
        &token,
        &[
            "call",
            "file.read",
            "--args",
            r#"{"path": "src/a.ts"}"#,
            "--action",
            "read",
            "--task",
            "read it",
            "--watch",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = toolgate(
        &token,
        &[
            "complete-delegation",
            "--summary",
            "it is right",
            "--result",
            r#"{"verdict": "approve"}"#,
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let (_, out, _) = toolgate(AGENT, &["explain", &id]);
    assert!(out.contains("its subagent's calls: call-"), "{out}");
    let (_, out, _) = toolgate(AGENT, &["get", &id]);
    assert!(out.contains("phase=Succeeded"), "{out}");
}

/// `toolgate local` runs the small `toolgate-executor` beside it in every sandbox when that
/// binary is of this very build (its version and source hash), and its own `executor` command
/// when it is not; `--executor` naming a binary of another build is refused at start, saying
/// which build it is and which is needed. Seen from the calls: each succeeds, and the sandbox its
/// explanation records had that executor bound in.
#[tokio::test(flavor = "multi_thread")]
async fn sandboxes_run_the_executor_of_this_very_build() {
    let dir = setup();
    let root = dir.path();
    let built = toolgate_binary();
    let small = built.with_file_name("toolgate-executor");
    assert!(
        small.is_file(),
        "{} is missing: build it first (cargo build -p toolgate-executor; tests/run.sh does)",
        small.display()
    );
    // A folder of its own, as an installation would be: toolgate (which runs `local` by exec of
    // the toolgate-full beside it), and beside them an executor.
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let place = |from: &std::path::Path, to: &std::path::Path| {
        let _ = std::fs::remove_file(to);
        if std::fs::hard_link(from, to).is_err() {
            std::fs::copy(from, to).expect("copy");
        }
    };
    place(&built, &bin.join("toolgate"));
    place(
        &built.with_file_name("toolgate-full"),
        &bin.join("toolgate-full"),
    );
    let beside = bin.join("toolgate-executor");
    let stale = root.join("stale-executor");
    std::fs::write(
        &stale,
        "#!/bin/sh\necho 'toolgate-executor 0.1.0 (build 0123456789abcdef)'\n",
    )
    .expect("stale");
    std::fs::set_permissions(&stale, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");

    // Runs a call on a server started with `extra`; the sandbox its explanation records.
    let run = |extra: &[&str]| {
        let mut command = local_command_of(
            &bin.join("toolgate"),
            root,
            &root.join("data"),
            &root.join("workspace"),
        );
        command.args(["--listen", "127.0.0.1:0"]).args(extra);
        Server::spawn(command, Some(&root.join("local.log")))
    };
    // Beside it, an executor of another build: passed over, the built-in one runs.
    place(&stale, &beside);
    let mut server = run(&[]);
    let sandbox = sandbox_of_a_call(&server).await;
    server.stop();
    assert!(
        !sandbox.contains(&*beside.to_string_lossy()),
        "the stale executor was bound in: {sandbox}"
    );
    let log = std::fs::read_to_string(root.join("local.log")).expect("log");
    assert!(
        log.contains("not the toolgate-executor beside it") && log.contains("0123456789abcdef"),
        "{log}"
    );

    // Named with --executor, it is refused at start.
    let out = local_command_of(
        &bin.join("toolgate"),
        root,
        &root.join("data"),
        &root.join("workspace"),
    )
    .args(["--listen", "127.0.0.1:0", "--executor"])
    .arg(&stale)
    .output()
    .expect("toolgate local");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--executor")
            && err.contains("(build 0123456789abcdef)")
            && err.contains("this build needs"),
        "{err}"
    );

    // Beside it, the executor of this build: it is what every sandbox runs.
    place(&small, &beside);
    let mut server = run(&[]);
    let sandbox = sandbox_of_a_call(&server).await;
    server.stop();
    assert!(
        sandbox.contains(&*beside.to_string_lossy()),
        "{} was not bound in: {sandbox}",
        beside.display()
    );

    // `--executor builtin` runs the command's own (toolgate-full's), whatever is beside it.
    let mut server = run(&["--executor", "builtin"]);
    let sandbox = sandbox_of_a_call(&server).await;
    server.stop();
    assert!(!sandbox.contains(&*beside.to_string_lossy()), "{sandbox}");
    assert!(
        sandbox.contains(&*bin.join("toolgate-full").to_string_lossy()),
        "{sandbox}"
    );
}

/// Runs `test.echo` on `server` to its end; the sandbox its explanation records.
async fn sandbox_of_a_call(server: &Server) -> String {
    let mut c = server.client().await;
    let done = succeed(
        &mut c,
        "test.echo",
        serde_json::json!({"msg": "hi"}),
        "execute",
    )
    .await;
    explain_as(&mut c, REVIEWER, &done.id).await.sandbox_json
}

/// The Rust client's example agent loop (`clients/rust/examples/agent_loop.rs`, built by `cargo
/// test` beside this suite) against a real runtime: the model's tool call becomes a governed call
/// and the recorded result goes back to it.
#[test]
fn the_rust_example_agent_loop_runs_a_governed_call() {
    // `cargo test --workspace` (and `cargo build --examples`) builds it as a program there.
    let example = std::path::Path::new(env!("CARGO_BIN_EXE_toolgate"))
        .parent()
        .expect("the target folder")
        .join("examples/agent_loop");
    assert!(
        example.exists(),
        "{} is built by `cargo test --workspace` or `cargo build -p toolgate-client --examples`",
        example.display()
    );
    let dir = setup();
    std::fs::write(
        dir.path().join("workspace/src/serializer.ts"),
        "export const formatDate = (d: Date) => d.toISOString();\n",
    )
    .expect("the file the scripted model reads");
    let server = Server::start(dir.path());
    let out = Command::new(&example)
        .args([format!("http://{}", server.addr), AGENT.to_string()])
        .output()
        .expect("the example runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let messages: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let tool = &messages[2];
    assert_eq!(tool["role"], "tool", "{messages}");
    assert!(
        tool["content"]
            .as_str()
            .is_some_and(|c| c.contains("formatDate")),
        "{messages}"
    );
    assert_eq!(messages[3]["role"], "assistant");
}

/// Tool definitions an application already hands a model (OpenAI and Anthropic shapes), imported
/// as descriptors and called through the whole chain against the application's real endpoint: the
/// schema the model saw validates the args, a human approves (definitions say nothing of risk),
/// and the endpoint gets exactly the args.
#[test]
fn imported_function_definitions_are_governed_calls_of_the_applications_endpoint() {
    // The application: answers a POST to /tools/<name> with what it received.
    let mut app = Command::new("python3")
        .args([
            "-c",
            r#"
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        out = json.dumps({"path": self.path, "got": json.loads(body or b"{}")}).encode()
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out))); self.end_headers(); self.wfile.write(out)
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    /// The application stops with the test, whatever its end.
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = app.stdout.take().expect("stdout");
    let _app = Stop(app);
    let mut port = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut port).expect("port");
    let port = port.trim().to_string();

    let dir = setup();
    let defs = dir.path().join("definitions.json");
    std::fs::write(
        &defs,
        r#"[{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}},
            {"name": "book_table", "description": "Book a table at a restaurant.", "input_schema": {"type": "object", "properties": {"restaurant": {"type": "string"}, "people": {"type": "integer", "minimum": 1}}, "required": ["restaurant", "people"]}}]"#,
    )
    .expect("definitions");
    let out = Command::new(toolgate_binary())
        .arg("import")
        .arg(&defs)
        .args(["--url-base", &format!("http://127.0.0.1:{port}/tools")])
        .args([
            "--sandbox-policy",
            "app-api",
            "--namespace",
            "team-a",
            "--prefix",
            "app",
        ])
        .output()
        .expect("import");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = dir.path().join("manifests");
    std::fs::write(m.join("tools/app.yaml"), &out.stdout).expect("descriptors");
    std::fs::write(
        m.join("app.yaml"),
        format!(
            r#"apiVersion: toolgate.dev/v1alpha1
kind: SandboxPolicy
metadata: {{name: app-api, namespace: team-a}}
spec:
  mode: network_restricted
  filesystem: {{readRoots: [], writeRoots: []}}
  network: {{egress: allowlist, allowDomains: ["127.0.0.1:{port}"], denyPrivateNetworks: false}}
  process: {{timeoutMs: 15000, maxMemoryMb: 128, maxProcesses: 4, maxStdoutBytes: 1048576, maxStderrBytes: 65536}}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolGrant
metadata: {{name: app, namespace: team-a}}
spec:
  subjects: [{{kind: ServiceAccount, name: fixer, namespace: team-a}}]
  tools: {{names: [app.get-weather, app.book-table]}}
  scopes: ["tools:app"]
  reason: the application's own functions
"#
        ),
    )
    .expect("policy");
    let lint = Command::new(toolgate_binary())
        .args(["lint"])
        .arg(&m)
        .output()
        .expect("lint");
    assert!(
        lint.status.success(),
        "{}",
        String::from_utf8_lossy(&lint.stdout)
    );

    let server = Server::start(dir.path());
    let url = format!("http://{}", server.addr);
    let toolgate = cli(&url);
    let (code, out, err) = toolgate(
        AGENT,
        &[
            "view",
            "--intent",
            "what is the weather in Paris",
            "--format",
            "openai",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("app__get-weather") && out.contains("\"city\""),
        "{out}"
    );
    // The schema the model saw is the one the call is checked against.
    let (code, out, err) = toolgate(
        AGENT,
        &[
            "call",
            "app.get-weather",
            "--args",
            r#"{"city": 7}"#,
            "--action",
            "execute",
            "--task",
            "weather",
        ],
    );
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(format!("{out}{err}").contains("/city"), "{out}{err}");
    let (code, out, err) = toolgate(
        AGENT,
        &[
            "call",
            "app.book-table",
            "--args",
            r#"{"restaurant": "Chez Nous", "people": 2}"#,
            "--action",
            "execute",
            "--task",
            "book for two",
        ],
    );
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(
        out.contains("phase=AwaitingApproval"),
        "a human approves: {out}{err}"
    );
    let id = out.split_whitespace().next().expect("call id").to_string();
    let (code, out, err) = toolgate(REVIEWER, &["approve", &id]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = toolgate(AGENT, &["watch", &id]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (_, out, _) = toolgate(AGENT, &["get", &id, "-o", "json"]);
    assert!(
        out.contains("/tools/book_table") && out.contains("Chez Nous"),
        "{out}"
    );
}

/// `toolgate init`, then `toolgate local` on what it wrote, then a call: nothing written by hand.
#[test]
fn init_scaffolds_a_namespace_whose_agent_calls_a_tool_with_nothing_written_by_hand() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("ns");
    let init = |args: &[&str]| {
        Command::new(toolgate_binary())
            .arg("init")
            .arg(&dir)
            .args(args)
            .output()
            .expect("init runs")
    };
    let out = init(&["--namespace", "team-z", "--agent", "helper"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("toolgate local --manifests"), "{said}");
    let mode = |p: &str| {
        std::fs::metadata(dir.join(p))
            .expect(p)
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("tokens.yaml"), 0o600);
    assert_eq!(mode("agent.env"), 0o600);
    let lint = Command::new(toolgate_binary())
        .arg("lint")
        .arg(dir.join("manifests"))
        .output()
        .expect("lint");
    assert!(lint.status.success(), "{lint:?}");

    let mut local = local_command(&dir, &dir.join("data"), &dir.join("workspace"));
    local.args(["--listen", "127.0.0.1:0"]);
    let server = Server::spawn(local, None);
    let env = std::fs::read_to_string(dir.join("agent.env")).expect("agent.env");
    let token = env
        .lines()
        .find_map(|l| l.strip_prefix("TOOLGATE_TOKEN="))
        .expect("a token");
    let url = format!("http://{}", server.addr);
    let toolgate = cli(&url);
    let (code, out, err) = toolgate(
        token,
        &[
            "call",
            "file.read",
            "--args",
            r#"{"path": "README.md"}"#,
            "--task",
            "read the README",
            "--watch",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("A workspace"), "{out}");

    // Never over what is there; names checked before anything is written.
    let again = init(&[]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("exists and is not empty"),
        "{again:?}"
    );
    let bad = Command::new(toolgate_binary())
        .arg("init")
        .arg(tmp.path().join("other"))
        .args(["--namespace", "Team_A"])
        .output()
        .expect("init runs");
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--namespace: expected a DNS label"),
        "{bad:?}"
    );
    assert!(!tmp.path().join("other").exists(), "nothing written");
}

/// `toolgate mcp config CLIENT` prints what each client reads, the token referenced the way that
/// client fills it in; the Claude Desktop entry, started as a client starts it (the official
/// MCP SDK's stdio client, from the file), serves the caller's governed tools.
#[test]
fn mcp_config_snippets_start_the_gateway_as_an_mcp_client_does() {
    let dir = setup();
    let server = Server::start(dir.path());
    let url = format!("http://{}", server.addr);
    let config = |client: &str, extra: &[&str]| -> serde_json::Value {
        let out = Command::new(toolgate_binary())
            .args(["mcp", "config", client, "--intent", "echo a greeting"])
            .args(extra)
            .env("TOOLGATE_SERVER", &url)
            .env("TOOLGATE_TOKEN", AGENT)
            .output()
            .expect("mcp config runs");
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).expect("a JSON snippet")
    };
    for client in ["claude-desktop", "claude-code", "cursor"] {
        let entry = &config(client, &[])["mcpServers"]["toolgate"];
        assert_eq!(entry["args"][0], "mcp", "{entry}");
        assert_eq!(entry["args"][3], url.as_str(), "{entry}");
        assert!(
            entry["command"]
                .as_str()
                .is_some_and(|c| c.starts_with('/')),
            "{entry}"
        );
        assert_ne!(
            entry["env"]["TOOLGATE_TOKEN"], AGENT,
            "no credential unless asked"
        );
    }
    assert_eq!(
        config("claude-code", &[])["mcpServers"]["toolgate"]["env"]["TOOLGATE_TOKEN"],
        "${TOOLGATE_TOKEN}"
    );
    let vscode = config("vscode", &[]);
    assert_eq!(vscode["servers"]["toolgate"]["type"], "stdio");
    assert_eq!(
        vscode["servers"]["toolgate"]["env"]["TOOLGATE_TOKEN"],
        "${input:toolgate-token}"
    );
    assert_eq!(vscode["inputs"][0]["password"], true);

    let Some(sdk) = std::env::var_os("TOOLGATE_MCP_SERVERS") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "no MCP SDK: CI runs this suite through tests/run.sh, which installs it"
        );
        eprintln!("skipping the client half: run tests/run.sh to install the MCP SDK");
        return;
    };
    let file = dir.path().join("claude_desktop_config.json");
    let desktop = config("claude-desktop", &["--embed-token"]);
    assert_eq!(
        desktop["mcpServers"]["toolgate"]["env"]["TOOLGATE_TOKEN"],
        AGENT
    );
    std::fs::write(&file, desktop.to_string()).expect("config file");
    let out = Command::new(std::path::Path::new(&sdk).join("bin/python"))
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../local/tests/support/mcp_config_client.py"),
        )
        .arg(&file)
        .arg("toolgate")
        .output()
        .expect("the MCP client runs");
    assert!(out.status.success(), "{out:?}");
    let names: Vec<String> = serde_json::from_slice(&out.stdout).expect("names");
    assert!(
        names.iter().any(|n| n == "test.echo") && names.iter().any(|n| n == "toolgate.get_call"),
        "{names:?}"
    );
}
