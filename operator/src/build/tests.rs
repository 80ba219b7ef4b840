//! The children as built: names, owners, the hardened pod, egress per mode.

use super::*;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use toolgate_crds::SandboxPolicySpec;

const OWNER: Owner<'static> = Owner {
    kind: "ToolCall",
    name: "fix-serializer-3",
    namespace: "team-a",
    uid: "0b8a-uid",
};

fn policy(network: serde_json::Value) -> SandboxPolicySpec {
    serde_json::from_value(serde_json::json!({
        "mode": "workspace_write",
        "filesystem": {"readRoots": ["workspace"], "writeRoots": ["workspace"], "tempDirSizeMb": 32, "writeQuota": {"sizeMb": 48, "files": 1000}},
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
    let workspace = vols.iter().find(|v| v.name == "workspace").expect("ws");
    assert_eq!(
        workspace
            .empty_dir
            .as_ref()
            .and_then(|e| e.size_limit.clone()),
        Some(Quantity("48Mi".into())),
        "the workspace is bounded by the policy's write quota"
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
    let containerfile = include_str!("../../../executor/Containerfile");
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
        None,
        &ArtifactEgress::default(),
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
        None,
        &ArtifactEgress::default(),
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
        None,
        &ArtifactEgress::default(),
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
    let http = network_policy(
        &OWNER,
        &domains,
        Some(&[443, 80]),
        &ArtifactEgress::default(),
    )
    .expect("http");
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
        network_policy(&OWNER, &domains, None, &ArtifactEgress::default()),
        Err(BuildError::DomainsForProcess(_))
    ));
}

#[test]
fn a_process_tool_under_a_domain_allowlist_reaches_its_proxy_and_nothing_else() {
    let domains = policy(serde_json::json!({
        "egress": "allowlist",
        "allowDomains": ["api.github.com"],
        "allowCidrs": ["203.0.113.0/24"],
    }));
    let proxy: std::net::SocketAddr = "10.1.2.3:31337".parse().expect("addr");
    let np = super::network_policy_through(
        &OWNER,
        &domains,
        None,
        &ArtifactEgress::default(),
        Some(proxy),
    )
    .expect("policy");
    let rules = np.spec.expect("spec").egress.expect("egress");
    // One rule: the proxy's address and port. Not the CIDR (the proxy decides it), not DNS.
    assert_eq!(rules.len(), 1, "{rules:#?}");
    let to = rules[0].to.as_ref().expect("to");
    assert_eq!(to.len(), 1);
    assert_eq!(to[0].ip_block.as_ref().expect("block").cidr, "10.1.2.3/32");
    let ports = rules[0].ports.as_ref().expect("ports");
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].port, Some(IntOrString::Int(31337)));
    // Whoever the client, a call given a proxy (the caller's choice: `call::plan::needs_proxy`)
    // reaches that proxy alone — an http tool whose credential the proxy delivers too.
    let http = super::network_policy_through(
        &OWNER,
        &domains,
        Some(&[443]),
        &ArtifactEgress::default(),
        Some(proxy),
    )
    .expect("policy");
    assert_eq!(http.spec.expect("spec").egress.expect("egress").len(), 1);
    // Given none, the executor's own client keeps its direct rules (the CIDR, then its ports).
    let direct = super::network_policy_through(
        &OWNER,
        &domains,
        Some(&[443]),
        &ArtifactEgress::default(),
        None,
    )
    .expect("policy");
    assert!(direct.spec.expect("spec").egress.expect("egress").len() > 1);
    // A process tool allowed domains with no proxy is refused: a NetworkPolicy cannot name them.
    assert!(matches!(
        super::network_policy_through(&OWNER, &domains, None, &ArtifactEgress::default(), None),
        Err(BuildError::DomainsForProcess(_))
    ));
}

#[test]
fn the_artifact_store_stays_reachable_even_with_egress_none_on_its_port_only() {
    let np = network_policy(
        &OWNER,
        &policy(serde_json::json!({"egress": "none"})),
        None,
        &ArtifactEgress::new(
            vec!["10.96.40.0/24".to_string()],
            Some("http://10.96.40.7:9000"),
        ),
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
    let ports: Vec<_> = rules[0]
        .ports
        .clone()
        .expect("only the store's port")
        .into_iter()
        .map(|p| (p.protocol, p.port))
        .collect();
    assert_eq!(
        ports,
        vec![(Some("TCP".into()), Some(IntOrString::Int(9000)))]
    );
    // AWS itself: HTTPS.
    assert_eq!(ArtifactEgress::new(vec![], None).port, 443);
    assert_eq!(
        ArtifactEgress::new(vec![], Some("https://minio.storage.svc")).port,
        443
    );
}

#[test]
fn the_egress_gate_probes_only_what_the_policy_refuses() {
    use super::network::refuses;
    use crate::build::EgressGateConfig;
    let api: std::net::SocketAddr = "10.96.40.7:6443".parse().expect("addr");
    let store = ArtifactEgress::new(vec!["10.96.40.7/32".into()], Some("http://10.96.40.7:9000"));
    let np = |network: serde_json::Value| {
        network_policy(&OWNER, &policy(network), Some(&[443, 80]), &store).expect("policy")
    };
    // The store shares the API server's address: only its own port is opened.
    let none = np(serde_json::json!({"egress": "none"}));
    assert!(refuses(&none, api));
    assert!(!refuses(&none, "10.96.40.7:9000".parse().expect("addr")));
    // Private ranges excepted from open egress: refused; allowed: admitted.
    assert!(refuses(
        &np(serde_json::json!({"egress": "open", "denyPrivateNetworks": true})),
        api
    ));
    assert!(!refuses(
        &np(serde_json::json!({"egress": "open", "denyPrivateNetworks": false})),
        api
    ));
    // A CIDR allowlist: inside admitted, outside refused.
    let inside = np(serde_json::json!({"egress": "allowlist", "allowCidrs": ["10.96.0.0/16"]}));
    assert!(!refuses(&inside, api));
    let outside = np(serde_json::json!({"egress": "allowlist", "allowCidrs": ["203.0.113.0/24"]}));
    assert!(refuses(&outside, api));
    // Domains: web ports to public ranges and DNS to kube-dns pods; 6443 on a private address
    // is refused, 443 on a public one admitted, port 53 possibly (a selected pod).
    let domains = np(
        serde_json::json!({"egress": "allowlist", "allowDomains": ["api.github.com"], "denyPrivateNetworks": true}),
    );
    assert!(refuses(&domains, api));
    assert!(!refuses(
        &domains,
        "198.51.100.1:443".parse().expect("addr")
    ));
    assert!(!refuses(&domains, "10.96.0.10:53".parse().expect("addr")));
    // IPv6.
    assert!(refuses(&none, "[fd00::1]:6443".parse().expect("addr")));

    let gate = EgressGateConfig {
        probes: vec![api, "10.96.40.7:9000".parse().expect("addr")],
        within_ms: 10_000,
    };
    let g = gate.for_policy(&none).expect("a gate");
    assert_eq!((g.refused, g.within_ms), (vec![api], 10_000));
    assert_eq!(gate.for_policy(&inside), None, "nothing refused to probe");
    let off = EgressGateConfig {
        within_ms: 0,
        ..gate
    };
    assert_eq!(off.for_policy(&none), None);
}

#[test]
fn secret_and_config_map_are_immutable_and_owned() {
    let s = secret(&OWNER, "github-token", "canary");
    assert_eq!(s.immutable, Some(true));
    assert_eq!(s.data.expect("data")["github-token"].0, b"canary");
    assert!(s.metadata.owner_references.is_some());
}

/// Found on the real node: an HTTP tool whose URL names a port (an internal API on 8443, the
/// demo's tracker) was refused by its own NetworkPolicy, which opened only 443 and 80.
#[test]
fn an_http_tool_is_reached_by_the_executor_on_its_urls_port() {
    let execution = |url: &str| -> toolgate_crds::Execution {
        serde_json::from_value(serde_json::json!({
            "adapter": "http", "timeoutMs": 1000,
            "http": {"method": "POST", "urlTemplate": url},
        }))
        .expect("execution")
    };
    let internal = execution("https://tracker.internal:8443/repos/{{owner}}/issues");
    assert_eq!(crate::build::executor_ports(&internal), Some(vec![8443]));
    let plain = execution("http://10.0.0.7:39671/repos/{{owner}}/{{repo}}/issues");
    assert_eq!(crate::build::executor_ports(&plain), Some(vec![39671]));
    let github = execution("https://api.github.com/repos/{{owner}}/{{repo}}/issues");
    assert_eq!(crate::build::executor_ports(&github), Some(vec![443]));
}

#[test]
fn an_mcp_server_over_http_is_reached_by_the_executor_on_its_urls_port() {
    let execution = |adapter: &str, mcp: serde_json::Value| -> toolgate_crds::Execution {
        serde_json::from_value(serde_json::json!({
            "adapter": adapter, "argv": [], "timeoutMs": 1000, "mcp": mcp,
        }))
        .expect("execution")
    };
    let http = execution(
        "mcp",
        serde_json::json!({"tool": "echo", "url": "http://mcp.example.com:3001/mcp"}),
    );
    assert_eq!(crate::build::executor_ports(&http), Some(vec![3001]));
    let https = execution(
        "mcp",
        serde_json::json!({"tool": "echo", "url": "https://mcp.example.com/mcp"}),
    );
    assert_eq!(crate::build::executor_ports(&https), Some(vec![443]));
    let stdio = execution("mcp", serde_json::json!({"tool": "echo"}));
    assert_eq!(
        crate::build::executor_ports(&stdio),
        None,
        "a server process makes its own requests"
    );
}
