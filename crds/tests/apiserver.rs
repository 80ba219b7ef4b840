//! The generated CRDs against a real kube-apiserver (started by tests/run.sh through
//! tests/cluster/up.sh): they install, the examples apply, `kubectl get toolgate` and
//! `kubectl explain` read well, and the schema and CEL rules reject what they must with the
//! message a user understands. In CI the suite never skips: no API server is a failure.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

struct Cluster {
    kubectl: PathBuf,
    kubeconfig: PathBuf,
}

fn cluster() -> Option<Cluster> {
    match (
        std::env::var_os("TOOLGATE_KUBECTL"),
        std::env::var_os("TOOLGATE_KUBECONFIG"),
    ) {
        (Some(k), Some(c)) => Some(Cluster {
            kubectl: k.into(),
            kubeconfig: c.into(),
        }),
        _ if std::env::var_os("CI").is_some() => {
            panic!("no API server: CI runs this suite through tests/run.sh, which starts one")
        }
        _ => {
            eprintln!(
                "skipping the API server suite: run tests/run.sh to start a real kube-apiserver"
            );
            None
        }
    }
}

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

impl Cluster {
    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
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
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes()).expect("stdin");
        }
        child.wait_with_output().expect("kubectl output")
    }

    fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Create `manifest` as `context` until admission refuses it (a new policy takes a moment to
    /// reach the admission plugin); what was accepted meanwhile is deleted. Returns the refusal.
    fn refused_eventually(
        &self,
        context: &str,
        manifest: &str,
        kind: &str,
        name: &str,
        ns: &str,
    ) -> String {
        for _ in 0..40 {
            let out = self.kubectl(&["--context", context, "create", "-f", "-"], Some(manifest));
            if !out.status.success() {
                return String::from_utf8_lossy(&out.stderr).into_owned();
            }
            self.ok(&["delete", kind, name, "-n", ns], None);
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        String::new()
    }

    /// Install the CRDs (idempotent) and make a fresh namespace.
    fn namespace(&self, prefix: &str) -> String {
        self.ok(
            &[
                "apply",
                "--server-side",
                "--field-manager=toolgate-tests",
                "-f",
                &root().join("crds/generated").display().to_string(),
            ],
            None,
        );
        for crd in toolgate_crds::all_crds() {
            let name = format!("crd/{}", crd.metadata.name.unwrap_or_default());
            self.ok(
                &[
                    "wait",
                    "--for=condition=Established",
                    &name,
                    "--timeout=60s",
                ],
                None,
            );
        }
        let suffix: String = format!(
            "{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        );
        let ns = format!("{prefix}-{suffix}");
        self.ok(&["create", "namespace", &ns], None);
        ns
    }
}

/// The YAML of every file under `dir`, moved to namespace `ns`.
fn manifests(dir: &str, ns: &str) -> String {
    let mut files: Vec<PathBuf> = Vec::new();
    let start = root().join(dir);
    let mut stack = vec![];
    if start.is_file() {
        files.push(start);
    } else {
        stack.push(start);
    }
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("read"))
        .map(|t| {
            t.replace("namespace: team-a", &format!("namespace: {ns}"))
                .replace("namespace: lint-test", &format!("namespace: {ns}"))
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[test]
fn the_crds_install_and_the_examples_apply() {
    let Some(c) = cluster() else { return };
    let ns = c.namespace("tg-examples");
    c.ok(&["apply", "-f", "-"], Some(&manifests("examples", &ns)));
    let names = c.ok(&["get", "toolgate", "-n", &ns, "-o", "name"], None);
    assert_eq!(names.lines().count(), 22, "{names}");
    let calls = c.ok(&["get", "toolcalls", "-n", &ns], None);
    let header = calls.lines().next().unwrap_or_default();
    for col in [
        "NAME",
        "TOOL",
        "PRINCIPAL",
        "PHASE",
        "RISK",
        "DECISION",
        "AGE",
    ] {
        assert!(header.contains(col), "{header}");
    }
    let tds = c.ok(&["get", "td", "-n", &ns], None);
    for col in ["RISK", "LIFECYCLE", "DIGEST"] {
        assert!(
            tds.lines().next().unwrap_or_default().contains(col),
            "{tds}"
        );
    }
    let explain = c.ok(&["explain", "toolcall.spec.intent"], None);
    assert!(
        explain.contains("The public reason for the call"),
        "{explain}"
    );
    assert!(explain.contains("userGoal"), "{explain}");
}

#[test]
fn the_api_server_enforces_the_schema_and_the_cel_rules() {
    let Some(c) = cluster() else { return };
    let ns = c.namespace("tg-rules");
    c.ok(
        &["apply", "-f", "-"],
        Some(&manifests("tests/manifests/base", &ns)),
    );
    let cases = [
        (
            "wrong-type.yaml",
            "spec.execution.timeoutMs in body must be of type integer",
        ),
        ("unknown-enum.yaml", "Unsupported value: \"moderate\""),
        (
            "missing-required.yaml",
            "spec.effects.dryRunSupported: Required value",
        ),
        (
            "destructive-without-dry-run.yaml",
            "a destructive tool must support dry run",
        ),
        (
            "grant-expiry-before-start.yaml",
            "expiresAt must be after notBefore",
        ),
    ];
    for (file, message) in cases {
        let text = std::fs::read_to_string(root().join("tests/manifests/broken").join(file))
            .expect("read")
            .replace("namespace: lint-test", &format!("namespace: {ns}"));
        let out = c.kubectl(&["apply", "-f", "-"], Some(&text));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{file} was accepted");
        assert!(
            err.contains(message),
            "{file}: expected {message:?} in: {err}"
        );
    }

    // A ToolCall's spec and a ToolApproval's spec are immutable.
    c.ok(&["apply", "-f", "-"], Some(&manifests("examples", &ns)));
    let out = c.kubectl(
        &[
            "patch",
            "toolcall",
            "run-tests-1",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"args":{"testFile":"src/other.test.ts"}}}"#,
        ],
        None,
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a ToolCall's spec is immutable"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = c.kubectl(
        &[
            "patch",
            "toolapproval",
            "report-flaky-tz-alice",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"decision":"deny"}}"#,
        ],
        None,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("a ToolApproval's spec is immutable"));
    // Status stays writable through its subresource.
    c.ok(
        &[
            "patch",
            "toolcall",
            "run-tests-1",
            "-n",
            &ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Pending"}}"#,
        ],
        None,
    );

    // An approver may not approve their own call.
    let approval = manifests("examples/calls", &ns)
        .split("\n---\n")
        .find(|d| d.contains("kind: ToolApproval"))
        .expect("example approval")
        .replace("name: report-flaky-tz-alice", "name: self-approval")
        .replace(
            "approver: alice@example.com",
            "approver: system:serviceaccount:team-a:fixer",
        );
    let out = c.kubectl(&["apply", "-f", "-"], Some(&approval));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("an approver may not approve their own call"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Children owned by a ToolCall go when it goes (the operator relies on this), and a namespace
/// deletion completes: the controller manager runs.
#[test]
fn owner_references_and_namespace_deletion_work() {
    let Some(c) = cluster() else { return };
    let ns = c.namespace("tg-gc");
    c.ok(
        &["apply", "-f", "-"],
        Some(&manifests("examples/calls/02-run-tests.yaml", &ns)),
    );
    let uid = c.ok(
        &[
            "get",
            "toolcall",
            "run-tests-1",
            "-n",
            &ns,
            "-o",
            "jsonpath={.metadata.uid}",
        ],
        None,
    );
    let child = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: run-tests-1-spec\n  namespace: {ns}\n  ownerReferences:\n  - {{apiVersion: toolgate.dev/v1alpha1, kind: ToolCall, name: run-tests-1, uid: {uid}, controller: true, blockOwnerDeletion: true}}\ndata: {{spec: x}}\n"
    );
    c.ok(&["apply", "-f", "-"], Some(&child));
    c.ok(
        &[
            "delete",
            "toolcall",
            "run-tests-1",
            "-n",
            &ns,
            "--wait=true",
        ],
        None,
    );
    c.ok(
        &[
            "wait",
            "--for=delete",
            "configmap/run-tests-1-spec",
            "-n",
            &ns,
            "--timeout=60s",
        ],
        None,
    );
    c.ok(&["delete", "namespace", &ns, "--wait=false"], None);
    c.ok(
        &[
            "wait",
            "--for=delete",
            &format!("namespace/{ns}"),
            "--timeout=240s",
        ],
        None,
    );
}

/// Identities are bound at admission and by RBAC: an agent cannot propose a call as someone
/// else or create approvals at all; a reviewer cannot approve under another name.
#[test]
fn admission_binds_identities_and_rbac_keeps_agents_from_approving() {
    let Some(c) = cluster() else { return };
    let ns = c.namespace("tg-identity");
    c.ok(
        &[
            "apply",
            "--server-side",
            "--field-manager=toolgate-tests",
            "-f",
            &root()
                .join("crds/admission/identity.yaml")
                .display()
                .to_string(),
        ],
        None,
    );
    let rbac = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: agent, namespace: {ns}}}\nrules:\n- {{apiGroups: [toolgate.dev], resources: [toolcalls], verbs: [create, get, list, watch]}}\n---\n\
apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: agent, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: agent}}\nsubjects: [{{kind: ServiceAccount, name: fixer, namespace: team-a}}]\n---\n\
apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: reviewer, namespace: {ns}}}\nrules:\n- {{apiGroups: [toolgate.dev], resources: [toolapprovals], verbs: [create, get, list]}}\n---\n\
apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: reviewer, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reviewer}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: Group, name: team-a-reviewers}}]\n"
    );
    c.ok(&["apply", "-f", "-"], Some(&rbac));
    let call = manifests("examples/calls/04-create-issue.yaml", &ns);
    let approval = manifests("examples/calls/06-approve-create-issue.yaml", &ns);

    // The policies take a moment to reach the admission plugin: retry the spoof until refused.
    let spoofed = call
        .replace(
            "principal: system:serviceaccount:team-a:fixer",
            "principal: system:serviceaccount:team-a:admin-bot",
        )
        .replace("name: report-flaky-tz", "name: spoofed");
    let refused = c.refused_eventually("agent", &spoofed, "toolcall", "spoofed", &ns);
    assert!(
        refused.contains("spec.principal must be your own identity"),
        "a spoofed principal was accepted: {refused}"
    );
    // The agent's own identity is fine.
    c.ok(&["--context", "agent", "create", "-f", "-"], Some(&call));
    // Agents may not create approvals at all (RBAC).
    let out = c.kubectl(
        &["--context", "agent", "create", "-f", "-"],
        Some(&approval),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("forbidden"), "{err}");
    // A reviewer approves as themselves, never as someone else.
    let as_bob = approval
        .replace("approver: alice@example.com", "approver: bob@example.com")
        .replace("name: report-flaky-tz-alice", "name: as-bob");
    let refused = c.refused_eventually("reviewer", &as_bob, "toolapproval", "as-bob", &ns);
    assert!(
        refused.contains("spec.approver must be your own identity"),
        "an approval under another name was accepted: {refused}"
    );
    c.ok(
        &["--context", "reviewer", "create", "-f", "-"],
        Some(&approval),
    );
    // Cluster admins are trusted (the other tests apply recorded calls as admin).
    c.ok(&["create", "-f", "-"], Some(&spoofed));
}
