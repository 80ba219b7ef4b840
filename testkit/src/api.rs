//! The gRPC API as every suite drives it: bearer-token requests, a client that waits for the
//! server, waiting for a phase, following a call to its end.

use std::time::{Duration, Instant};

use futures::StreamExt;
use tonic::transport::Channel;
use toolgate_proto::v1 as pb;
use toolgate_proto::v1::toolgate_client::ToolgateClient;

/// A request carrying `token` as its bearer credential.
pub fn authorized<T>(token: &str, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if let Ok(v) = format!("Bearer {token}").parse() {
        r.metadata_mut().insert("authorization", v);
    }
    r
}

/// A self-signed certificate for 127.0.0.1 and localhost, made once per test process: what an
/// operator under test serves its agent API with (`--grpc-tls-cert`, `--grpc-tls-key`).
pub struct TestTls {
    /// Certificate (PEM); also the clients' CA.
    pub cert: std::path::PathBuf,
    /// Key (PEM).
    pub key: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl TestTls {
    /// The shared certificate.
    pub fn get() -> &'static TestTls {
        static TLS: std::sync::OnceLock<TestTls> = std::sync::OnceLock::new();
        TLS.get_or_init(|| {
            let dir = tempfile::tempdir().expect("tmp");
            let ck =
                rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
                    .expect("certificate");
            let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
            std::fs::write(&cert, ck.cert.pem()).expect("cert");
            std::fs::write(&key, ck.signing_key.serialize_pem()).expect("key");
            TestTls {
                cert,
                key,
                _dir: dir,
            }
        })
    }

    /// The operator's arguments serving the agent API on `addr` over TLS.
    pub fn operator_args(&self, addr: &str) -> Vec<String> {
        vec![
            "--grpc-addr".into(),
            addr.into(),
            "--grpc-tls-cert".into(),
            self.cert.display().to_string(),
            "--grpc-tls-key".into(),
            self.key.display().to_string(),
        ]
    }
}

/// An agent's client certificate, self-signed: also the CA a server requiring client
/// certificates is given (`--grpc-tls-client-ca`, `--tls-client-ca`).
pub struct ClientIdentity {
    /// Certificate (PEM).
    pub cert: std::path::PathBuf,
    /// Key (PEM).
    pub key: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Default for ClientIdentity {
    fn default() -> Self {
        let dir = tempfile::tempdir().expect("tmp");
        let ck = rcgen::generate_simple_self_signed(vec!["fixer.agents.example".into()])
            .expect("certificate");
        let (cert, key) = (dir.path().join("agent.crt"), dir.path().join("agent.key"));
        std::fs::write(&cert, ck.cert.pem()).expect("cert");
        std::fs::write(&key, ck.signing_key.serialize_pem()).expect("key");
        ClientIdentity {
            cert,
            key,
            _dir: dir,
        }
    }
}

/// A TLS client of the API at `addr` trusting [`TestTls`], presenting `identity` if given; the
/// first call's answer says whether the server served it.
pub async fn tls_client_with(
    addr: &str,
    identity: Option<&ClientIdentity>,
) -> Result<ToolgateClient<Channel>, tonic::transport::Error> {
    let mut tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(
            std::fs::read(&TestTls::get().cert).expect("ca"),
        ))
        .domain_name("localhost");
    if let Some(id) = identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(
            std::fs::read(&id.cert).expect("cert"),
            std::fs::read(&id.key).expect("key"),
        ));
    }
    let channel = Channel::from_shared(format!("https://{addr}"))
        .expect("url")
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(ToolgateClient::new(channel))
}

/// A client of the API at `addr` (`host:port`), once it answers (30 s at most).
pub async fn grpc_client(addr: &str) -> ToolgateClient<Channel> {
    connect_when_up(addr, None).await
}

/// Whether a plain-text call to a TLS server at `addr` fails (it must).
pub async fn plain_call_fails(addr: &str, token: &str) -> bool {
    let Ok(channel) = Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
    else {
        return true;
    };
    ToolgateClient::new(channel)
        .list_calls(authorized(
            token,
            toolgate_proto::v1::ListCallsRequest::default(),
        ))
        .await
        .is_err()
}

/// A TLS client of the API at `addr`, trusting [`TestTls`]'s certificate.
pub async fn grpc_tls_client(addr: &str) -> ToolgateClient<Channel> {
    connect_when_up(addr, Some(TestTls::get())).await
}

async fn connect_when_up(addr: &str, tls: Option<&TestTls>) -> ToolgateClient<Channel> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let scheme = if tls.is_some() { "https" } else { "http" };
    loop {
        let mut endpoint = Channel::from_shared(format!("{scheme}://{addr}")).expect("url");
        if let Some(t) = tls {
            endpoint = endpoint
                .tls_config(
                    tonic::transport::ClientTlsConfig::new()
                        .ca_certificate(tonic::transport::Certificate::from_pem(
                            std::fs::read(&t.cert).expect("ca"),
                        ))
                        .domain_name("localhost"),
                )
                .expect("tls");
        }
        match endpoint.connect().await {
            Ok(ch) => return ToolgateClient::new(ch),
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "the agent API never came up: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Poll a call until it reaches one of `phases` (90 s at most).
pub async fn wait_call(
    client: &mut ToolgateClient<Channel>,
    token: &str,
    id: &str,
    phases: &[&str],
) -> pb::Call {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let c = client
            .get_call(authorized(token, pb::GetCallRequest { id: id.into() }))
            .await
            .expect("get")
            .into_inner();
        if phases.contains(&c.phase.as_str()) {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "{id} stuck in {} waiting for {phases:?}: {:#?}",
            c.phase,
            c.conditions
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// WatchCall until the call's end: every event, in order.
pub async fn watch_events(
    client: &mut ToolgateClient<Channel>,
    token: &str,
    id: &str,
) -> Vec<pb::CallEvent> {
    let mut s = client
        .watch_call(authorized(token, pb::WatchCallRequest { id: id.into() }))
        .await
        .expect("watch")
        .into_inner();
    let mut all = Vec::new();
    while let Some(e) = s.next().await {
        let e = e.expect("event");
        let end = e.terminal;
        all.push(e);
        if end {
            break;
        }
    }
    all
}
