//! The rules over a folder of objects a schema cannot express: credentials in documents,
//! references between objects, ToolPolicies type-checked against the tools they name; each
//! object's own rules are `crate::findings`'.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Finding, Severity, join_path};
use crate::findings::Local;
use crate::findings::descriptor::{Declared, descriptor, reference, sandbox};
use crate::manifest::{Object, ObjectSet, Spec};
use crate::{digest, secrets};

/// Report credential values anywhere in a document. Returns the paths reported, so the schema
/// check does not explain the same field a second time.
pub(super) fn scan_secrets(kind: &str, doc: &Value, out: &mut Vec<Local>) -> Vec<String> {
    let mut paths = Vec::new();
    walk(kind, doc, "", false, out, &mut paths);
    paths
}

fn walk(
    kind: &str,
    v: &Value,
    path: &str,
    in_schema: bool,
    out: &mut Vec<Local>,
    paths: &mut Vec<String>,
) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let p = join_path(path, k);
                // JSON Schemas name properties, they do not hold values.
                let schema_here = in_schema || (path == "spec.schemas" && k.ends_with("Schema"));
                if kind == "CredentialBinding"
                    && !schema_here
                    && secrets::is_secret_field_name(k)
                    && matches!(child, Value::String(_) | Value::Object(_))
                {
                    out.push((
                        Severity::Error,
                        p.clone(),
                        "secret-inline",
                        "a CredentialBinding names where a credential lives (vault.mount, vault.path, vault.field), never its value: remove this field and store the value in Vault".into(),
                    ));
                    paths.push(p);
                    continue;
                }
                walk(kind, child, &p, schema_here, out, paths);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(kind, item, &format!("{path}[{i}]"), in_schema, out, paths);
            }
        }
        Value::String(s) => {
            if let Some((shape, _)) = secrets::find_secret_shape(s) {
                out.push((
                    Severity::Error,
                    path.to_string(),
                    "secret-inline",
                    format!(
                        "looks like a credential ({}); manifests are reviewed in Git and must never hold one: reference it through a CredentialBinding",
                        shape.name
                    ),
                ));
                paths.push(path.to_string());
            }
        }
        _ => {}
    }
}

/// Cross-object and semantic rules over the typed objects: one arm per kind, each a few
/// reference checks (its length is the number of kinds, not the depth of any one rule).
pub(super) fn check_objects(
    set: &ObjectSet,
    declared: &BTreeSet<(String, String, String)>,
    now: jiff::Timestamp,
    findings: &mut Vec<Finding>,
) {
    let declared = &Declared::Names(declared);
    for obj in set.iter() {
        let mut local: Vec<Local> = Vec::new();
        match &obj.spec {
            Spec::ToolDescriptor(d) => descriptor(obj, d, set, declared, &mut local),
            Spec::ToolGrant(g) => {
                for (i, name) in g.tools.names.iter().enumerate() {
                    reference(
                        obj,
                        "ToolDescriptor",
                        name,
                        &format!("spec.tools.names[{i}]"),
                        declared,
                        &mut local,
                    );
                }
                if let Some(exp) = g.expires_at
                    && exp.0 <= now
                {
                    local.push((
                        Severity::Warning,
                        "spec.expiresAt".into(),
                        "grant-expired",
                        format!("the grant expired at {exp}; it grants nothing"),
                    ));
                }
            }
            Spec::SandboxPolicy(s) => sandbox(s, &mut local),
            Spec::CredentialBinding(_) | Spec::ToolPolicy(_) => {}
            Spec::McpServer(m) => parent_of_tools(
                obj,
                &m.sandbox_policy_ref.name,
                "server",
                declared,
                &mut local,
            ),
            Spec::Skill(k) => parent_of_tools(
                obj,
                &k.sandbox_policy_ref.name,
                "skill",
                declared,
                &mut local,
            ),
            Spec::ToolCall(c) => {
                if reference(
                    obj,
                    "ToolDescriptor",
                    &c.tool_ref.name,
                    "spec.toolRef.name",
                    declared,
                    &mut local,
                ) && let Some(Object {
                    spec: Spec::ToolDescriptor(d),
                    ..
                }) = set.find("ToolDescriptor", obj.meta.namespace(), &c.tool_ref.name)
                {
                    if !d.intent.action_types.contains(&c.intent.action_type) {
                        local.push((
                            Severity::Error,
                            "spec.intent.actionType".into(),
                            "action-type-not-declared",
                            format!(
                                "expected one of the tool's action types ({}), found {}",
                                d.intent
                                    .action_types
                                    .iter()
                                    .map(|a| a.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", "),
                                c.intent.action_type
                            ),
                        ));
                    }
                    local.extend(crate::findings::args_findings(
                        &d.schemas.input_schema,
                        &c.args,
                        "spec.args",
                        "args-invalid",
                    ));
                    if let (Some(pinned), Ok(current)) =
                        (&c.tool_ref.digest, digest::descriptor_digest(d))
                        && *pinned != current
                    {
                        local.push((Severity::Error, "spec.toolRef.digest".into(), "tool-digest-mismatch", format!(
                            "expected the current digest of ToolDescriptor/{} ({current}), found {pinned}: the call would be denied", c.tool_ref.name)));
                    }
                }
            }
            Spec::ToolApproval(a) => {
                if reference(
                    obj,
                    "ToolCall",
                    &a.call_ref.name,
                    "spec.callRef.name",
                    declared,
                    &mut local,
                ) && let Some(Object {
                    spec: Spec::ToolCall(c),
                    ..
                }) = set.find("ToolCall", obj.meta.namespace(), &a.call_ref.name)
                {
                    if let Ok(args) = digest::json_digest(&c.args)
                        && args != a.args_digest
                    {
                        local.push((Severity::Warning, "spec.argsDigest".into(), "approval-void", format!(
                            "the approval binds args {} but ToolCall/{} has args {args}: it would be void", a.args_digest, a.call_ref.name)));
                    }
                    if let Some(Object {
                        spec: Spec::ToolDescriptor(d),
                        ..
                    }) = set.find("ToolDescriptor", obj.meta.namespace(), &c.tool_ref.name)
                        && let Ok(current) = digest::descriptor_digest(d)
                        && current != a.tool_digest
                    {
                        local.push((Severity::Warning, "spec.toolDigest".into(), "approval-void", format!(
                            "the approval binds tool version {} but ToolDescriptor/{} is now {current}: it would be void", a.tool_digest, c.tool_ref.name)));
                    }
                    if a.principal != c.principal {
                        local.push((Severity::Warning, "spec.principal".into(), "approval-void", format!(
                            "the approval names principal {:?} but the call's principal is {:?}: it would be void", a.principal, c.principal)));
                    }
                }
            }
        }
        for (severity, path, code, message) in local {
            findings.push(Finding {
                severity,
                origin: obj.origin.clone(),
                object: Some(obj.id()),
                path,
                code,
                message,
            });
        }
    }
    tool_policies(set, declared, findings);
}

/// Descriptors of a namespace declared in the folder that did not check (so are not in `set`).
fn declared_but_broken<'a>(
    set: &'a ObjectSet,
    declared: &'a Declared<'_>,
    ns: &'a str,
) -> impl Iterator<Item = &'a str> {
    let names = match declared {
        Declared::Names(names) => Some(*names),
        Declared::Set(_) => None,
    };
    names
        .into_iter()
        .flatten()
        .filter(move |(kind, n, name)| {
            kind == "ToolDescriptor" && n == ns && set.find("ToolDescriptor", ns, name).is_none()
        })
        .map(|(_, _, name)| name.as_str())
}

/// ToolPolicies parse, only forbid, and type-check against the tools of their namespace: each
/// problem at `spec.policies` with its line and column in the policy text.
fn tool_policies(set: &ObjectSet, declared: &Declared<'_>, findings: &mut Vec<Finding>) {
    if !set.iter().any(|o| matches!(o.spec, Spec::ToolPolicy(_))) {
        return;
    }
    let registry = crate::registry::Registry::from_objects(set);
    for (ns, p) in registry.policy_problems() {
        let Some(obj) = set.find("ToolPolicy", ns, &p.tool_policy) else {
            continue;
        };
        // A tool declared in the folder but broken is reported where it is; the policy that
        // names it is not a second defect.
        if p.code == "cedar-type"
            && declared_but_broken(set, declared, ns).any(|name| {
                p.message
                    .contains(&format!("unrecognized action `Action::\"{name}\"`"))
            })
        {
            continue;
        }
        findings.push(Finding {
            severity: Severity::Error,
            origin: obj.origin.clone(),
            object: Some(obj.id()),
            path: "spec.policies".into(),
            code: p.code,
            message: p.to_string(),
        });
    }
}

/// An object whose tools toolgate generates (`<name>.<tool>`: an McpServer's, a Skill's): its
/// SandboxPolicy exists and its name has no dots.
fn parent_of_tools(
    obj: &Object,
    policy: &str,
    what: &str,
    declared: &Declared<'_>,
    out: &mut Vec<Local>,
) {
    reference(
        obj,
        "SandboxPolicy",
        policy,
        "spec.sandboxPolicyRef.name",
        declared,
        out,
    );
    if !crate::names::is_dns_label(&obj.meta.name) {
        out.push((
            Severity::Error,
            "metadata.name".into(),
            "schema-format",
            format!(
                "expected a name without dots (its tools are named <{what}>.<tool>), found {:?}",
                obj.meta.name
            ),
        ));
    }
}
