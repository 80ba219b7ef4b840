//! One object its controller cannot read leaves the controller healthy: a status an older
//! operator or a hand edit wrote, which the CRD's schema takes but the operator's types do not
//! (a count past what they hold). The object is logged and left until it changes; the
//! controller's other objects keep being reconciled, on the real API server. One case per kind:
//! the kinds with a status count too large for the operator's type, and every kind through a
//! condition time the API server takes as `date-time` and the operator cannot hold (a year-9999
//! instant past the last one it represents). The kinds decisions read come from shared caches:
//! one unreadable object of those must neither keep the cache from filling (the operator started
//! after the poison is Ready) nor stop calls being decided; it counts as absent.

mod support;

use support::{jsonpath, ok, prepare, root, start_operator, wait_for};
use toolgate_testkit::fixtures::{grant, standard_tools};

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

/// A condition time the API server accepts as `date-time` that the operator cannot represent.
const FAR_FUTURE: &str = "9999-12-31T23:59:59Z";

/// `kind/first` given a condition the operator cannot read.
fn poison_condition(ns: &str, object: &str) {
    ok(
        &[
            "patch",
            object,
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(
                "{{\"status\":{{\"conditions\":[{{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"Poisoned\",\"message\":\"\",\"lastTransitionTime\":\"{FAR_FUTURE}\"}}]}}}}"
            ),
        ],
        None,
    );
}

/// The example sandbox policies and credential bindings, the standard tools and a grant of
/// `test.echo` in `ns`.
fn base(ns: &str) -> String {
    let mut docs: Vec<String> = [
        "examples/sandbox-policies.yaml",
        "examples/credential-bindings.yaml",
    ]
    .iter()
    .map(|f| {
        std::fs::read_to_string(root().join(f))
            .expect("read")
            .replace("namespace: team-a}", &format!("namespace: {ns}}}"))
    })
    .collect();
    docs.extend(standard_tools().iter().map(|t| t.yaml(ns)));
    docs.push(grant(ns, "echo", &["test.echo"]));
    docs.join("\n---\n")
}

/// `kind/first` (from `first`, applied beside the base objects) made unreadable before the
/// operator starts: it becomes Ready, says why it leaves the object, leaves it as it is, and
/// decides a call that reads every cache.
fn a_poisoned_object_leaves_calls_decided(
    prefix: &str,
    kind: &str,
    first: impl Fn(&str) -> String,
) {
    if !toolgate_testkit::have_cluster() {
        return;
    }
    let ns = prepare(prefix);
    ok(&["apply", "-f", "-"], Some(&base(&ns)));
    ok(&["apply", "-f", "-"], Some(&first(&ns)));
    poison_condition(&ns, &format!("{kind}/first"));
    let operator = start_operator(&ns, &[]);
    support::until("the operator is ready", || {
        support::http_get(operator.health_port, "/readyz").0 == 200
    });
    ok(
        &["apply", "-f", "-"],
        Some(&toolgate_testkit::fixtures::call(
            &ns,
            "second",
            "test.echo",
            "{msg: decided}",
            "team-a",
        )),
    );
    wait_for(
        &ns,
        "toolcall/second",
        "{.status.conditions[?(@.type==\"PolicyChecked\")].status}",
        &["True"],
    );
    assert_eq!(
        jsonpath(
            &ns,
            &format!("{kind}/first"),
            "{.status.conditions[0].lastTransitionTime}"
        ),
        FAR_FUTURE,
        "the unreadable object is left as it is"
    );
    support::until("the operator says why it leaves the object", || {
        support::operator_log()
            .lines()
            .any(|l| l.contains("does not deserialize") && l.contains(&ns) && l.contains("first"))
    });
}

#[test]
fn a_tool_grant_that_does_not_deserialize_leaves_calls_decided() {
    a_poisoned_object_leaves_calls_decided("tg-poison-grant", "toolgrant", |ns| {
        grant(ns, "first", &["test.gated"])
    });
}

#[test]
fn a_tool_descriptor_that_does_not_deserialize_leaves_calls_decided() {
    a_poisoned_object_leaves_calls_decided("tg-poison-descriptor", "tooldescriptor", |ns| {
        toolgate_testkit::fixtures::Tool::test("first").yaml(ns)
    });
}

#[test]
fn a_sandbox_policy_that_does_not_deserialize_leaves_calls_decided() {
    a_poisoned_object_leaves_calls_decided("tg-poison-sandbox", "sandboxpolicy", |ns| {
        std::fs::read_to_string(root().join("examples/sandbox-policies.yaml"))
            .expect("read")
            .split("\n---\n")
            .next()
            .expect("a policy")
            .replace("namespace: team-a}", &format!("namespace: {ns}}}"))
            .replacen("name: read-only", "name: first", 1)
    });
}

#[test]
fn a_credential_binding_that_does_not_deserialize_leaves_calls_decided() {
    a_poisoned_object_leaves_calls_decided("tg-poison-binding", "credentialbinding", |ns| {
        let text = std::fs::read_to_string(root().join("examples/credential-bindings.yaml"))
            .expect("read");
        let first = text
            .split("\n---\n")
            .find(|d| d.contains("kind: CredentialBinding"))
            .expect("a binding")
            .replace("namespace: team-a}", &format!("namespace: {ns}}}"));
        let name = first
            .split("metadata: {name: ")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .expect("its name")
            .to_string();
        first.replacen(&format!("name: {name},"), "name: first,", 1)
    });
}

#[test]
fn a_tool_approval_that_does_not_deserialize_leaves_calls_decided() {
    a_poisoned_object_leaves_calls_decided("tg-poison-approval", "toolapproval", |ns| {
        let z = "0".repeat(64);
        format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: ToolApproval\nmetadata: {{name: first, namespace: {ns}}}\nspec: {{callRef: {{name: gone}}, argsDigest: \"sha256:{z}\", toolDigest: \"sha256:{z}\", riskTier: L1, principal: \"system:serviceaccount:team-a:fixer\", approver: alice@example.com, decision: allowOnce, expiresAt: \"2099-01-01T00:00:00Z\"}}\n"
        )
    });
}

#[test]
fn a_tool_call_that_does_not_deserialize_leaves_calls_decided() {
    a_poisoned_object_leaves_calls_decided("tg-poison-call", "toolcall", |ns| {
        toolgate_testkit::fixtures::call(ns, "first", "test.echo", "{msg: first}", "team-a")
    });
}
