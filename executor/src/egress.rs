//! The tool's one way out of a sandbox whose egress is by name: a relay on the sandbox's
//! loopback to the call's egress proxy, named to the tool as its HTTP proxy.
//!
//! The sandbox's network namespace has loopback only, so a connection that does not go through
//! the relay goes nowhere; the runtime's proxy at the other end of the socket decides each one.
//! The relay decides nothing: it only carries bytes, so nothing a tool does to it widens what the
//! proxy allows.

use std::path::PathBuf;
use std::sync::OnceLock;

use tokio::net::{TcpListener, UnixStream};

use crate::spec::ExecError;

/// The relay's URL once it is listening: what the tool's proxy variables and the executor's own
/// HTTP client name.
static PROXY_URL: OnceLock<String> = OnceLock::new();

/// The variables HTTP clients read their proxy from (curl, git, pip, requests, Go, Node's
/// undici with `NODE_USE_ENV_PROXY`), upper and lower case.
pub(crate) const PROXY_VARIABLES: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// The variables TLS clients read the CAs they trust from (OpenSSL and curl, git, Python's
/// requests and pip, Node): set to the call's bundle when its proxy intercepts TLS to deliver a
/// credential, so the tool trusts the call's CA and the system's roots, nothing more.
pub(crate) const CA_BUNDLE_VARIABLES: &[&str] = &[
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
];

/// The variables that exempt hosts from the proxy: removed, since the sandbox has no other way
/// out and an exempted host would just fail.
pub(crate) const NO_PROXY_VARIABLES: &[&str] = &["NO_PROXY", "no_proxy"];

/// The tool's way to the call's proxy for the rest of this process: a proxy the pod reaches
/// directly (`http://host:port`, a cluster's: the pod's NetworkPolicy admits it and nothing
/// else), or a relay on the sandbox's loopback to the proxy's `socket` (the embedded runtime's).
pub(crate) async fn start(proxy: &str) -> Result<&'static str, ExecError> {
    if proxy.starts_with("http://") {
        return Ok(PROXY_URL.get_or_init(|| proxy.to_string()));
    }
    start_relay(proxy).await
}

/// Start relaying to the proxy's `socket` for the rest of this process; its URL from then on.
async fn start_relay(socket: &str) -> Result<&'static str, ExecError> {
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|e| {
        ExecError::Unrunnable(format!("the egress relay on the sandbox's loopback: {e}"))
    })?;
    let port = listener
        .local_addr()
        .map_err(|e| ExecError::Unrunnable(format!("the egress relay's port: {e}")))?
        .port();
    let socket = PathBuf::from(socket);
    tokio::spawn(async move {
        while let Ok((mut tool, _)) = listener.accept().await {
            let socket = socket.clone();
            tokio::spawn(async move {
                match UnixStream::connect(&socket).await {
                    Ok(mut proxy) => {
                        let _ = tokio::io::copy_bidirectional(&mut tool, &mut proxy).await;
                    }
                    Err(e) => eprintln!(
                        "toolgate-executor: the call's egress proxy at {} cannot be reached: {e}",
                        socket.display()
                    ),
                }
            });
        }
    });
    Ok(PROXY_URL.get_or_init(|| format!("http://127.0.0.1:{port}")))
}

/// The call's CA, when its proxy intercepts TLS: what the executor's own HTTP client trusts
/// besides its roots, and the bundle of the system's roots and that CA its tool's clients read.
static CA: OnceLock<(Vec<u8>, PathBuf)> = OnceLock::new();

/// Where this image keeps the system's roots (Debian's bundle).
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Trust the call's CA (PEM, a file the runtime put beside the spec): in the executor's own
/// HTTP client, and in a bundle of the system's roots and that CA written to the sandbox's
/// temporary folder for the tool.
pub(crate) fn trust_ca(path: &str) -> Result<(), ExecError> {
    let unrunnable = |what: &str, e: std::io::Error| {
        ExecError::Unrunnable(format!("the call's CA ({what}): {e}"))
    };
    let ca = std::fs::read(path).map_err(|e| unrunnable(path, e))?;
    let mut bundle = std::fs::read(SYSTEM_BUNDLE).unwrap_or_default();
    if !bundle.is_empty() && !bundle.ends_with(b"\n") {
        bundle.push(b'\n');
    }
    bundle.extend_from_slice(&ca);
    let written = std::env::temp_dir().join("toolgate-ca-bundle.pem");
    std::fs::write(&written, &bundle).map_err(|e| unrunnable("its bundle", e))?;
    let _ = CA.set((ca, written));
    Ok(())
}

/// The call's CA, PEM, when there is one.
pub(crate) fn ca() -> Option<&'static [u8]> {
    CA.get().map(|(pem, _)| pem.as_slice())
}

/// The bundle the tool's TLS clients read, when the call has a CA.
pub(crate) fn ca_bundle_path() -> Option<&'static std::path::Path> {
    CA.get().map(|(_, path)| path.as_path())
}

/// The relay's URL, when this call's egress goes through a proxy.
pub(crate) fn proxy_url() -> Option<&'static str> {
    PROXY_URL.get().map(String::as_str)
}
