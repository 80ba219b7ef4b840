//! The Rust client of toolgate's gRPC API: a connection (plain, TLS or mutual TLS), the bearer
//! token of the caller, the process's trace context on every proposal, and the calls an agent
//! makes (views, proposals, watches, approvals, explanations, artifacts). Every failure is an
//! [`Error`]: a server refusal carries its stable reason (`approval-self`) and the field it is
//! about, so a program can branch on it. The command line is built on it (in `cli/`).

use std::path::{Path, PathBuf};

use futures::StreamExt;
use tonic::transport::Channel;
use toolgate_proto::v1 as pb;
use toolgate_proto::v1::toolgate_client::ToolgateClient;

/// Why a request or a connection failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server address or its TLS settings cannot be used.
    #[error("--server {server}: {reason}")]
    Server {
        /// The address as given.
        server: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A certificate or key file could not be read.
    #[error("{what} {}: {source}", path.display())]
    Read {
        /// The option it was given as (`--ca`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The connection could not be made.
    #[error("connecting to {server}: {}{detail}{}", hint.as_deref().map(|h| format!("{h} (")).unwrap_or_default(), if hint.is_some() { ")" } else { "" })]
    Connect {
        /// The server.
        server: String,
        /// What the failure most likely means (a TLS case), when known.
        hint: Option<String>,
        /// The transport's own account of it.
        detail: String,
    },
    /// The server answered with an error status.
    #[error("{}", status_line(.0))]
    Status(Box<tonic::Status>),
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Self {
        Error::Status(Box::new(s))
    }
}

impl Error {
    /// The server's status, when it answered.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            Error::Status(s) => Some(s),
            _ => None,
        }
    }

    /// The stable reason of a server refusal (`approval-self`, `args-invalid`), when it gave one.
    pub fn reason(&self) -> Option<String> {
        let (code, _) = toolgate_proto::status_code_and_field(self.status()?);
        (!code.is_empty()).then_some(code)
    }

    /// As a gRPC status: the server's own, or `Unavailable` for a failure to reach it (what a
    /// program that relays errors in gRPC terms, like an MCP bridge, passes on).
    pub fn into_status(self) -> tonic::Status {
        match self {
            Error::Status(s) => *s,
            other => tonic::Status::unavailable(other.to_string()),
        }
    }

    /// The request field a server refusal is about (`args_json`), when it named one.
    pub fn field(&self) -> Option<String> {
        toolgate_proto::status_code_and_field(self.status()?).1
    }
}

/// A status as one line: its code, message, stable reason and field, and what broke beneath it.
fn status_line(s: &tonic::Status) -> String {
    let (code, field) = toolgate_proto::status_code_and_field(s);
    let mut msg = format!("{:?}: {}", s.code(), s.message());
    if !code.is_empty() {
        msg.push_str(&format!(" [{code}]"));
    }
    if let Some(f) = field {
        msg.push_str(&format!(" (field {f})"));
    }
    // A transport failure (TLS 1.3 refuses a client certificate after the handshake): its causes.
    if let Some(source) = std::error::Error::source(s) {
        let detail = error_line(source);
        match tls_hint(&detail).or_else(|| TRANSPORT_HINT.get().copied()) {
            Some(hint) => msg.push_str(&format!(": {hint} ({detail})")),
            None => msg.push_str(&format!(" ({detail})")),
        }
    }
    msg
}

/// How a client reaches an `https://` server.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    /// CA bundle (PEM); the system's roots when absent.
    pub ca: Option<PathBuf>,
    /// Client certificate and key (PEM).
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The name the certificate is checked against (default: the server's host).
    pub server_name: Option<String>,
}

/// What a broken connection most likely means for this process's one connection: set when it
/// connects over TLS without a client certificate (a server requiring one closes the
/// connection after the handshake, and the alert saying so does not reach the client's error).
static TRANSPORT_HINT: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// What a TLS failure means for the person at the command line (rustls names the case).
fn tls_hint(detail: &str) -> Option<&'static str> {
    let cases = [
        ("Expired", "the server's certificate has expired; renew it"),
        (
            "NotValidYet",
            "the server's certificate is not valid yet; check the clocks",
        ),
        (
            "UnknownIssuer",
            "the server's certificate is not signed by a CA this client trusts",
        ),
        (
            "BadSignature",
            "the server's certificate is not signed by the CA this client trusts",
        ),
        (
            "NotValidForName",
            "the server's certificate is not for this host name; use a name it lists",
        ),
        (
            "CertificateRequired",
            "the server requires a client certificate; give --client-cert and --client-key",
        ),
        (
            "certificate required",
            "the server requires a client certificate; give --client-cert and --client-key",
        ),
        (
            "UnknownCA",
            "the server does not trust this client certificate's CA",
        ),
        (
            "unknown ca",
            "the server does not trust this client certificate's CA",
        ),
        (
            "InvalidContentType",
            "the server does not speak TLS here; use http:// for a plain-text server",
        ),
    ];
    cases
        .iter()
        .find(|(needle, _)| detail.contains(needle))
        .map(|(_, hint)| *hint)
}

/// A connected client (cheap to clone: the connection is shared).
#[derive(Clone)]
pub struct Client {
    inner: ToolgateClient<Channel>,
    token: String,
}

/// The server as a URL: a bare `host:port` (the form `toolgate local` prints and the Python
/// client takes) is plain `http://`; an `http://` or `https://` URL is kept as given; any other
/// scheme is refused by name.
pub fn server_url(server: &str) -> Result<std::borrow::Cow<'_, str>, Error> {
    if server.starts_with("http://") || server.starts_with("https://") {
        Ok(server.into())
    } else if server.contains("://") {
        Err(Error::Server {
            server: server.to_string(),
            reason: "expected host:port, http://host:port or https://host:port".into(),
        })
    } else {
        Ok(format!("http://{server}").into())
    }
}

impl Client {
    /// Connect (over TLS to an `https://` server; `host:port` means plain `http://`).
    pub async fn connect(server: &str, token: &str, tls: &Tls) -> Result<Client, Error> {
        let server = server_url(server)?;
        let server = server.as_ref();
        let mut endpoint = Channel::from_shared(server.to_string()).map_err(|_| Error::Server {
            server: server.to_string(),
            reason: "not a URL".into(),
        })?;
        if server.starts_with("https://") {
            let read = |what: &'static str, p: &Path| {
                std::fs::read(p).map_err(|source| Error::Read {
                    what,
                    path: p.to_path_buf(),
                    source,
                })
            };
            let mut config = tonic::transport::ClientTlsConfig::new();
            if let Some(name) = &tls.server_name {
                config = config.domain_name(name.clone());
            }
            config = match &tls.ca {
                Some(ca) => config
                    .ca_certificate(tonic::transport::Certificate::from_pem(read("--ca", ca)?)),
                None => config.with_native_roots(),
            };
            match &tls.identity {
                Some((cert, key)) => {
                    config = config.identity(tonic::transport::Identity::from_pem(
                        read("--client-cert", cert)?,
                        read("--client-key", key)?,
                    ));
                }
                None => {
                    let _ = TRANSPORT_HINT.set(
                        "the connection broke; a server that requires a client certificate \
                         closes it when none is given (--client-cert and --client-key)",
                    );
                }
            }
            endpoint = endpoint.tls_config(config).map_err(|e| Error::Server {
                server: server.to_string(),
                reason: format!("TLS configuration: {}", error_line(&e)),
            })?;
        } else if tls.ca.is_some() || tls.identity.is_some() || tls.server_name.is_some() {
            return Err(Error::Server {
                server: server.to_string(),
                reason: "--ca, --client-cert and --tls-server-name are for an https:// server; this one is plain http".into(),
            });
        }
        let ca = match &tls.ca {
            Some(p) => format!("--ca {}", p.display()),
            None => "the system's roots (give --ca)".to_string(),
        };
        let channel = endpoint.connect().await.map_err(|e| {
            let detail = error_line(&e);
            Error::Connect {
                server: server.to_string(),
                hint: tls_hint(&detail).map(|hint| format!("{hint} [{ca}]")),
                detail,
            }
        })?;
        Ok(Client {
            inner: ToolgateClient::new(channel),
            token: token.to_string(),
        })
    }

    /// The same connection, acting as the holder of another token.
    pub fn with_token(&self, token: &str) -> Client {
        Client {
            inner: self.inner.clone(),
            token: token.to_string(),
        }
    }

    /// A request with the bearer token.
    pub fn req<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        if let Ok(v) = format!("Bearer {}", self.token).parse() {
            r.metadata_mut().insert("authorization", v);
        }
        r
    }

    /// The generated client.
    pub fn api(&mut self) -> &mut ToolgateClient<Channel> {
        &mut self.inner
    }

    /// GetToolView.
    pub async fn view(&mut self, req: pb::GetToolViewRequest) -> Result<pb::ToolView, Error> {
        let r = self.req(req);
        Ok(self.inner.get_tool_view(r).await?.into_inner())
    }

    /// ProposeCall, under the process's trace context (`$TRACEPARENT`, the OTel convention for
    /// processes): a call proposed from inside a traced agent or script joins its trace.
    pub async fn propose(&mut self, req: pb::ProposeCallRequest) -> Result<pb::Call, Error> {
        let env = std::env::var(toolgate_contract::exec::TRACEPARENT_ENV).ok();
        self.propose_traced(req, env.as_deref()).await
    }

    /// ProposeCall under this W3C `traceparent`, if any.
    pub async fn propose_traced(
        &mut self,
        req: pb::ProposeCallRequest,
        traceparent: Option<&str>,
    ) -> Result<pb::Call, Error> {
        let mut r = self.req(req);
        if let Some(v) = traceparent.and_then(|tp| tp.parse().ok()) {
            r.metadata_mut().insert("traceparent", v);
        }
        Ok(self.inner.propose_call(r).await?.into_inner())
    }

    /// GetCall.
    pub async fn get(&mut self, id: &str) -> Result<pb::Call, Error> {
        let r = self.req(pb::GetCallRequest { id: id.into() });
        Ok(self.inner.get_call(r).await?.into_inner())
    }

    /// WatchCall, calling `each` on every event until the call ends.
    pub async fn watch(
        &mut self,
        id: &str,
        mut each: impl FnMut(&pb::CallEvent),
    ) -> Result<Vec<pb::CallEvent>, Error> {
        let r = self.req(pb::WatchCallRequest { id: id.into() });
        let mut stream = self.inner.watch_call(r).await?.into_inner();
        let mut all = Vec::new();
        while let Some(e) = stream.next().await {
            let e = e?;
            each(&e);
            all.push(e);
        }
        Ok(all)
    }

    /// ApproveCall bound to what GetCall showed.
    pub async fn approve(
        &mut self,
        call: &pb::Call,
        for_session: bool,
        ttl: u32,
        comment: &str,
    ) -> Result<pb::Call, Error> {
        let r = self.req(pb::ApproveCallRequest {
            id: call.id.clone(),
            args_digest: call.args_digest.clone(),
            tool_digest: call.tool_digest.clone(),
            for_session,
            ttl_seconds: ttl,
            comment: comment.into(),
        });
        Ok(self.inner.approve_call(r).await?.into_inner())
    }

    /// ExplainCall.
    pub async fn explain(&mut self, id: &str) -> Result<pb::Explanation, Error> {
        let r = self.req(pb::ExplainCallRequest { id: id.into() });
        Ok(self.inner.explain_call(r).await?.into_inner())
    }

    /// GetArtifact, whole.
    pub async fn artifact(
        &mut self,
        call: &str,
        artifact: &str,
    ) -> Result<(Vec<u8>, String), Error> {
        let r = self.req(pb::GetArtifactRequest {
            call_id: call.into(),
            artifact_id: artifact.into(),
        });
        let mut stream = self.inner.get_artifact(r).await?.into_inner();
        let mut data = Vec::new();
        let mut hash = String::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if hash.is_empty() {
                hash = chunk.content_hash;
            }
            data.extend_from_slice(&chunk.data);
        }
        Ok((data, hash))
    }
}

/// An error and its causes in one line, each cause once: some libraries print their cause in
/// their own message and report it as the source too ("tcp connect error: tcp connect error").
/// (An `anyhow::Error` is given as `e.as_ref()`.)
pub fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    for cause in std::iter::successors(Some(e), |cause| cause.source()) {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        // A cause that repeats the previous one's text with more after it replaces it.
        if !line.is_empty() && text.starts_with(line.rsplit(": ").next().unwrap_or_default()) {
            let keep = line.len() - line.rsplit(": ").next().unwrap_or_default().len();
            line.truncate(keep);
            line.push_str(&text);
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::error_line;

    #[derive(Debug, thiserror::Error)]
    #[error("tcp connect error: {0}")]
    struct Connect(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("connecting to http://127.0.0.1:1")]
    struct Connecting(#[source] Connect);

    #[test]
    fn each_cause_appears_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let e = Connecting(Connect(io));
        assert_eq!(
            error_line(&e),
            "connecting to http://127.0.0.1:1: tcp connect error: Connection refused"
        );
    }

    #[test]
    fn a_refusal_says_its_reason_and_field() {
        let e = super::Error::from(tonic::Status::not_found("call \"x\""));
        assert_eq!(e.reason(), None);
        assert_eq!(e.to_string(), "NotFound: call \"x\"");
        let bad = super::server_url("ftp://h:1").expect_err("scheme");
        assert_eq!(
            bad.to_string(),
            "--server ftp://h:1: expected host:port, http://host:port or https://host:port"
        );
    }
}
