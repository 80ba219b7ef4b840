//! The operator against the real API server: descriptors get their lifecycle, digest and Ready
//! condition in status; the digest equals the one the example calls pin (computed offline by
//! the same core); a descriptor that fails the lint is marked so, with its findings. The
//! operator runs as its own identity with only the permissions it needs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Operator(Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn kubectl(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let kubectl = std::env::var_os("TOOLGATE_KUBECTL").expect("TOOLGATE_KUBECTL");
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(std::env::var_os("TOOLGATE_KUBECONFIG").expect("TOOLGATE_KUBECONFIG"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    if let (Some(t), Some(mut p)) = (stdin, child.stdin.take()) {
        p.write_all(t.as_bytes()).expect("stdin");
    }
    let out = child.wait_with_output().expect("kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(args: &[&str], stdin: Option<&str>) -> String {
    let (success, out, err) = kubectl(args, stdin);
    assert!(success, "kubectl {args:?}: {err}");
    out
}

/// Poll a jsonpath until it equals `want`.
fn eventually(ns: &str, object: &str, jsonpath: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        last = kubectl(
            &[
                "get",
                object,
                "-n",
                ns,
                "-o",
                &format!("jsonpath={jsonpath}"),
            ],
            None,
        )
        .1;
        if last == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!("{object} {jsonpath}: expected {want:?}, last saw {last:?}");
}

const RBAC: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: toolgate-operator-registration}
rules:
# Read what registration depends on.
- {apiGroups: [toolgate.dev], resources: [tooldescriptors, sandboxpolicies, credentialbindings, toolgrants], verbs: [get, list, watch]}
# Write only status.
- {apiGroups: [toolgate.dev], resources: [tooldescriptors/status, toolgrants/status], verbs: [patch, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: toolgate-operator-registration}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: toolgate-operator-registration}
subjects: [{kind: ServiceAccount, name: toolgate-operator, namespace: toolgate-system}]
";

/// Whether a real API server is there; in CI its absence is a failure, never a skip.
fn have_cluster() -> bool {
    if std::env::var_os("TOOLGATE_KUBECONFIG").is_some() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "no API server: CI runs this suite through tests/run.sh"
    );
    eprintln!("skipping: run tests/run.sh to start a real kube-apiserver");
    false
}

/// CRDs and the operator's ClusterRole installed, and a fresh namespace.
fn prepare(prefix: &str) -> String {
    ok(
        &[
            "apply",
            "--server-side",
            "--field-manager=toolgate-tests",
            "-f",
            &root().join("crds/generated").display().to_string(),
        ],
        None,
    );
    ok(&["apply", "-f", "-"], Some(RBAC));
    let ns = format!(
        "{prefix}-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    ok(&["create", "namespace", &ns], None);
    ns
}

/// The operator binary, running as its own identity until dropped.
fn start_operator() -> Operator {
    Operator(
        Command::new(env!("CARGO_BIN_EXE_toolgate-operator"))
            .args(["--context", "operator"])
            .env(
                "KUBECONFIG",
                std::env::var_os("TOOLGATE_KUBECONFIG").expect("kubeconfig"),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("operator"),
    )
}

#[test]
fn descriptors_are_registered_in_status() {
    if !have_cluster() {
        return;
    }
    let ns = prepare("tg-operator");
    let mut files: Vec<PathBuf> = [
        "examples/sandbox-policies.yaml",
        "examples/credential-bindings.yaml",
    ]
    .iter()
    .map(|f| root().join(f))
    .collect();
    let mut tools: Vec<PathBuf> = std::fs::read_dir(root().join("examples/tools"))
        .expect("tools")
        .map(|e| e.expect("e").path())
        .collect();
    tools.sort();
    files.extend(tools);
    files.push(root().join("examples/calls/04-create-issue.yaml"));
    let yaml: Vec<String> = files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .expect("read")
                .replace("namespace: team-a", &format!("namespace: {ns}"))
        })
        .collect();
    ok(&["apply", "-f", "-"], Some(&yaml.join("\n---\n")));

    let _operator = start_operator();

    for tool in [
        "file.read",
        "code.search",
        "file.write",
        "test.run",
        "git.diff",
        "web.fetch",
        "github.create-issue",
        "file.delete",
    ] {
        eventually(
            &ns,
            &format!("tooldescriptor/{tool}"),
            "{.status.lifecycle}",
            "enabled",
        );
        eventually(
            &ns,
            &format!("tooldescriptor/{tool}"),
            "{.status.conditions[?(@.type==\"Ready\")].status}",
            "True",
        );
    }
    // The digest the operator computes is the one the example call pins (computed offline).
    let pinned = ok(
        &[
            "get",
            "toolcall",
            "report-flaky-tz",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.toolRef.digest}",
        ],
        None,
    );
    eventually(
        &ns,
        "tooldescriptor/github.create-issue",
        "{.status.digest}",
        &pinned,
    );

    // A descriptor whose declared risk is dishonest is not enabled, and says why.
    let (_, _, _) = kubectl(
        &[
            "patch",
            "tooldescriptor",
            "file.delete",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"risk":{"level":"low"}}}"#,
        ],
        None,
    );
    eventually(
        &ns,
        "tooldescriptor/file.delete",
        "{.status.lifecycle}",
        "permissionLintFailed",
    );
    eventually(
        &ns,
        "tooldescriptor/file.delete",
        "{.status.findings[0].code}",
        "risk-understated",
    );
    eventually(
        &ns,
        "tooldescriptor/file.delete",
        "{.status.conditions[?(@.type==\"Ready\")].reason}",
        "PermissionLintFailed",
    );
    // Removing the sandbox policy it runs in disables git.diff through the watch on policies.
    ok(&["delete", "sandboxpolicy", "read-only", "-n", &ns], None);
    eventually(
        &ns,
        "tooldescriptor/git.diff",
        "{.status.lifecycle}",
        "sandboxLintFailed",
    );
}

/// Grants: state in status, and the expiry is acted on when it comes, without any other event.
#[test]
fn grant_states_follow_time() {
    if !have_cluster() {
        return;
    }
    let ns = prepare("tg-grants");
    let soon = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(6);
    let grants = format!(
        "apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {{name: short, namespace: {ns}}}\nspec: {{subjects: [{{kind: User, name: bob}}], tools: {{names: [file.read]}}, expiresAt: \"{soon}\"}}\n---\n\
apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {{name: later, namespace: {ns}}}\nspec: {{subjects: [{{kind: User, name: bob}}], tools: {{names: [file.read]}}, notBefore: \"2099-01-01T00:00:00Z\"}}\n---\n\
apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {{name: gone, namespace: {ns}}}\nspec: {{subjects: [{{kind: User, name: bob}}], tools: {{names: [file.read]}}, revoked: true, reason: left the team}}\n"
    );
    ok(&["apply", "-f", "-"], Some(&grants));
    let _operator = start_operator();
    eventually(&ns, "toolgrant/later", "{.status.state}", "Pending");
    eventually(
        &ns,
        "toolgrant/gone",
        "{.status.conditions[?(@.type==\"Active\")].message}",
        "left the team",
    );
    eventually(&ns, "toolgrant/short", "{.status.state}", "Active");
    // Nothing touches the grant again: the controller wakes up at expiresAt by itself.
    eventually(&ns, "toolgrant/short", "{.status.state}", "Expired");
    eventually(
        &ns,
        "toolgrant/short",
        "{.status.conditions[?(@.type==\"Active\")].status}",
        "False",
    );
}
