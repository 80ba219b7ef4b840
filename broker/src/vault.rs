//! The Vault broker: KV v2 reads and leased dynamic secrets (the database and kubernetes engines,
//! or any engine that answers with a lease), through vaultrs.
//!
//! The broker's own identity comes from a token file, AppRole credentials, or Kubernetes auth
//! with the pod's projected service-account token. A binding's `authRole` narrows it: the broker
//! logs in with that Kubernetes auth role, or creates a child token from that token role, and
//! asks `sys/capabilities-self` before it reads, so a binding reads only what its role allows.
//! Every request has a deadline: an unreachable Vault fails the one call with
//! `BrokerUnavailable`, and a later call succeeds once Vault is back.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustify_derive::Endpoint;
use serde::Deserialize;
use tokio::sync::Mutex;
use toolgate_crds::{CredentialBindingSpec, VaultEngine};
use vaultrs::client::{VaultClient, VaultClientSettingsBuilder};
use vaultrs::error::ClientError;

use crate::{BrokerError, BrokerFuture, CredentialBroker, Issued, Lease, Request, Secret};

/// How the broker proves who it is to Vault.
#[derive(Debug, Clone)]
pub enum VaultAuth {
    /// A token in a file readable only by its owner (mode 600).
    Token {
        /// The file.
        file: PathBuf,
    },
    /// AppRole: a YAML or JSON file (mode 600) with `roleId` and `secretId`.
    AppRole {
        /// Mount of the approle auth method (`approle`).
        mount: String,
        /// The file.
        file: PathBuf,
    },
    /// Kubernetes auth: the pod's projected service-account token, checked by Vault with a
    /// TokenReview against the API server.
    Kubernetes {
        /// Mount of the kubernetes auth method (`kubernetes`).
        mount: String,
        /// The role to log in with when a binding names none.
        role: String,
        /// The projected token's file.
        token_file: PathBuf,
    },
}

/// Where Vault is and how to reach it.
#[derive(Debug, Clone)]
pub struct VaultConfig {
    /// `https://vault.example:8200` (`http://127.0.0.1:…` for a dev server).
    pub addr: String,
    /// A CA certificate (PEM) to trust for Vault's TLS certificate.
    pub ca_cert: Option<PathBuf>,
    /// The broker's identity.
    pub auth: VaultAuth,
    /// The deadline of every request to Vault.
    pub timeout: Duration,
}

/// A Vault token the broker holds, and the client that carries it.
struct Session {
    client: Arc<VaultClient>,
    /// When to log in again (a little before the token expires); `None`: never expires.
    renew_at: Option<Instant>,
}

/// The Vault broker.
pub struct VaultBroker {
    config: VaultConfig,
    /// Sessions by the binding's `authRole` (`None`: the broker's own identity).
    sessions: Mutex<HashMap<Option<String>, Session>>,
}

impl std::fmt::Debug for VaultBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VaultBroker")
            .field("addr", &self.config.addr)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AppRoleFile {
    role_id: String,
    secret_id: String,
}

/// A dynamic engine's answer: its data and the lease.
#[derive(Deserialize, Debug)]
struct LeasedAnswer {
    #[serde(default)]
    lease_id: String,
    #[serde(default)]
    lease_duration: u64,
    #[serde(default)]
    data: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `GET {path}`: a dynamic engine that issues on read (database).
#[derive(Endpoint)]
#[endpoint(path = "{self.path}", method = "GET", response = "LeasedAnswer")]
struct ReadLeased {
    #[endpoint(skip)]
    path: String,
}

/// `POST {path}`: a dynamic engine that takes parameters (kubernetes).
#[derive(Endpoint)]
#[endpoint(path = "{self.path}", method = "POST", response = "LeasedAnswer")]
struct WriteLeased {
    #[endpoint(skip)]
    path: String,
    ttl: Option<String>,
    kubernetes_namespace: Option<String>,
    audiences: Option<String>,
}

#[derive(Deserialize, Debug)]
struct Capabilities {
    #[serde(default)]
    capabilities: Vec<String>,
}

/// `sys/capabilities-self`: what the broker's token may do at a path.
#[derive(Endpoint)]
#[endpoint(
    path = "sys/capabilities-self",
    method = "POST",
    response = "Capabilities"
)]
struct CapabilitiesSelf {
    paths: Vec<String>,
}

/// `sys/leases/revoke`.
#[derive(Endpoint)]
#[endpoint(path = "sys/leases/revoke", method = "PUT")]
struct RevokeLease {
    lease_id: String,
}

/// The Kubernetes secrets engine refuses a token shorter than the API server allows.
const KUBERNETES_MIN_TTL_SECONDS: u32 = 600;

impl VaultBroker {
    /// A broker for `config`. Nothing is contacted until the first call or readiness check, so
    /// a runtime starts while Vault is down and recovers when it comes back.
    pub fn new(config: VaultConfig) -> Result<Self, BrokerError> {
        url_ok(&config.addr)?;
        match &config.auth {
            VaultAuth::Token { file } => {
                crate::read_private(file, "Vault token file")?;
            }
            VaultAuth::AppRole { file, .. } => {
                parse_approle(file)?;
            }
            VaultAuth::Kubernetes { .. } => {}
        }
        Ok(VaultBroker {
            config,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    fn client(&self, token: &str) -> Result<VaultClient, BrokerError> {
        let mut settings = VaultClientSettingsBuilder::default();
        settings
            .address(&self.config.addr)
            .token(token)
            .timeout(Some(self.config.timeout));
        if let Some(ca) = &self.config.ca_cert {
            settings.ca_certs(vec![ca.display().to_string()]);
        }
        let settings = settings
            .build()
            .map_err(|e| BrokerError::Source(format!("Vault address {}: {e}", self.config.addr)))?;
        VaultClient::new(settings)
            .map_err(|e| BrokerError::Source(format!("Vault client: {}", describe(&e))))
    }

    /// The client acting for `auth_role`, logging in when there is none or it is about to expire.
    async fn session(&self, auth_role: Option<&str>) -> Result<Arc<VaultClient>, BrokerError> {
        let key = auth_role.map(str::to_string);
        let mut sessions = self.sessions.lock().await;
        if let Some(s) = sessions.get(&key)
            && s.renew_at.is_none_or(|t| Instant::now() < t)
        {
            return Ok(s.client.clone());
        }
        let session = self.login(auth_role).await?;
        let client = session.client.clone();
        sessions.insert(key, session);
        Ok(client)
    }

    /// Forget a session whose token Vault no longer accepts (expired, revoked).
    async fn forget(&self, auth_role: Option<&str>) {
        self.sessions
            .lock()
            .await
            .remove(&auth_role.map(str::to_string));
    }

    async fn login(&self, auth_role: Option<&str>) -> Result<Session, BrokerError> {
        let anonymous = self.client("")?;
        let (token, lease_seconds) = match &self.config.auth {
            VaultAuth::Token { file } => (crate::read_private(file, "Vault token file")?, None),
            VaultAuth::AppRole { mount, file } => {
                let creds = parse_approle(file)?;
                let auth = vaultrs::auth::approle::login(
                    &anonymous,
                    mount,
                    &creds.role_id,
                    &creds.secret_id,
                )
                .await
                .map_err(|e| login_error(&e, &format!("AppRole login at auth/{mount}")))?;
                (auth.client_token, Some(auth.lease_duration))
            }
            VaultAuth::Kubernetes {
                mount,
                role,
                token_file,
            } => {
                let role = auth_role.unwrap_or(role);
                let jwt = tokio::fs::read_to_string(token_file).await.map_err(|e| {
                    BrokerError::Source(format!(
                        "service-account token {}: {e}",
                        token_file.display()
                    ))
                })?;
                let auth = vaultrs::auth::kubernetes::login(&anonymous, mount, role, jwt.trim())
                    .await
                    .map_err(|e| {
                        login_error(
                            &e,
                            &format!("Kubernetes login at auth/{mount} as role {role}"),
                        )
                    })?;
                let session = self.session_of(&auth.client_token, Some(auth.lease_duration))?;
                return Ok(session);
            }
        };
        let Some(role) = auth_role else {
            return self.session_of(&token, lease_seconds);
        };
        // A token role narrows the broker's token to what the binding may read.
        let parent = self.client(&token)?;
        let child = vaultrs::token::new_role(&parent, role, None)
            .await
            .map_err(|e| login_error(&e, &format!("creating a token from token role {role}")))?;
        self.session_of(&child.client_token, Some(child.lease_duration))
    }

    fn session_of(&self, token: &str, lease_seconds: Option<u64>) -> Result<Session, BrokerError> {
        Ok(Session {
            client: Arc::new(self.client(token)?),
            // Log in again at 80 % of the token's life; a token without one never expires.
            renew_at: lease_seconds
                .filter(|s| *s > 0)
                .map(|s| Instant::now() + Duration::from_secs(s * 4 / 5)),
        })
    }

    /// Whether the session may read what the binding names; the path it reads.
    async fn allowed(
        &self,
        client: &VaultClient,
        binding: &CredentialBindingSpec,
    ) -> Result<String, BrokerError> {
        let v = &binding.vault;
        let path = match v.engine {
            VaultEngine::Kv2 => format!("{}/data/{}", v.mount, v.path),
            _ => format!("{}/{}", v.mount, v.path),
        };
        let need = match v.engine {
            VaultEngine::Kubernetes => "update",
            _ => "read",
        };
        let caps = vaultrs::api::exec_with_no_result(
            client,
            CapabilitiesSelf {
                paths: vec![path.clone()],
            },
        )
        .await
        .map_err(|e| vault_error(&e, &format!("sys/capabilities-self for {path}")))?;
        let has = |c: &str| caps.capabilities.iter().any(|x| x == c);
        if has("deny") || !(has(need) || has("root")) {
            let role = v
                .auth_role
                .as_deref()
                .map_or("the broker's own identity".into(), |r| format!("role {r}"));
            return Err(BrokerError::Forbidden(format!(
                "Vault does not let {role} {need} {path} (its capabilities there: [{}])",
                caps.capabilities.join(", ")
            )));
        }
        Ok(path)
    }

    async fn issue_once(&self, request: &Request<'_>) -> Result<Issued, BrokerError> {
        let v = &request.binding.vault;
        let client = self.session(v.auth_role.as_deref()).await?;
        let path = self.allowed(&client, request.binding).await?;
        let ttl = request.ttl_seconds();
        match v.engine {
            VaultEngine::Kv2 => {
                let data: HashMap<String, serde_json::Value> =
                    vaultrs::kv2::read(&*client, &v.mount, &v.path)
                        .await
                        .map_err(|e| vault_error(&e, &path))?;
                let field = v.field.as_deref().unwrap_or("value");
                let value = data.get(field).ok_or_else(|| BrokerError::Missing {
                    location: format!("{path} (field {field})"),
                    source_name: format!("Vault at {}", self.config.addr),
                })?;
                Ok(Issued {
                    value: Secret::new(text_of(value)),
                    ttl_seconds: ttl,
                    lease: None,
                })
            }
            VaultEngine::Kubernetes => {
                let ttl = ttl.max(KUBERNETES_MIN_TTL_SECONDS);
                let answer = vaultrs::api::exec_with_no_result(
                    &*client,
                    WriteLeased {
                        path: path.clone(),
                        ttl: Some(format!("{ttl}s")),
                        kubernetes_namespace: Some(
                            v.kubernetes_namespace
                                .clone()
                                .unwrap_or_else(|| request.namespace.to_string()),
                        ),
                        audiences: request.binding.audience.clone(),
                    },
                )
                .await
                .map_err(|e| vault_error(&e, &path))?;
                leased(answer, request, &path, "service_account_token")
            }
            VaultEngine::Database | VaultEngine::Dynamic => {
                let answer =
                    vaultrs::api::exec_with_no_result(&*client, ReadLeased { path: path.clone() })
                        .await
                        .map_err(|e| vault_error(&e, &path))?;
                leased(answer, request, &path, "")
            }
        }
    }
}

/// The delivered value and lease of a dynamic engine's answer.
fn leased(
    answer: LeasedAnswer,
    request: &Request<'_>,
    path: &str,
    default_field: &str,
) -> Result<Issued, BrokerError> {
    let data = answer.data.unwrap_or_default();
    let field = request
        .binding
        .vault
        .field
        .as_deref()
        .or(Some(default_field).filter(|f| !f.is_empty()));
    let value = match field {
        Some(f) => text_of(data.get(f).ok_or_else(|| BrokerError::Missing {
            location: format!("{path} (field {f})"),
            source_name: "Vault's answer".into(),
        })?),
        None => serde_json::Value::Object(data).to_string(),
    };
    Ok(Issued {
        value: Secret::new(value),
        ttl_seconds: u32::try_from(answer.lease_duration).unwrap_or(u32::MAX),
        lease: (!answer.lease_id.is_empty()).then(|| Lease {
            id: answer.lease_id,
            binding: request.name.to_string(),
        }),
    })
}

fn text_of(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn parse_approle(file: &Path) -> Result<AppRoleFile, BrokerError> {
    let text = crate::read_private(file, "AppRole file")?;
    serde_norway::from_str(&text).map_err(|e| {
        BrokerError::Source(format!(
            "AppRole file {}: expected roleId and secretId: {e}",
            file.display()
        ))
    })
}

fn url_ok(addr: &str) -> Result<(), BrokerError> {
    if addr.starts_with("https://") || addr.starts_with("http://") {
        Ok(())
    } else {
        Err(BrokerError::Source(format!(
            "Vault address {addr:?}: expected an http:// or https:// URL"
        )))
    }
}

/// What went wrong, in words that never carry a value (Vault's error strings name paths and
/// reasons, never secrets).
fn describe(e: &ClientError) -> String {
    match e {
        ClientError::APIError { code, errors } => {
            format!("Vault answered {code}: {}", errors.join("; "))
        }
        ClientError::RestClientError { source } => {
            let mut text = source.to_string();
            let mut cause: Option<&dyn std::error::Error> = std::error::Error::source(source);
            while let Some(c) = cause {
                text = format!("{text}: {c}");
                cause = c.source();
            }
            text
        }
        other => other.to_string(),
    }
}

/// A Vault error as the broker reports it.
fn vault_error(e: &ClientError, what: &str) -> BrokerError {
    match e {
        ClientError::APIError { code: 403, .. } => {
            BrokerError::Forbidden(format!("Vault refused {what}: {}", describe(e)))
        }
        ClientError::APIError { code: 404, .. } => BrokerError::Missing {
            location: what.to_string(),
            source_name: "Vault".into(),
        },
        ClientError::APIError {
            code: 429 | 500..=599,
            ..
        } => BrokerError::Unavailable(format!(
            "Vault is sealed or unavailable ({what}): {}",
            describe(e)
        )),
        ClientError::RestClientError { .. } => {
            BrokerError::Unavailable(format!("Vault cannot be reached ({what}): {}", describe(e)))
        }
        _ => BrokerError::Source(format!("Vault ({what}): {}", describe(e))),
    }
}

/// A refused login is Forbidden whatever Vault's code (it answers 400 for a bad role).
fn login_error(e: &ClientError, what: &str) -> BrokerError {
    match vault_error(e, what) {
        BrokerError::Source(m) | BrokerError::Missing { location: m, .. } => {
            BrokerError::Forbidden(format!("Vault refused {what}: {m}"))
        }
        other => other,
    }
}

impl CredentialBroker for VaultBroker {
    fn issue<'a>(&'a self, request: Request<'a>) -> BrokerFuture<'a, Issued> {
        Box::pin(async move {
            let role = request.binding.vault.auth_role.as_deref();
            match self.issue_once(&request).await {
                // Maybe a token Vault stopped accepting (expired, revoked, a rotated token
                // file): log in again, once.
                Err(BrokerError::Forbidden(_)) => {
                    self.forget(role).await;
                    self.issue_once(&request).await
                }
                other => other,
            }
        })
    }

    fn revoke<'a>(&'a self, lease: &'a Lease) -> BrokerFuture<'a, ()> {
        Box::pin(async move {
            // Revoking needs `sys/leases/revoke` on the broker's own identity.
            let client = self.session(None).await?;
            vaultrs::api::exec_with_empty(
                &*client,
                RevokeLease {
                    lease_id: lease.id.clone(),
                },
            )
            .await
            .map_err(|e| {
                vault_error(
                    &e,
                    &format!("revoking the lease of CredentialBinding {}", lease.binding),
                )
            })
        })
    }

    fn check<'a>(
        &'a self,
        _namespace: &'a str,
        _name: &'a str,
        binding: &'a CredentialBindingSpec,
    ) -> BrokerFuture<'a, String> {
        Box::pin(async move {
            let role = binding.vault.auth_role.as_deref();
            let client = self.session(role).await?;
            let path = self.allowed(&client, binding).await?;
            Ok(format!(
                "Vault at {} lets {} read {path}",
                self.config.addr,
                role.map_or("the broker".into(), |r| format!("role {r}"))
            ))
        })
    }
}
