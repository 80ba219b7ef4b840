//! Credential brokers: a CredentialBinding in, a value for one call's sandbox out. The value
//! leaves the broker only into the sandbox's credential folder, and into the redactor.
//!
//! Two brokers: the file broker (a local secrets file, readable only by its owner: the embedded
//! default) and the Vault broker ([`vault`]: KV v2 and leased dynamic secrets, revoked when the
//! call ends).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use toolgate_crds::{CredentialBindingSpec, VaultEngine};

pub mod vault;

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
    /// The lease to revoke when the call ends; `None` for a static (kv2) secret.
    pub lease: Option<Lease>,
}

/// A lease held for one call, revoked when the call ends. Its id is kept by the runtime with
/// the call (the local store, the call's Secret), never in a status, event or view.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    /// The broker's lease id (`kubernetes/creds/agent/abc…`).
    pub id: String,
    /// The binding it was issued for, for messages.
    pub binding: String,
}

/// What a call asks of the broker.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The call's namespace.
    pub namespace: &'a str,
    /// The binding's name.
    pub name: &'a str,
    /// The binding.
    pub binding: &'a CredentialBindingSpec,
    /// The call's deadline, in seconds: a credential never outlives it (TTL = the smaller of
    /// this and the binding's).
    pub deadline_seconds: Option<u64>,
}

impl Request<'_> {
    /// The TTL to ask for: the smaller of the binding's and the call's deadline.
    pub fn ttl_seconds(&self) -> u32 {
        let deadline = self
            .deadline_seconds
            .map_or(u32::MAX, |d| u32::try_from(d.max(1)).unwrap_or(u32::MAX));
        self.binding.ttl_seconds.min(deadline)
    }
}

/// Why a credential could not be issued or revoked. Never carries a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    /// No broker is configured.
    #[error(
        "no credential broker is configured (start toolgate local with --secrets FILE or --vault-addr URL)"
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
    /// The broker cannot be reached, is sealed, or did not answer in time.
    #[error("{0}")]
    Unavailable(String),
    /// The broker refused: a path its identity may not read, a login refused.
    #[error("{0}")]
    Forbidden(String),
    /// The source is unusable.
    #[error("{0}")]
    Source(String),
}

impl BrokerError {
    /// The condition reason this error gives (`BrokerUnavailable`, `BrokerForbidden`,
    /// `BrokerFailed`).
    pub fn reason(&self) -> &'static str {
        use toolgate_crds::conditions::reason;
        match self {
            BrokerError::Unavailable(_) => reason::BROKER_UNAVAILABLE,
            BrokerError::Forbidden(_) => reason::BROKER_FORBIDDEN,
            _ => reason::BROKER_FAILED,
        }
    }
}

/// A broker's answer, later.
pub type BrokerFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, BrokerError>> + Send + 'a>>;

/// Issues credentials for bindings, and revokes their leases. Asynchronous: a slow broker holds
/// up the one call waiting for it, never the runtime.
pub trait CredentialBroker: Send + Sync + 'static {
    /// A value for one call.
    fn issue<'a>(&'a self, request: Request<'a>) -> BrokerFuture<'a, Issued>;

    /// Revoke a lease [`CredentialBroker::issue`] returned. Revoking one already gone succeeds.
    fn revoke<'a>(&'a self, lease: &'a Lease) -> BrokerFuture<'a, ()>;

    /// Whether the binding can be brokered, without issuing anything: what the binding's Ready
    /// condition says.
    fn check<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        binding: &'a CredentialBindingSpec,
    ) -> BrokerFuture<'a, String>;
}

/// A credential for the span of `use_it` alone: issued for `request`, its value handed to
/// `use_it`, its lease (if any) revoked as soon as `use_it` is done — what a discovery needs (a
/// call's lease, kept with the call, is revoked when the call ends instead). A failed revoke is
/// logged; the lease then expires with its TTL.
pub async fn lend<T, F, Fut>(
    broker: &dyn CredentialBroker,
    request: Request<'_>,
    use_it: F,
) -> Result<T, BrokerError>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let issued = broker.issue(request).await?;
    let out = use_it(issued.value.expose().to_string()).await;
    if let Some(lease) = &issued.lease
        && let Err(e) = broker.revoke(lease).await
    {
        tracing::warn!(binding = %lease.binding, error = %e, "revoking a lent credential's lease");
    }
    Ok(out)
}

/// No broker: every binding fails with [`BrokerError::NotConfigured`].
#[derive(Debug, Default)]
pub struct NoBroker;

impl CredentialBroker for NoBroker {
    fn issue<'a>(&'a self, _: Request<'a>) -> BrokerFuture<'a, Issued> {
        Box::pin(async { Err(BrokerError::NotConfigured) })
    }

    fn revoke<'a>(&'a self, _: &'a Lease) -> BrokerFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn check<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a CredentialBindingSpec,
    ) -> BrokerFuture<'a, String> {
        Box::pin(async { Err(BrokerError::NotConfigured) })
    }
}

/// Secrets from a local YAML file, addressed like Vault KV v2: `mount/path` → `{field: value}`.
///
/// ```yaml
/// secret/team-a/github-issues-bot:
///   token: ghp_example
/// ```
/// Read a file that holds a credential, refusing one that users other than this process's can
/// read: mode 600, or group-readable (640, 440) when its group is the one this process runs as —
/// a Kubernetes Secret volume's file, which is root's and readable through the pod's fsGroup.
pub(crate) fn read_private(path: &Path, what: &str) -> Result<String, BrokerError> {
    use std::os::unix::fs::MetadataExt;
    let show = path.display();
    let meta =
        std::fs::metadata(path).map_err(|e| BrokerError::Source(format!("{what} {show}: {e}")))?;
    let mode = meta.mode() & 0o777;
    let group_is_ours = meta.gid() == nix::unistd::getegid().as_raw();
    if mode & 0o007 != 0 || (mode & 0o070 != 0 && !group_is_ours) || mode & 0o022 != 0 {
        return Err(BrokerError::Source(format!(
            "{what} {show}: mode {mode:o} (group {}) lets others read or change it; expected 600, \
             or 640 with the group this process runs as (chmod 600 {show})",
            meta.gid()
        )));
    }
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| BrokerError::Source(format!("{what} {show}: {e}")))
}

#[derive(Debug)]
pub struct FileBroker {
    path: PathBuf,
    secrets: BTreeMap<String, BTreeMap<String, Secret>>,
}

impl FileBroker {
    /// Read a secrets file; refuses one that others can read.
    pub fn load(path: &Path) -> Result<Self, BrokerError> {
        let show = path.display();
        let text = read_private(path, "secrets file")?;
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

impl FileBroker {
    fn read(&self, binding: &CredentialBindingSpec) -> Result<Issued, BrokerError> {
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
            lease: None,
        })
    }
}

impl CredentialBroker for FileBroker {
    fn issue<'a>(&'a self, request: Request<'a>) -> BrokerFuture<'a, Issued> {
        let issued = self.read(request.binding).map(|i| Issued {
            ttl_seconds: request.ttl_seconds(),
            ..i
        });
        Box::pin(async move { issued })
    }

    fn revoke<'a>(&'a self, _: &'a Lease) -> BrokerFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn check<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        binding: &'a CredentialBindingSpec,
    ) -> BrokerFuture<'a, String> {
        let v = &binding.vault;
        let found = self.read(binding).map(|_| {
            format!(
                "{}/{} is in the secrets file {}",
                v.mount,
                v.path,
                self.path.display()
            )
        });
        Box::pin(async move { found })
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
        let b = binding("token");
        let issued = broker.read(&b).expect("issued");
        assert_eq!(issued.value.expose(), "canary-7f3a");
        assert!(!format!("{issued:?} {broker:?}").contains("canary-7f3a"));
        let e = broker.read(&binding("other")).expect_err("missing");
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

    /// A Secret volume's file as the chart mounts it (0440, root's, the pod's fsGroup): readable
    /// by the group this process runs as, so accepted; the same mode with another group is not.
    /// Found with the operator installed by Helm: it refused its own secrets file.
    #[test]
    fn a_file_readable_by_its_own_group_is_accepted_and_by_another_group_refused() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("secrets.yaml");
        std::fs::write(&path, "secret/team-a/bot: {token: t}\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o440)).expect("chmod");
        let ours = std::fs::metadata(&path).expect("meta").gid();
        assert_eq!(
            ours,
            nix::unistd::getegid().as_raw(),
            "a new file has our group"
        );
        FileBroker::load(&path).expect("group-readable by our own group");
        // Another group: one this process is not (root may chown; others skip this half).
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&path, None, Some(ours + 4242)).expect("chgrp");
            let e = FileBroker::load(&path).expect_err("refused");
            assert!(e.to_string().contains("mode 440"), "{e}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660)).expect("chmod");
        let e = FileBroker::load(&path).expect_err("group-writable");
        assert!(e.to_string().contains("mode 660"), "{e}");
    }

    /// A broker that leases every value and remembers what it revoked.
    #[derive(Default)]
    struct Leasing {
        revoked: std::sync::Mutex<Vec<String>>,
        refuse: bool,
    }

    impl CredentialBroker for Leasing {
        fn issue<'a>(&'a self, r: Request<'a>) -> BrokerFuture<'a, Issued> {
            Box::pin(async move {
                if self.refuse {
                    return Err(BrokerError::Forbidden("no".into()));
                }
                Ok(Issued {
                    value: Secret::new("lent-value"),
                    ttl_seconds: r.ttl_seconds(),
                    lease: Some(Lease {
                        id: "lease/1".into(),
                        binding: r.name.into(),
                    }),
                })
            })
        }
        fn revoke<'a>(&'a self, lease: &'a Lease) -> BrokerFuture<'a, ()> {
            Box::pin(async move {
                self.revoked.lock().expect("lock").push(lease.id.clone());
                Ok(())
            })
        }
        fn check<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: &'a CredentialBindingSpec,
        ) -> BrokerFuture<'a, String> {
            Box::pin(async { Ok(String::new()) })
        }
    }

    #[test]
    fn a_lent_credential_is_revoked_once_used_and_a_refusal_runs_nothing() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt");
        let b = binding("token");
        let request = Request {
            namespace: "team-a",
            name: "bot",
            binding: &b,
            deadline_seconds: Some(30),
        };
        let broker = Leasing::default();
        let seen = rt
            .block_on(lend(&broker, request, |v| async move { v }))
            .expect("lent");
        assert_eq!(seen, "lent-value");
        assert_eq!(
            *broker.revoked.lock().expect("lock"),
            vec!["lease/1".to_string()]
        );

        let refusing = Leasing {
            refuse: true,
            ..Default::default()
        };
        let mut ran = false;
        let e = rt
            .block_on(lend(&refusing, request, |_| {
                ran = true;
                async {}
            }))
            .expect_err("refused");
        assert_eq!(
            e.reason(),
            toolgate_crds::conditions::reason::BROKER_FORBIDDEN
        );
        assert!(!ran, "nothing runs without the credential");
        assert!(refusing.revoked.lock().expect("lock").is_empty());
    }
}
