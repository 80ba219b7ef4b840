//! What the executor is given: the call's spec (one version, refused otherwise) and the
//! credentials mounted beside it; and why it may refuse to run at all.

use std::path::{Path, PathBuf};

use serde_json::Value;
use toolgate_contract::exec::{EXEC_SPEC_VERSION, ExecSpec};

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

/// One way the executor ends: its process exit code, the stable code its result's error carries,
/// and what it means. [`EXIT_CODES`] lists them all (the generated reference prints it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// The process exit code.
    pub code: u8,
    /// The result's `error.code` (empty when the executor writes no error).
    pub error_code: &'static str,
    /// What it means.
    pub meaning: &'static str,
}

impl Exit {
    /// The call ran; its result says how it went.
    pub const RAN: Exit = Exit {
        code: 0,
        error_code: "",
        meaning: "the call ran; the result says how it went (including tool failures and timeouts)",
    };
    /// The command line was not understood.
    pub const USAGE: Exit = Exit {
        code: 2,
        error_code: "",
        meaning: "bad command line",
    };
    /// A template cannot be rendered from the args.
    pub const TEMPLATE: Exit = Exit {
        code: 65,
        error_code: "template",
        meaning: "a template cannot be rendered from the args (a missing arg, a value that would be an option, …)",
    };
    /// The spec file is missing or unreadable.
    pub const SPEC_UNREADABLE: Exit = Exit {
        code: 66,
        error_code: "spec-unreadable",
        meaning: "the spec file is missing or unreadable",
    };
    /// The spec is not valid JSON of the expected shape.
    pub const SPEC_INVALID: Exit = Exit {
        code: 67,
        error_code: "spec-invalid",
        meaning: "the spec is not valid JSON of the expected shape (the message names the field)",
    };
    /// The spec is of another version.
    pub const SPEC_VERSION: Exit = Exit {
        code: 68,
        error_code: "spec-version",
        meaning: "the spec's `apiVersion` is not the one this executor reads",
    };
    /// The artifact store cannot be opened.
    pub const ARTIFACT_STORE: Exit = Exit {
        code: 69,
        error_code: "artifact-store",
        meaning: "the artifact store cannot be opened",
    };
    /// An upload to the artifact store failed.
    pub const ARTIFACT_UPLOAD: Exit = Exit {
        code: 69,
        error_code: "artifact-upload",
        meaning: "storing an artifact failed",
    };
    /// The executor could not start its own runtime, or outlived its lifetime.
    pub const RUNTIME: Exit = Exit {
        code: 70,
        error_code: "",
        meaning: "the executor could not start its runtime, or was still running past its lifetime (no result)",
    };
    /// A credential file is missing or unreadable.
    pub const CREDENTIAL: Exit = Exit {
        code: 71,
        error_code: "credential-unreadable",
        meaning: "a credential file is missing or unreadable",
    };
    /// The spec cannot run.
    pub const UNRUNNABLE: Exit = Exit {
        code: 72,
        error_code: "unrunnable",
        meaning: "the spec cannot run (an adapter this build does not run, a URL outside the allowed domains, …)",
    };
    /// Confinement was asked for and the kernel cannot give it.
    pub const CONFINEMENT: Exit = Exit {
        code: 73,
        error_code: "confinement",
        meaning: "the spec asks for filesystem confinement and the kernel enforces no Landlock",
    };
    /// The call's NetworkPolicy was not in force in time.
    pub const EGRESS_NOT_ENFORCED: Exit = Exit {
        code: 74,
        error_code: "egress-not-enforced",
        meaning: "an address of the spec's `egressGate`, which the call's NetworkPolicy refuses, still accepted connections `withinMs` after start; the tool never started",
    };
    /// Told to stop by SIGTERM.
    pub const TERMINATED: Exit = Exit {
        code: 143,
        error_code: "terminated",
        meaning: "SIGTERM (the pod deleted with its call, cancelled or evicted): the tool was stopped and the result says so",
    };
}

/// Every way the executor ends, by exit code.
pub const EXIT_CODES: &[Exit] = &[
    Exit::RAN,
    Exit::USAGE,
    Exit::TEMPLATE,
    Exit::SPEC_UNREADABLE,
    Exit::SPEC_INVALID,
    Exit::SPEC_VERSION,
    Exit::ARTIFACT_STORE,
    Exit::ARTIFACT_UPLOAD,
    Exit::RUNTIME,
    Exit::CREDENTIAL,
    Exit::UNRUNNABLE,
    Exit::CONFINEMENT,
    Exit::EGRESS_NOT_ENFORCED,
    Exit::TERMINATED,
];

impl ExecError {
    /// How the executor ends for this error.
    pub fn exit(&self) -> Exit {
        match self {
            ExecError::SpecUnreadable { .. } => Exit::SPEC_UNREADABLE,
            ExecError::SpecInvalid { .. } => Exit::SPEC_INVALID,
            ExecError::SpecVersion { .. } => Exit::SPEC_VERSION,
            ExecError::Credential { .. } => Exit::CREDENTIAL,
            ExecError::Template(_) => Exit::TEMPLATE,
            ExecError::Unrunnable(_) => Exit::UNRUNNABLE,
            ExecError::Store(_) => Exit::ARTIFACT_STORE,
            ExecError::Sink(_) => Exit::ARTIFACT_UPLOAD,
            ExecError::Confinement(_) => Exit::CONFINEMENT,
            ExecError::EgressNotEnforced(_) => Exit::EGRESS_NOT_ENFORCED,
            ExecError::Terminated => Exit::TERMINATED,
        }
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        self.exit().code
    }

    /// Stable code for the result's error.
    pub fn code(&self) -> &'static str {
        self.exit().error_code
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
    pub file: toolgate_contract::exec::CredentialFile,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_way_to_end_has_its_own_error_code_and_the_errors_are_listed() {
        let mut codes = std::collections::BTreeSet::new();
        for e in EXIT_CODES {
            assert!(
                e.error_code.is_empty() || codes.insert(e.error_code),
                "{e:?} repeats an error code"
            );
        }
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let errors = [
            ExecError::SpecUnreadable {
                path: "s".into(),
                source: io(),
            },
            ExecError::SpecInvalid {
                path: "s".into(),
                message: "m".into(),
            },
            ExecError::SpecVersion {
                path: "s".into(),
                found: "v".into(),
            },
            ExecError::Credential {
                binding: "b".into(),
                file: "f".into(),
                source: io(),
            },
            ExecError::Unrunnable("u".into()),
            ExecError::Terminated,
        ];
        for e in &errors {
            assert!(EXIT_CODES.contains(&e.exit()), "{e:?} is not in EXIT_CODES");
            assert_eq!(
                (e.exit_code(), e.code()),
                (e.exit().code, e.exit().error_code)
            );
        }
    }
}
