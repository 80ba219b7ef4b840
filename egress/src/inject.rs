//! Credentials by placeholder: the sandbox holds a random placeholder where its credential would
//! be; the proxy swaps in the value only in requests to the binding's hosts (and methods and
//! paths, when named), and refuses a request carrying the placeholder anywhere else.
//!
//! TLS to a binding's host is intercepted: the proxy answers the tool's handshake with a
//! certificate for that host from a CA made for this one call (the call's sandbox alone trusts
//! it: [`Interception::ca_pem`]), reads the request, swaps, and
//! sends it on over its own TLS connection, verified against the system's roots. Every other
//! host is tunnelled untouched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use toolgate_crds::{InjectionPosition, ProxyDelivery};

/// Why interception could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum InterceptError {
    /// The per-call CA or a host's certificate.
    #[error("the call's TLS certificate authority: {0}")]
    Certificate(#[from] rcgen::Error),
    /// A TLS configuration.
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    /// A CA file the runtime was given.
    #[error("{path}: {reason}")]
    CaFile {
        /// The file.
        path: String,
        /// What was wrong.
        reason: String,
    },
}

/// A credential the proxy puts into its call's requests.
pub struct Injection {
    placeholder: String,
    value: String,
    hosts: Vec<(String, Option<u16>)>,
    positions: Vec<InjectionPosition>,
    methods: Vec<String>,
    path_prefixes: Vec<String>,
}

impl std::fmt::Debug for Injection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injection")
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

impl Injection {
    /// The value `value` for `placeholder`, where `delivery` lets it go.
    pub fn new(placeholder: String, value: String, delivery: &ProxyDelivery) -> Injection {
        let hosts = delivery
            .hosts
            .iter()
            .map(|h| match h.rsplit_once(':') {
                Some((name, port)) => (name.to_ascii_lowercase(), port.parse().ok()),
                None => (h.to_ascii_lowercase(), None),
            })
            .collect();
        Injection {
            placeholder,
            value,
            hosts,
            positions: delivery.positions.clone(),
            methods: delivery.methods.clone(),
            path_prefixes: delivery.path_prefixes.clone(),
        }
    }

    /// A fresh placeholder: worthless anywhere but in this call's requests to its hosts.
    pub fn placeholder() -> String {
        let mut bytes = [0u8; 20];
        // The OS's randomness; a placeholder that could not be made random is still unique
        // enough to swap, never a secret.
        let _ = getrandom::fill(&mut bytes);
        format!("toolgate-placeholder-{}", hex::encode(bytes))
    }

    /// Whether requests to `host:port` get the value (`default_port` when a host entry names
    /// none).
    pub(crate) fn for_host(&self, host: &str, port: u16, default_port: u16) -> bool {
        self.hosts
            .iter()
            .any(|(h, p)| h == host && p.unwrap_or(default_port) == port)
    }

    /// Whether `bytes` carry the placeholder.
    pub(crate) fn carried_by(&self, bytes: &[u8]) -> bool {
        bytes
            .windows(self.placeholder.len())
            .any(|w| w == self.placeholder.as_bytes())
    }

    /// Whether a request with this method and path may carry the value.
    pub(crate) fn allows(&self, method: &str, path: &str) -> bool {
        (self.methods.is_empty() || self.methods.iter().any(|m| m.eq_ignore_ascii_case(method)))
            && (self.path_prefixes.is_empty()
                || self.path_prefixes.iter().any(|p| path.starts_with(p)))
    }

    /// Swap the placeholder for the value in the positions the binding names: each header's
    /// value, and the query of `origin_form`. Returns whether anything was swapped.
    pub(crate) fn swap(&self, headers: &mut [(String, Vec<u8>)], origin_form: &mut String) -> bool {
        let mut swapped = false;
        if self.positions.contains(&InjectionPosition::Header) {
            for (_, value) in headers.iter_mut() {
                if self.carried_by(value) {
                    *value = self.swapped_bytes(value);
                    swapped = true;
                }
            }
        }
        if self.positions.contains(&InjectionPosition::Query)
            && let Some((path, query)) = origin_form.split_once('?')
            && query.contains(&self.placeholder)
        {
            *origin_form = format!("{path}?{}", query.replace(&self.placeholder, &self.value));
            swapped = true;
        }
        swapped
    }

    /// `bytes` with every placeholder replaced by the value, the other bytes as they were (a
    /// header value need not be UTF-8).
    fn swapped_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let needle = self.placeholder.as_bytes();
        let mut out = Vec::with_capacity(bytes.len() + self.value.len());
        let mut rest = bytes;
        while let Some(at) = rest.windows(needle.len()).position(|w| w == needle) {
            out.extend_from_slice(&rest[..at]);
            out.extend_from_slice(self.value.as_bytes());
            rest = &rest[at + needle.len()..];
        }
        out.extend_from_slice(rest);
        out
    }
}

/// What a call with a proxy-delivered credential has before the credential is issued: the
/// placeholder its sandbox gets and the CA its sandbox trusts. Each runtime makes it when it
/// places the call, and turns it into the proxy's injection once the broker answered.
pub struct Pending {
    placeholder: String,
    interception: Interception,
}

impl Pending {
    /// A fresh placeholder, and `interception`'s CA.
    pub fn new(interception: Interception) -> Pending {
        Pending {
            placeholder: Injection::placeholder(),
            interception,
        }
    }

    /// What the sandbox gets where the value would be.
    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }

    /// The CA the sandbox trusts, PEM.
    pub fn ca_pem(&self) -> String {
        self.interception.ca_pem()
    }

    /// The proxy's injection of `value` where `delivery` lets it go; none without either (a
    /// credential that could not be issued: the call does not run).
    pub fn into_injection(
        self,
        value: Option<&str>,
        delivery: Option<&ProxyDelivery>,
    ) -> Option<(Injection, Interception)> {
        let (value, delivery) = (value?, delivery?);
        Some((
            Injection::new(self.placeholder, value.to_string(), delivery),
            self.interception,
        ))
    }
}

/// TLS interception for one call: its CA, the host certificates made from it, and how the proxy
/// reaches upstreams.
pub struct Interception {
    ca: CertifiedIssuer<'static, KeyPair>,
    hosts: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
    upstream: Arc<rustls::ClientConfig>,
}

impl Interception {
    /// A CA for this call alone, valid for a day (a call lasts at most an hour), and the TLS
    /// client configuration upstreams are verified with ([`upstream_tls`]).
    pub fn new(upstream: Arc<rustls::ClientConfig>) -> Result<Interception, InterceptError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(DnType::CommonName, "toolgate per-call egress CA");
        let now = std::time::SystemTime::now();
        params.not_before = (now - std::time::Duration::from_secs(300)).into();
        params.not_after = (now + std::time::Duration::from_secs(86_400)).into();
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(Interception {
            ca,
            hosts: Mutex::default(),
            upstream,
        })
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// The server side of the tool's handshake with `host`: a certificate for it, made once.
    pub(crate) fn server_config(
        &self,
        host: &str,
    ) -> Result<Arc<rustls::ServerConfig>, InterceptError> {
        if let Ok(made) = self.hosts.lock()
            && let Some(config) = made.get(host)
        {
            return Ok(config.clone());
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![host.to_string()])?;
        params.distinguished_name.push(DnType::CommonName, host);
        let now = std::time::SystemTime::now();
        params.not_before = (now - std::time::Duration::from_secs(300)).into();
        params.not_after = (now + std::time::Duration::from_secs(86_400)).into();
        let cert = params.signed_by(&key, &self.ca)?;
        let chain = vec![cert.der().clone(), self.ca.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        // One request per connection, read as HTTP/1.1: no HTTP/2 inside an intercepted tunnel.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if let Ok(mut made) = self.hosts.lock() {
            made.insert(host.to_string(), config.clone());
        }
        Ok(config)
    }

    pub(crate) fn upstream(&self) -> Arc<rustls::ClientConfig> {
        self.upstream.clone()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// How the proxy verifies the upstreams it intercepts for: the system's roots, and the CA
/// certificates in `extra` (PEM files; a private CA the runtime's hosts use). Made once per set
/// of files for the process (loading the system's roots reads every certificate in them); a
/// runtime asks at start, so a file it cannot use is said before any call.
pub fn upstream_tls(
    extra: &[std::path::PathBuf],
) -> Result<Arc<rustls::ClientConfig>, InterceptError> {
    type Made = HashMap<Vec<std::path::PathBuf>, Arc<rustls::ClientConfig>>;
    static MADE: Mutex<Option<Made>> = Mutex::new(None);
    let mut made = MADE.lock().map_err(|_| InterceptError::CaFile {
        path: String::new(),
        reason: "the upstream TLS cache was poisoned".into(),
    })?;
    let made = made.get_or_insert_with(Made::new);
    if let Some(config) = made.get(extra) {
        return Ok(config.clone());
    }
    let config = load_upstream_tls(extra)?;
    made.insert(extra.to_vec(), config.clone());
    Ok(config)
}

fn load_upstream_tls(
    extra: &[std::path::PathBuf],
) -> Result<Arc<rustls::ClientConfig>, InterceptError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    for path in extra {
        let shown = path.display().to_string();
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| InterceptError::CaFile {
                path: shown.clone(),
                reason: e.to_string(),
            })?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| InterceptError::CaFile {
                path: shown.clone(),
                reason: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(InterceptError::CaFile {
                path: shown,
                reason: "expected PEM certificates, found none".into(),
            });
        }
        for cert in certs {
            roots.add(cert).map_err(|e| InterceptError::CaFile {
                path: shown.clone(),
                reason: e.to_string(),
            })?;
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placeholder_is_swapped_in_its_positions_and_other_bytes_are_kept() {
        let delivery: ProxyDelivery = serde_json::from_value(serde_json::json!({
            "hosts": ["api.example.com"], "positions": ["header"],
        }))
        .expect("delivery");
        let inj = Injection::new("PH".into(), "value".into(), &delivery);
        let mut headers = vec![
            ("Authorization".to_string(), b"Bearer PH".to_vec()),
            ("X-Raw".to_string(), vec![0xff, b'P', b'H', 0xfe]),
        ];
        let mut origin = "/x?token=PH".to_string();
        assert!(inj.swap(&mut headers, &mut origin));
        assert_eq!(headers[0].1, b"Bearer value");
        assert_eq!(headers[1].1, vec![0xff, b'v', b'a', b'l', b'u', b'e', 0xfe]);
        assert_eq!(
            origin, "/x?token=PH",
            "the query is not a position this binding names"
        );
        assert!(inj.for_host("api.example.com", 443, 443));
        assert!(!inj.for_host("api.example.com", 8443, 443));
    }
}
