//! The NetworkPolicy of one call's pod: all ingress denied, egress only what the sandbox
//! policy allows (plus the artifact store).

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use toolgate_crds::{EgressMode, ExecutionAdapter, SandboxPolicySpec};

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

/// The NetworkPolicy of one call's pod: all ingress denied; egress none, the allowed CIDRs, or
/// (http adapter with domains) DNS plus HTTPS/HTTP to public addresses, which the executor's
/// client narrows to the allowed domains; private ranges excepted when the policy says so; plus
/// the artifact store's CIDRs, which the executor needs for every call.
pub fn network_policy(
    o: &Owner<'_>,
    policy: &SandboxPolicySpec,
    adapter: ExecutionAdapter,
    artifact_store: &[String],
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
        EgressMode::Allowlist => {
            let mut rules = Vec::new();
            if !net.allow_cidrs.is_empty() {
                rules.push(NetworkPolicyEgressRule {
                    to: Some(net.allow_cidrs.iter().map(|c| ip_peer(c, &[])).collect()),
                    ports: None,
                });
            }
            if !net.allow_domains.is_empty() {
                if adapter != ExecutionAdapter::Http {
                    return Err(BuildError::DomainsForProcess(net.allow_domains.join(", ")));
                }
                rules.push(NetworkPolicyEgressRule {
                    to: Some(vec![
                        ip_peer("0.0.0.0/0", v4_except),
                        ip_peer("::/0", v6_except),
                    ]),
                    ports: Some(
                        [443, 80]
                            .into_iter()
                            .map(|p| NetworkPolicyPort {
                                protocol: Some("TCP".into()),
                                port: Some(IntOrString::Int(p)),
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
    // The executor uploads the full output: the artifact store stays reachable whatever the
    // tool's egress (operator flag --artifacts-egress-cidr).
    let mut egress = egress;
    if !artifact_store.is_empty() {
        egress.push(NetworkPolicyEgressRule {
            to: Some(artifact_store.iter().map(|c| ip_peer(c, &[])).collect()),
            ports: None,
        });
    }
    Ok(NetworkPolicy {
        metadata: meta(o, "network-policy"),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    CALL_LABEL.to_string(),
                    label_value(o.name),
                )])),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![]),
            egress: Some(egress),
        }),
    })
}
