//! The generated CRDs against a real kube-apiserver (started by tests/run.sh through
//! tests/cluster/up.sh): they install, the examples apply, `kubectl get toolgate` and
//! `kubectl explain` read well, and the schema and CEL rules reject what they must with the
//! message a user understands. In CI the suite never skips: no API server is a failure.

use toolgate_testkit::{
    apply_admission_policies, have_cluster, kubectl, manifests, namespace, ok, refused_eventually,
    root,
};

#[test]
fn the_crds_install_and_the_examples_apply() {
    if !have_cluster() {
        return;
    }
    let ns = namespace("tg-examples");
    ok(&["apply", "-f", "-"], Some(&manifests("examples", &ns)));
    let names = ok(&["get", "toolgate", "-n", &ns, "-o", "name"], None);
    assert_eq!(names.lines().count(), 28, "{names}");
    let calls = ok(&["get", "toolcalls", "-n", &ns], None);
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
    let tds = ok(&["get", "td", "-n", &ns], None);
    for col in ["RISK", "LIFECYCLE", "DIGEST"] {
        assert!(
            tds.lines().next().unwrap_or_default().contains(col),
            "{tds}"
        );
    }
    let explain = ok(&["explain", "toolcall.spec.intent"], None);
    assert!(
        explain.contains("The public reason for the call"),
        "{explain}"
    );
    assert!(explain.contains("userGoal"), "{explain}");
}

#[test]
fn the_api_server_enforces_the_schema_and_the_cel_rules() {
    if !have_cluster() {
        return;
    }
    let ns = namespace("tg-rules");
    ok(
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
        let (accepted, _, err) = kubectl(&["apply", "-f", "-"], Some(&text));
        assert!(!accepted, "{file} was accepted");
        assert!(
            err.contains(message),
            "{file}: expected {message:?} in: {err}"
        );
    }

    // A ToolCall's spec and a ToolApproval's spec are immutable.
    ok(&["apply", "-f", "-"], Some(&manifests("examples", &ns)));
    let (_, _, err) = kubectl(
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
    assert!(err.contains("a ToolCall's spec is immutable"), "{err}");
    let (_, _, err) = kubectl(
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
    assert!(err.contains("a ToolApproval's spec is immutable"), "{err}");
    // Status stays writable through its subresource.
    ok(
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
    let (_, _, err) = kubectl(&["apply", "-f", "-"], Some(&approval));
    assert!(
        err.contains("an approver may not approve their own call"),
        "{err}"
    );
}

/// Children owned by a ToolCall go when it goes (the operator relies on this), and a namespace
/// deletion completes: the controller manager runs.
#[test]
fn owner_references_and_namespace_deletion_work() {
    if !have_cluster() {
        return;
    }
    let ns = namespace("tg-gc");
    ok(
        &["apply", "-f", "-"],
        Some(&manifests("examples/calls/02-run-tests.yaml", &ns)),
    );
    let uid = ok(
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
    ok(&["apply", "-f", "-"], Some(&child));
    ok(
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
    ok(
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
    ok(&["delete", "namespace", &ns, "--wait=false"], None);
    ok(
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
    if !have_cluster() {
        return;
    }
    let ns = namespace("tg-identity");
    apply_admission_policies();
    let rbac = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: agent, namespace: {ns}}}\nrules:\n- {{apiGroups: [toolgate.dev], resources: [toolcalls], verbs: [create, get, list, watch]}}\n---\n\
apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: agent, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: agent}}\nsubjects: [{{kind: ServiceAccount, name: fixer, namespace: team-a}}]\n---\n\
apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: reviewer, namespace: {ns}}}\nrules:\n- {{apiGroups: [toolgate.dev], resources: [toolapprovals], verbs: [create, get, list]}}\n---\n\
apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: reviewer, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reviewer}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: Group, name: team-a-reviewers}}]\n"
    );
    ok(&["apply", "-f", "-"], Some(&rbac));
    let call = manifests("examples/calls/04-create-issue.yaml", &ns);
    let approval = manifests("examples/calls/06-approve-create-issue.yaml", &ns);

    // The policies take a moment to reach the admission plugin: retry the spoof until refused.
    let spoofed = call
        .replace(
            "principal: system:serviceaccount:team-a:fixer",
            "principal: system:serviceaccount:team-a:admin-bot",
        )
        .replace("name: report-flaky-tz", "name: spoofed");
    let refused = refused_eventually("agent", &spoofed, "toolcall", "spoofed", &ns);
    assert!(
        refused.contains("spec.principal must be your own identity"),
        "a spoofed principal was accepted: {refused}"
    );
    // The agent's own identity is fine.
    ok(&["--context", "agent", "create", "-f", "-"], Some(&call));
    // Agents may not create approvals at all (RBAC).
    let (created, _, err) = kubectl(
        &["--context", "agent", "create", "-f", "-"],
        Some(&approval),
    );
    assert!(!created && err.contains("forbidden"), "{err}");
    // A reviewer approves as themselves, never as someone else.
    let as_bob = approval
        .replace("approver: alice@example.com", "approver: bob@example.com")
        .replace("name: report-flaky-tz-alice", "name: as-bob");
    let refused = refused_eventually("reviewer", &as_bob, "toolapproval", "as-bob", &ns);
    assert!(
        refused.contains("spec.approver must be your own identity"),
        "an approval under another name was accepted: {refused}"
    );
    ok(
        &["--context", "reviewer", "create", "-f", "-"],
        Some(&approval),
    );
    // Cluster admins are trusted (the other tests apply recorded calls as admin).
    ok(&["create", "-f", "-"], Some(&spoofed));
}
