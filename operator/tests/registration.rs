//! The operator against the real API server: descriptors get their lifecycle, digest and Ready
//! condition in status; the digest equals the one the example calls pin (computed offline by
//! the same core); a descriptor that fails the lint is marked so, with its findings. The
//! operator runs as its own identity with only the permissions it needs.

use std::path::PathBuf;

mod support;
use support::{eventually, have_cluster, kubectl, ok, prepare, root, start_operator};

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

    let _operator = start_operator(&ns, &[]);

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
    ok(&["delete", "sandboxpolicy", "git-read", "-n", &ns], None);
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
    let _operator = start_operator(&ns, &[]);
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
