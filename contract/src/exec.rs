//! The executor's input: everything one call needs to run, resolved by a runtime (operator or
//! embedded) from the descriptor, the sandbox policy and the validated args. Versioned, because
//! an operator and an executor image of different releases must agree or refuse.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use toolgate_crds::{Execution, OutputExposure};

/// The only spec version this build reads and writes.
pub const EXEC_SPEC_VERSION: &str = "toolgate.dev/exec/v1";

/// Largest serialized result: the Kubernetes termination message limit.
pub const MAX_RESULT_BYTES: usize = 4096;

/// One call, resolved for execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecSpec {
    /// Must equal [`EXEC_SPEC_VERSION`].
    pub api_version: String,
    /// Which call this is; names every artifact (invariant 9).
    pub call: CallIdentity,
    /// The descriptor's execution section.
    pub execution: Execution,
    /// Args, already validated against the input schema.
    pub args: serde_json::Value,
    /// Run the tool's dry run.
    #[serde(default)]
    pub dry_run: bool,
    /// Limits from the sandbox policy.
    pub limits: ExecLimits,
    /// How much output the model may see.
    pub context: ContextLimits,
    /// The descriptor's output schema, when the tool returns JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// Where artifacts go.
    pub artifacts: ArtifactTarget,
    /// Credentials mounted beside the spec, by file name. Never values.
    #[serde(default)]
    pub credentials: Vec<CredentialFile>,
    /// Environment of the process.
    #[serde(default)]
    pub env: EnvSpec,
    /// Working directory of the process (absolute, inside the sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Writable roots (absolute): files created, changed or deleted under them are reported.
    #[serde(default)]
    pub write_roots: Vec<String>,
    /// Domains the HTTP adapter may reach, redirects included (`*.example.com` allowed).
    #[serde(default)]
    pub allowed_domains: Vec<String>,
    /// Refuse private, loopback and link-local addresses, by name or literal (HTTP adapter).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deny_private_networks: bool,
    /// The policy's filesystem rules, enforced by the executor with Landlock on itself and the
    /// tool (paths as the executor sees them). Absent: no confinement by the executor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<FsRules>,
    /// List the MCP server's tools (`initialize`, every page of `tools/list`) into the `tools`
    /// artifact instead of calling a tool: a discovery, on a cluster (see [`discovery_spec`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub discover: bool,
    /// Proof, before the tool starts, that the call's NetworkPolicy is in force: an enforcer may
    /// filter a new pod only a second after it starts, and a tool's first connections must not
    /// escape its policy. Absent where the sandbox's network needs no such proof (the embedded
    /// runtime's sandboxes have no network, or one filtered before the tool starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_gate: Option<EgressGate>,
    /// The executor already runs under the sandbox's seccomp filters (bubblewrap installed them
    /// on it as the sandbox's pid 1, and every process it starts inherits them), so it does not
    /// install the same filters on its tool a second time. Absent in a pod, where nothing
    /// installed them before the executor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seccomp_inherited: bool,
    /// The call's egress proxy: a socket inside the sandbox (the embedded runtime's sandbox has
    /// loopback only, and the executor relays its tool's proxied connections — `HTTPS_PROXY`,
    /// `HTTP_PROXY` on loopback — to it), or `http://host:port` (a cluster's, which the pod's
    /// NetworkPolicy admits and nothing else). Absent where the policy's egress is `none`,
    /// `open`, or checked by the executor's own client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_proxy: Option<String>,
    /// The call's own CA (a PEM file inside the sandbox), when its egress proxy intercepts TLS
    /// to deliver a credential: the executor's client trusts it, and its tool's TLS clients
    /// read a bundle of the system's roots and it (`SSL_CERT_FILE` and the like).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_ca: Option<String>,
}

impl ExecSpec {
    /// The longest the executor may take before its tool's output is in: the egress gate's
    /// bound, then the tool's timeout. What the pod's deadline and the executor's own lifetime
    /// count from.
    pub fn time_bound_ms(&self) -> u64 {
        self.limits
            .timeout_ms
            .saturating_add(self.egress_gate.as_ref().map_or(0, |g| g.within_ms))
    }
}

/// Addresses that listen and that the call's NetworkPolicy refuses: the executor connects to
/// each until every one is refused (or times out), and fails the call with
/// `egress-not-enforced` if one still answers after `within_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressGate {
    /// `address:port` (IPv6 in brackets), TCP.
    pub refused: Vec<std::net::SocketAddr>,
    /// How long the policy may take to be in force, in milliseconds.
    pub within_ms: u64,
}

/// What a confined process may touch on the filesystem; everything else is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FsRules {
    /// Readable (and executable) beneath.
    #[serde(default)]
    pub read: Vec<std::path::PathBuf>,
    /// Readable and writable beneath.
    #[serde(default)]
    pub write: Vec<std::path::PathBuf>,
    /// Nothing beneath, even inside a read or write root.
    #[serde(default)]
    pub blocked: Vec<std::path::PathBuf>,
}

/// Where the workspace appears inside a sandbox or a pod.
pub const WORKSPACE_INSIDE: &str = "/workspace";

/// A path of a SandboxPolicy that is not a plain path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {path:?} is not allowed ({why})")]
pub struct PathError {
    /// Field path (`filesystem.writeRoots[0]`).
    pub field: String,
    /// The path.
    pub path: String,
    /// Why.
    pub why: &'static str,
}

/// A policy path mapped: where it is on the host (for a workspace under `workspace`), and where
/// it appears inside. `workspace` and `workspace/x` (or a plain relative `x`) map into the
/// workspace; absolute paths map to themselves; `.` and `..` are refused everywhere, and so is
/// the host root.
pub fn map_path(
    field: &str,
    p: &str,
    workspace: &std::path::Path,
) -> Result<(std::path::PathBuf, std::path::PathBuf), PathError> {
    use std::path::{Component, Path};
    let bad = |why| PathError {
        field: field.into(),
        path: p.into(),
        why,
    };
    if p.is_empty() {
        return Err(bad("empty"));
    }
    let path = Path::new(p);
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(bad("`.` and `..` are not allowed"));
    }
    if path.is_absolute() {
        if path == Path::new("/") {
            return Err(bad("the host root cannot be a sandbox root"));
        }
        return Ok((path.into(), path.into()));
    }
    let rest = path.strip_prefix("workspace").unwrap_or(path);
    if rest.as_os_str().is_empty() {
        return Ok((workspace.to_path_buf(), WORKSPACE_INSIDE.into()));
    }
    Ok((workspace.join(rest), Path::new(WORKSPACE_INSIDE).join(rest)))
}

/// The policy's filesystem rules as paths inside the sandbox (or pod), for the executor to
/// enforce with Landlock. Refuses the paths [`map_path`] refuses.
pub fn confinement(policy: &toolgate_crds::SandboxPolicySpec) -> Result<FsRules, PathError> {
    let fs = &policy.filesystem;
    let inside = std::path::Path::new(WORKSPACE_INSIDE);
    let map = |field: &str, list: &[String]| -> Result<Vec<std::path::PathBuf>, PathError> {
        list.iter()
            .enumerate()
            .map(|(i, p)| Ok(map_path(&format!("filesystem.{field}[{i}]"), p, inside)?.1))
            .collect()
    };
    Ok(FsRules {
        read: map("readRoots", &fs.read_roots)?,
        write: map("writeRoots", &fs.write_roots)?,
        blocked: map("blockedPaths", &fs.blocked_paths)?,
    })
}

/// Which call is running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallIdentity {
    /// Namespace of the call.
    pub namespace: String,
    /// Name of the call.
    pub name: String,
    /// The event that started the execution; every artifact names it.
    pub event_id: String,
}

/// Limits of one execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecLimits {
    /// Wall-clock limit; the whole process group is killed after it.
    pub timeout_ms: u64,
    /// Bytes of stdout (or response body) kept.
    pub max_stdout_bytes: u64,
    /// Bytes of stderr kept.
    pub max_stderr_bytes: u64,
}

/// How much the model may see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextLimits {
    /// The descriptor's exposure.
    pub expose_output_to_model: OutputExposure,
    /// Preview bound in tokens (about 4 bytes each).
    pub max_output_preview_tokens: u32,
}

/// Where artifacts are stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "type",
    deny_unknown_fields
)]
pub enum ArtifactTarget {
    /// A local directory (embedded runtime).
    Local {
        /// The directory.
        dir: String,
    },
    /// An S3-compatible bucket. Credentials come from the environment
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), never from the spec.
    S3 {
        /// Bucket name.
        bucket: String,
        /// Endpoint URL for S3-compatible servers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<String>,
        /// Region.
        #[serde(default = "default_region")]
        region: String,
        /// Allow plain HTTP endpoints (test servers on loopback).
        #[serde(default)]
        allow_http: bool,
    },
}

fn default_region() -> String {
    "us-east-1".into()
}

/// A credential file mounted beside the spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialFile {
    /// The CredentialBinding it came from (for messages).
    pub binding: String,
    /// File name in the credentials directory.
    pub file_name: String,
    /// Deliver to the process as this environment variable (never logged) instead of a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_name: Option<String>,
    /// The file holds a placeholder the call's egress proxy swaps for the value (delivery mode
    /// `proxy`): worthless anywhere else, so not redacted from what the tool prints.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub placeholder: bool,
}

/// Environment of the process: nothing is inherited unless listed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvSpec {
    /// Variables passed through from the executor's environment.
    #[serde(default)]
    pub inherit: Vec<String>,
    /// Variables set.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

impl ContextLimits {
    /// The preview bound in bytes.
    pub fn preview_bytes(&self) -> usize {
        match self.expose_output_to_model {
            OutputExposure::None => 0,
            _ => (self.max_output_preview_tokens as usize).saturating_mul(4),
        }
    }
}

/// Whether the executor itself makes every network request of the tool (the `http` adapter, an
/// MCP server over streamable HTTP): then it checks each request against the allowed domains,
/// and no process of the tool's gets the network.
pub fn executor_is_the_only_client(execution: &toolgate_crds::Execution) -> bool {
    match execution.adapter {
        toolgate_crds::ExecutionAdapter::Http => true,
        toolgate_crds::ExecutionAdapter::Mcp => {
            execution.mcp.as_ref().is_some_and(|m| m.url.is_some())
        }
        _ => false,
    }
}

/// The variable a tool's process finds its call's trace context in.
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";

/// The longest message a result's error carries (`status.result.error.message`).
pub const ERROR_MESSAGE_MAX: usize = 2048;

/// A failed result's error message followed by `note` (what the runtime knows of the failure
/// that the tool could not say: a write quota used up, connections its egress proxy refused),
/// the note said whole and the tool's message cut to make room. A result that succeeded is left
/// as it is.
pub fn note_failure(result: &mut toolgate_crds::CallResult, note: &str) {
    if result.status != toolgate_crds::ResultStatus::Success
        && let Some(error) = result.error.as_mut()
    {
        let room = ERROR_MESSAGE_MAX.saturating_sub(note.len() + 2);
        error.message = format!("{}; {note}", crate::text::cut(&error.message, room));
    }
}
