//! SandboxPolicy: where a call runs and what it may touch.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::Condition;

/// Where a call runs: filesystem roots, network egress, environment, process limits, runtime
/// class and audit. Everything not allowed here is denied.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(
        group = "toolgate.dev",
        version = "v1alpha1",
        kind = "SandboxPolicy",
        namespaced,
        status = "SandboxPolicyStatus",
        shortname = "sbp",
        category = "toolgate",
        doc = "Where a tool call runs: filesystem, network egress, environment, process limits, runtime class, audit. Deny by default.",
        printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
        printcolumn(name = "Egress", type_ = "string", json_path = ".spec.network.egress"),
        printcolumn(
            name = "Ready",
            type_ = "string",
            json_path = ".status.conditions[?(@.type==\"Ready\")].status"
        ),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        ),
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.network.egress != 'allowlist' || size(self.network.allowDomains) + size(self.network.allowCidrs) > 0",
        "message": "egress 'allowlist' needs at least one entry in network.allowDomains or network.allowCidrs",
        "fieldPath": ".network"
    },
    {
        "rule": "self.network.egress == 'allowlist' || size(self.network.allowDomains) + size(self.network.allowCidrs) == 0",
        "message": "network.allowDomains and network.allowCidrs only apply with egress 'allowlist'",
        "fieldPath": ".network"
    },
    {
        "rule": "self.mode != 'read_only' || size(self.filesystem.writeRoots) == 0",
        "message": "a read_only sandbox cannot have filesystem.writeRoots",
        "fieldPath": ".filesystem.writeRoots"
    }
]))]
pub struct SandboxPolicySpec {
    /// The isolation mode.
    pub mode: SandboxMode,
    /// Filesystem view of the call.
    pub filesystem: FilesystemPolicy,
    /// Network egress of the call.
    pub network: NetworkPolicy,
    /// Environment variables the call gets.
    #[serde(default)]
    pub environment: EnvironmentPolicy,
    /// Process limits.
    pub process: ProcessLimits,
    /// Kubernetes RuntimeClass for stronger isolation (`gvisor`, `kata`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub runtime_class_name: Option<String>,
    /// What the sandbox records.
    #[serde(default)]
    pub audit: AuditPolicy,
}

/// The isolation mode of a sandbox.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// Nothing is writable but the temp dir.
    ReadOnly,
    /// The write roots of the workspace are writable.
    WorkspaceWrite,
    /// Like workspace_write, with an egress allowlist.
    NetworkRestricted,
    /// A container (pod) with the policy applied.
    Container,
    /// A virtual machine (runtime class such as Kata).
    Vm,
    /// No local execution: the call goes to a remote API through the gateway.
    RemoteApi,
}

/// Filesystem view of a call. Paths are relative to the workspace unless absolute.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilesystemPolicy {
    /// Working directory of the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub cwd: Option<String>,
    /// Paths visible read-only.
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(min = 1, max = 4096)))]
    pub read_roots: Vec<String>,
    /// Paths visible read-write.
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(min = 1, max = 4096)))]
    pub write_roots: Vec<String>,
    /// Paths hidden even inside a root (`.git/config`, `.env`): covered by an empty file or
    /// folder in the embedded runtime; refused (`Permission denied`) by the executor's Landlock
    /// confinement in a pod, so block only what the tools need not read.
    #[serde(default)]
    #[schemars(length(max = 128), inner(length(min = 1, max = 4096)))]
    pub blocked_paths: Vec<String>,
    /// On a cluster: the PersistentVolumeClaim (in the policy's namespace) mounted as the
    /// `workspace` root of every call run under this policy, read-only unless a write root lies
    /// in it. Unset: an empty, size-limited emptyDir. The embedded runtime ignores it (its
    /// workspace is the folder given to `toolgate local --workspace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub workspace_claim_name: Option<String>,
    /// Size limit of the temp dir, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65536))]
    pub temp_dir_size_mb: Option<u32>,
    /// How much one call may write into its write roots (unset: 1024 MiB and 100000 files). The
    /// embedded runtime, as root, gives each call a filesystem of this size layered over its
    /// write roots: the kernel refuses a write past it (`No space left on device`), and the
    /// call's writes reach the workspace when it ends. A file a call changes counts whole. Unprivileged, it cannot mount one: a quota set here refuses the call,
    /// the default is recorded as not enforced. On a cluster `sizeMb` is the size limit of the
    /// workspace's emptyDir (the kubelet evicts a pod past it); a PersistentVolumeClaim's capacity
    /// bounds a claimed workspace instead; `files` is not enforced there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_quota: Option<WriteQuota>,
    /// Whether declared output files are kept as artifacts.
    #[serde(default)]
    pub persist_outputs: bool,
}

/// A call's writes into its write roots, at most.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteQuota {
    /// Bytes, in MiB.
    #[schemars(range(min = 1, max = 1048576))]
    pub size_mb: u32,
    /// Files, folders and links created or changed.
    #[schemars(range(min = 16, max = 16777216))]
    pub files: u32,
}

impl WriteQuota {
    /// The quota of a policy that sets none.
    pub const DEFAULT: WriteQuota = WriteQuota {
        size_mb: 1024,
        files: 100_000,
    };
}

/// Network egress of a call.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicy {
    /// `none` (loopback only), `allowlist` or `open`.
    pub egress: EgressMode,
    /// Domains reachable with `allowlist` (`api.github.com`, `*.example.com`), each on the
    /// scheme's default port unless the entry names one (`api.example.com:8443`). A process tool
    /// reaches them through its call's egress proxy (named in `HTTPS_PROXY` and `HTTP_PROXY`;
    /// its sandbox has no other route), which resolves each name itself and refuses a private,
    /// loopback or link-local address behind it unless `allowCidrs` names it.
    #[serde(default)]
    #[schemars(
        length(max = 64),
        inner(
            length(min = 1, max = 253),
            regex(
                pattern = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(:[1-9][0-9]{0,4})?$"
            )
        )
    )]
    pub allow_domains: Vec<String>,
    /// CIDRs reachable with `allowlist`: by address, and as what an allowed name may resolve to.
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(min = 1, max = 64)))]
    pub allow_cidrs: Vec<String>,
    /// Deny private, loopback and link-local ranges even when egress is open or allowlisted.
    #[serde(default = "yes")]
    pub deny_private_networks: bool,
}

fn yes() -> bool {
    true
}

/// Network egress mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EgressMode {
    /// No network but loopback.
    None,
    /// Only the listed domains and CIDRs.
    Allowlist,
    /// Any destination (private ranges still denied when `denyPrivateNetworks`).
    Open,
}

/// Environment variables of a call.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentPolicy {
    /// Names of variables passed through from the runtime (`PATH`, `LANG`).
    #[serde(default)]
    #[schemars(length(max = 64), inner(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$")))]
    pub inherited_env: Vec<String>,
    /// Fixed variables set for the call, as `NAME=value`. Never a secret: lint refuses token shapes.
    #[serde(default)]
    #[schemars(
        length(max = 64),
        inner(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*=.*$"))
    )]
    pub injected_env: Vec<String>,
    /// Whether a credential binding may deliver its value as an environment variable.
    #[serde(default)]
    pub secret_env_allowed: bool,
}

/// Process limits of a call.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessLimits {
    /// Wall-clock limit, in milliseconds; the whole process group is killed after it.
    #[schemars(range(min = 100, max = 3600000))]
    pub timeout_ms: u32,
    /// Memory limit, in MiB.
    #[schemars(range(min = 16, max = 65536))]
    pub max_memory_mb: u32,
    /// CPU limit, in millicores (cluster) or CPU-time share (local).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 64000))]
    pub max_cpu_millis: Option<u32>,
    /// Maximum number of processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub max_processes: Option<u32>,
    /// Bytes of stdout kept (the rest is cut and reported).
    #[schemars(range(min = 0, max = 1073741824))]
    pub max_stdout_bytes: u64,
    /// Bytes of stderr kept.
    #[schemars(range(min = 0, max = 1073741824))]
    pub max_stderr_bytes: u64,
    /// Largest file the process may write, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_file_bytes: Option<u64>,
}

/// What a sandbox records.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditPolicy {
    /// Record the rendered argv (redacted).
    #[serde(default)]
    pub record_command: bool,
    /// Record files created, changed and deleted.
    #[serde(default)]
    pub record_file_access: bool,
    /// Record network connections.
    #[serde(default)]
    pub record_network_access: bool,
}

/// Observed state of a SandboxPolicy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxPolicyStatus {
    /// The `.metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (`Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
