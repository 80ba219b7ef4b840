//! What the egress proxy adds to a request, beside the plain alternative in the same run: an
//! HTTPS GET made directly, tunnelled through the proxy (`CONNECT`, TLS end to end), and
//! intercepted by it to swap a credential placeholder (TLS to the proxy with the call's CA, TLS
//! from it to the upstream); a plain HTTP GET directly and forwarded. Each request is a new
//! connection (the proxy decides each one, so clients through it reconnect), on loopback, to a
//! server of the test kit; the proxied ones include the proxy's DNS query to a nameserver on
//! loopback. Then what one call's proxy costs to start, with and without its CA.
//! Run: `cargo bench -p toolgate-egress --bench proxy`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use toolgate_contract::egress::EgressRules;
use toolgate_contract::redact::Redactor;
use toolgate_egress::{Injection, Interception, Proxy, Resolver, upstream_tls};

const HOST: &str = "127.0.0.2";
const TOKEN: &str = "bench-token-0000";
const RUNS: usize = 400;

/// p50 and p99 of `RUNS` runs of `f`, after a few unmeasured ones.
async fn timed<F, Fut>(mut f: F) -> (Duration, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..20 {
        f().await;
    }
    let mut all = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let t = Instant::now();
        f().await;
        all.push(t.elapsed());
    }
    all.sort();
    (all[RUNS / 2], all[RUNS * 99 / 100])
}

/// One GET of `path` on `stream`, read to its end (the server closes).
async fn get<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, host: &str, auth: &str) -> usize {
    let request = format!(
        "GET /user HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {auth}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("request");
    let mut body = Vec::new();
    let _ = stream.read_to_end(&mut body).await;
    assert!(
        body.starts_with(b"HTTP/1.1 "),
        "{}",
        String::from_utf8_lossy(&body)
    );
    body.len()
}

/// A TCP connection to `target` through the proxy at `proxy`: CONNECT, then the 200.
async fn tunnel(proxy: SocketAddr, target: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.expect("proxy");
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .expect("connect");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).await.expect("answer");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

async fn tls(
    config: &Arc<rustls::ClientConfig>,
    name: &str,
    tcp: TcpStream,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    tokio_rustls::TlsConnector::from(config.clone())
        .connect(
            rustls::pki_types::ServerName::try_from(name.to_string()).expect("name"),
            tcp,
        )
        .await
        .expect("tls")
}

fn client_trusting(pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
        roots.add(cert.expect("pem")).expect("root");
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

fn row(what: &str, (p50, p99): (Duration, Duration), base: Option<(Duration, Duration)>) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    match base {
        Some((b50, b99)) => println!(
            "{what:<44} p50 {:>7.3} ms  p99 {:>7.3} ms   added p50 {:>+6.3} ms  p99 {:>+6.3} ms",
            ms(p50),
            ms(p99),
            ms(p50) - ms(b50),
            ms(p99) - ms(b99)
        ),
        None => println!(
            "{what:<44} p50 {:>7.3} ms  p99 {:>7.3} ms",
            ms(p50),
            ms(p99)
        ),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(bench());
}

async fn bench() {
    let api = toolgate_testkit::upstream::start_tls(HOST, "api.test", TOKEN)
        .await
        .expect("https upstream");
    let plain = toolgate_testkit::upstream::start(HOST)
        .await
        .expect("http upstream");
    let dns = toolgate_testkit::dns::DnsServer::start(vec![
        ("api.test", vec![HOST.parse().expect("ip")]),
        ("other.test", vec![HOST.parse().expect("ip")]),
        ("plain.test", vec![HOST.parse().expect("ip")]),
    ])
    .await
    .expect("dns");
    let dir = tempfile::tempdir().expect("tmp");
    let ca_file = dir.path().join("upstream-ca.pem");
    std::fs::write(&ca_file, &api.ca_pem).expect("ca");
    let upstream = upstream_tls(std::slice::from_ref(&ca_file)).expect("upstream tls");
    let port = api.addr.port();
    let domains = vec![
        format!("api.test:{port}"),
        format!("other.test:{port}"),
        format!("plain.test:{}", plain.port()),
    ];
    let rules = || EgressRules::new(false, &domains, &[format!("{HOST}/32")], true).expect("rules");
    let delivery: toolgate_crds::ProxyDelivery =
        serde_json::from_value(serde_json::json!({"hosts": [format!("api.test:{port}")]}))
            .expect("delivery");
    let placeholder = Injection::placeholder();
    let interception = Interception::new(upstream.clone()).expect("ca");
    let call_client = client_trusting(&interception.ca_pem());
    let upstream_client = client_trusting(&api.ca_pem);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("port");
    let proxy = listener.local_addr().expect("addr");
    let _served = Proxy::new(
        rules(),
        Resolver::new(&[dns.addr()]).expect("resolver"),
        Redactor::new([TOKEN]),
    )
    .with_injection(
        Injection::new(placeholder.clone(), TOKEN.into(), &delivery),
        interception,
    )
    .serve_tcp(listener);

    println!(
        "one GET per connection, {RUNS} runs each, loopback; proxied ones include a DNS query"
    );
    let direct = timed(|| async {
        let tcp = TcpStream::connect(api.addr).await.expect("direct");
        get(
            tls(&upstream_client, "api.test", tcp).await,
            "api.test",
            TOKEN,
        )
        .await;
    })
    .await;
    row("HTTPS GET, direct (the plain alternative)", direct, None);
    let tunnelled = timed(|| async {
        let tcp = tunnel(proxy, &format!("other.test:{port}")).await;
        get(
            tls(&upstream_client, "api.test", tcp).await,
            "other.test",
            "none",
        )
        .await;
    })
    .await;
    row(
        "HTTPS GET, tunnelled through the proxy",
        tunnelled,
        Some(direct),
    );
    let injected = timed(|| async {
        let tcp = tunnel(proxy, &format!("api.test:{port}")).await;
        get(
            tls(&call_client, "api.test", tcp).await,
            "api.test",
            &placeholder,
        )
        .await;
    })
    .await;
    row(
        "HTTPS GET, credential injected by the proxy",
        injected,
        Some(direct),
    );

    let plain_direct = timed(|| async {
        get(
            TcpStream::connect(plain).await.expect("direct"),
            "plain.test",
            "none",
        )
        .await;
    })
    .await;
    row("HTTP GET, direct", plain_direct, None);
    let plain_proxied = timed(|| async {
        let mut s = TcpStream::connect(proxy).await.expect("proxy");
        let request = format!(
            "GET http://plain.test:{}/hello HTTP/1.1\r\nHost: plain.test\r\n\r\n",
            plain.port()
        );
        s.write_all(request.as_bytes()).await.expect("request");
        let mut body = Vec::new();
        let _ = s.read_to_end(&mut body).await;
        assert!(
            body.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&body)
        );
    })
    .await;
    row(
        "HTTP GET, forwarded by the proxy",
        plain_proxied,
        Some(plain_direct),
    );

    println!();
    let start = timed(|| async {
        let socket = dir.path().join("start.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = tokio::net::UnixListener::bind(&socket).expect("socket");
        let served = Proxy::new(
            rules(),
            Resolver::new(&[dns.addr()]).expect("resolver"),
            Redactor::new([TOKEN]),
        )
        .serve_unix(listener);
        drop(served);
    })
    .await;
    row(
        "a call's proxy started (rules, resolver, socket)",
        start,
        None,
    );
    let with_ca = timed(|| async {
        let interception = Interception::new(upstream.clone()).expect("ca");
        let _ = interception.ca_pem();
    })
    .await;
    row("its CA made (proxy delivery)", with_ca, None);
}
