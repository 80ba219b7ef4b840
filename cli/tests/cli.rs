//! The `toolgate` binary, run as a user runs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn toolgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run toolgate")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn crds_prints_the_committed_crds() {
    let out = toolgate(&["crds"]);
    assert!(out.status.success());
    let text = stdout(&out);
    let mut committed: Vec<PathBuf> = std::fs::read_dir(root().join("crds/generated"))
        .expect("crds/generated")
        .map(|e| e.expect("entry").path())
        .collect();
    committed.sort();
    let mut docs = 0;
    for d in serde_norway::Deserializer::from_str(&text) {
        use serde::Deserialize;
        let v = serde_json::Value::deserialize(d).expect("yaml");
        assert_eq!(v["kind"], "CustomResourceDefinition");
        assert_eq!(v["spec"]["group"], "toolgate.dev");
        docs += 1;
    }
    assert_eq!(docs, 7);
    for f in committed {
        let body = std::fs::read_to_string(&f).expect("read");
        assert!(
            text.contains(&body),
            "{} is not what `toolgate crds` prints",
            f.display()
        );
    }
}

#[test]
fn the_examples_lint_clean() {
    let out = toolgate(&["lint", "examples/"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.trim_end()
            .ends_with("25 documents, 25 objects: 0 errors, 0 warnings"),
        "{text}"
    );
}

/// Each file in tests/manifests/broken has one defect, named in its `# expect: CODE [PATH]`
/// header; linted with the base objects it refers to, it fails with exactly that one error.
#[test]
fn each_broken_manifest_fails_with_one_precise_error() {
    let dir = root().join("tests/manifests/broken");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("broken")
        .map(|e| e.expect("e").path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 7,
        "the broken set covers at least the seven defects of the issue"
    );
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read");
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .expect("an # expect: header");
        let mut parts = expect.split_whitespace();
        let code = parts.next().expect("code");
        let path = parts.next();
        let rel = f.strip_prefix(root()).expect("rel").display().to_string();
        let out = toolgate(&["lint", "tests/manifests/base", &rel]);
        let report = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{rel}: {report}");
        let errors: Vec<&str> = report.lines().filter(|l| l.contains(": error")).collect();
        assert_eq!(errors.len(), 1, "{rel}: expected one error, got:\n{report}");
        let line = errors[0];
        assert!(line.starts_with(&rel), "{rel}: names the file: {line}");
        assert!(
            line.ends_with(&format!("[{code}]")),
            "{rel}: expected code {code}: {line}"
        );
        if let Some(path) = path {
            assert!(
                line.contains(&format!(": {path}: ")),
                "{rel}: expected path {path}: {line}"
            );
            assert!(
                line.contains("ToolDescriptor/")
                    || line.contains("CredentialBinding/")
                    || line.contains("ToolGrant/"),
                "{rel}: names the object: {line}"
            );
        }
    }
}

#[test]
fn json_output_and_missing_paths() {
    let out = toolgate(&[
        "lint",
        "-o",
        "json",
        "tests/manifests/base",
        "tests/manifests/broken/unknown-enum.yaml",
        "no/such/dir",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let items = v.as_array().expect("array");
    assert!(
        items
            .iter()
            .any(|f| f["code"] == "io" && f["file"] == "no/such/dir")
    );
    let enum_err = items
        .iter()
        .find(|f| f["code"] == "schema-enum")
        .expect("enum finding");
    assert_eq!(enum_err["path"], "spec.risk.level");
    assert_eq!(enum_err["object"], "ToolDescriptor/dir.list");
}

#[test]
fn bad_usage_is_a_clear_error() {
    let out = toolgate(&["lint"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PATHS"));
}

const NOW: &str = "2026-11-30T00:00:00Z";

#[test]
fn check_exits_by_outcome() {
    let cases = [
        ("examples", "examples/calls/02-run-tests.yaml", 0, "ALLOW"),
        (
            "examples",
            "examples/calls/04-create-issue.yaml",
            0,
            "approval   report-flaky-tz-alice",
        ),
        (
            "examples",
            "examples/calls/05-cleanup-dry-run.yaml",
            3,
            "REQUIRE APPROVAL",
        ),
        (
            "tests/policy-change/before",
            "tests/policy-change/before/calls.yaml",
            4,
            "no-grant",
        ),
        (
            "tests/policy-change/after",
            "tests/policy-change/after/calls.yaml",
            3,
            "L5 (destructive/admin) needs a human approval",
        ),
    ];
    for (dir, call, code, text) in cases {
        let out = toolgate(&["check", "--manifests", dir, "--call", call, "--now", NOW]);
        let s = stdout(&out);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{call}: {s}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(s.contains(text), "{call}: {s}");
    }
    // Another principal, as JSON.
    let out = toolgate(&[
        "check",
        "--manifests",
        "examples",
        "--call",
        "examples/calls/03-fix-serializer.yaml",
        "--principal",
        "alice@example.com",
        "-o",
        "json",
        "--now",
        NOW,
    ]);
    assert_eq!(out.status.code(), Some(4));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v[0]["decision"]["outcome"], "deny");
    assert_eq!(
        v[0]["decision"]["reasons"]
            .as_array()
            .and_then(|r| r.last())
            .map(|r| r["code"].clone()),
        Some("no-grant".into())
    );
}

#[test]
fn check_refuses_broken_manifests_and_bad_input() {
    let out = toolgate(&[
        "check",
        "--manifests",
        "tests/manifests",
        "--call",
        "examples/calls/02-run-tests.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2), "broken manifests are refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("fix them first"));
    let out = toolgate(&["check", "--manifests", "examples", "--call", "no-such.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such.yaml: no such file"));
    let out = toolgate(&[
        "check",
        "--manifests",
        "examples",
        "--call",
        "examples/grants.yaml",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected a ToolCall"));
    let out = toolgate(&[
        "check",
        "--manifests",
        "examples",
        "--call",
        "examples/calls/02-run-tests.yaml",
        "--now",
        "tomorrow",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--now: expected an RFC 3339 time"));
}

#[test]
fn view_prints_provider_payloads_and_explains() {
    let fixer = "system:serviceaccount:team-a:fixer";
    let out = toolgate(&[
        "view",
        "--manifests",
        "examples",
        "--principal",
        fixer,
        "--intent",
        "run the serializer tests",
        "--format",
        "openai",
        "--max-tools",
        "2",
        "--now",
        NOW,
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let tools = v.as_array().expect("array");
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["function"]["name"], "test__run");

    let out = toolgate(&[
        "view",
        "--manifests",
        "examples",
        "--principal",
        "alice@example.com",
        "--namespace",
        "team-a",
        "--intent",
        "review",
        "--format",
        "mcp",
        "--explain",
        "--now",
        NOW,
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let hidden = v["hidden"].as_array().expect("hidden");
    assert!(
        hidden
            .iter()
            .any(|h| h["name"] == "file.write" && h["code"] == "no-grant")
    );
    assert!(
        v["exposed"]
            .as_array()
            .expect("exposed")
            .iter()
            .all(|e| e["reason"].as_str().is_some_and(|r| !r.is_empty()))
    );

    let out = toolgate(&[
        "view",
        "--manifests",
        "examples",
        "--principal",
        "alice@example.com",
        "--intent",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--namespace is required"));
    let out = toolgate(&[
        "view",
        "--manifests",
        "examples",
        "--principal",
        fixer,
        "--intent",
        "x",
        "--action-type",
        "rm",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected one of read, search"));
}

#[test]
fn diff_shows_exactly_the_changes_made() {
    let out = toolgate(&[
        "diff",
        "tests/policy-change/before",
        "tests/policy-change/after",
        "--now",
        NOW,
    ]);
    assert!(out.status.success());
    let md = stdout(&out);
    let expected =
        std::fs::read_to_string(root().join("tests/policy-change/README.md")).expect("readme");
    let bullets: Vec<&str> = expected.lines().filter(|l| l.starts_with("- ")).collect();
    assert_eq!(bullets.len(), 3);
    for b in bullets {
        assert!(md.contains(&b[2..]), "missing {b:?} in:\n{md}");
    }
    assert_eq!(
        md.lines().filter(|l| l.starts_with("- ")).count(),
        3,
        "{md}"
    );

    let out = toolgate(&[
        "diff",
        "tests/policy-change/before",
        "tests/policy-change/after",
        "-o",
        "json",
        "--now",
        NOW,
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v.as_array().map(Vec::len), Some(3));

    let out = toolgate(&["diff", "examples", "examples", "--now", NOW]);
    assert!(stdout(&out).contains("No principal gains or loses access"));
}

/// A reader that stops early (`toolgate crds | head`) ends the command quietly, with success.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("crds")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("toolgate crds");
    let mut first = [0u8; 16];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("some output");
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
