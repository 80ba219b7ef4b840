//! The real `toolgate-executor` binary against real processes, a local HTTP server, a local
//! artifact directory and a real S3-compatible server (moto, started here).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const CANARY: &str = "tg-canary-5f0c2e7d41b9-do-not-leak";

struct Run {
    code: i32,
    result: Value,
    stderr: String,
}

fn base_spec(artifacts: &Path, argv: Value) -> Value {
    json!({
        "apiVersion": "toolgate.dev/exec/v1",
        "call": {"namespace": "team-a", "name": "call-1", "eventId": "evt-started-1"},
        "execution": {"adapter": "cli", "argv": argv, "timeoutMs": 10000},
        "args": {},
        "limits": {"timeoutMs": 10000, "maxStdoutBytes": 104857600u64, "maxStderrBytes": 1048576},
        "context": {"exposeOutputToModel": "preview", "maxOutputPreviewTokens": 50},
        "artifacts": {"type": "local", "dir": artifacts.display().to_string()},
        "env": {"inherit": ["PATH"]}
    })
}

fn run_spec(dir: &Path, spec: &Value) -> Run {
    let path = dir.join("spec.json");
    std::fs::write(&path, serde_json::to_vec_pretty(spec).expect("spec")).expect("write spec");
    run_file(&path, &[])
}

fn run_file(path: &Path, extra: &[&str]) -> Run {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_toolgate-executor"))
        .arg("--spec")
        .arg(path)
        .args(extra)
        .output()
        .expect("run executor");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = stdout.lines().last().unwrap_or_default();
    assert!(
        line.len() <= 4096,
        "result over 4 KiB: {} bytes",
        line.len()
    );
    Run {
        code: out.status.code().unwrap_or(-1),
        result: serde_json::from_str(line).unwrap_or(Value::Null),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn artifact<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["artifacts"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["artifactId"] == id))
        .unwrap_or_else(|| panic!("no artifact {id}: {r:#}"))
}

fn local_file(a: &Value) -> PathBuf {
    PathBuf::from(
        a["uri"]
            .as_str()
            .and_then(|u| u.strip_prefix("file://"))
            .expect("file uri"),
    )
}

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[test]
fn an_ordinary_command() {
    let dir = tempfile::tempdir().expect("tmp");
    let r = run_spec(
        dir.path(),
        &base_spec(
            &dir.path().join("art"),
            json!(["printf", "hello %s\\n", "world"]),
        ),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.result["status"], "success");
    assert_eq!(r.result["exitCode"], 0);
    assert_eq!(r.result["outputPreview"], "hello world\n");
    let a = artifact(&r.result, "stdout");
    assert_eq!(
        a["eventId"], "evt-started-1",
        "every artifact names its event"
    );
    assert!(
        a["uri"]
            .as_str()
            .expect("uri")
            .ends_with("/team-a/call-1/stdout"),
        "keyed by namespace/call/artifact"
    );
    let stored = std::fs::read(local_file(a)).expect("artifact");
    assert_eq!(stored, b"hello world\n");
    assert_eq!(a["contentHash"], sha(&stored));
    assert_eq!(a["sizeBytes"], 12);
    assert_eq!(r.result["verifier"]["status"], "passed");
}

#[test]
fn fifty_mebibytes_are_stored_whole_with_a_bounded_preview() {
    let dir = tempfile::tempdir().expect("tmp");
    let n: u64 = 50 * 1024 * 1024;
    let mut spec = base_spec(
        &dir.path().join("art"),
        json!(["head", "-c", n.to_string(), "/dev/zero"]),
    );
    // A debug build scanning 50 MiB for secrets on a loaded machine needs more than 10 s.
    spec["limits"]["timeoutMs"] = json!(300_000);
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.result["status"], "success", "{:#}", r.result);
    assert!(r.result["outputPreview"].as_str().expect("preview").len() <= 200);
    let a = artifact(&r.result, "stdout");
    assert_eq!(a["sizeBytes"], n);
    let stored = std::fs::read(local_file(a)).expect("artifact");
    assert_eq!(stored.len() as u64, n);
    assert_eq!(a["contentHash"], sha(&stored));
    // Memory stays bounded: measure the executor alone (a wrapper reports its peak RSS).
    let spec_path = dir.path().join("spec.json");
    let probe = Command::new("python3")
        .args(["-c", "import resource,subprocess,sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"])
        .arg(env!("CARGO_BIN_EXE_toolgate-executor"))
        .arg("--spec")
        .arg(&spec_path)
        .output()
        .expect("python3");
    let max_rss_kib: u64 = String::from_utf8_lossy(&probe.stdout)
        .trim()
        .parse()
        .expect("rss");
    assert!(
        max_rss_kib < 48 * 1024,
        "the executor peaked at {max_rss_kib} KiB for a 50 MiB output"
    );
}

#[test]
fn a_timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().expect("tmp");
    let pidfile = dir.path().join("grandchild.pid");
    // The test's tool starts a background grandchild and waits; both must die.
    let argv = json!([
        "sh",
        "-c",
        format!("sleep 30 & echo $! > {}; wait", pidfile.display())
    ]);
    let mut spec = base_spec(&dir.path().join("art"), argv);
    spec["limits"]["timeoutMs"] = json!(1500);
    let started = std::time::Instant::now();
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        started.elapsed().as_secs() < 10,
        "the executor returned promptly"
    );
    assert_eq!(r.result["status"], "error");
    assert_eq!(r.result["error"]["code"], "timeout");
    assert_eq!(r.result["error"]["retryable"], true);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .expect("pid")
        .trim()
        .parse()
        .expect("pid");
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ");
    assert!(!alive, "grandchild {pid} survived the timeout");
}

#[test]
fn injection_attempts_arrive_as_literal_arguments() {
    let dir = tempfile::tempdir().expect("tmp");
    let marker = dir.path().join("pwned");
    let mut spec = base_spec(
        &dir.path().join("art"),
        json!(["printf", "[%s]\\n", "{{a}}", "{{b}}", "{{c}}", "{{d}}"]),
    );
    spec["args"] = json!({
        "a": "; rm -rf /",
        "b": format!("$(touch {})", marker.display()),
        "c": "../../etc/passwd",
        "d": format!("`touch {}` && echo | tee x", marker.display()),
    });
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = std::fs::read_to_string(local_file(artifact(&r.result, "stdout"))).expect("stdout");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "[; rm -rf /]");
    assert_eq!(lines[1], format!("[$(touch {})]", marker.display()));
    assert_eq!(lines[2], "[../../etc/passwd]");
    assert!(!marker.exists(), "nothing was interpreted by a shell");

    // A value that would become an option is refused before anything runs...
    spec["args"]["a"] = json!("--output=/tmp/x");
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 65);
    assert!(
        r.stderr.contains("execution.argv[2]") && r.stderr.contains("would be read as an option"),
        "{}",
        r.stderr
    );
    assert_eq!(r.result["error"]["code"], "template");
    // ...unless the template ends options first.
    spec["execution"]["argv"] = json!(["printf", "[%s]\\n", "--", "{{a}}"]);
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn a_canary_credential_never_reaches_the_preview_or_the_artifacts() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("github-token"), format!("{CANARY}\n")).expect("cred");
    std::fs::write(dir.path().join("env-token"), CANARY).expect("cred");
    let argv = json!([
        "sh",
        "-c",
        "cat \"$TOOLGATE_CREDENTIALS_DIR/github-token\"; echo \"env=$GH_TOKEN\"; printf %s \"$GH_TOKEN\" | base64; echo \"$GH_TOKEN\" >&2; exit 3"
    ]);
    let mut spec = base_spec(&dir.path().join("art"), argv);
    spec["credentials"] = json!([
        {"binding": "github-issues-bot", "fileName": "github-token"},
        {"binding": "github-env", "fileName": "env-token", "envName": "GH_TOKEN"}
    ]);
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = r.result.to_string();
    assert!(!text.contains(CANARY), "result leaks the canary: {text}");
    assert!(text.contains("[REDACTED]"), "{text}");
    assert_eq!(r.result["error"]["code"], "exit-nonzero");
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(CANARY);
    for id in ["stdout", "stderr"] {
        let stored =
            std::fs::read_to_string(local_file(artifact(&r.result, id))).expect("artifact");
        assert!(
            !stored.contains(CANARY) && !stored.contains(&b64),
            "{id} leaks: {stored}"
        );
        assert!(stored.contains("[REDACTED]"), "{id}: {stored}");
    }
}

#[test]
fn stdin_env_allowlist_and_working_dir() {
    let dir = tempfile::tempdir().expect("tmp");
    let work = dir.path().join("ws");
    std::fs::create_dir(&work).expect("ws");
    let mut spec = base_spec(
        &dir.path().join("art"),
        json!([
            "sh",
            "-c",
            "cat > note.txt; pwd; echo \"home=${HOME:-unset} lang=$LANG\""
        ]),
    );
    spec["execution"]["stdin"] = json!("{{content}}");
    spec["args"] = json!({"content": "from stdin\n"});
    spec["workingDir"] = json!(work.display().to_string());
    spec["env"] = json!({"inherit": ["PATH"], "set": {"LANG": "C.UTF-8"}});
    spec["writeRoots"] = json!([work.display().to_string()]);
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(work.join("note.txt")).expect("note"),
        "from stdin\n"
    );
    let out = std::fs::read_to_string(local_file(artifact(&r.result, "stdout"))).expect("stdout");
    assert!(
        out.contains(&work.display().to_string()) && out.contains("home=unset lang=C.UTF-8"),
        "{out}"
    );
    // Observed effects and a diff artifact for the workspace write.
    assert!(
        r.result["effectsObserved"]["writes"][0]
            .as_str()
            .expect("write")
            .ends_with("ws/note.txt"),
        "{:#}",
        r.result
    );
    let diff =
        std::fs::read_to_string(local_file(artifact(&r.result, "workspace.diff"))).expect("diff");
    assert!(diff.contains("+from stdin"), "{diff}");
}

#[test]
fn bad_inputs_have_distinct_exit_codes() {
    let dir = tempfile::tempdir().expect("tmp");
    let r = run_file(&dir.path().join("missing.json"), &[]);
    assert_eq!(r.code, 66, "{}", r.stderr);
    assert!(r.stderr.contains("missing.json"));

    let path = dir.path().join("bad.json");
    std::fs::write(&path, "{not json").expect("w");
    assert_eq!(run_file(&path, &[]).code, 67, "not JSON");
    std::fs::write(&path, "{}").expect("w");
    assert_eq!(
        run_file(&path, &[]).code,
        68,
        "no apiVersion reads as a wrong version"
    );

    let mut spec = base_spec(&dir.path().join("art"), json!(["true"]));
    spec["apiVersion"] = json!("toolgate.dev/exec/v0");
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 68);
    assert!(r.stderr.contains("toolgate.dev/exec/v0"), "{}", r.stderr);

    let mut spec = base_spec(&dir.path().join("art"), json!(["true"]));
    spec["limits"]["timeoutMs"] = json!("soon");
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 67);
    assert!(r.stderr.contains("limits.timeoutMs"), "{}", r.stderr);

    let mut spec = base_spec(&dir.path().join("art"), json!(["true"]));
    spec["credentials"] = json!([{"binding": "gh", "fileName": "absent-token"}]);
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 71);
    assert!(r.stderr.contains("CredentialBinding gh"), "{}", r.stderr);

    let spec = base_spec(&dir.path().join("art"), json!(["cat", "{{path}}"]));
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 65);
    assert!(r.stderr.contains("needs arg \"path\""), "{}", r.stderr);

    let spec = base_spec(&dir.path().join("art"), json!(["/no/such/program"]));
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 0);
    assert_eq!(r.result["error"]["code"], "spawn-failed");
}

/// The egress gate, against real sockets: an address the call's policy should refuse still
/// accepting connections fails the call before the tool starts (exit 74); once it refuses, the
/// tool runs. A malformed address is a spec error naming the field.
#[test]
fn the_tool_starts_only_once_the_gate_addresses_refuse() {
    let dir = tempfile::tempdir().expect("tmp");
    let marker = dir.path().join("tool-ran");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let answering = listener.local_addr().expect("addr").to_string();
    let mut spec = base_spec(
        &dir.path().join("art"),
        json!(["touch", marker.display().to_string()]),
    );
    spec["egressGate"] = json!({"refused": [answering], "withinMs": 300});
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 74, "{}", r.stderr);
    assert_eq!(r.result["error"]["code"], "egress-not-enforced");
    let message = r.result["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&answering) && message.contains("not in force 300 ms"),
        "{message}"
    );
    assert!(!marker.exists(), "the tool must not have started");

    // The "enforcer" arrives: the address refuses, and the tool runs.
    drop(listener);
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.result["status"], "success", "{:#}", r.result);
    assert!(marker.exists());
    assert!(
        r.stderr.contains("NetworkPolicy is in force"),
        "{}",
        r.stderr
    );

    spec["egressGate"] = json!({"refused": ["api-server:6443"], "withinMs": 300});
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 67, "{}", r.stderr);
    assert!(r.stderr.contains("egressGate.refused"), "{}", r.stderr);
}

#[test]
fn structured_output_is_validated() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut spec = base_spec(
        &dir.path().join("art"),
        json!(["printf", "{\"passed\": 3, \"failed\": 0}"]),
    );
    spec["outputSchema"] = json!({"type": "object", "required": ["passed"], "properties": {"passed": {"type": "integer"}}});
    spec["context"]["exposeOutputToModel"] = json!("structured");
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.result["status"], "success", "{:#}", r.result);
    assert_eq!(r.result["structuredOutput"]["passed"], 3);
    spec["execution"]["argv"] = json!(["printf", "{\"passed\": \"three\"}"]);
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.result["status"], "partial");
    assert_eq!(r.result["verifier"]["status"], "failed");
    assert!(r.result.get("structuredOutput").is_none());
}

/// A one-connection-at-a-time HTTP server on loopback that records each request and answers
/// with a scripted response.
fn http_server(responses: Vec<String>) -> (u16, std::thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        listener.set_nonblocking(true).expect("nonblocking");
        for response in responses {
            // Give up after 15 s so a failing executor cannot hang the test.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
            let mut stream = loop {
                match listener.accept() {
                    Ok((s, _)) => break Some(s),
                    Err(_) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(std::time::Duration::from_millis(20))
                    }
                    Err(_) => break None,
                }
            };
            let Some(mut stream) = stream.take() else {
                break;
            };
            stream.set_nonblocking(false).ok();
            stream
                .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .ok();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stream.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf);
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length: ")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            seen.push(String::from_utf8_lossy(&buf).into_owned());
            let _ = stream.write_all(response.as_bytes());
        }
        seen
    });
    (port, handle)
}

fn http_spec(dir: &Path, port: u16) -> Value {
    let mut spec = base_spec(&dir.join("art"), json!([]));
    spec["execution"] = json!({
        "adapter": "http",
        "http": {
            "method": "POST",
            "urlTemplate": format!("http://127.0.0.1:{port}/repos/{{{{owner}}}}/{{{{repo}}}}/issues"),
            "headers": {"Accept": "application/json"},
            "bodyArgs": ["title", "labels"],
            "credentialHeader": "Authorization",
            "credentialPrefix": "Bearer "
        },
        "timeoutMs": 5000
    });
    spec["args"] =
        json!({"owner": "acme", "repo": "web app/..", "title": "flaky test", "labels": ["bug"]});
    spec["allowedDomains"] = json!([format!("127.0.0.1:{port}")]);
    spec["credentials"] = json!([{"binding": "github-issues-bot", "fileName": "token"}]);
    spec["outputSchema"] = json!({"type": "object", "required": ["number"]});
    spec["context"]["exposeOutputToModel"] = json!("structured");
    std::fs::write(dir.join("token"), CANARY).expect("cred");
    spec
}

#[test]
fn the_http_adapter_sends_the_templated_request_with_the_credential() {
    let dir = tempfile::tempdir().expect("tmp");
    let body = format!("{{\"number\": 42, \"echo\": \"{CANARY}\"}}");
    let (port, server) = http_server(vec![format!(
        "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )]);
    let r = run_spec(dir.path(), &http_spec(dir.path(), port));
    let requests = server.join().expect("server");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let req = &requests[0];
    // One path segment per arg: the slash is encoded, so `..` stays inside the segment.
    assert!(
        req.starts_with("POST /repos/acme/web%20app%2F../issues HTTP/1.1"),
        "{req}"
    );
    assert!(
        req.contains(&format!("authorization: Bearer {CANARY}"))
            || req.contains(&format!("Authorization: Bearer {CANARY}")),
        "{req}"
    );
    assert!(
        req.ends_with("{\"labels\":[\"bug\"],\"title\":\"flaky test\"}"),
        "{req}"
    );
    assert_eq!(r.result["status"], "success", "{:#}", r.result);
    assert_eq!(r.result["exitCode"], 201);
    assert_eq!(r.result["structuredOutput"]["number"], 42);
    assert!(!r.result.to_string().contains(CANARY));
    let stored =
        std::fs::read_to_string(local_file(artifact(&r.result, "response-body"))).expect("body");
    assert!(
        !stored.contains(CANARY) && stored.contains("\"number\": 42"),
        "{stored}"
    );
    assert!(
        artifact(&r.result, "response-headers")["sizeBytes"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
}

#[test]
fn the_http_adapter_stays_inside_the_allowed_domains() {
    let dir = tempfile::tempdir().expect("tmp");
    let (port, server) = http_server(vec!["HTTP/1.1 302 Found\r\nLocation: http://evil.invalid/steal\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into()]);
    let r = run_spec(dir.path(), &http_spec(dir.path(), port));
    server.join().expect("server");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.result["error"]["code"], "redirect-refused",
        "{:#}",
        r.result
    );

    // Another port of the allowed host is another service: a redirect there is not followed.
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("other");
    other.set_nonblocking(true).expect("nonblocking");
    let other_port = other.local_addr().expect("addr").port();
    let (port, server) = http_server(vec![format!(
        "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:{other_port}/admin\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )]);
    let r = run_spec(dir.path(), &http_spec(dir.path(), port));
    server.join().expect("server");
    assert_eq!(
        r.result["error"]["code"], "redirect-refused",
        "{:#}",
        r.result
    );
    assert!(
        other.accept().is_err(),
        "the redirect to another port was followed"
    );

    let mut spec = http_spec(dir.path(), 9);
    spec["allowedDomains"] = json!(["api.github.com", "127.0.0.1"]);
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.code, 72);
    assert!(
        r.stderr
            .contains("127.0.0.1:9 is not among the sandbox's allowed domains"),
        "{}",
        r.stderr
    );

    let (port, server) = http_server(vec![
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy"
            .into(),
    ]);
    let r = run_spec(dir.path(), &http_spec(dir.path(), port));
    server.join().expect("server");
    assert_eq!(r.result["error"]["code"], "http-503");
    assert_eq!(r.result["error"]["retryable"], true);
}

#[test]
fn artifacts_go_to_a_real_s3_server() {
    let server = toolgate_testkit::moto::Moto::start("127.0.0.1");
    server.create_bucket("artifacts");
    let dir = tempfile::tempdir().expect("tmp");
    let n = 12 * 1024 * 1024; // more than one 5 MiB part: a real multipart upload
    let mut spec = base_spec(
        dir.path(),
        json!(["head", "-c", n.to_string(), "/dev/zero"]),
    );
    spec["artifacts"] = json!({"type": "s3", "bucket": "artifacts", "endpoint": server.endpoint(), "allowHttp": true});
    let path = dir.path().join("spec.json");
    std::fs::write(&path, serde_json::to_vec(&spec).expect("spec")).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate-executor"))
        .arg("--spec")
        .arg(&path)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .output()
        .expect("run");
    let result: Value = serde_json::from_slice(out.stdout.trim_ascii())
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a = artifact(&result, "stdout");
    assert_eq!(a["uri"], "s3://artifacts/team-a/call-1/stdout");
    let body = server.object("artifacts", "team-a/call-1/stdout");
    assert_eq!(body.len(), n);
    assert_eq!(a["contentHash"], sha(&body));
}

fn builtin_spec(dir: &Path, op: &str, args: Value) -> Value {
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join("src")).expect("ws");
    let mut spec = base_spec(&dir.join("art"), json!([]));
    spec["execution"] = json!({"adapter": "builtin", "builtin": op, "timeoutMs": 5000});
    spec["args"] = args;
    spec["workingDir"] = json!(ws.display().to_string());
    spec["writeRoots"] = json!([ws.display().to_string()]);
    spec
}

#[test]
fn builtin_file_operations_stay_in_the_write_roots() {
    let dir = tempfile::tempdir().expect("tmp");
    let ws = dir.path().join("ws");
    // Dry run first: nothing changes.
    let mut spec = builtin_spec(
        dir.path(),
        "fs.write",
        json!({"path": "src/serializer.ts", "content": "export {};\n"}),
    );
    spec["dryRun"] = json!(true);
    let r = run_spec(dir.path(), &spec);
    assert_eq!(
        r.result["outputPreview"], "dry run: would create src/serializer.ts with 11 bytes\n",
        "{:#}",
        r.result
    );
    assert!(!ws.join("src/serializer.ts").exists());
    spec["dryRun"] = json!(false);
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.result["status"], "success", "{:#}", r.result);
    assert_eq!(
        std::fs::read_to_string(ws.join("src/serializer.ts")).expect("file"),
        "export {};\n"
    );
    assert!(
        r.result["effectsObserved"]["writes"][0]
            .as_str()
            .expect("w")
            .ends_with("src/serializer.ts")
    );

    for evil in ["../outside.txt", "/etc/passwd", "src/../../x", ""] {
        let r = run_spec(
            dir.path(),
            &builtin_spec(
                dir.path(),
                "fs.write",
                json!({"path": evil, "content": "x"}),
            ),
        );
        assert_eq!(
            r.result["error"]["code"], "path-outside-write-roots",
            "{evil}: {:#}",
            r.result
        );
    }
    assert!(!dir.path().join("outside.txt").exists());
    // A symlinked folder inside the workspace that points outside is not a way out.
    std::os::unix::fs::symlink(dir.path(), ws.join("escape")).expect("symlink");
    let r = run_spec(
        dir.path(),
        &builtin_spec(
            dir.path(),
            "fs.write",
            json!({"path": "escape/owned.txt", "content": "x"}),
        ),
    );
    assert_eq!(
        r.result["error"]["code"], "path-outside-write-roots",
        "{:#}",
        r.result
    );
    assert!(!dir.path().join("owned.txt").exists());
    // Nor one that stays inside: `src/ci -> ../ci` would put a file a policy allowed under
    // `src/` into `ci/`.
    std::fs::create_dir_all(ws.join("ci")).expect("ci");
    std::os::unix::fs::symlink("../ci", ws.join("src/ci")).expect("symlink");
    let r = run_spec(
        dir.path(),
        &builtin_spec(
            dir.path(),
            "fs.write",
            json!({"path": "src/ci/deploy.yml", "content": "x"}),
        ),
    );
    assert_eq!(
        r.result["error"]["code"], "path-outside-write-roots",
        "{:#}",
        r.result
    );
    assert!(!ws.join("ci/deploy.yml").exists());

    let mut del = builtin_spec(
        dir.path(),
        "fs.delete",
        json!({"path": "src/serializer.ts"}),
    );
    del["dryRun"] = json!(true);
    let r = run_spec(dir.path(), &del);
    assert!(
        r.result["outputPreview"]
            .as_str()
            .expect("p")
            .starts_with("dry run: would delete src/serializer.ts")
    );
    assert!(ws.join("src/serializer.ts").exists());
    del["dryRun"] = json!(false);
    let r = run_spec(dir.path(), &del);
    assert_eq!(r.result["status"], "success", "{:#}", r.result);
    assert!(!ws.join("src/serializer.ts").exists());
    assert!(
        r.result["effectsObserved"]["deletes"][0]
            .as_str()
            .expect("d")
            .ends_with("src/serializer.ts")
    );
}

#[test]
fn a_dry_run_is_announced_to_a_cli_tool() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut spec = base_spec(
        &dir.path().join("art"),
        json!(["sh", "-c", "echo dry=${TOOLGATE_DRY_RUN:-0}"]),
    );
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.result["outputPreview"], "dry=0\n");
    spec["dryRun"] = json!(true);
    let r = run_spec(dir.path(), &spec);
    assert_eq!(r.result["outputPreview"], "dry=1\n");
}

/// With `confinement`, the executor and the tool lose every path the rules do not grant: a
/// blocked file is refused to the builtin and to a process alike, and never reaches an artifact.
#[test]
fn confinement_refuses_blocked_paths_to_builtins_and_tools() {
    // Not under /tmp: every confined process may write its /tmp.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tmp");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).expect("ws");
    std::fs::write(ws.join(".env"), "TOKEN=canary-confined-0f3e\n").expect(".env");
    std::fs::write(ws.join("src/a.ts"), "export const a = 1;\n").expect("a");
    let rules = json!({"write": [ws.display().to_string()], "blocked": [ws.join(".env").display().to_string()]});

    let mut write = builtin_spec(
        dir.path(),
        "fs.write",
        json!({"path": ".env", "content": "TOKEN=overwritten\n"}),
    );
    write["confinement"] = rules.clone();
    let r = run_spec(dir.path(), &write);
    assert_eq!(r.result["status"], "error", "{:#}", r.result);
    assert!(
        r.result["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Permission denied")),
        "{:#}",
        r.result
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".env")).expect(".env"),
        "TOKEN=canary-confined-0f3e\n"
    );

    let mut fix = builtin_spec(
        dir.path(),
        "fs.write",
        json!({"path": "src/a.ts", "content": "export const a = 2;\n"}),
    );
    fix["confinement"] = rules.clone();
    let r = run_spec(dir.path(), &fix);
    assert_eq!(r.result["status"], "success", "{:#}", r.result);
    let diff =
        std::fs::read_to_string(local_file(artifact(&r.result, "workspace.diff"))).expect("diff");
    assert!(diff.contains("+export const a = 2;") && !diff.contains("canary-confined"));

    let mut cat = base_spec(
        &dir.path().join("art"),
        json!(["cat", ws.join("src/a.ts"), ws.join(".env")]),
    );
    cat["confinement"] = rules;
    let r = run_spec(dir.path(), &cat);
    assert_eq!(r.result["exitCode"], 1, "{:#}", r.result);
    let out = std::fs::read_to_string(local_file(artifact(&r.result, "stdout"))).expect("stdout");
    let err = std::fs::read_to_string(local_file(artifact(&r.result, "stderr"))).expect("stderr");
    assert_eq!(out, "export const a = 2;\n");
    assert!(err.contains("Permission denied"), "{err}");
    assert!(!format!("{:#} {out} {err}", r.result).contains("canary-confined"));

    // A write root that does not exist yet is made before confinement, so the tool can use it.
    let mut coverage = base_spec(
        &dir.path().join("art"),
        json!(["touch", ws.join("coverage/lcov.info")]),
    );
    coverage["call"]["name"] = json!("call-3");
    coverage["confinement"] = json!({"read": [ws.display().to_string()], "write": [ws.join("coverage").display().to_string()], "blocked": [ws.join(".env").display().to_string()]});
    let r = run_spec(dir.path(), &coverage);
    assert_eq!(r.result["exitCode"], 0, "{:#}", r.result);
    assert!(ws.join("coverage/lcov.info").is_file());

    // The executor's own files are not the tool's: it cannot rewrite an artifact or the spec.
    let art = dir.path().join("art");
    let stored = local_file(artifact(&r.result, "stdout"));
    let mut tamper = base_spec(
        &art,
        json!([
            "sh",
            "-c",
            format!(
                "echo forged > {}; echo forged > {}",
                stored.display(),
                dir.path().join("spec.json").display()
            )
        ]),
    );
    tamper["confinement"] = json!({"write": [ws.display().to_string()]});
    tamper["call"]["name"] = json!("call-2");
    let before = std::fs::read(&stored).expect("artifact");
    let r = run_spec(dir.path(), &tamper);
    assert_ne!(r.result["exitCode"], 0, "{:#}", r.result);
    assert_eq!(std::fs::read(&stored).expect("artifact"), before);
    assert_eq!(
        std::fs::read(dir.path().join("spec.json")).expect("spec"),
        serde_json::to_vec_pretty(&tamper).expect("spec"),
        "the spec was rewritten"
    );
}

/// The tool runs as the executor's user, but the executor is not dumpable: the tool cannot read
/// its environment (in a pod, the artifact store's keys) through /proc.
#[test]
fn the_tool_cannot_read_the_executors_environment() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
        eprintln!("skipping: running the executor as another user needs root");
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let open = |p: &Path, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod")
    };
    open(dir.path(), 0o755);
    // A copy the unprivileged user can execute, wherever the build lives.
    let exe = dir.path().join("toolgate-executor");
    std::fs::copy(env!("CARGO_BIN_EXE_toolgate-executor"), &exe).expect("copy");
    open(&exe, 0o755);
    let art = dir.path().join("art");
    std::fs::create_dir(&art).expect("art");
    open(&art, 0o777);
    let spec = base_spec(
        &art,
        json!([
            "sh",
            "-c",
            "tr '\\0' '\\n' < /proc/$PPID/environ; tr '\\0' '\\n' < /proc/self/environ"
        ]),
    );
    let path = dir.path().join("spec.json");
    std::fs::write(&path, serde_json::to_vec(&spec).expect("spec")).expect("write");
    open(&path, 0o644);
    let out = Command::new(&exe)
        .arg("--spec")
        .arg(&path)
        .env("AWS_SECRET_ACCESS_KEY", "canary-artifact-key-77a1")
        .uid(65532)
        .gid(65532)
        .output()
        .expect("run executor");
    let result: Value = serde_json::from_slice(
        out.stdout
            .split(|b| *b == b'\n')
            .rfind(|l| !l.is_empty())
            .unwrap_or_default(),
    )
    .expect("result");
    let stdout = std::fs::read_to_string(local_file(artifact(&result, "stdout"))).expect("stdout");
    let stderr = std::fs::read_to_string(local_file(artifact(&result, "stderr"))).expect("stderr");
    assert!(
        !format!("{stdout}{stderr}{result}").contains("canary-artifact-key"),
        "the tool read the executor's environment"
    );
    assert!(
        stdout.starts_with("PATH="),
        "the tool reads its own environment: {stdout} {stderr}"
    );
    assert!(stderr.contains("Permission denied"), "{stderr}");
}

/// As in a pod, with no bubblewrap around it: the executor puts the sandbox's seccomp filters
/// and its Landlock rules on the tool itself, so a tool cannot leave a setuid file, a device
/// node or a FIFO in the workspace.
#[test]
fn a_tool_run_without_bubblewrap_cannot_make_setuid_files_devices_or_fifos() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tmp");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("ws");
    let script = format!(
        "cd {ws}; cp /bin/sh sh && echo copied; chmod 4755 sh; chmod g+s sh; mkdir -m 2775 sgid; \
         mkfifo fifo; mknod null c 1 3; echo end",
        ws = ws.display()
    );
    // The third run's spec says wrongly that bubblewrap installed the filters: the executor
    // finds none on itself and installs them anyway.
    for (confined, claims_inherited) in [(false, false), (true, false), (false, true)] {
        let mut spec = base_spec(&dir.path().join("art"), json!(["sh", "-c", script]));
        if confined {
            spec["confinement"] = json!({"write": [ws.display().to_string()]});
            spec["call"]["name"] = json!("call-confined");
        }
        if claims_inherited {
            spec["seccompInherited"] = json!(true);
            spec["call"]["name"] = json!("call-claims-inherited");
        }
        let r = run_spec(dir.path(), &spec);
        let out = std::fs::read_to_string(local_file(artifact(&r.result, "stdout"))).expect("out");
        assert!(
            out.contains("copied") && out.contains("end"),
            "{out} {:#}",
            r.result
        );
        for entry in std::fs::read_dir(&ws).expect("ws").flatten() {
            let meta = std::fs::symlink_metadata(entry.path()).expect("meta");
            let t = meta.file_type();
            assert_eq!(meta.permissions().mode() & 0o6000, 0, "{:?}", entry.path());
            assert!(
                !t.is_fifo() && !t.is_char_device() && !t.is_block_device(),
                "{:?}",
                entry.path()
            );
        }
        let _ = std::fs::remove_dir_all(&ws);
        std::fs::create_dir_all(&ws).expect("ws");
    }
}

/// An executor never outlives its call: when storing artifacts hangs (here an S3 endpoint that
/// accepts and never answers), it ends itself after the tool's timeout and the grace after it.
#[test]
fn an_executor_stuck_after_its_tool_ends_itself() {
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = blackhole.local_addr().expect("addr").port();
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in blackhole.incoming().take(16) {
            open.push(stream);
        }
    });
    let dir = tempfile::tempdir().expect("tmp");
    let mut spec = base_spec(dir.path(), json!(["echo", "hello"]));
    spec["limits"]["timeoutMs"] = json!(500);
    spec["artifacts"] = json!({"type": "s3", "bucket": "artifacts", "endpoint": format!("http://127.0.0.1:{port}"), "allowHttp": true});
    let path = dir.path().join("spec.json");
    std::fs::write(&path, serde_json::to_vec(&spec).expect("spec")).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate-executor"))
        .arg("--spec")
        .arg(&path)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("TOOLGATE_EXECUTOR_GRACE_MS", "1500")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains("still running") && stderr.contains("ending"),
        "{stderr}"
    );
    drop(held);
}

/// The kernel's backstop: an executor blocked where its runtime's timer cannot fire (here, on
/// writing its result to a FIFO nobody reads, after the runtime is gone; in the wild, a store
/// retrying inline forever) is ended by SIGALRM a little after its lifetime, not left running.
#[test]
fn an_executor_blocked_outside_its_runtime_is_ended_by_the_kernel() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().expect("tmp");
    let fifo = dir.path().join("result.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let mut spec = base_spec(&dir.path().join("art"), json!(["true"]));
    spec["limits"]["timeoutMs"] = json!(500);
    let path = dir.path().join("spec.json");
    std::fs::write(&path, serde_json::to_vec(&spec).expect("spec")).expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate-executor"))
        .arg("--spec")
        .arg(&path)
        .arg("--result")
        .arg(&fifo)
        .env("TOOLGATE_EXECUTOR_GRACE_MS", "100")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the executor was still blocked after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(
        status.signal(),
        Some(nix::sys::signal::Signal::SIGALRM as i32),
        "{status:?}"
    );
}

/// SIGTERM (what the kubelet sends when a call's pod is deleted: cancelled, its ToolCall
/// deleted, evicted) stops the tool at once and ends the executor with a `terminated` result;
/// as a container's first process it would otherwise ignore the signal, and the tool run on for
/// the pod's whole grace period.
#[test]
fn sigterm_stops_the_tool_and_says_so() {
    let dir = tempfile::tempdir().expect("tmp");
    let spec = base_spec(&dir.path().join("art"), json!(["sleep", "30"]));
    let path = dir.path().join("spec.json");
    std::fs::write(&path, serde_json::to_vec(&spec).expect("spec")).expect("write spec");
    let mut executor = Command::new(env!("CARGO_BIN_EXE_toolgate-executor"))
        .arg("--spec")
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run executor");
    let pid = executor.id();
    // The tool, once started: the executor's child.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let tool: i32 = loop {
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(child) = children.split_whitespace().next() {
            break child.parse().expect("a pid");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the tool never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let executor_pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid"));
    nix::sys::signal::kill(executor_pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = executor.try_wait().expect("wait") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the executor ignored SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stdout = String::new();
    executor
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("stdout");
    assert_eq!(status.code(), Some(143), "{stdout}");
    let result: Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("a result");
    assert_eq!(result["error"]["code"], "terminated", "{result}");
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(tool), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{tool}/stat"))
            .unwrap_or_default()
            .contains(") Z ");
    assert!(!alive, "the tool {tool} ran on after SIGTERM");
}
