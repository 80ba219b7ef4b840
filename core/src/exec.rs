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
