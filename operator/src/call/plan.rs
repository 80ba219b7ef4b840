//! The children of a call's run, built before anything is applied (pure): the executor's spec,
//! its NetworkPolicy, the spec as a ConfigMap, the credential as a Secret, and the Pod.

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use toolgate_core::exec::{CallIdentity, ExecInput, ExecSpec, FsRules, exec_spec};
use toolgate_core::lifecycle::{RunTarget, Step, cannot_run};
use toolgate_crds::conditions::{SANDBOX_PREPARED, STARTED, reason};
use toolgate_crds::{ToolCall, ToolCallSpec};

use super::CallConfig;
use crate::build::{self, Owner, PodInput};

/// Whether a call's pod could be built: its NetworkPolicy and its Landlock confinement. Asked
/// before anyone approves the call, and again when it starts.
pub(crate) fn placeable(
    owner: &Owner<'_>,
    target: &RunTarget<'_>,
    config: &CallConfig,
) -> Result<(), String> {
    if let Some(why) =
        toolgate_core::exec::proxied_credential_refused(target.policy, target.binding)
    {
        return Err(why);
    }
    // Where a proxy would serve the call (its port is held only when it starts).
    let proxy = (needs_proxy(target) && config.egress.configured())
        .then(|| std::net::SocketAddr::from(([127, 0, 0, 1], 1)));
    build::network_policy_through(
        owner,
        target.policy,
        direct_ports(target).as_deref(),
        &config.artifact_egress,
        proxy,
    )
    .map_err(|e| e.to_string())?;
    toolgate_core::exec::confinement(target.policy).map_err(|e| e.to_string())?;
    Ok(())
}

/// What the call's pod is made of, before the credential: its NetworkPolicy, the executor's
/// spec and the policy's confinement.
pub(crate) struct Sandbox {
    pub(crate) network_policy: NetworkPolicy,
    pub(crate) spec: ExecSpec,
    pub(crate) confinement: FsRules,
}

/// Whether a call's tool reaches the network only through an egress proxy: under an allowlist,
/// a process tool allowed domains (a NetworkPolicy cannot name them), or any tool whose
/// credential the proxy delivers.
pub(crate) fn needs_proxy(target: &RunTarget<'_>) -> bool {
    let net = &target.policy.network;
    let execution = &target.tool.spec.execution;
    net.egress == toolgate_crds::EgressMode::Allowlist
        && (toolgate_core::exec::proxy_delivered(target.binding)
            || (!net.allow_domains.is_empty()
                && !toolgate_core::exec::executor_is_the_only_client(execution)))
}

/// The ports the executor's own client needs, unless the proxy is the way out.
fn direct_ports(target: &RunTarget<'_>) -> Option<Vec<i32>> {
    if !toolgate_core::exec::executor_reaches_the_network(
        &target.tool.spec.execution,
        target.binding,
    ) {
        return None;
    }
    build::executor_ports(&target.tool.spec.execution)
}

/// The call's sandbox on the cluster, or the steps that end the call when the policy cannot be
/// honoured.
pub(crate) fn sandbox(
    owner: &Owner<'_>,
    call: &ToolCallSpec,
    traceparent: String,
    target: &RunTarget<'_>,
    config: &CallConfig,
    proxy: Option<std::net::SocketAddr>,
) -> Result<Sandbox, Vec<Step>> {
    let refused = |e: String| {
        cannot_run(
            SANDBOX_PREPARED,
            reason::SANDBOX_REFUSED,
            format!("SandboxPolicy {}: {e}", target.policy_name),
        )
    };
    if let Some(why) =
        toolgate_core::exec::proxied_credential_refused(target.policy, target.binding)
    {
        return Err(refused(why));
    }
    let network_policy = build::network_policy_through(
        owner,
        target.policy,
        direct_ports(target).as_deref(),
        &config.artifact_egress,
        proxy,
    )
    .map_err(|e| refused(e.to_string()))?;
    // The policy's roots and blocked paths, enforced by the executor with Landlock: the pod has
    // no other way to hide `.env` inside a mounted workspace.
    let confinement =
        toolgate_core::exec::confinement(target.policy).map_err(|e| refused(e.to_string()))?;
    let mut spec = exec_spec(ExecInput {
        call: CallIdentity {
            namespace: owner.namespace.into(),
            name: owner.name.into(),
            event_id: format!("{}/{STARTED}", owner.name),
        },
        tool: &target.tool.spec,
        policy: target.policy,
        args: call.args.clone(),
        dry_run: call.dry_run,
        artifacts: config.artifacts.clone(),
        credential: target.binding,
        traceparent: Some(traceparent),
        working_dir: Some(build::WORKSPACE_DIR.into()),
        write_roots: confinement
            .write
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        confinement: Some(confinement.clone()),
    });
    spec.egress_gate = config.egress_gate.for_policy(&network_policy);
    spec.egress_proxy = proxy.map(|addr| format!("http://{addr}"));
    Ok(Sandbox {
        network_policy,
        spec,
        confinement,
    })
}

/// What SandboxPrepared says of a pod.
pub(crate) fn described(call: &ToolCall, target: &RunTarget<'_>, spec: &ExecSpec) -> String {
    format!(
        "pod {} with NetworkPolicy egress {:?}{}, memory {} MiB, deadline from timeout {} ms",
        build::child_name(&kube::ResourceExt::name_any(call)),
        target.policy.network.egress,
        match &spec.egress_gate {
            Some(g) => format!(
                " (in force before the tool starts: {} refused)",
                g.refused
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => String::new(),
        },
        target.policy.process.max_memory_mb,
        spec.limits.timeout_ms
    )
}

/// Every child of a running call. The apply step destructures it without `..`, so a new kind
/// of child cannot be forgotten there.
pub(crate) struct Children {
    pub(crate) network_policy: NetworkPolicy,
    pub(crate) config_map: ConfigMap,
    pub(crate) secret: Option<Secret>,
    pub(crate) pod: Pod,
}

/// The children of a call whose credential (file name and value), if any, was issued.
/// The children of a call whose credential (file name and value), if any, was issued; with
/// `interception`, the call's CA beside its spec, which its tool's TLS clients trust.
pub(crate) fn children(
    owner: &Owner<'_>,
    target: &RunTarget<'_>,
    sandbox: Sandbox,
    credential: Option<(&str, &str)>,
    config: &CallConfig,
    ca: Option<&str>,
) -> Result<Children, serde_json::Error> {
    let image = target
        .tool
        .spec
        .execution
        .image
        .clone()
        .unwrap_or_else(|| config.executor_image.clone());
    let pod = build::pod(
        owner,
        &PodInput {
            image: &image,
            policy: target.policy,
            timeout_ms: sandbox.spec.time_bound_ms(),
            with_credential: credential.is_some(),
            artifact_secret: config.artifact_secret.as_deref(),
            workspace_writable: sandbox
                .confinement
                .write
                .iter()
                .any(|p| p.starts_with(build::WORKSPACE_DIR)),
        },
    );
    Ok(Children {
        config_map: build::config_map(owner, &sandbox.spec, ca)?,
        network_policy: sandbox.network_policy,
        secret: credential.map(|(file, value)| build::secret(owner, file, value)),
        pod,
    })
}
