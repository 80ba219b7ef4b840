//! The NetworkPolicy of one call's pod: all ingress denied, egress only what the sandbox
//! policy allows (plus the artifact store).

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use toolgate_crds::{EgressMode, SandboxPolicySpec};

use super::{BuildError, CALL_LABEL, Owner, PRIVATE_V4, PRIVATE_V6, label_value, meta};

fn ip_peer(cidr: &str, except: &[&str]) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.into(),
            except: (!except.is_empty()).then(|| except.iter().map(|s| s.to_string()).collect()),
        }),
        ..Default::default()
    }
}

fn dns_rule() -> NetworkPolicyEgressRule {
    NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_string(),
                    "kube-system".to_string(),
                )])),
                ..Default::default()
            }),
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "k8s-app".to_string(),
                    "kube-dns".to_string(),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ports: Some(
            ["UDP", "TCP"]
                .into_iter()
                .map(|proto| NetworkPolicyPort {
                    protocol: Some(proto.into()),
                    port: Some(IntOrString::Int(53)),
                    ..Default::default()
                })
                .collect(),
        ),
    }
}

/// The ports the executor itself connects to when it is the tool's only network client (the
/// `http` adapter and an MCP server over streamable HTTP: the port of the URL it requests), or
/// `None` when a process of the tool's makes its own requests.
pub fn executor_ports(execution: &toolgate_crds::Execution) -> Option<Vec<i32>> {
    if !toolgate_core::exec::executor_is_the_only_client(execution) {
        return None;
    }
    // The one URL the executor requests: an HTTP tool's (its authority is never a template) or
    // an MCP server's.
    let url = execution
        .http
        .as_ref()
        .map(|h| h.url_template.as_str())
        .or_else(|| execution.mcp.as_ref().and_then(|m| m.url.as_deref()));
    match url {
        Some(url) => Some(vec![url_port(url)]),
        None => Some(vec![443, 80]),
    }
}

/// The TCP port a URL names, or its scheme's (80 for http, else 443).
fn url_port(url: &str) -> i32 {
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    let authority = rest.split('/').next().unwrap_or_default();
    authority
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<i32>().ok())
        .unwrap_or(if scheme == "http" { 80 } else { 443 })
}

/// Where the executor uploads a call's full output: the artifact store's CIDRs (operator flag
/// `--artifacts-egress-cidr`) and its port, opened in every call's NetworkPolicy whatever the
/// tool's egress — and only that port, so a store that shares an address with other services
/// (a node, the API server) opens nothing else to the tool.
#[derive(Debug, Clone, Default)]
pub struct ArtifactEgress {
    /// The store's CIDRs; none when the store is a folder on the node.
    pub cidrs: Vec<String>,
    /// The store's port.
    pub port: i32,
}

impl ArtifactEgress {
    /// The store at `endpoint` (AWS's HTTPS endpoints when `None`).
    pub fn new(cidrs: Vec<String>, endpoint: Option<&str>) -> ArtifactEgress {
        ArtifactEgress {
            cidrs,
            port: endpoint.map(url_port).unwrap_or(443),
        }
    }
}

/// How the executor proves a pod's NetworkPolicy is in force before the tool starts
/// ([`toolgate_core::exec::EgressGate`]): addresses known to listen (the API server), each probed
/// only by pods whose policy refuses it, within a bound.
#[derive(Debug, Clone, Default)]
pub struct EgressGateConfig {
    /// Listening TCP addresses.
    pub probes: Vec<std::net::SocketAddr>,
    /// How long the policy may take to be in force; 0 turns the gate off.
    pub within_ms: u64,
}

impl EgressGateConfig {
    /// The gate of a pod with this NetworkPolicy: the probes it refuses, or `None` (gate off, or
    /// the policy refuses none of them, so nothing can prove it is in force).
    pub fn for_policy(&self, policy: &NetworkPolicy) -> Option<toolgate_core::exec::EgressGate> {
        let refused: Vec<_> = self
            .probes
            .iter()
            .copied()
            .filter(|a| refuses(policy, *a))
            .collect();
        (self.within_ms > 0 && !refused.is_empty()).then_some(toolgate_core::exec::EgressGate {
            refused,
            within_ms: self.within_ms,
        })
    }
}

/// Whether a pod under `policy` is certainly refused a TCP connection to `address`: no egress
/// rule admits it. A rule whose peers select pods or namespaces, and admits the port, might
/// admit the address (the API server can be a pod), so it counts as admitting it.
pub fn refuses(policy: &NetworkPolicy, address: std::net::SocketAddr) -> bool {
    let Some(spec) = &policy.spec else {
        return false;
    };
    if !spec
        .policy_types
        .as_ref()
        .is_some_and(|t| t.iter().any(|t| t == "Egress"))
    {
        return false;
    }
    let port_admitted = |ports: &Option<Vec<NetworkPolicyPort>>| match ports {
        None => true,
        Some(ports) if ports.is_empty() => true,
        Some(ports) => ports.iter().any(|p| {
            let tcp = p.protocol.as_deref().unwrap_or("TCP") == "TCP";
            let from = match &p.port {
                None => return tcp,
                Some(IntOrString::Int(n)) => *n,
                // A named port is a container's: it could be any number.
                Some(IntOrString::String(_)) => return tcp,
            };
            let to = p.end_port.unwrap_or(from);
            tcp && (from..=to).contains(&i32::from(address.port()))
        }),
    };
    let in_cidr = |cidr: &str| {
        cidr.parse::<ipnet::IpNet>()
            .map_or(true, |net| net.contains(&address.ip()))
    };
    let peer_admits = |peer: &NetworkPolicyPeer| match &peer.ip_block {
        Some(block) => {
            in_cidr(&block.cidr)
                && !block.except.iter().flatten().any(|e| {
                    e.parse::<ipnet::IpNet>()
                        .is_ok_and(|n| n.contains(&address.ip()))
                })
        }
        None => true,
    };
    !spec.egress.iter().flatten().any(|rule| {
        port_admitted(&rule.ports)
            && match &rule.to {
                None => true,
                Some(peers) if peers.is_empty() => true,
                Some(peers) => peers.iter().any(peer_admits),
            }
    })
}

/// Egress to the call's proxy alone: its address and port.
fn proxy_rule(proxy: &std::net::SocketAddr) -> NetworkPolicyEgressRule {
    let cidr = match proxy.ip() {
        std::net::IpAddr::V4(ip) => format!("{ip}/32"),
        std::net::IpAddr::V6(ip) => format!("{ip}/128"),
    };
    NetworkPolicyEgressRule {
        to: Some(vec![ip_peer(&cidr, &[])]),
        ports: Some(vec![NetworkPolicyPort {
            protocol: Some("TCP".into()),
            port: Some(IntOrString::Int(i32::from(proxy.port()))),
            ..Default::default()
        }]),
    }
}

/// The NetworkPolicy of one call's pod: all ingress denied; egress none, the allowed CIDRs, or
/// (the executor the only client, with domains) DNS plus `executor_ports` to public addresses,
/// which the executor's client narrows to the allowed domains; private ranges excepted when the
/// policy says so; plus the artifact store's CIDRs, which the executor needs for every call.
pub fn network_policy(
    o: &Owner<'_>,
    policy: &SandboxPolicySpec,
    executor_ports: Option<&[i32]>,
    artifact_store: &ArtifactEgress,
) -> Result<NetworkPolicy, BuildError> {
    network_policy_through(o, policy, executor_ports, artifact_store, None)
}

/// [`network_policy`] for a call whose egress by name goes through an egress proxy at `proxy`
/// (a process tool under a domain allowlist): its pod may reach the proxy's address and port
/// and nothing else (but the artifact store), whatever the allowlist names — the proxy decides
/// names and CIDRs alike, as in the embedded runtime, and a tool cannot go around it.
pub fn network_policy_through(
    o: &Owner<'_>,
    policy: &SandboxPolicySpec,
    executor_ports: Option<&[i32]>,
    artifact_store: &ArtifactEgress,
    proxy: Option<std::net::SocketAddr>,
) -> Result<NetworkPolicy, BuildError> {
    let net = &policy.network;
    let (v4_except, v6_except): (&[&str], &[&str]) = if net.deny_private_networks {
        (PRIVATE_V4, PRIVATE_V6)
    } else {
        (&[], &[])
    };
    let egress = match net.egress {
        EgressMode::None => vec![],
        EgressMode::Open => vec![
            NetworkPolicyEgressRule {
                to: Some(vec![
                    ip_peer("0.0.0.0/0", v4_except),
                    ip_peer("::/0", v6_except),
                ]),
                ports: None,
            },
            dns_rule(),
        ],
        EgressMode::Allowlist
            if executor_ports.is_none() && !net.allow_domains.is_empty() && proxy.is_none() =>
        {
            return Err(BuildError::DomainsForProcess(net.allow_domains.join(", ")));
        }
        EgressMode::Allowlist if proxy.is_some() => proxy.iter().map(proxy_rule).collect(),
        EgressMode::Allowlist => {
            let mut rules = Vec::new();
            if !net.allow_cidrs.is_empty() {
                rules.push(NetworkPolicyEgressRule {
                    to: Some(net.allow_cidrs.iter().map(|c| ip_peer(c, &[])).collect()),
                    ports: None,
                });
            }
            if !net.allow_domains.is_empty() {
                let Some(ports) = executor_ports else {
                    return Err(BuildError::DomainsForProcess(net.allow_domains.join(", ")));
                };
                rules.push(NetworkPolicyEgressRule {
                    to: Some(vec![
                        ip_peer("0.0.0.0/0", v4_except),
                        ip_peer("::/0", v6_except),
                    ]),
                    ports: Some(
                        ports
                            .iter()
                            .map(|p| NetworkPolicyPort {
                                protocol: Some("TCP".into()),
                                port: Some(IntOrString::Int(*p)),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                });
                rules.push(dns_rule());
            }
            rules
        }
    };
    // The executor uploads the full output: the artifact store's port stays reachable whatever
    // the tool's egress.
    let mut egress = egress;
    if !artifact_store.cidrs.is_empty() {
        egress.push(NetworkPolicyEgressRule {
            to: Some(
                artifact_store
                    .cidrs
                    .iter()
                    .map(|c| ip_peer(c, &[]))
                    .collect(),
            ),
            ports: Some(vec![NetworkPolicyPort {
                protocol: Some("TCP".into()),
                port: Some(IntOrString::Int(artifact_store.port)),
                ..Default::default()
            }]),
        });
    }
    Ok(NetworkPolicy {
        metadata: meta(o, "network-policy"),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    CALL_LABEL.to_string(),
                    label_value(&o.subject()),
                )])),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![]),
            egress: Some(egress),
        }),
    })
}
