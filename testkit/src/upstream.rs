//! An HTTP server on a loopback address for egress tests: `/hello` answers a greeting that
//! repeats the request line and its `Connection` header, `/redirect?to=URL` a 302 to `URL`.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serve on a free port of `ip` (a 127.0.0.0/8 address) until the runtime stops; its address.
pub async fn start(ip: &str) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(answer(s));
        }
    });
    Ok(addr)
}

/// A request's head, read to its blank line; none when the client closed first.
async fn read_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<String> {
    let mut buf = vec![0u8; 8192];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    Some(String::from_utf8_lossy(&got).to_string())
}

async fn answer(mut s: tokio::net::TcpStream) {
    let Some(text) = read_head(&mut s).await else {
        return;
    };
    let line = text.lines().next().unwrap_or_default().to_string();
    let path = line.split(' ').nth(1).unwrap_or("/").to_string();
    let reply = if let Some(to) = path.strip_prefix("/redirect?to=") {
        format!(
            "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    } else {
        let connection = text
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("connection:"))
            .unwrap_or("none");
        let body =
            format!("hello from upstream; request line {line}; connection header {connection}\n");
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let _ = s.write_all(reply.as_bytes()).await;
    let _ = s.shutdown().await;
}

/// An HTTPS server for `name` on `ip`, its certificate from a CA of its own: the API a
/// proxy-delivered credential is for. It answers `token ok` to a request whose `Authorization`
/// is `Bearer <token>`, and `401` repeating what it got otherwise.
pub struct TlsUpstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its CA's certificate, PEM: what a client (or a proxy) must trust to reach it.
    pub ca_pem: String,
}

/// Start a [`TlsUpstream`] (inside a tokio runtime).
pub async fn start_tls(ip: &str, name: &str, token: &str) -> std::io::Result<TlsUpstream> {
    serve_tls(ip, name, token, None).await
}

/// A [`TlsUpstream`] that answers an authorized `GET /x` with the file `x` under `root` (404
/// when there is none): a git server of the dumb HTTP protocol when `root` holds a bare
/// repository after `git update-server-info`.
pub async fn start_tls_files(
    ip: &str,
    name: &str,
    token: &str,
    root: std::path::PathBuf,
) -> std::io::Result<TlsUpstream> {
    serve_tls(ip, name, token, Some(root)).await
}

async fn serve_tls(
    ip: &str,
    name: &str,
    token: &str,
    files: Option<std::path::PathBuf>,
) -> std::io::Result<TlsUpstream> {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let err = |e: rcgen::Error| std::io::Error::other(e.to_string());
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca =
        CertifiedIssuer::self_signed(ca_params, KeyPair::generate().map_err(err)?).map_err(err)?;
    let key = KeyPair::generate().map_err(err)?;
    let cert = CertificateParams::new(vec![name.to_string()])
        .map_err(err)?
        .signed_by(&key, &ca)
        .map_err(err)?;
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            b.with_no_client_auth().with_single_cert(
                vec![cert.der().clone(), ca.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
        })
        .map_err(std::io::Error::other)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
    let addr = listener.local_addr()?;
    let expected = token.to_string();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let expected = expected.clone();
            let files = files.clone();
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(s).await else {
                    return;
                };
                let Some(text) = read_head(&mut s).await else {
                    return;
                };
                let auth = text
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("authorization")
                            .then(|| v.trim().to_string())
                    })
                    .unwrap_or_default();
                let bearer = auth
                    .get(..7)
                    .is_some_and(|b| b.eq_ignore_ascii_case("bearer "));
                let (status, body) = match (bearer && auth[7..] == expected, &files) {
                    (false, _) => (
                        "401 Unauthorized",
                        format!("bad token: {auth}\n").into_bytes(),
                    ),
                    (true, None) => ("200 OK", b"token ok\n".to_vec()),
                    (true, Some(root)) => {
                        let path = text
                            .split(' ')
                            .nth(1)
                            .unwrap_or("/")
                            .split('?')
                            .next()
                            .unwrap_or("/")
                            .trim_start_matches('/')
                            .to_string();
                        match std::fs::read(root.join(&path)) {
                            Ok(bytes) if !path.split('/').any(|c| c == "..") => ("200 OK", bytes),
                            _ => ("404 Not Found", b"no such file\n".to_vec()),
                        }
                    }
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&body).await;
                let _ = s.shutdown().await;
            });
        }
    });
    Ok(TlsUpstream {
        addr,
        ca_pem: ca.pem(),
    })
}
