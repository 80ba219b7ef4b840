//! The children of one ToolCall, built by pure functions: the executor Pod, its NetworkPolicy,
//! the call's spec as a ConfigMap and the brokered credential as a Secret. Names are
//! deterministic (a restarted operator applies the same objects, never a second pod) and every
//! child is owned by the call (garbage collection cleans up what the finalizer does not).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource,
    PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, ResourceRequirements,
    SeccompProfile, Secret, SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::{Digest, Sha256};
use toolgate_core::exec::ExecSpec;
use toolgate_crds::{EgressMode, ExecutionAdapter, SandboxPolicySpec};

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
        "network.egress: a NetworkPolicy cannot allow domains ({0}); only the http adapter, whose executor checks every request, may use a domain allowlist until the egress proxy exists"
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

/// What identifies the owning call.
#[derive(Debug, Clone)]
pub struct Owner<'a> {
    /// Call name.
    pub name: &'a str,
    /// Namespace.
    pub namespace: &'a str,
    /// UID.
    pub uid: &'a str,
}

fn owner_reference(o: &Owner<'_>) -> OwnerReference {
    OwnerReference {
        api_version: toolgate_crds::API_VERSION.into(),
        kind: "ToolCall".into(),
        name: o.name.into(),
        uid: o.uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn meta(o: &Owner<'_>, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(child_name(o.name)),
        namespace: Some(o.namespace.into()),
        labels: Some(BTreeMap::from([
            (CALL_LABEL.to_string(), label_value(o.name)),
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

/// The call's spec as a ConfigMap (immutable: a call's spec never changes).
pub fn config_map(o: &Owner<'_>, spec: &ExecSpec) -> Result<ConfigMap, serde_json::Error> {
    Ok(ConfigMap {
        metadata: meta(o, "call-spec"),
        data: Some(BTreeMap::from([(
            "spec.json".to_string(),
            serde_json::to_string_pretty(spec)?,
        )])),
        immutable: Some(true),
        ..Default::default()
    })
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

/// What the pod needs besides the call.
#[derive(Debug, Clone)]
pub struct PodInput<'a> {
    /// The executor image.
    pub image: &'a str,
    /// The sandbox policy.
    pub policy: &'a SandboxPolicySpec,
    /// The tool's timeout, in milliseconds.
    pub timeout_ms: u64,
    /// Whether a credential Secret is mounted.
    pub with_credential: bool,
    /// A Secret whose keys become the executor's environment (artifact store credentials).
    pub artifact_secret: Option<&'a str>,
    /// Whether a write root lies in the workspace (its volume is mounted read-write).
    pub workspace_writable: bool,
}

/// The workspace: the policy's PersistentVolumeClaim, or an empty folder of at most 1 GiB.
fn workspace_volume(input: &PodInput<'_>) -> Volume {
    match &input.policy.filesystem.workspace_claim_name {
        Some(claim) => Volume {
            name: "workspace".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.clone(),
                read_only: Some(!input.workspace_writable),
            }),
            ..Default::default()
        },
        None => Volume {
            name: "workspace".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity("1Gi".into())),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

/// The executor pod: hardened, limited, deadline-bound, and labelled for its NetworkPolicy.
pub fn pod(o: &Owner<'_>, input: &PodInput<'_>) -> Pod {
    let p = &input.policy.process;
    let mut limits = BTreeMap::from([(
        "memory".to_string(),
        Quantity(format!("{}Mi", p.max_memory_mb)),
    )]);
    if let Some(cpu) = p.max_cpu_millis {
        limits.insert("cpu".into(), Quantity(format!("{cpu}m")));
    }
    let tmp_mb = input.policy.filesystem.temp_dir_size_mb.unwrap_or(64);
    let name = child_name(o.name);
    let mut mounts = vec![
        VolumeMount {
            name: "spec".into(),
            mount_path: SPEC_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
        VolumeMount {
            name: "workspace".into(),
            mount_path: WORKSPACE_DIR.into(),
            read_only: Some(!input.workspace_writable),
            ..Default::default()
        },
        VolumeMount {
            name: "tmp".into(),
            mount_path: "/tmp".into(),
            ..Default::default()
        },
    ];
    let mut volumes = vec![
        Volume {
            name: "spec".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: name.clone(),
                default_mode: Some(0o444),
                ..Default::default()
            }),
            ..Default::default()
        },
        workspace_volume(input),
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity(format!("{tmp_mb}Mi"))),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    let mut args = vec![
        "--spec".to_string(),
        format!("{SPEC_DIR}/spec.json"),
        "--result".to_string(),
        "/dev/termination-log".to_string(),
    ];
    if input.with_credential {
        mounts.push(VolumeMount {
            name: "credentials".into(),
            mount_path: CREDENTIALS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
        volumes.push(Volume {
            name: "credentials".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(name.clone()),
                default_mode: Some(0o400),
                ..Default::default()
            }),
            ..Default::default()
        });
        args.extend(["--credentials".to_string(), CREDENTIALS_DIR.to_string()]);
    }
    Pod {
        metadata: meta(o, "executor"),
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            active_deadline_seconds: Some(
                i64::try_from(input.timeout_ms.div_ceil(1000)).unwrap_or(i64::MAX / 2)
                    + DEADLINE_GRACE_SECONDS,
            ),
            runtime_class_name: input.policy.runtime_class_name.clone(),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(EXECUTOR_UID),
                run_as_group: Some(EXECUTOR_UID),
                fs_group: Some(EXECUTOR_UID),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            containers: vec![Container {
                name: "executor".into(),
                image: Some(input.image.into()),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(vec!["toolgate-executor".into()]),
                args: Some(args),
                working_dir: Some(WORKSPACE_DIR.into()),
                termination_message_path: Some("/dev/termination-log".into()),
                termination_message_policy: Some("File".into()),
                resources: Some(ResourceRequirements {
                    requests: Some(limits.clone()),
                    limits: Some(limits),
                    ..Default::default()
                }),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    read_only_root_filesystem: Some(true),
                    run_as_non_root: Some(true),
                    privileged: Some(false),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".into()]),
                        ..Default::default()
                    }),
                    seccomp_profile: Some(SeccompProfile {
                        type_: "RuntimeDefault".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                volume_mounts: Some(mounts),
                env_from: input.artifact_secret.map(|name| {
                    vec![k8s_openapi::api::core::v1::EnvFromSource {
                        secret_ref: Some(k8s_openapi::api::core::v1::SecretEnvSource {
                            name: name.into(),
                            optional: Some(false),
                        }),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }],
            volumes: Some(volumes),
            ..Default::default()
        }),
        ..Default::default()
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: Owner<'static> = Owner {
        name: "fix-serializer-3",
        namespace: "team-a",
        uid: "0b8a-uid",
    };

    fn policy(network: serde_json::Value) -> SandboxPolicySpec {
        serde_json::from_value(serde_json::json!({
            "mode": "workspace_write",
            "filesystem": {"readRoots": ["workspace"], "writeRoots": ["workspace"], "tempDirSizeMb": 32},
            "network": network,
            "environment": {},
            "process": {"timeoutMs": 10000, "maxMemoryMb": 128, "maxCpuMillis": 500, "maxProcesses": 4,
                        "maxStdoutBytes": 100, "maxStderrBytes": 100},
            "runtimeClassName": "gvisor",
            "audit": {}
        }))
        .expect("policy")
    }

    #[test]
    fn names_are_deterministic_dns_labels() {
        assert_eq!(child_name("fix-serializer-3"), "tg-fix-serializer-3");
        let long = "a".repeat(100);
        let n = child_name(&long);
        assert!(n.len() <= 63, "{n}");
        assert_eq!(n, child_name(&long));
        assert_ne!(n, child_name(&format!("{long}b")));
        assert!(label_value(&long).len() <= 63);
    }

    #[test]
    fn the_pod_is_hardened_limited_and_owned() {
        let p = pod(
            &OWNER,
            &PodInput {
                image: "ghcr.io/toolgate/executor:0.1.0",
                policy: &policy(serde_json::json!({"egress": "none"})),
                timeout_ms: 10_001,
                with_credential: true,
                artifact_secret: Some("toolgate-artifacts"),
                workspace_writable: true,
            },
        );
        let owner = &p.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("ToolCall", "0b8a-uid", Some(true))
        );
        assert_eq!(p.metadata.name.as_deref(), Some("tg-fix-serializer-3"));
        let spec = p.spec.expect("spec");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(
            spec.active_deadline_seconds,
            Some(11 + DEADLINE_GRACE_SECONDS)
        );
        assert_eq!(spec.runtime_class_name.as_deref(), Some("gvisor"));
        let psc = spec.security_context.expect("pod security");
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(
            psc.seccomp_profile.expect("seccomp").type_,
            "RuntimeDefault"
        );
        let c = &spec.containers[0];
        let sc = c.security_context.as_ref().expect("container security");
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(
            sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_string()])
        );
        let r = c.resources.as_ref().expect("resources");
        assert_eq!(r.requests, r.limits, "requests equal limits");
        assert_eq!(
            r.limits.as_ref().expect("limits")["memory"],
            Quantity("128Mi".into())
        );
        assert_eq!(
            r.limits.as_ref().expect("limits")["cpu"],
            Quantity("500m".into())
        );
        let args = c.args.clone().expect("args").join(" ");
        assert!(args.contains("--result /dev/termination-log") && args.contains("--credentials"));
        let vols = spec.volumes.expect("volumes");
        let tmp = vols.iter().find(|v| v.name == "tmp").expect("tmp");
        assert_eq!(
            tmp.empty_dir.as_ref().and_then(|e| e.size_limit.clone()),
            Some(Quantity("32Mi".into()))
        );
        let cred = vols
            .iter()
            .find(|v| v.name == "credentials")
            .expect("credentials");
        assert_eq!(
            cred.secret.as_ref().and_then(|s| s.default_mode),
            Some(0o400)
        );
        assert_eq!(
            p.metadata.labels.expect("labels")[CALL_LABEL],
            "fix-serializer-3"
        );
    }

    /// A pod of `policy` without credential or artifact store keys.
    fn plain(policy: &SandboxPolicySpec, workspace_writable: bool) -> PodInput<'_> {
        PodInput {
            image: "x",
            policy,
            timeout_ms: 1000,
            with_credential: false,
            artifact_secret: None,
            workspace_writable,
        }
    }

    #[test]
    fn a_pod_without_a_credential_mounts_none() {
        let p = pod(
            &OWNER,
            &plain(&policy(serde_json::json!({"egress": "none"})), false),
        );
        let spec = p.spec.expect("spec");
        assert!(
            spec.volumes
                .expect("volumes")
                .iter()
                .all(|v| v.secret.is_none())
        );
        assert!(
            !spec.containers[0]
                .args
                .clone()
                .expect("args")
                .contains(&"--credentials".to_string())
        );
    }

    /// The executor image (executor/Containerfile) runs what the pod says, as the pod's user.
    #[test]
    fn the_executor_image_matches_the_pod() {
        let containerfile = include_str!("../../executor/Containerfile");
        let p = pod(
            &OWNER,
            &plain(&policy(serde_json::json!({"egress": "none"})), false),
        );
        let command = p.spec.expect("spec").containers[0]
            .command
            .clone()
            .expect("command");
        assert!(
            containerfile.contains(&format!("/usr/local/bin/{}\n", command[0])),
            "the image installs {} on PATH",
            command[0]
        );
        assert!(containerfile.contains(&format!("\nUSER {EXECUTOR_UID}:{EXECUTOR_UID}\n")));
    }

    #[test]
    fn the_workspace_is_the_policys_claim_read_only_unless_written() {
        let mut with_claim = policy(serde_json::json!({"egress": "none"}));
        with_claim.filesystem.workspace_claim_name = Some("team-a-repo".into());
        for writable in [false, true] {
            for (p, claim) in [
                (&with_claim, Some("team-a-repo")),
                (&policy(serde_json::json!({"egress": "none"})), None),
            ] {
                let built = pod(&OWNER, &plain(p, writable));
                let spec = built.spec.expect("spec");
                let volume = spec
                    .volumes
                    .expect("volumes")
                    .into_iter()
                    .find(|v| v.name == "workspace")
                    .expect("workspace volume");
                let pvc = volume.persistent_volume_claim.clone();
                assert_eq!(pvc.as_ref().map(|c| c.claim_name.as_str()), claim);
                if let Some(pvc) = pvc {
                    assert_eq!(pvc.read_only, Some(!writable));
                } else {
                    assert!(volume.empty_dir.is_some());
                }
                let mount = spec.containers[0]
                    .volume_mounts
                    .clone()
                    .expect("mounts")
                    .into_iter()
                    .find(|m| m.name == "workspace")
                    .expect("workspace mount");
                assert_eq!(
                    (mount.mount_path.as_str(), mount.read_only),
                    (WORKSPACE_DIR, Some(!writable))
                );
            }
        }
    }

    #[test]
    fn network_policies_per_egress_mode() {
        let none = network_policy(
            &OWNER,
            &policy(serde_json::json!({"egress": "none"})),
            ExecutionAdapter::Cli,
            &[],
        )
        .expect("none");
        let spec = none.spec.expect("spec");
        assert_eq!(
            spec.policy_types,
            Some(vec!["Ingress".to_string(), "Egress".to_string()])
        );
        assert_eq!(spec.ingress, Some(vec![]));
        assert_eq!(spec.egress, Some(vec![]));
        assert_eq!(
            spec.pod_selector
                .expect("selector")
                .match_labels
                .expect("labels")[CALL_LABEL],
            "fix-serializer-3"
        );

        let open = network_policy(
            &OWNER,
            &policy(serde_json::json!({"egress": "open", "denyPrivateNetworks": true})),
            ExecutionAdapter::Cli,
            &[],
        )
        .expect("open");
        let rules = open.spec.expect("spec").egress.expect("egress");
        let v4 = rules[0].to.as_ref().expect("to")[0]
            .ip_block
            .clone()
            .expect("block");
        assert_eq!(v4.cidr, "0.0.0.0/0");
        assert!(
            v4.except
                .expect("except")
                .contains(&"10.0.0.0/8".to_string())
        );

        let cidrs = network_policy(
            &OWNER,
            &policy(serde_json::json!({"egress": "allowlist", "allowCidrs": ["203.0.113.0/24"]})),
            ExecutionAdapter::Cli,
            &[],
        )
        .expect("cidrs");
        let rules = cidrs.spec.expect("spec").egress.expect("egress");
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].to.as_ref().expect("to")[0]
                .ip_block
                .as_ref()
                .expect("block")
                .cidr,
            "203.0.113.0/24"
        );

        let domains = policy(
            serde_json::json!({"egress": "allowlist", "allowDomains": ["api.github.com"], "denyPrivateNetworks": true}),
        );
        let http = network_policy(&OWNER, &domains, ExecutionAdapter::Http, &[]).expect("http");
        let rules = http.spec.expect("spec").egress.expect("egress");
        assert_eq!(rules.len(), 2, "web ports to public ranges, and DNS");
        let ports: Vec<_> = rules[0]
            .ports
            .clone()
            .expect("ports")
            .into_iter()
            .map(|p| p.port)
            .collect();
        assert_eq!(
            ports,
            vec![Some(IntOrString::Int(443)), Some(IntOrString::Int(80))]
        );
        assert!(matches!(
            network_policy(&OWNER, &domains, ExecutionAdapter::Cli, &[]),
            Err(BuildError::DomainsForProcess(_))
        ));
    }

    #[test]
    fn the_artifact_store_stays_reachable_even_with_egress_none() {
        let np = network_policy(
            &OWNER,
            &policy(serde_json::json!({"egress": "none"})),
            ExecutionAdapter::Cli,
            &["10.96.40.0/24".to_string()],
        )
        .expect("policy");
        let rules = np.spec.expect("spec").egress.expect("egress");
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].to.as_ref().expect("to")[0]
                .ip_block
                .as_ref()
                .expect("block")
                .cidr,
            "10.96.40.0/24"
        );
    }

    #[test]
    fn secret_and_config_map_are_immutable_and_owned() {
        let s = secret(&OWNER, "github-token", "canary");
        assert_eq!(s.immutable, Some(true));
        assert_eq!(s.data.expect("data")["github-token"].0, b"canary");
        assert!(s.metadata.owner_references.is_some());
    }
}
