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
    assert_eq!(docs, 6);
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
            .ends_with("22 documents, 22 objects: 0 errors, 0 warnings"),
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
