//! The children of one ToolCall, built by pure functions: the executor Pod, its NetworkPolicy,
//! the call's spec as a ConfigMap and the brokered credential as a Secret. Names are
//! deterministic (a restarted operator applies the same objects, never a second pod) and every
//! child is owned by the call (garbage collection cleans up what the finalizer does not).

use std::collections::BTreeMap;

mod network;
mod pod;
#[cfg(test)]
mod tests;

pub use network::{
    ArtifactEgress, EgressGateConfig, executor_ports, network_policy, network_policy_through,
};
pub use pod::{PodInput, executor_terminated, pod};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sha2::{Digest, Sha256};
use toolgate_core::exec::ExecSpec;

/// Label every child carries: the call it belongs to.
pub const CALL_LABEL: &str = "toolgate.dev/call";
/// Label of the component.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// The executor's user and group: not root.
pub const EXECUTOR_UID: i64 = 65532;
/// Where the spec is mounted.
pub const SPEC_DIR: &str = "/etc/toolgate/call";
/// Where the credential is mounted.
pub const CREDENTIALS_DIR: &str = "/var/run/toolgate/credentials";
/// Where the workspace is mounted.
pub const WORKSPACE_DIR: &str = "/workspace";
/// Seconds beyond the tool's timeout before the kubelet stops the pod.
pub const DEADLINE_GRACE_SECONDS: i64 = 30;

/// Private, loopback, link-local and shared ranges: excepted from egress when the policy denies
/// private networks.
pub const PRIVATE_V4: &[&str] = &[
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "0.0.0.0/8",
];
/// The IPv6 counterparts.
pub const PRIVATE_V6: &[&str] = &["fc00::/7", "fe80::/10", "::1/128"];

/// Why children cannot be built for a call. Nothing is created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// A domain allowlist for a process that opens its own connections.
    #[error(
        "network.egress: a NetworkPolicy cannot allow domains ({0}), and this operator serves no egress proxy (start it with --egress-proxy-address); only the http adapter, whose executor checks every request, may use a domain allowlist without one"
    )]
    DomainsForProcess(String),
}

/// The name of every child of a call: `tg-<call>`, shortened with a hash to fit a DNS label.
pub fn child_name(call: &str) -> String {
    let name = format!("tg-{call}");
    if name.len() <= 63 {
        return name;
    }
    let hash = hex::encode(&Sha256::digest(call.as_bytes())[..4]);
    let keep = name
        .char_indices()
        .take_while(|(i, _)| *i < 63 - 9)
        .map(|(_, c)| c)
        .collect::<String>();
    format!("{}-{hash}", keep.trim_end_matches(['-', '.']))
}

/// What identifies the object a pod runs for: a ToolCall, or an McpServer being discovered.
#[derive(Debug, Clone)]
pub struct Owner<'a> {
    /// `ToolCall` or `McpServer`.
    pub kind: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Namespace.
    pub namespace: &'a str,
    /// UID.
    pub uid: &'a str,
}

impl Owner<'_> {
    /// What its children are named for ([`subject`]).
    pub fn subject(&self) -> String {
        subject(self.kind, self.name)
    }
}

/// What the children of an object are named for: a call's name, or `mcp-<server>` for an
/// McpServer's discovery (so a call and a server of the same name never share children).
pub fn subject(kind: &str, name: &str) -> String {
    match kind {
        "ToolCall" => name.to_string(),
        _ => format!("mcp-{name}"),
    }
}

fn owner_reference(o: &Owner<'_>) -> OwnerReference {
    OwnerReference {
        api_version: toolgate_crds::API_VERSION.into(),
        kind: o.kind.into(),
        name: o.name.into(),
        uid: o.uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

pub(crate) fn meta(o: &Owner<'_>, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(child_name(&o.subject())),
        namespace: Some(o.namespace.into()),
        labels: Some(BTreeMap::from([
            (CALL_LABEL.to_string(), label_value(&o.subject())),
            (COMPONENT_LABEL.to_string(), component.to_string()),
            (
                "app.kubernetes.io/managed-by".to_string(),
                "toolgate".to_string(),
            ),
        ])),
        owner_references: Some(vec![owner_reference(o)]),
        ..Default::default()
    }
}

/// A call name as a label value (at most 63 characters).
pub fn label_value(call: &str) -> String {
    if call.len() <= 63 {
        call.to_string()
    } else {
        child_name(call)
    }
}

/// The file of a call's CA beside its spec ([`config_map`]).
pub const CA_FILE: &str = "egress-ca.pem";

/// The call's spec as a ConfigMap (immutable: a call's spec never changes), with the call's CA
/// when its egress proxy intercepts TLS.
pub fn config_map(
    o: &Owner<'_>,
    spec: &ExecSpec,
    ca: Option<&str>,
) -> Result<ConfigMap, serde_json::Error> {
    let mut data = BTreeMap::from([("spec.json".to_string(), serde_json::to_string_pretty(spec)?)]);
    if let Some(ca) = ca {
        data.insert(CA_FILE.to_string(), ca.to_string());
    }
    Ok(ConfigMap {
        metadata: meta(o, "call-spec"),
        data: Some(data),
        immutable: Some(true),
        ..Default::default()
    })
}

/// Name of the Secret that keeps a call's lease id until the lease is revoked.
pub fn lease_name(call: &str) -> String {
    format!("{}-lease", child_name(call))
}

/// The lease a call's credential holds, kept (never mounted) until it is revoked: the call's
/// credential Secret goes when the pod ends, this one when Vault confirms the revocation, so an
/// operator that restarts in between still revokes it.
pub fn lease_secret(o: &Owner<'_>, lease: &toolgate_broker::Lease) -> Secret {
    let mut metadata = meta(o, "lease");
    metadata.name = Some(lease_name(o.name));
    Secret {
        metadata,
        string_data: Some(BTreeMap::from([
            ("leaseId".to_string(), lease.id.clone()),
            ("binding".to_string(), lease.binding.clone()),
        ])),
        type_: Some("toolgate.dev/lease".into()),
        ..Default::default()
    }
}

/// The brokered credential as a Secret, one file.
pub fn secret(o: &Owner<'_>, file_name: &str, value: &str) -> Secret {
    Secret {
        metadata: meta(o, "credential"),
        data: Some(BTreeMap::from([(
            file_name.to_string(),
            ByteString(value.as_bytes().to_vec()),
        )])),
        immutable: Some(true),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}
