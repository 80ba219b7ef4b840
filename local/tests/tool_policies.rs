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

/// `toolgate local --metrics-addr` serves the operator's metric names.
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
    let scrape = || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&metrics_addr).expect("metrics");
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .expect("get");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("read");
        text
    };
    let text = scrape();
    assert!(
        text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200"),
        "{text}"
    );
    for want in [
        "toolgate_call_phase_transitions_total{phase=\"Succeeded\"} 2",
        "toolgate_call_phase_transitions_total{phase=\"Denied\"} 1",
        "toolgate_shadow_forbids_total{tool_policy=\"team-a/echo-trial\"} 1",
        "toolgate_call_decisions_total{decision=\"deny\",",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
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
