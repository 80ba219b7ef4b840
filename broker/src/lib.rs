//! Credential brokers: a CredentialBinding in, a value for one call's sandbox out. The value
//! leaves the broker only into the sandbox's credential folder, and into the redactor.
//!
//! This file ships the file broker (a local secrets file, readable only by its owner) behind the
//! interface a Vault broker implements.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use toolgate_crds::{CredentialBindingSpec, VaultEngine};

/// A credential value. Its Debug and Display never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the sandbox's credential file and the redactor only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A brokered credential.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The value.
    pub value: Secret,
    /// Lifetime in seconds.
    pub ttl_seconds: u32,
}

/// Why a credential could not be issued. Never carries a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    /// No broker is configured.
    #[error(
        "no credential broker is configured (start toolgate local with --secrets FILE, or use Vault)"
    )]
    NotConfigured,
    /// The location has no value.
    #[error("no value at {location} in {source_name}")]
    Missing {
        /// Vault-style location.
        location: String,
        /// The broker's source.
        source_name: String,
    },
    /// The engine is not available here.
    #[error("vault.engine {0}: the file broker serves kv2 secrets only")]
    Engine(String),
    /// The source is unusable.
    #[error("{0}")]
    Source(String),
}

/// Issues credentials for bindings.
pub trait CredentialBroker: Send + Sync + 'static {
    /// A value for `binding` (namespace/name), for one call.
    fn issue(
        &self,
        namespace: &str,
        name: &str,
        binding: &CredentialBindingSpec,
    ) -> Result<Issued, BrokerError>;
}

/// No broker: every binding fails with [`BrokerError::NotConfigured`].
#[derive(Debug, Default)]
pub struct NoBroker;

impl CredentialBroker for NoBroker {
    fn issue(&self, _: &str, _: &str, _: &CredentialBindingSpec) -> Result<Issued, BrokerError> {
        Err(BrokerError::NotConfigured)
    }
}

/// Secrets from a local YAML file, addressed like Vault KV v2: `mount/path` → `{field: value}`.
///
/// ```yaml
/// secret/team-a/github-issues-bot:
///   token: ghp_example
/// ```
#[derive(Debug)]
pub struct FileBroker {
    path: PathBuf,
    secrets: BTreeMap<String, BTreeMap<String, Secret>>,
}

impl FileBroker {
    /// Read a secrets file; refuses one that others can read.
    pub fn load(path: &Path) -> Result<Self, BrokerError> {
        use std::os::unix::fs::PermissionsExt;
        let show = path.display();
        let meta = std::fs::metadata(path)
            .map_err(|e| BrokerError::Source(format!("secrets file {show}: {e}")))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(BrokerError::Source(format!(
                "secrets file {show}: mode {mode:o} lets others read it; expected 600 (chmod 600 {show})"
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| BrokerError::Source(format!("secrets file {show}: {e}")))?;
        let raw: BTreeMap<String, BTreeMap<String, String>> = serde_norway::from_str(&text)
            .map_err(|e| {
                BrokerError::Source(format!(
                    "secrets file {show}: expected a map of `mount/path` to {{field: value}}: {e}"
                ))
            })?;
        Ok(FileBroker {
            path: path.to_path_buf(),
            secrets: raw
                .into_iter()
                .map(|(k, fields)| (k, fields.into_iter().map(|(f, v)| (f, Secret(v))).collect()))
                .collect(),
        })
    }

    /// Every value, for registering with a redactor.
    pub fn values(&self) -> impl Iterator<Item = &Secret> {
        self.secrets.values().flat_map(BTreeMap::values)
    }
}

impl CredentialBroker for FileBroker {
    fn issue(
        &self,
        _namespace: &str,
        _name: &str,
        binding: &CredentialBindingSpec,
    ) -> Result<Issued, BrokerError> {
        let v = &binding.vault;
        if v.engine != VaultEngine::Kv2 {
            return Err(BrokerError::Engine(
                format!("{:?}", v.engine).to_lowercase(),
            ));
        }
        let location = format!("{}/{}", v.mount, v.path);
        let field = v.field.as_deref().unwrap_or("value");
        let missing = || BrokerError::Missing {
            location: format!("{location} (field {field})"),
            source_name: format!("the secrets file {}", self.path.display()),
        };
        let value = self
            .secrets
            .get(&location)
            .and_then(|f| f.get(field))
            .ok_or_else(missing)?;
        Ok(Issued {
            value: value.clone(),
            ttl_seconds: binding.ttl_seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn binding(field: &str) -> CredentialBindingSpec {
        serde_json::from_value(serde_json::json!({
            "vault": {"engine": "kv2", "mount": "secret", "path": "team-a/bot", "field": field},
            "scopes": [], "ttlSeconds": 60, "delivery": {"mode": "file", "fileName": "token"}
        }))
        .expect("binding")
    }

    #[test]
    fn issues_kv2_values_and_never_prints_them() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("secrets.yaml");
        std::fs::write(&path, "secret/team-a/bot: {token: canary-7f3a}\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let broker = FileBroker::load(&path).expect("load");
        let issued = broker
            .issue("team-a", "bot", &binding("token"))
            .expect("issued");
        assert_eq!(issued.value.expose(), "canary-7f3a");
        assert!(!format!("{issued:?} {broker:?}").contains("canary-7f3a"));
        let e = broker
            .issue("team-a", "bot", &binding("other"))
            .expect_err("missing");
        assert!(
            e.to_string().contains("secret/team-a/bot (field other)"),
            "{e}"
        );
    }

    #[test]
    fn refuses_a_file_others_can_read() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("secrets.yaml");
        std::fs::write(&path, "{}\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = FileBroker::load(&path).expect_err("refused");
        assert!(e.to_string().contains("mode 644"), "{e}");
    }
}
