//! ToolPolicies in `toolgate local`, end to end over gRPC with the real binary: argument
//! conditions deny as written, shadow policies change nothing but are recorded, a tool every
//! call of which is forbidden leaves the view, and a policy change is picked up on reload.

mod support;

use support::*;
use toolgate_proto::v1 as pb;

const POLICIES: &str = r#"apiVersion: toolgate.dev/v1alpha1
kind: ToolPolicy
metadata: {name: echo-bounds, namespace: team-a}
spec:
  mode: enforce
  policies: |
    @id("no-secrets")
    @reason("messages never carry secrets")
    forbid (principal, action == Action::"test.echo", resource)
    when { context.args has msg && context.args.msg like "*secret*" };

    @reason("sleeping is switched off")
    forbid (principal, action == Action::"test.sleep", resource);
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolPolicy
metadata: {name: echo-trial, namespace: team-a}
spec:
  mode: shadow
  policies: |
    @id("no-drafts")
    @reason("drafts stay local")
    forbid (principal, action == Action::"test.echo", resource)
    when { context.args has msg && context.args.msg like "draft*" };
"#;

fn status(call: &pb::Call) -> serde_json::Value {
    serde_json::from_str(&call.status_json).expect("status")
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_policies_narrow_calls_and_shadow_ones_only_record() {
    let dir = setup();
    let policies = dir.path().join("manifests/tool-policies.yaml");
    std::fs::write(&policies, POLICIES).expect("policies");
    let server = Server::start(dir.path());
    let mut c = server.client().await;

    // Allowed, denied by an argument condition, recorded by the shadow policy.
    let ok = submit(
        &mut c,
        "test.echo",
        serde_json::json!({"msg": "hello"}),
        "execute",
    )
    .await;
    let ok = wait_phase(&mut c, &ok.id, &["Succeeded", "Failed", "Denied"]).await;
    assert_eq!(ok.phase, "Succeeded", "{:#?}", ok.conditions);
    let denied = submit(
        &mut c,
        "test.echo",
        serde_json::json!({"msg": "my secret token"}),
        "execute",
    )
    .await;
    assert_eq!(denied.phase, "Denied");
    let checked = denied
        .conditions
        .iter()
        .find(|c| c.r#type == "PolicyChecked")
        .expect("PolicyChecked");
    assert_eq!(checked.reason, "PolicyForbidden");
    assert!(
        checked.message.contains("echo-bounds/no-secrets")
            && checked.message.contains("messages never carry secrets"),
        "{}",
        checked.message
    );
    let draft = submit(
        &mut c,
        "test.echo",
        serde_json::json!({"msg": "draft 1"}),
        "execute",
    )
    .await;
    let draft = wait_phase(&mut c, &draft.id, &["Succeeded", "Failed", "Denied"]).await;
    assert_eq!(draft.phase, "Succeeded", "shadow changes nothing");
    assert_eq!(
        status(&draft)["authorization"]["shadowForbids"][0]["policy"],
        "echo-trial/no-drafts"
    );
    assert!(
        draft
            .reasons
            .iter()
            .any(|r| r.code == "policy-shadow-forbid"),
        "{:?}",
        draft.reasons
    );

    // A tool every call of which is forbidden is not in the view, with the reason.
    let view = c
        .get_tool_view(req(
            AGENT,
            pb::GetToolViewRequest {
                intent: "sleep or echo".into(),
                max_tools: 32,
                explain: true,
                ..Default::default()
            },
        ))
        .await
        .expect("view")
        .into_inner();
    assert!(view.exposed.iter().any(|t| t.name == "test.echo"));
    let sleep = view
        .hidden
        .iter()
        .find(|h| h.name == "test.sleep")
        .expect("test.sleep hidden");
    assert_eq!(sleep.code, "policy-forbidden");
    assert!(
        sleep.reason.contains("sleeping is switched off"),
        "{}",
        sleep.reason
    );

    // The trial becomes the rule: the same call is now refused.
    std::fs::write(&policies, POLICIES.replace("mode: shadow", "mode: enforce")).expect("rewrite");
    let mut refused = None;
    for _ in 0..100 {
        let again = submit(
            &mut c,
            "test.echo",
            serde_json::json!({"msg": "draft 2"}),
            "execute",
        )
        .await;
        if again.phase == "Denied" {
            refused = Some(again);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let refused = refused.expect("the reloaded policy enforces");
    assert!(
        refused
            .reasons
            .iter()
            .any(|r| r.code == "policy-forbidden" && r.message.contains("drafts stay local")),
        "{:?}",
        refused.reasons
    );
}

#[test]
fn toolgate_check_and_lint_apply_the_policies() {
    let dir = setup();
    let m = dir.path().join("manifests");
    std::fs::write(m.join("tool-policies.yaml"), POLICIES).expect("policies");
    let call = |name: &str, msg: &str| {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &path,
            toolgate_testkit::fixtures::call(
                "team-a",
                name,
                "test.echo",
                &format!("{{msg: {msg:?}}}"),
                "team-a",
            ),
        )
        .expect("call");
        path
    };
    let check = |path: &std::path::Path| {
        std::process::Command::new(toolgate_binary())
            .args(["check", "--manifests"])
            .arg(&m)
            .arg("--call")
            .arg(path)
            .output()
            .expect("check")
    };
    let allowed = check(&call("fine", "hello"));
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stdout)
    );
    let denied = check(&call("leak", "a secret"));
    assert!(!denied.status.success());
    let out = String::from_utf8_lossy(&denied.stdout);
    assert!(
        out.contains("policy-forbidden") && out.contains("no-secrets"),
        "{out}"
    );

    // A type error is a lint error with its line and column, and `local` refuses to start on it.
    std::fs::write(
        m.join("tool-policies.yaml"),
        POLICIES.replace("context.args.msg like \"*secret*\"", "context.args.msg > 3"),
    )
    .expect("broken");
    let lint = std::process::Command::new(toolgate_binary())
        .arg("lint")
        .arg(&m)
        .output()
        .expect("lint");
    assert!(!lint.status.success());
    let out =
        String::from_utf8_lossy(&lint.stdout).to_string() + &String::from_utf8_lossy(&lint.stderr);
    assert!(
        out.contains("ToolPolicy/echo-bounds: spec.policies: line 4, column ")
            && out.contains("[cedar-type]"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_over_the_embedded_store_reports_the_calls_a_change_would_refuse() {
    let dir = setup();
    let m = dir.path().join("manifests");
    std::fs::write(m.join("tool-policies.yaml"), POLICIES).expect("policies");
    let mut server = Server::start(dir.path());
    let mut c = server.client().await;
    let mut drafts = Vec::new();
    for i in 0..12 {
        let msg = if i % 4 == 0 {
            format!("draft {i}")
        } else {
            format!("hello {i}")
        };
        let call = submit(
            &mut c,
            "test.echo",
            serde_json::json!({"msg": msg}),
            "execute",
        )
        .await;
        let call = wait_phase(&mut c, &call.id, &["Succeeded", "Failed", "Denied"]).await;
        assert_eq!(call.phase, "Succeeded");
        if i % 4 == 0 {
            drafts.push(format!("team-a/{}", call.id));
        }
    }
    server.stop();
    // The pull request: the draft trial becomes a rule.
    let after = dir.path().join("after");
    std::fs::create_dir_all(after.join("tools")).expect("after");
    for entry in walk(&m) {
        let rel = entry.strip_prefix(&m).expect("rel");
        std::fs::copy(&entry, after.join(rel)).expect("copy");
    }
    std::fs::write(
        after.join("tool-policies.yaml"),
        POLICIES.replace("mode: shadow", "mode: enforce"),
    )
    .expect("after");
    let out = std::process::Command::new(toolgate_binary())
        .args(["diff", "-o", "json", "--replay"])
        .arg(dir.path().join("data"))
        .arg(&m)
        .arg(&after)
        .output()
        .expect("diff");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["replay"]["calls"], 12);
    let changed: Vec<&str> = v["replay"]["changed"]
        .as_array()
        .expect("changed")
        .iter()
        .filter_map(|c| c["call"].as_str())
        .collect();
    let mut want: Vec<&str> = drafts.iter().map(String::as_str).collect();
    want.sort();
    let mut got = changed.clone();
    got.sort();
    assert_eq!(got, want);
    assert_eq!(v["rules"][0]["change"], "mode", "{}", v["rules"]);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `toolgate local --metrics-addr` serves the operator's metric names, durations by tool and
/// outcome, calls in flight, build info and health; promtool accepts the scrape, the chart's
/// alert rules (and their unit tests) and the dashboard's queries.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_phases_decisions_and_shadow_forbids() {
    let dir = setup();
    std::fs::write(dir.path().join("manifests/tool-policies.yaml"), POLICIES).expect("policies");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let metrics_addr = format!("127.0.0.1:{port}");
    let server = Server::start_with(
        dir.path(),
        &dir.path().join("data"),
        &dir.path().join("workspace"),
        &["--listen", "127.0.0.1:0", "--metrics-addr", &metrics_addr],
    );
    let mut c = server.client().await;
    for msg in ["hello", "my secret", "draft 1"] {
        let call = submit(
            &mut c,
            "test.echo",
            serde_json::json!({"msg": msg}),
            "execute",
        )
        .await;
        wait_phase(&mut c, &call.id, &["Succeeded", "Failed", "Denied"]).await;
    }
    let text = scrape_path(&metrics_addr, "/metrics");
    assert!(
        text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200"),
        "{text}"
    );
    for want in [
        "toolgate_call_phase_transitions_total{phase=\"Succeeded\"} 2",
        "toolgate_call_phase_transitions_total{phase=\"Denied\"} 1",
        "toolgate_shadow_forbids_total{tool_policy=\"team-a/echo-trial\"} 1",
        "toolgate_call_decisions_total{decision=\"deny\",",
        // Durations by tool and outcome, the start, calls in flight, the build.
        "toolgate_call_duration_seconds_count{tool=\"test.echo\",outcome=\"Succeeded\"} 2",
        "toolgate_call_duration_seconds_count{tool=\"test.echo\",outcome=\"Denied\"} 1",
        "toolgate_call_duration_seconds_bucket{le=\"0.005\",tool=\"test.echo\",outcome=\"Succeeded\"}",
        "toolgate_call_start_seconds_count{tool=\"test.echo\"} 2",
        "toolgate_calls_in_flight 0",
        "toolgate_build_info{version=\"",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // A call approved by a person: its wait is timed.
    let gated = submit(
        &mut c,
        "test.gated",
        serde_json::json!({"msg": "approve me"}),
        "execute",
    )
    .await;
    c.approve_call(req(REVIEWER, approval_of(&gated)))
        .await
        .expect("approved");
    wait_phase(&mut c, &gated.id, &["Succeeded"]).await;
    // A tool no descriptor names is no label.
    let call = submit(&mut c, "no.such-tool-xyz", serde_json::json!({}), "execute").await;
    wait_phase(&mut c, &call.id, &["Denied", "Failed"]).await;
    let text = scrape_path(&metrics_addr, "/metrics");
    assert!(!text.contains("no.such-tool-xyz"), "{text}");
    assert!(text.contains("tool=\"unregistered\""), "{text}");
    assert!(
        text.contains("toolgate_approval_wait_seconds_count{tool=\"test.gated\"} 1"),
        "{text}"
    );
    for health in ["/healthz", "/livez", "/readyz"] {
        let answer = scrape_path(&metrics_addr, health);
        assert!(
            answer.split_whitespace().nth(1) == Some("200") && answer.ends_with("ok"),
            "{health}: {answer}"
        );
    }

    // The scrape, read by the reference OpenMetrics parser (Prometheus's Python client: strict,
    // `# EOF` included); the chart's alert rules and dashboard by Prometheus's own promtool.
    let body = text.split("\r\n\r\n").nth(1).expect("a body").to_string();
    let parsed = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys; from prometheus_client.openmetrics.parser import text_string_to_metric_families as p; \
             print(len(list(p(sys.stdin.read()))))",
        ])
        .stdin(std::process::Stdio::piped())
        .output_with_stdin(body.as_bytes());
    let parser_missing = String::from_utf8_lossy(&parsed.stderr).contains("No module named");
    if parser_missing {
        assert!(
            std::env::var_os("CI").is_none(),
            "no OpenMetrics parser: CI runs this suite through tests/run.sh, which installs it"
        );
        eprintln!("skipping the OpenMetrics parse: run tests/run.sh to install prometheus-client");
    } else {
        assert!(
            parsed.status.success(),
            "the scrape is not OpenMetrics: {parsed:?}"
        );
    }
    let Some(promtool) = promtool() else { return };
    let mut check;
    let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/toolgate/files");
    for args in [
        ["check", "rules", "alerts.yaml"],
        ["test", "rules", "alerts.test.yaml"],
    ] {
        check = std::process::Command::new(&promtool)
            .args(args)
            .current_dir(&chart)
            .output()
            .expect("promtool");
        assert!(check.status.success(), "promtool {args:?}: {check:?}");
    }
    // Every panel's query parses (as a recording rule) and names metrics a runtime exports.
    let dashboard: serde_json::Value =
        serde_json::from_slice(&std::fs::read(chart.join("dashboard.json")).expect("dashboard"))
            .expect("the dashboard is JSON");
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(String::from))
        .collect();
    assert!(exprs.len() >= 8, "{exprs:?}");
    let rules: Vec<serde_json::Value> = exprs
        .iter()
        .enumerate()
        .map(|(i, e)| serde_json::json!({"record": format!("dashboard:panel_{i}"), "expr": e}))
        .collect();
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("panels.yaml");
    std::fs::write(
        &file,
        serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]}).to_string(),
    )
    .expect("rules");
    check = std::process::Command::new(&promtool)
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool");
    assert!(check.status.success(), "the dashboard's queries: {check:?}");
    let alerts = std::fs::read_to_string(chart.join("alerts.yaml")).expect("alerts");
    for text_with_names in exprs.iter().map(String::as_str).chain([alerts.as_str()]) {
        for name in text_with_names
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("toolgate_"))
        {
            let family = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_count")
                .trim_end_matches("_sum");
            assert!(
                body.contains(family) || family.starts_with("toolgate_reconcile_"),
                "{name} is in a panel or rule but not exported"
            );
        }
    }
}

/// Prometheus's promtool (tests/install.sh extracts Debian's), when this run has it.
fn promtool() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("TOOLGATE_PROMTOOL") {
        return Some(p.into());
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "no promtool: CI runs this suite through tests/run.sh, which installs it"
    );
    eprintln!("skipping the promtool checks: run tests/run.sh to install promtool");
    None
}

/// `GET path` on `addr`: the whole HTTP answer.
fn scrape_path(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .expect("get");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    text
}

/// Run with `input` on stdin.
trait OutputWithStdin {
    fn output_with_stdin(&mut self, input: &[u8]) -> std::process::Output;
}

impl OutputWithStdin for std::process::Command {
    fn output_with_stdin(&mut self, input: &[u8]) -> std::process::Output {
        use std::io::Write;
        let mut child = self
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("write");
        child.wait_with_output().expect("wait")
    }
}

/// A rule over a path argument holds for the file the tool opens: `src/../secret.txt` (and
/// `src/./../`, `src//../`) is refused before the policy sees it, with the normalised form to
/// send, and a path out of the workspace is refused outright.
#[tokio::test(flavor = "multi_thread")]
async fn a_path_rule_cannot_be_walked_around_with_dot_segments() {
    let dir = setup();
    let m = dir.path().join("manifests");
    let cat = toolgate_testkit::fixtures::Tool::test("test.cat")
        .argv("[cat, \"{{path}}\"]")
        .yaml("team-a")
        .replace(
            "msg: {type: string, maxLength: 64}",
            "path: {type: string, format: path, maxLength: 200}",
        );
    assert!(cat.contains("format: path"), "{cat}");
    std::fs::write(m.join("tools/test-cat.yaml"), cat).expect("tool");
    std::fs::write(
        m.join("cat-policy.yaml"),
        format!(
            r#"{}---
apiVersion: toolgate.dev/v1alpha1
kind: ToolPolicy
metadata: {{name: reads-under-src, namespace: team-a}}
spec:
  mode: enforce
  policies: |
    @id("reads-under-src")
    @reason("the fixer reads only under src/")
    forbid (principal, action == Action::"test.cat", resource)
    unless {{ context.args has path && context.args.path like "src/*" }};
"#,
            toolgate_testkit::fixtures::grant("team-a", "cat-tools", &["test.cat"])
        ),
    )
    .expect("policy");
    let ws = dir.path().join("workspace");
    std::fs::create_dir_all(ws.join("src")).expect("src");
    std::fs::write(ws.join("src/a.txt"), "source text\n").expect("a");
    std::fs::write(ws.join("secret.txt"), "top secret 0451\n").expect("secret");
    let server = Server::start(dir.path());
    let mut c = server.client().await;

    let ok = submit(
        &mut c,
        "test.cat",
        serde_json::json!({"path": "src/a.txt"}),
        "execute",
    )
    .await;
    let ok = wait_phase(&mut c, &ok.id, &["Succeeded", "Failed", "Denied"]).await;
    assert_eq!(ok.phase, "Succeeded", "{:#?}", ok.conditions);
    assert_eq!(ok.output_preview.trim(), "source text");

    for (path, says) in [
        ("src/../secret.txt", "send \"secret.txt\""),
        ("src/./../secret.txt", "send \"secret.txt\""),
        ("src//../secret.txt", "send \"secret.txt\""),
        ("src/../../etc/passwd", "climbs out"),
    ] {
        let call = submit(
            &mut c,
            "test.cat",
            serde_json::json!({"path": path}),
            "execute",
        )
        .await;
        let call = wait_phase(&mut c, &call.id, &["Succeeded", "Failed", "Denied"]).await;
        assert_eq!(call.phase, "Denied", "{path}: {:#?}", call.conditions);
        let said = format!("{:?}", call.conditions);
        let args = call
            .conditions
            .iter()
            .find(|k| k.r#type == "ArgsValidated")
            .expect("ArgsValidated");
        assert_eq!(
            (args.status.as_str(), args.reason.as_str()),
            ("False", "ArgsInvalid")
        );
        assert!(args.message.starts_with("/path: "), "{path}: {said}");
        assert!(args.message.contains(says), "{path}: {said}");
        assert!(!said.contains("0451") && !call.output_preview.contains("0451"));
    }
}
