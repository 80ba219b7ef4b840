//! TLS for the API with certificates that can change under a running server: the certificate
//! and key are read again when their files change (cert-manager renews a Secret; the kubelet
//! updates the mounted files), so a rotation needs no restart. A file that changed into
//! something unreadable keeps the last good pair and logs why.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::Stream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;

use crate::error::ApiError;

/// How often the files' modification times are looked at, at most.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Longest a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// TLS for the API: the server's certificate chain and key (PEM), and optionally a CA whose
/// client certificates every caller must present (mutual TLS; the bearer token still says who
/// the caller is).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Certificate chain, PEM.
    pub cert: PathBuf,
    /// Private key, PEM.
    pub key: PathBuf,
    /// CA bundle that client certificates must chain to, PEM.
    pub client_ca: Option<PathBuf>,
}

fn invalid(flag: &str, path: &Path, message: impl std::fmt::Display) -> ApiError {
    ApiError::InvalidArgument {
        field: flag.to_string(),
        message: format!("{}: {message}", path.display()),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

impl TlsFiles {
    /// The certificate and key as one signing identity, or what is wrong with them.
    fn certified_key(&self) -> Result<CertifiedKey, ApiError> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
            .map_err(|e| invalid("--tls-cert", &self.cert, e))?
            .collect::<Result<_, _>>()
            .map_err(|e| invalid("--tls-cert", &self.cert, e))?;
        if chain.is_empty() {
            return Err(invalid(
                "--tls-cert",
                &self.cert,
                "expected a PEM file with a CERTIFICATE block",
            ));
        }
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| {
            invalid(
                "--tls-key",
                &self.key,
                format!("expected a PEM file with a PRIVATE KEY block ({e})"),
            )
        })?;
        let certified = CertifiedKey::from_der(chain, key, &provider())
            .map_err(|e| invalid("--tls-key", &self.key, e))?;
        certified.keys_match().map_err(|e| {
            invalid(
                "--tls-key",
                &self.key,
                format!("the key does not belong to the certificate in --tls-cert ({e})"),
            )
        })?;
        Ok(certified)
    }

    /// The server TLS configuration (certificates that reload when their files change), or what
    /// is wrong with the files.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, ApiError> {
        let resolver = Arc::new(Reloading::new(self.clone())?);
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid("--tls-cert", &self.cert, e))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(ca)
                    .map_err(|e| invalid("--tls-client-ca", ca, e))?
                {
                    roots
                        .add(cert.map_err(|e| invalid("--tls-client-ca", ca, e))?)
                        .map_err(|e| invalid("--tls-client-ca", ca, e))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                        .build()
                        .map_err(|e| invalid("--tls-client-ca", ca, e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_cert_resolver(resolver);
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// The current certificate, read again when the files' modification times change.
#[derive(Debug)]
struct Reloading {
    files: TlsFiles,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    key: Arc<CertifiedKey>,
    stamps: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

impl Reloading {
    fn new(files: TlsFiles) -> Result<Self, ApiError> {
        let key = Arc::new(files.certified_key()?);
        let stamps = (modified(&files.cert), modified(&files.key));
        Ok(Reloading {
            files,
            state: Mutex::new(State {
                key,
                stamps,
                checked: Instant::now(),
            }),
        })
    }

    fn current(&self) -> Arc<CertifiedKey> {
        let mut s = match self.state.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if s.checked.elapsed() >= CHECK_EVERY {
            s.checked = Instant::now();
            let stamps = (modified(&self.files.cert), modified(&self.files.key));
            if stamps != s.stamps {
                match self.files.certified_key() {
                    Ok(k) => {
                        s.key = Arc::new(k);
                        s.stamps = stamps;
                        tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                    }
                    // Half-written during a rotation, or wrong: keep serving the last good pair.
                    Err(e) => {
                        tracing::warn!(error = %e, "the changed TLS files do not load; keeping the previous certificate")
                    }
                }
            }
        }
        s.key.clone()
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The TLS connections accepted on `listener` (TCP_NODELAY set, handshakes in parallel, a failed
/// or slow handshake dropped and logged).
pub(crate) fn incoming(
    listener: TcpListener,
    config: rustls::ServerConfig,
) -> impl Stream<Item = std::io::Result<TlsStream<TcpStream>>> + Send + 'static {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if let Err(e) = stream.set_nodelay(true) {
                tracing::warn!(error = %e, "TCP_NODELAY");
            }
            if tx.is_closed() {
                break;
            }
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    Ok(Err(e)) => tracing::info!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
