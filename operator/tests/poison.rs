//! One object its controller cannot read leaves the controller healthy: a status an older
//! operator or a hand edit wrote, which the CRD's schema takes but the operator's types do not
//! (a count past what they hold). The object is logged and left until it changes; the
//! controller's other objects keep being reconciled, on the real API server. One case per kind
//! whose schema lets such a status through.

mod support;

use support::{ok, prepare, start_operator, wait_for};

/// A status count the schema allows (`format: int64`, no maximum) and the operator's `u32` does
/// not: the object no longer deserializes.
fn poison(ns: &str, object: &str, field: &str) {
    ok(
        &[
            "patch",
            object,
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!("{{\"status\":{{\"{field}\":5000000000}}}}"),
        ],
        None,
    );
}

const READY: &str = "{.status.conditions[?(@.type==\"Ready\")].status}";

/// `first` reconciled, then poisoned; `second`, applied after, is reconciled all the same.
fn leaves_its_controller_healthy(
    ns: &str,
    kind: &str,
    manifest: impl Fn(&str) -> String,
    field: &str,
) {
    ok(&["apply", "-f", "-"], Some(&manifest("first")));
    wait_for(ns, &format!("{kind}/first"), READY, &["True", "False"]);
    poison(ns, &format!("{kind}/first"), field);
    ok(&["apply", "-f", "-"], Some(&manifest("second")));
    wait_for(ns, &format!("{kind}/second"), READY, &["True", "False"]);
    // The poisoned object is left as it is: nothing overwrote it.
    assert_eq!(
        support::jsonpath(
            ns,
            &format!("{kind}/first"),
            &format!("{{.status.{field}}}")
        ),
        "5000000000"
    );
    support::until("the operator says why it leaves the object", || {
        support::operator_log()
            .lines()
            .any(|l| l.contains("does not deserialize") && l.contains(ns) && l.contains("first"))
    });
}

#[test]
fn a_skill_that_does_not_deserialize_leaves_the_skill_controller_healthy() {
    if !toolgate_testkit::have_cluster() {
        return;
    }
    let ns = prepare("tg-poison-skill");
    let operator = start_operator(&ns, &[]);
    // A skill whose ConfigMap is missing: reconciled to Ready=False at once.
    let skill = |name: &str| {
        format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: Skill\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  configMapRef: {{name: {name}}}\n  trustLevel: workspace\n  sandboxPolicyRef: {{name: read-only}}\n"
        )
    };
    leaves_its_controller_healthy(&ns, "skill", skill, "enabledCount");
    let (code, _) = support::http_get(operator.health_port, "/readyz");
    assert_eq!(code, 200);
}

#[test]
fn an_mcp_server_that_does_not_deserialize_leaves_the_mcp_server_controller_healthy() {
    if !toolgate_testkit::have_cluster() {
        return;
    }
    let ns = prepare("tg-poison-mcp");
    let operator = start_operator(&ns, &[]);
    // A server whose sandbox policy is missing: reconciled to Ready=False at once, no pod.
    let server = |name: &str| {
        format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: McpServer\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  url: \"http://127.0.0.1:9/mcp\"\n  trustLevel: first_party\n  sandboxPolicyRef: {{name: missing}}\n"
        )
    };
    leaves_its_controller_healthy(&ns, "mcpserver", server, "toolCount");
    let (code, _) = support::http_get(operator.health_port, "/readyz");
    assert_eq!(code, 200);
}

#[test]
fn a_tool_policy_that_does_not_deserialize_leaves_the_tool_policy_controller_healthy() {
    if !toolgate_testkit::have_cluster() {
        return;
    }
    let ns = prepare("tg-poison-policy");
    let operator = start_operator(&ns, &[]);
    let policy = |name: &str| {
        format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  mode: enforce\n  description: nothing is forbidden\n  policies: |\n    @id(\"never\")\n    forbid (principal, action, resource) when {{ false }};\n"
        )
    };
    leaves_its_controller_healthy(&ns, "toolpolicy", policy, "policies");
    let (code, _) = support::http_get(operator.health_port, "/readyz");
    assert_eq!(code, 200);
}
