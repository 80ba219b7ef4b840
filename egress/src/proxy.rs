//! The proxy's connections: read a request head, decide, then tunnel, forward or refuse.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener};
use toolgate_contract::egress::{EgressRules, Refusal};
use toolgate_contract::redact::Redactor;

use crate::inject::{Injection, Interception};
use crate::record::{Decision, Record, Records};
use crate::resolve::Resolver;

/// The longest request head read: a tool's request line and headers, not its body.
const HEAD_LIMIT: usize = 64 * 1024;
/// How long a tool has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long reaching an upstream may take, per address.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once: a tool looping on connections waits instead of exhausting the
/// runtime's descriptors.
const CONCURRENT: usize = 256;

/// One call's egress proxy.
#[derive(Clone)]
pub struct Proxy {
    rules: Arc<EgressRules>,
    /// The call's credentials, kept out of every record: a tool may put one in a host name or
    /// a path to carry it out, and the record of that attempt must not carry it on.
    redactor: Arc<Redactor>,
    resolver: Resolver,
    records: Records,
    permits: Arc<tokio::sync::Semaphore>,
    /// The call's `proxy`-delivered credential and the TLS interception it needs.
    injection: Option<Arc<(Injection, Interception)>>,
}

/// A proxy serving a listener: its records stay readable after it is stopped. Dropping it stops
/// the accept loop and every connection it relays.
pub struct Served {
    records: Records,
    task: tokio::task::JoinHandle<()>,
    port: u16,
}

impl Served {
    /// The TCP port it serves on (0 for a socket).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The records so far (and how many were dropped past the cap).
    pub fn records(&self) -> (Vec<Record>, u64) {
        self.records.snapshot()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A listener the proxy serves: a socket (the embedded runtime's) or a TCP port (a cluster's).
trait Accept: Send + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept_one(&self)
    -> impl std::future::Future<Output = std::io::Result<Self::Stream>> + Send;
}

impl Accept for UnixListener {
    type Stream = tokio::net::UnixStream;
    async fn accept_one(&self) -> std::io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }
}

impl Accept for tokio::net::TcpListener {
    type Stream = TcpStream;
    async fn accept_one(&self) -> std::io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }
}

/// A request head as the proxy needs it.
struct Head {
    method: String,
    /// The authority (`CONNECT`) or the absolute URL (plain HTTP).
    target: String,
    headers: Vec<(String, Vec<u8>)>,
    /// Bytes read past the head (a body's start, or a TLS hello sent eagerly).
    rest: Vec<u8>,
}

/// A request the proxy answers itself, with the status and words the tool shows.
struct Answer {
    status: u16,
    kind: String,
    reason: String,
}

impl Answer {
    fn bad_request(reason: impl Into<String>) -> Answer {
        Answer {
            status: 400,
            kind: "bad-request".into(),
            reason: reason.into(),
        }
    }
}

impl From<Refusal> for Answer {
    fn from(r: Refusal) -> Answer {
        let status = match r {
            Refusal::Unresolved { .. } => 502,
            _ => 403,
        };
        Answer {
            status,
            kind: r.kind().into(),
            reason: r.to_string(),
        }
    }
}

impl Proxy {
    /// A proxy deciding by `rules`, resolving with `resolver`, redacting `redactor`'s secrets
    /// from its records.
    pub fn new(rules: EgressRules, resolver: Resolver, redactor: Redactor) -> Proxy {
        Proxy {
            rules: Arc::new(rules),
            redactor: Arc::new(redactor),
            resolver,
            records: Records::default(),
            permits: Arc::new(tokio::sync::Semaphore::new(CONCURRENT)),
            injection: None,
        }
    }

    /// The same proxy, swapping `injection`'s placeholder for its value on requests to its
    /// hosts, TLS to them intercepted with `interception`'s CA.
    pub fn with_injection(mut self, injection: Injection, interception: Interception) -> Proxy {
        self.injection = Some(Arc::new((injection, interception)));
        self
    }

    /// Serve every connection of `listener` (a socket) until the returned handle is dropped.
    pub fn serve_unix(self, listener: UnixListener) -> Served {
        self.serve(listener, 0)
    }

    /// Serve every connection of a TCP `listener` until the returned handle is dropped.
    pub fn serve_tcp(self, listener: tokio::net::TcpListener) -> Served {
        let port = listener.local_addr().map_or(0, |a| a.port());
        self.serve(listener, port)
    }

    fn serve<L: Accept>(self, listener: L, port: u16) -> Served {
        let records = self.records.clone();
        let task = tokio::spawn(async move {
            while let Ok(stream) = listener.accept_one().await {
                self.spawn(stream);
            }
        });
        Served {
            records,
            task,
            port,
        }
    }

    fn spawn<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(&self, stream: S) {
        let proxy = self.clone();
        tokio::spawn(async move {
            let Ok(_permit) = proxy.permits.clone().acquire_owned().await else {
                return;
            };
            proxy.connection(stream).await;
        });
    }

    /// One connection from the tool: one request decided and relayed.
    async fn connection<S: AsyncRead + AsyncWrite + Unpin>(&self, mut tool: S) {
        let at_ms = self.records.now_ms();
        let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut tool)).await {
            Ok(Ok(Some(h))) => h,
            // Closed before a request, or a head the tool never finished: nothing to record.
            Ok(Ok(None)) | Err(_) => return,
            Ok(Err(reason)) => {
                let _ = answer(&mut tool, &Answer::bad_request(reason)).await;
                return;
            }
        };
        let mut record = Record {
            at_ms,
            method: head.method.clone(),
            host: String::new(),
            port: 0,
            path: None,
            address: None,
            decision: Decision::Refused,
            kind: None,
            reason: None,
            bytes_sent: 0,
            bytes_received: 0,
            injected: false,
        };
        let outcome = self.relay(&mut tool, head, &mut record).await;
        if let Err(a) = outcome {
            record.decision = if a.status == 403 || a.status == 400 {
                Decision::Refused
            } else {
                Decision::Failed
            };
            record.kind = Some(a.kind.clone());
            record.reason = Some(a.reason.clone());
            let _ = answer(&mut tool, &a).await;
        }
        record.host = self.redactor.redact_str(&record.host);
        record.path = record.path.map(|p| self.redactor.redact_str(&p));
        record.reason = record.reason.map(|r| self.redactor.redact_str(&r));
        self.records.push(record);
    }

    async fn relay<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        tool: &mut S,
        head: Head,
        record: &mut Record,
    ) -> Result<(), Answer> {
        let tunnel = head.method.eq_ignore_ascii_case("CONNECT");
        let (host, port, origin_form) = if tunnel {
            let (host, port) = authority(&head.target, None).ok_or_else(|| {
                Answer::bad_request(format!("CONNECT needs host:port, found {:?}", head.target))
            })?;
            (host, port, None)
        } else {
            let Some(rest) = strip_prefix_ignore_case(&head.target, "http://") else {
                return Err(Answer::bad_request(format!(
                    "expected an absolute http:// URL (or CONNECT for https), found {:?}",
                    head.target
                )));
            };
            let (auth, path) = match rest.find(['/', '?']) {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, "/"),
            };
            let path = if path.starts_with('?') {
                format!("/{path}")
            } else {
                path.to_string()
            };
            let (host, port) = authority(auth, Some(80))
                .ok_or_else(|| Answer::bad_request(format!("no host in {:?}", head.target)))?;
            (host, port, Some(path))
        };
        record.host = host.clone();
        record.port = port;
        record.path = origin_form
            .as_deref()
            .map(|p| p.split('?').next().unwrap_or(p).to_string());
        let default_port = if tunnel { 443 } else { 80 };
        // The value's hosts, when this request goes to one of them.
        let injecting = self
            .injection
            .as_deref()
            .filter(|(inj, _)| inj.for_host(&host, port, default_port));
        if let Some((inj, _)) = self.injection.as_deref()
            && injecting.is_none()
            && carries(inj, &head)
        {
            return Err(exfiltration(&host, port));
        }
        self.rules.check_host(&host, port, default_port)?;
        let addresses =
            self.resolver
                .addresses(&host)
                .await
                .map_err(|reason| Refusal::Unresolved {
                    host: host.clone(),
                    reason,
                })?;
        let mut allowed = Vec::new();
        let mut first_refusal = None;
        for ip in addresses {
            match self.rules.check_address(&host, ip) {
                Ok(()) => allowed.push(ip),
                Err(r) => {
                    if first_refusal.is_none() {
                        record.address = Some(ip);
                        first_refusal = Some(r);
                    }
                }
            }
        }
        // Every address must pass: a name with one public and one private address is refused,
        // so the answer a client library would pick is never the question.
        if let Some(r) = first_refusal {
            return Err(r.into());
        }
        let (mut upstream, ip) = connect(&allowed, port).await.map_err(|reason| Answer {
            status: 502,
            kind: "unreachable".into(),
            reason: format!("{host}:{port}: {reason}"),
        })?;
        record.address = Some(ip);
        if let (true, Some((inj, interception))) = (tunnel, injecting) {
            if !head.rest.is_empty() {
                return Err(Answer::bad_request(
                    "the tool sent bytes before the tunnel was established",
                ));
            }
            tool.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .map_err(|e| failed(&e))?;
            record.decision = Decision::Allowed;
            intercepted(tool, upstream, &host, port, inj, interception, record).await;
            return Ok(());
        }
        let mut head = head;
        let mut origin_form = origin_form;
        if let (false, Some((inj, _)), Some(origin)) = (tunnel, injecting, origin_form.as_mut()) {
            let path = origin.split('?').next().unwrap_or(origin).to_string();
            if carries(inj, &head) && !inj.allows(&head.method, &path) {
                return Err(not_here(&head.method, &path));
            }
            record.injected = inj.swap(&mut head.headers, origin);
        }
        let sent_first = if tunnel {
            tool.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .map_err(|e| failed(&e))?;
            upstream
                .write_all(&head.rest)
                .await
                .map_err(|e| failed(&e))?;
            head.rest.len()
        } else {
            let bytes = forwarded_head(&head, origin_form.as_deref().unwrap_or("/"), &host, port);
            upstream.write_all(&bytes).await.map_err(|e| failed(&e))?;
            upstream
                .write_all(&head.rest)
                .await
                .map_err(|e| failed(&e))?;
            bytes.len() + head.rest.len()
        };
        record.decision = Decision::Allowed;
        let (up, down) = tokio::io::copy_bidirectional(tool, &mut upstream)
            .await
            .unwrap_or((0, 0));
        record.bytes_sent = up + sent_first as u64;
        record.bytes_received = down;
        Ok(())
    }
}

/// Whether a request head carries the placeholder anywhere (its target or any header).
fn carries(inj: &Injection, head: &Head) -> bool {
    inj.carried_by(head.target.as_bytes()) || head.headers.iter().any(|(_, v)| inj.carried_by(v))
}

fn exfiltration(host: &str, port: u16) -> Answer {
    Answer {
        status: 403,
        kind: "credential-exfiltration".into(),
        reason: format!(
            "a request to {host}:{port} carried the call's credential placeholder, which only the credential binding's hosts get: refused and recorded as an exfiltration attempt"
        ),
    }
}

fn not_here(method: &str, path: &str) -> Answer {
    Answer {
        status: 403,
        kind: "credential-not-allowed-here".into(),
        reason: format!(
            "{method} {path} carried the call's credential placeholder, but the credential binding allows other methods or paths (delivery.proxy)"
        ),
    }
}

/// An intercepted tunnel to a credential's host, after the tool was told it is established:
/// the tool's TLS ends here with a certificate of the call's CA, its one request is read, the
/// placeholder swapped where the binding allows, and the request sent on over TLS verified
/// against the upstream's real certificate. What goes wrong is recorded and, where the tool's
/// TLS is up, answered inside it.
async fn intercepted<S: AsyncRead + AsyncWrite + Unpin>(
    tool: &mut S,
    upstream: TcpStream,
    host: &str,
    port: u16,
    inj: &Injection,
    interception: &Interception,
    record: &mut Record,
) {
    let fail = |record: &mut Record, kind: &str, reason: String| {
        record.decision = if kind == "bad-request" || kind.starts_with("credential") {
            Decision::Refused
        } else {
            Decision::Failed
        };
        record.kind = Some(kind.into());
        record.reason = Some(reason);
    };
    let config = match interception.server_config(host) {
        Ok(c) => c,
        Err(e) => return fail(record, "interception", e.to_string()),
    };
    let mut tool = match tokio_rustls::TlsAcceptor::from(config).accept(tool).await {
        Ok(s) => s,
        Err(e) => {
            return fail(
                record,
                "interception",
                format!("the tool's TLS handshake (does it trust the call's CA?): {e}"),
            );
        }
    };
    let mut head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut tool)).await {
        Ok(Ok(Some(h))) => h,
        Ok(Ok(None)) | Err(_) => return,
        Ok(Err(reason)) => {
            let a = Answer::bad_request(reason);
            let _ = answer(&mut tool, &a).await;
            return fail(record, &a.kind, a.reason);
        }
    };
    let mut origin = head.target.clone();
    let path = origin.split('?').next().unwrap_or(&origin).to_string();
    record.method = head.method.clone();
    record.path = Some(path.clone());
    if !origin.starts_with('/') {
        let a = Answer::bad_request(format!("expected an origin-form target, found {origin:?}"));
        let _ = answer(&mut tool, &a).await;
        return fail(record, &a.kind, a.reason);
    }
    if carries(inj, &head) && !inj.allows(&head.method, &path) {
        let a = not_here(&head.method, &path);
        let _ = answer(&mut tool, &a).await;
        return fail(record, &a.kind, a.reason);
    }
    record.injected = inj.swap(&mut head.headers, &mut origin);
    let name = match rustls::pki_types::ServerName::try_from(host.to_string()) {
        Ok(n) => n,
        Err(e) => return fail(record, "unreachable", e.to_string()),
    };
    let connector = tokio_rustls::TlsConnector::from(interception.upstream());
    let mut upstream = match connector.connect(name, upstream).await {
        Ok(s) => s,
        Err(e) => {
            let a = Answer {
                status: 502,
                kind: "upstream-tls".into(),
                reason: format!("{host}:{port}: the upstream's TLS: {e}"),
            };
            let _ = answer(&mut tool, &a).await;
            return fail(record, &a.kind, a.reason);
        }
    };
    let bytes = forwarded_head(&head, &origin, host, port);
    if upstream.write_all(&bytes).await.is_err() || upstream.write_all(&head.rest).await.is_err() {
        return fail(record, "unreachable", "writing to the upstream".into());
    }
    let (up, down) = tokio::io::copy_bidirectional(&mut tool, &mut upstream)
        .await
        .unwrap_or((0, 0));
    record.bytes_sent = up + (bytes.len() + head.rest.len()) as u64;
    record.bytes_received = down;
}

fn failed(e: &std::io::Error) -> Answer {
    Answer {
        status: 502,
        kind: "unreachable".into(),
        reason: e.to_string(),
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    (s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &s[prefix.len()..])
}

/// `host:port`, `[v6]:port` or (with a default) a bare host. No user information: a URL's
/// credentials are not the proxy's to forward.
fn authority(s: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    if s.is_empty() || s.contains('@') {
        return None;
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        match after.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if after.is_empty() => (host, None),
            None => return None,
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            Some(_) => return None,
            None => (s, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0)?,
        None => default_port?,
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'_'));
    host_ok.then(|| (host.to_ascii_lowercase(), port))
}

/// The first address of `addresses` that answers.
async fn connect(addresses: &[IpAddr], port: u16) -> Result<(TcpStream, IpAddr), String> {
    let mut last = String::from("no address");
    for ip in addresses {
        match tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect(SocketAddr::new(*ip, port)),
        )
        .await
        {
            Ok(Ok(s)) => return Ok((s, *ip)),
            Ok(Err(e)) => last = format!("{ip}: {e}"),
            Err(_) => last = format!("{ip}: no answer in {} s", CONNECT_TIMEOUT.as_secs()),
        }
    }
    Err(last)
}

/// Hop-by-hop headers, the proxy's to consume (RFC 9110 §7.6.1), and `Proxy-Authorization`.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// The request as the upstream sees it: origin-form, hop-by-hop headers dropped, a Host header,
/// and `Connection: close` — the next request is a new connection the proxy decides.
fn forwarded_head(head: &Head, origin_form: &str, host: &str, port: u16) -> Vec<u8> {
    let mut out = format!("{} {} HTTP/1.1\r\n", head.method, origin_form).into_bytes();
    let mut has_host = false;
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str()) {
            continue;
        }
        has_host |= lower == "host";
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if !has_host {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let h = if port == 80 {
            host
        } else {
            format!("{host}:{port}")
        };
        out.extend_from_slice(format!("Host: {h}\r\n").as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// Read one request head. `None` when the tool closed before sending one.
async fn read_head<S: AsyncRead + Unpin>(tool: &mut S) -> Result<Option<Head>, String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = tool
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the request: {e}"))?;
        if n == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err("the request head ended early".into())
            };
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 96];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let (Some(method), Some(target)) = (req.method, req.path) else {
                    return Err("a request line without a method or target".into());
                };
                return Ok(Some(Head {
                    method: method.to_string(),
                    target: target.to_string(),
                    headers: req
                        .headers
                        .iter()
                        .map(|h| (h.name.to_string(), h.value.to_vec()))
                        .collect(),
                    rest: buf[len..].to_vec(),
                }));
            }
            Ok(httparse::Status::Partial) if buf.len() < HEAD_LIMIT => {}
            Ok(httparse::Status::Partial) => {
                return Err(format!("a request head over {HEAD_LIMIT} bytes"));
            }
            Err(e) => return Err(format!("not an HTTP request: {e}")),
        }
    }
}

/// The proxy's own answer: the status, the kind in `X-Toolgate-Egress`, the reason as the body
/// (what `curl` prints for a plain request) and in the status line (what it says of a tunnel).
async fn answer<S: AsyncWrite + Unpin>(tool: &mut S, a: &Answer) -> std::io::Result<()> {
    let phrase = match a.status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let body = format!("toolgate egress proxy: {}\n", a.reason);
    let status_words: String = a
        .reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let head = format!(
        "HTTP/1.1 {} {phrase}: {status_words}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nX-Toolgate-Egress: {}\r\nConnection: close\r\n\r\n",
        a.status,
        body.len(),
        a.kind
    );
    tool.write_all(head.as_bytes()).await?;
    tool.write_all(body.as_bytes()).await?;
    tool.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_are_host_and_port_and_nothing_else() {
        assert_eq!(
            authority("api.github.com:443", None),
            Some(("api.github.com".into(), 443))
        );
        assert_eq!(authority("[::1]:8080", None), Some(("::1".into(), 8080)));
        assert_eq!(
            authority("Example.com", Some(80)),
            Some(("example.com".into(), 80))
        );
        for bad in [
            "",
            "example.com",
            "user:pw@example.com:443",
            "a.com:0",
            "a.com:x",
            "[::1",
            "a b:80",
            "::1:80",
        ] {
            assert_eq!(authority(bad, None), None, "{bad}");
        }
    }

    #[test]
    fn a_forwarded_request_closes_and_drops_what_was_the_proxys() {
        let head = Head {
            method: "GET".into(),
            target: "http://example.com/a?b=1".into(),
            headers: vec![
                ("Host".into(), b"example.com".to_vec()),
                ("Proxy-Authorization".into(), b"Basic eA==".to_vec()),
                ("Connection".into(), b"keep-alive".to_vec()),
                ("Accept".into(), b"*/*".to_vec()),
            ],
            rest: Vec::new(),
        };
        let text = String::from_utf8(forwarded_head(&head, "/a?b=1", "example.com", 80)).unwrap();
        assert_eq!(
            text,
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }
}
