//! The executor pod of one call: hardened (non-root, read-only root filesystem, no
//! service-account token, seccomp RuntimeDefault, every capability dropped), limited, and bound
//! to a deadline.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvFromSource,
    PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, ResourceRequirements,
    SeccompProfile, SecretEnvSource, SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use toolgate_crds::SandboxPolicySpec;

use super::{
    CREDENTIALS_DIR, DEADLINE_GRACE_SECONDS, EXECUTOR_UID, Owner, SPEC_DIR, WORKSPACE_DIR,
    child_name, meta,
};

/// What the pod needs besides the call.
#[derive(Debug, Clone)]
pub struct PodInput<'a> {
    /// The executor image.
    pub image: &'a str,
    /// The sandbox policy.
    pub policy: &'a SandboxPolicySpec,
    /// How long the executor may take, in milliseconds: the egress gate's bound and the tool's
    /// timeout ([`toolgate_core::exec::ExecSpec::time_bound_ms`]); the deadline adds a grace.
    pub timeout_ms: u64,
    /// Whether a credential Secret is mounted.
    pub with_credential: bool,
    /// A Secret whose keys become the executor's environment (artifact store credentials).
    pub artifact_secret: Option<&'a str>,
    /// Whether a write root lies in the workspace (its volume is mounted read-write).
    pub workspace_writable: bool,
}

/// The workspace: the policy's PersistentVolumeClaim, or an empty folder of at most the policy's
/// write quota (its default, 1 GiB, when it sets none): the kubelet evicts a pod past it.
fn workspace_volume(input: &PodInput<'_>) -> Volume {
    let quota = input
        .policy
        .filesystem
        .write_quota
        .unwrap_or(toolgate_crds::WriteQuota::DEFAULT);
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
                size_limit: Some(Quantity(format!("{}Mi", quota.size_mb))),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

/// How long the kubelet waits after SIGTERM before killing a call's container.
pub const TERMINATION_GRACE_SECONDS: i64 = 5;

/// The executor pod: hardened, limited, deadline-bound, and labelled for its NetworkPolicy.
pub fn pod(o: &Owner<'_>, input: &PodInput<'_>) -> Pod {
    let (volumes, mounts, args) = storage(o, input);
    Pod {
        metadata: meta(o, "executor"),
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            // The executor stops its tool on SIGTERM at once; a deleted call's pod is gone
            // within seconds, not the default 30.
            termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
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
                seccomp_profile: Some(runtime_default()),
                ..Default::default()
            }),
            containers: vec![executor(input, args, mounts)],
            volumes: Some(volumes),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn runtime_default() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..Default::default()
    }
}

/// The volumes and where the executor sees them (the spec, the workspace, a private /tmp, the
/// credential when there is one), and the executor's arguments that name them.
fn storage(o: &Owner<'_>, input: &PodInput<'_>) -> (Vec<Volume>, Vec<VolumeMount>, Vec<String>) {
    let name = child_name(&o.subject());
    let tmp_mb = input.policy.filesystem.temp_dir_size_mb.unwrap_or(64);
    let mount = |name: &str, path: &str, read_only: Option<bool>| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only,
        ..Default::default()
    };
    let mut mounts = vec![
        mount("spec", SPEC_DIR, Some(true)),
        mount("workspace", WORKSPACE_DIR, Some(!input.workspace_writable)),
        mount("tmp", "/tmp", None),
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
        mounts.push(mount("credentials", CREDENTIALS_DIR, Some(true)));
        volumes.push(Volume {
            name: "credentials".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(name),
                default_mode: Some(0o400),
                ..Default::default()
            }),
            ..Default::default()
        });
        args.extend(["--credentials".to_string(), CREDENTIALS_DIR.to_string()]);
    }
    (volumes, mounts, args)
}

/// The executor container: the policy's limits, no privileges, its result in the termination
/// message.
fn executor(input: &PodInput<'_>, args: Vec<String>, mounts: Vec<VolumeMount>) -> Container {
    let p = &input.policy.process;
    let mut limits = BTreeMap::from([(
        "memory".to_string(),
        Quantity(format!("{}Mi", p.max_memory_mb)),
    )]);
    if let Some(cpu) = p.max_cpu_millis {
        limits.insert("cpu".into(), Quantity(format!("{cpu}m")));
    }
    Container {
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
            seccomp_profile: Some(runtime_default()),
            ..Default::default()
        }),
        volume_mounts: Some(mounts),
        env_from: input.artifact_secret.map(|name| {
            vec![EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: name.into(),
                    optional: Some(false),
                }),
                ..Default::default()
            }]
        }),
        ..Default::default()
    }
}

/// How the executor's container ended, once it has: its exit and the termination message the
/// executor wrote (its result), as the kubelet reports them.
pub fn executor_terminated(
    pod: &Pod,
) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "executor")?
        .state
        .as_ref()?
        .terminated
        .clone()
}
