//! The rules of one object a schema cannot express: a descriptor's (its references, effects
//! against its actions, risk, templates, secrets, instruction-like text), a sandbox policy's and
//! an input schema's. Registration holds a tool back by them; the folder linter reports them.

use std::collections::BTreeSet;

use serde_json::Value;
use toolgate_crds::{
    ActionType, DeliveryMode, ExecutionAdapter, SandboxPolicySpec, ToolDescriptorSpec, TrustLevel,
};

use super::{Local, Severity};
use crate::manifest::{Object, ObjectSet, Spec};
use crate::{digest, risk, template};

/// The finding of a tool discovered on an MCP server that no reviewer has read in this version.
pub const MCP_NOT_REVIEWED: &str = "mcp-not-reviewed";
/// A skill's script tool nobody has reviewed at this digest.
pub const SKILL_NOT_REVIEWED: &str = "skill-not-reviewed";

/// The descriptor rules alone, for registration: references resolve against `set`.
pub fn descriptor_findings(obj: &Object, d: &ToolDescriptorSpec, set: &ObjectSet) -> Vec<Local> {
    let mut out = Vec::new();
    descriptor(obj, d, set, &Declared::Set(set), &mut out);
    out
}

/// What references may resolve to: every declared document (lint, where a broken object is
/// still declared) or the typed objects (registration).
pub enum Declared<'a> {
    /// `(kind, namespace, name)` of every declared document.
    Names(&'a BTreeSet<(String, String, String)>),
    /// The typed objects.
    Set(&'a ObjectSet),
}

impl Declared<'_> {
    pub(crate) fn contains(&self, kind: &str, ns: &str, name: &str) -> bool {
        match self {
            Declared::Names(n) => n.contains(&(kind.to_string(), ns.to_string(), name.to_string())),
            Declared::Set(s) => s.contains(kind, ns, name),
        }
    }
}
/// Report a reference that names nothing; true if it resolves.
pub(crate) fn reference(
    obj: &Object,
    kind: &str,
    name: &str,
    path: &str,
    declared: &Declared<'_>,
    out: &mut Vec<Local>,
) -> bool {
    let ns = obj.meta.namespace();
    let found = declared.contains(kind, ns, name);
    // A tool of an McpServer exists once the server has been asked (it may be down): naming
    // one before that is not an error, and the reference holds nothing until it is discovered.
    let server = name.split_once('.').map(|(s, _)| s);
    if !found
        && kind == "ToolDescriptor"
        && server.is_some_and(|s| declared.contains("McpServer", ns, s))
    {
        out.push((Severity::Warning, path.into(), "mcp-tool-not-discovered", format!(
            "{name:?} is not among the tools McpServer {} listed so far; the reference holds nothing until it is", server.unwrap_or_default())));
        return false;
    }
    if !found {
        out.push((Severity::Error, path.into(), "dangling-reference", format!(
            "expected the name of a {kind} in namespace {ns}, found {name:?}, which is not defined in the manifests")));
    }
    found
}

/// Every finding about one ToolDescriptor, rule group by rule group.
pub(crate) fn descriptor(
    obj: &Object,
    d: &ToolDescriptorSpec,
    set: &ObjectSet,
    declared: &Declared<'_>,
    out: &mut Vec<Local>,
) {
    input_schema(d, out);
    other_schemas(d, out);
    honest_risk(d, out);
    effects_match_actions(d, out);
    templates_name_declared_args(d, out);
    review_of_discovered_tools(obj, d, out);
    sandbox_fits(obj, d, set, declared, out);
    no_instructions_to_the_model(d, out);
    if d.provenance.trust_level == TrustLevel::Untrusted {
        out.push((
            Severity::Warning,
            "spec.provenance.trustLevel".into(),
            "untrusted",
            "untrusted tools are registered as blocked and never callable".into(),
        ));
    }
    if d.canonical_name != obj.meta.name {
        out.push((Severity::Warning, "spec.canonicalName".into(), "name-mismatch", format!(
            "expected the object name {:?} (grants and calls use the object name, agents the canonical name), found {:?}", obj.meta.name, d.canonical_name)));
    }
}

/// The output and error schemas, when given, are JSON Schema.
fn other_schemas(d: &ToolDescriptorSpec, out: &mut Vec<Local>) {
    for (field, schema) in [
        ("outputSchema", &d.schemas.output_schema),
        ("errorSchema", &d.schemas.error_schema),
    ] {
        if let Some(s) = schema
            && let Err(e) = jsonschema::meta::validate(s)
        {
            out.push((
                Severity::Error,
                format!("spec.schemas.{field}"),
                "invalid-json-schema",
                format!("not a valid JSON Schema at {}: {e}", schema_location(&e)),
            ));
        }
    }
}

/// The declared risk is honest about what the tool does, and an arg that becomes code is said.
fn honest_risk(d: &ToolDescriptorSpec, out: &mut Vec<Local>) {
    // An arg that becomes code a shell or interpreter runs: the tier rises to L4 (a human
    // approves each call under `on_risk`), and the author is told how to pass it safely.
    if let Some((i, program)) = risk::templated_code(&d.execution.argv) {
        out.push((
            Severity::Warning,
            format!("spec.execution.argv[{i}]"),
            "templated-script",
            format!(
                "{program} runs this argument as code and it holds an arg: an arg that is code is a command injection; pass each arg as its own argument (`[{program}, -c, 'grep -- \"$1\" src', {program}, \"{{{{pattern}}}}\"]`). The tool is {} for this",
                risk::descriptor_tier(d)
            ),
        ));
    }

    // The declared risk must be honest about what the tool does.
    let tier = risk::declared_tier(d);
    let min = risk::minimum_severity(tier);
    if d.risk.level < min {
        out.push((
            Severity::Error,
            "spec.risk.level".into(),
            "risk-understated",
            format!(
                "expected at least {min} for a {tier} ({}) tool (action types: {}), found {}",
                tier.label(),
                d.intent
                    .action_types
                    .iter()
                    .map(|a| a.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                d.risk.level
            ),
        ));
    }
}

/// Whether the tool's action types write.
fn writes(d: &ToolDescriptorSpec) -> bool {
    d.intent.action_types.iter().any(|a| {
        matches!(
            a,
            ActionType::Write | ActionType::Patch | ActionType::MemoryWrite
        )
    })
}

/// The declared effects match the action types (invariant 13) and each other.
fn effects_match_actions(d: &ToolDescriptorSpec, out: &mut Vec<Local>) {
    // Effects must match the action types (invariant 13).
    let acts = &d.intent.action_types;
    let e = &d.effects;
    if writes(d) && e.writes.is_empty() {
        out.push((Severity::Error, "spec.effects.writes".into(), "effects-undeclared", "expected the resources written (the action types include write/patch), found an empty list".into()));
    }
    if acts.contains(&ActionType::Delete) && e.deletes.is_empty() {
        out.push((
            Severity::Error,
            "spec.effects.deletes".into(),
            "effects-undeclared",
            "expected the resources deleted (the action types include delete), found none".into(),
        ));
    }
    if acts.contains(&ActionType::ExternalSend) && !e.external_calls {
        out.push((
            Severity::Error,
            "spec.effects.externalCalls".into(),
            "effects-undeclared",
            "expected true (the action types include external_send), found false".into(),
        ));
    }
    if !e.mutates_state && (!e.writes.is_empty() || !e.deletes.is_empty()) {
        out.push((
            Severity::Error,
            "spec.effects.mutatesState".into(),
            "effects-inconsistent",
            "expected true: the tool declares writes or deletes, found false".into(),
        ));
    }
    if !e.deletes.is_empty() && !d.risk.destructive {
        out.push((
            Severity::Error,
            "spec.risk.destructive".into(),
            "effects-inconsistent",
            "expected true: the tool declares deletes, found false".into(),
        ));
    }
}

/// The argv, stdin, URL and body templates name only the input schema's properties.
fn templates_name_declared_args(d: &ToolDescriptorSpec, out: &mut Vec<Local>) {
    // Templates may only name declared args.
    let props: BTreeSet<String> = d
        .schemas
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let mut templates: Vec<(String, &str)> = d
        .execution
        .argv
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("spec.execution.argv[{i}]"), a.as_str()))
        .collect();
    if let Some(stdin) = &d.execution.stdin {
        templates.push(("spec.execution.stdin".into(), stdin));
    }
    if let Some(http) = &d.execution.http {
        templates.push(("spec.execution.http.urlTemplate".into(), &http.url_template));
        for (i, b) in http.body_args.iter().enumerate() {
            if !props.contains(b) {
                out.push((
                    Severity::Error,
                    format!("spec.execution.http.bodyArgs[{i}]"),
                    "template-unknown-arg",
                    format!(
                        "expected one of the input schema's properties ({}), found {b:?}",
                        props.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
    }
    for (path, t) in templates {
        match template::placeholders(t) {
            Ok(names) => {
                for name in names {
                    if !props.contains(name) {
                        out.push((Severity::Error, path.clone(), "template-unknown-arg", format!(
                            "{{{{{name}}}}} names no property of the input schema (expected one of: {})", props.iter().cloned().collect::<Vec<_>>().join(", "))));
                    }
                }
            }
            Err(e) => out.push((Severity::Error, path, "template-syntax", e.to_string())),
        }
    }
}

/// A tool a skill declares or an MCP server lists waits for a reviewer who read this version.
fn review_of_discovered_tools(obj: &Object, d: &ToolDescriptorSpec, out: &mut Vec<Local>) {
    // A tool discovered on an MCP server says what its server says: a person reads this exact
    // version before any model sees it (a changed description or schema needs a new review).
    let reviewed = |digest: &str| {
        obj.meta
            .annotations
            .get(super::poisoning::REVIEWED_ANNOTATION)
            .is_some_and(|r| r == digest)
    };
    if d.source.type_ == toolgate_crds::SourceType::Skill {
        let digest = digest::descriptor_digest(d).unwrap_or_default();
        if !reviewed(&digest) {
            let (skill, _) = d
                .canonical_name
                .split_once('.')
                .unwrap_or((&d.canonical_name, ""));
            out.push((
                Severity::Warning,
                "metadata.annotations".into(),
                SKILL_NOT_REVIEWED,
                format!(
                    "declared by skill {skill}: the script's tool stays out of every view until a reviewer who read this version (declaration and script) enables it: {{tool: {}, digest: {digest:?}}} in Skill {skill}'s spec.enabled",
                    d.canonical_name.strip_prefix(&format!("{skill}.")).unwrap_or(&d.canonical_name),
                ),
            ));
        }
    }
    if d.source.type_ == toolgate_crds::SourceType::Mcp {
        let digest = digest::descriptor_digest(d).unwrap_or_default();
        if !reviewed(&digest) {
            out.push((
                Severity::Warning,
                "metadata.annotations".into(),
                MCP_NOT_REVIEWED,
                format!(
                    "discovered on MCP server {server}: the tool stays out of every view until a reviewer who read this version enables it: metadata.annotations[\"{}\"] set to {digest:?} (a tool of McpServer {server}: {{tool: {}, digest: {digest:?}}} in its spec.enabled)",
                    super::poisoning::REVIEWED_ANNOTATION,
                    d.execution.mcp.as_ref().map_or("?", |m| m.tool.as_str()),
                    server = d.source.server_id.as_deref().unwrap_or("(unnamed)"),
                ),
            ));
        }
    }
}

/// Anything that executes has a sandbox (invariant 10), open enough for what it declares and
/// closed to what its credential delivery needs.
fn sandbox_fits(
    obj: &Object,
    d: &ToolDescriptorSpec,
    set: &ObjectSet,
    declared: &Declared<'_>,
    out: &mut Vec<Local>,
) {
    let e = &d.effects;
    // Anything that executes needs a resolved sandbox (invariant 10).
    let ns = obj.meta.namespace();
    let executes = matches!(
        d.execution.adapter,
        ExecutionAdapter::Cli | ExecutionAdapter::Http | ExecutionAdapter::Mcp
    );
    match &d.sandbox_policy_ref {
        None if executes => out.push((Severity::Error, "spec.sandboxPolicyRef".into(), "sandbox-missing", format!(
            "expected a SandboxPolicy reference: a {:?} tool executes and must run in a sandbox, found none", d.execution.adapter).to_lowercase())),
        Some(r) => {
            reference(obj, "SandboxPolicy", &r.name, "spec.sandboxPolicyRef.name", declared, out);
        }
        None => {}
    }
    let sandbox =
        d.sandbox_policy_ref
            .as_ref()
            .and_then(|r| match set.find("SandboxPolicy", ns, &r.name) {
                Some(Object {
                    spec: Spec::SandboxPolicy(s),
                    ..
                }) => Some(s.as_ref()),
                _ => None,
            });
    if let Some(r) = &d.credential_binding_ref
        && reference(
            obj,
            "CredentialBinding",
            &r.name,
            "spec.credentialBindingRef.name",
            declared,
            out,
        )
        && let Some(Object {
            spec: Spec::CredentialBinding(b),
            ..
        }) = set.find("CredentialBinding", ns, &r.name)
        && b.delivery.mode == DeliveryMode::Env
        && let Some(s) = sandbox
        && !s.environment.secret_env_allowed
    {
        out.push((Severity::Error, "spec.credentialBindingRef".into(), "credential-env-not-allowed", format!(
            "CredentialBinding/{} delivers its value as an environment variable but SandboxPolicy/{} has environment.secretEnvAllowed: false; deliver it as a file",
            r.name, d.sandbox_policy_ref.as_ref().map_or("", |r| r.name.as_str()))));
    }
    if let Some(r) = &d.credential_binding_ref
        && let Some(Object {
            spec: Spec::CredentialBinding(b),
            ..
        }) = set.find("CredentialBinding", ns, &r.name)
        && let Some(proxy) = &b.delivery.proxy
        && let Some(s) = sandbox
    {
        proxied_credential(&r.name, proxy, s, out);
    }
    if let Some(s) = sandbox {
        if e.external_calls
            && s.network.egress == toolgate_crds::EgressMode::None
            && d.execution.adapter != ExecutionAdapter::Mcp
        {
            out.push((
                Severity::Error,
                "spec.sandboxPolicyRef".into(),
                "sandbox-too-closed",
                format!(
                    "the tool declares externalCalls: true but SandboxPolicy/{} allows no egress",
                    d.sandbox_policy_ref
                        .as_ref()
                        .map_or("", |r| r.name.as_str())
                ),
            ));
        }
        // An MCP tool's state is its server's (its own store, or a service behind it), not
        // necessarily the workspace.
        if (writes(d) || e.mutates_state)
            && s.filesystem.write_roots.is_empty()
            && !e.external_calls
            && d.execution.adapter != ExecutionAdapter::Mcp
        {
            out.push((Severity::Error, "spec.sandboxPolicyRef".into(), "sandbox-too-closed", format!(
                "the tool writes the workspace but SandboxPolicy/{} has no filesystem.writeRoots", d.sandbox_policy_ref.as_ref().map_or("", |r| r.name.as_str()))));
        }
    }
}

/// Model-visible text holds no instructions to the model: a warning for the platform team's and
/// the workspace's own tools (a reviewer must look before it reaches a view), an error for
/// anything from outside.
fn no_instructions_to_the_model(d: &ToolDescriptorSpec, out: &mut Vec<Local>) {
    let severity = match d.provenance.trust_level {
        TrustLevel::FirstParty | TrustLevel::Workspace => Severity::Warning,
        TrustLevel::ThirdParty | TrustLevel::Untrusted => Severity::Error,
    };
    let poisoned = super::poisoning::findings(d);
    if !poisoned.is_empty() {
        let review = match severity {
            Severity::Warning => format!(
                "; the tool stays out of every view until a reviewer who read this version sets metadata.annotations[\"{}\"] to {:?}",
                super::poisoning::REVIEWED_ANNOTATION,
                digest::descriptor_digest(d).unwrap_or_default()
            ),
            Severity::Error => "; from a third party this blocks the tool".into(),
        };
        for (path, found) in poisoned {
            out.push((
                severity,
                path,
                super::poisoning::CODE,
                format!(
                    "model-visible text holds {found}: rewrite it as a plain description{review}"
                ),
            ));
        }
    }
}

/// A `proxy`-delivered credential reaches its hosts only through an egress proxy, which only a
/// sandbox with `egress: allowlist` has, and only where that allowlist lets the call go.
fn proxied_credential(
    binding: &str,
    proxy: &toolgate_crds::ProxyDelivery,
    s: &SandboxPolicySpec,
    out: &mut Vec<Local>,
) {
    let rules = match toolgate_contract::egress::EgressRules::from_policy(&s.network) {
        Ok(r) if s.network.egress == toolgate_crds::EgressMode::Allowlist => r,
        _ => {
            out.push((
            Severity::Error,
            "spec.credentialBindingRef".into(),
            "credential-proxy-needs-allowlist",
            format!(
                "CredentialBinding/{binding} is delivered by the egress proxy, which only a sandbox with network.egress: allowlist has; its SandboxPolicy's egress is {:?}",
                s.network.egress
            ),
            ));
            return;
        }
    };
    for (i, host) in proxy.hosts.iter().enumerate() {
        let (name, port) = match host.rsplit_once(':') {
            Some((n, p)) => (n, p.parse().unwrap_or(443)),
            None => (host.as_str(), 443),
        };
        if let Err(refusal) = rules.check_host(name, port, 443) {
            out.push((
                Severity::Error,
                "spec.credentialBindingRef".into(),
                "credential-proxy-host-not-allowed",
                format!(
                    "CredentialBinding/{binding} delivery.proxy.hosts[{i}]: the sandbox's egress refuses it ({refusal}); the value could never be sent there"
                ),
            ));
        }
    }
}

pub(crate) fn sandbox(s: &SandboxPolicySpec, out: &mut Vec<Local>) {
    for (i, root) in s.filesystem.write_roots.iter().enumerate() {
        if root == "/"
            || root.starts_with("/etc")
            || root.starts_with("/proc")
            || root.starts_with("/sys")
            || root.starts_with("/dev")
        {
            out.push((
                Severity::Error,
                format!("spec.filesystem.writeRoots[{i}]"),
                "sandbox-too-open",
                format!("a sandbox may not write {root:?}: expected a workspace path"),
            ));
        }
    }
    for (i, cidr) in s.network.allow_cidrs.iter().enumerate() {
        if toolgate_contract::egress::parse_cidr(cidr).is_none() {
            out.push((
                Severity::Error,
                format!("spec.network.allowCidrs[{i}]"),
                "schema-format",
                format!("expected a CIDR such as 140.82.112.0/20, found {cidr:?}"),
            ));
        }
    }
    if s.network.egress == toolgate_crds::EgressMode::Open && !s.network.deny_private_networks {
        out.push((Severity::Warning, "spec.network.denyPrivateNetworks".into(), "sandbox-too-open", "open egress with private networks reachable lets a tool reach cluster-internal services".into()));
    }
}

/// The input schema must be JSON Schema describing an object, and the examples must fit it.
fn input_schema(d: &ToolDescriptorSpec, out: &mut Vec<Local>) {
    // Schemas must be JSON Schema, and the input must describe an object.
    match jsonschema::meta::validate(&d.schemas.input_schema) {
        Err(e) => out.push((
            Severity::Error,
            "spec.schemas.inputSchema".into(),
            "invalid-json-schema",
            format!("not a valid JSON Schema at {}: {e}", schema_location(&e)),
        )),
        Ok(()) => {
            if d.schemas.input_schema.get("type") != Some(&Value::String("object".into())) {
                out.push((
                    Severity::Error,
                    "spec.schemas.inputSchema.type".into(),
                    "invalid-json-schema",
                    format!(
                        "expected \"object\" (tool args are a JSON object), found {}",
                        d.schemas
                            .input_schema
                            .get("type")
                            .map_or("nothing".into(), crate::args::short_json)
                    ),
                ));
                return;
            }
            for (i, ex) in d.description.examples.iter().enumerate() {
                out.extend(super::args_findings(
                    &d.schemas.input_schema,
                    &ex.expected_args,
                    &format!("spec.description.examples[{i}].expectedArgs"),
                    "example-args-invalid",
                ));
            }
        }
    }
}

/// Where in a JSON Schema a meta-schema error points (`/properties/path/type`).
fn schema_location(e: &jsonschema::ValidationError<'_>) -> String {
    let p = e.instance_path().as_str();
    if p.is_empty() {
        "/".into()
    } else {
        p.to_string()
    }
}
