//! What the executor is given: the call's spec (one version, refused otherwise) and the
//! credentials mounted beside it; and why it may refuse to run at all.

use std::path::{Path, PathBuf};

use serde_json::Value;
use toolgate_core::exec::{EXEC_SPEC_VERSION, ExecSpec};

use crate::render::RenderError;
use crate::sink::SinkError;
use toolgate_artifacts::StoreError;

/// Why the executor could not run a call. Each has its own exit code.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The spec file is missing or unreadable.
    #[error("spec {path}: {source}")]
    SpecUnreadable {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The spec is not valid JSON of the expected shape.
    #[error("spec {path}: {message}")]
    SpecInvalid {
        /// The file.
        path: String,
        /// What serde said, with the field path.
        message: String,
    },
    /// The spec is of another version.
    #[error(
        "spec {path}: apiVersion {found:?} is not supported; this executor reads {EXEC_SPEC_VERSION:?}"
    )]
    SpecVersion {
        /// The file.
        path: String,
        /// The version found.
        found: String,
    },
    /// A credential file is missing or unreadable.
    #[error("credential {file} (CredentialBinding {binding}): {source}")]
    Credential {
        /// The CredentialBinding.
        binding: String,
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// A template cannot be rendered from the args.
    #[error(transparent)]
    Template(#[from] RenderError),
    /// The spec is inconsistent (an http tool without a request template, a URL outside the
    /// allowed domains, …).
    #[error("{0}")]
    Unrunnable(String),
    /// The artifact store cannot be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Storing an artifact failed.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// The spec asks for filesystem confinement and the kernel cannot give it.
    #[error("confinement: {0}")]
    Confinement(#[from] toolgate_sandbox::confine::ConfineError),
    /// The call's NetworkPolicy was not in force before the tool would have started.
    #[error(transparent)]
    EgressNotEnforced(#[from] crate::egress_gate::NotEnforced),
    /// The executor was told to stop (SIGTERM: its pod deleted with its call, cancelled or
    /// evicted) and stopped the tool.
    #[error(
        "the executor was told to stop (SIGTERM: its pod was deleted or evicted) and stopped the tool"
    )]
    Terminated,
}

impl ExecError {
    /// The process exit code for this error (documented in executor/README.md).
    pub fn exit_code(&self) -> u8 {
        match self {
            ExecError::SpecUnreadable { .. } => 66,
            ExecError::SpecInvalid { .. } => 67,
            ExecError::SpecVersion { .. } => 68,
            ExecError::Credential { .. } => 71,
            ExecError::Template(_) => 65,
            ExecError::Unrunnable(_) => 72,
            ExecError::Store(_) | ExecError::Sink(_) => 69,
            ExecError::Confinement(_) => 73,
            ExecError::EgressNotEnforced(_) => 74,
            ExecError::Terminated => 143,
        }
    }

    /// Stable code for the result's error.
    pub fn code(&self) -> &'static str {
        match self {
            ExecError::SpecUnreadable { .. } => "spec-unreadable",
            ExecError::SpecInvalid { .. } => "spec-invalid",
            ExecError::SpecVersion { .. } => "spec-version",
            ExecError::Credential { .. } => "credential-unreadable",
            ExecError::Template(_) => "template",
            ExecError::Unrunnable(_) => "unrunnable",
            ExecError::Store(_) => "artifact-store",
            ExecError::Sink(_) => "artifact-upload",
            ExecError::Confinement(_) => "confinement",
            ExecError::EgressNotEnforced(_) => "egress-not-enforced",
            ExecError::Terminated => "terminated",
        }
    }
}

/// Read and check a spec file.
pub fn load_spec(path: &Path) -> Result<ExecSpec, ExecError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ExecError::SpecUnreadable {
        path: p.clone(),
        source,
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| ExecError::SpecInvalid {
        path: p.clone(),
        message: e.to_string(),
    })?;
    match value.get("apiVersion").and_then(Value::as_str) {
        Some(EXEC_SPEC_VERSION) => {}
        other => {
            return Err(ExecError::SpecVersion {
                path: p,
                found: other.unwrap_or("<missing>").into(),
            });
        }
    }
    serde_path_to_error::deserialize(&value).map_err(|e| ExecError::SpecInvalid {
        path: p,
        message: format!("{}: {}", e.path(), e.inner()),
    })
}

/// A credential value, read from its file. Never printed.
pub struct Credential {
    /// Where it goes.
    pub file: toolgate_core::exec::CredentialFile,
    /// The path of the file.
    pub path: PathBuf,
    /// The value.
    pub value: String,
}

/// Read the credentials a spec names from `dir`.
pub fn load_credentials(spec: &ExecSpec, dir: &Path) -> Result<Vec<Credential>, ExecError> {
    spec.credentials
        .iter()
        .map(|c| {
            let path = dir.join(&c.file_name);
            let value = std::fs::read_to_string(&path).map_err(|source| ExecError::Credential {
                binding: c.binding.clone(),
                file: path.display().to_string(),
                source,
            })?;
            Ok(Credential {
                file: c.clone(),
                path,
                value: value.trim_end_matches(['\n', '\r']).to_string(),
            })
        })
        .collect()
}
