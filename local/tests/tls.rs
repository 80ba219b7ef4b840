//! TLS on `toolgate local`'s API, end to end with the real binary: a TLS client works, a
//! plain-text one is refused, the command line's client talks TLS with `--ca`, a non-loopback
//! address needs TLS, and mutual TLS refuses a client without a certificate.

mod support;

use support::*;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use toolgate_proto::v1 as pb;
use toolgate_proto::v1::toolgate_client::ToolgateClient;

/// A self-signed certificate for 127.0.0.1 and localhost: (cert PEM, key PEM), written to files.
fn certificate(dir: &std::path::Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
        .expect("certificate");
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, ck.cert.pem()).expect("cert");
    write_private(&key, &ck.signing_key.serialize_pem());
    (cert, key)
}

async fn tls_client(
    addr: &str,
    ca: &std::path::Path,
    identity: Option<(&std::path::Path, &std::path::Path)>,
) -> Result<ToolgateClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca).expect("ca")))
        .domain_name("localhost");
    if let Some((c, k)) = identity {
        tls = tls.identity(Identity::from_pem(
            std::fs::read(c).expect("cert"),
            std::fs::read(k).expect("key"),
        ));
    }
    let channel = Channel::from_shared(format!("https://{addr}"))
        .expect("url")
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(ToolgateClient::new(channel))
}

fn tls_args<'a>(cert: &'a str, key: &'a str, listen: &'a str) -> Vec<&'a str> {
    vec!["--tls-cert", cert, "--tls-key", key, "--listen", listen]
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_serves_tls_and_refuses_plain_text() {
    let dir = setup();
    let (cert, key) = certificate(dir.path(), "server");
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let server = Server::start_with(
        dir.path(),
        &dir.path().join("data"),
        &dir.path().join("workspace"),
        &tls_args(&c, &k, "127.0.0.1:0"),
    );
    let mut client = tls_client(&server.addr, &cert, None)
        .await
        .expect("TLS connects");
    let call = client
        .propose_call(req(
            AGENT,
            propose(
                "test.echo",
                serde_json::json!({"msg": "over tls"}),
                "execute",
            ),
        ))
        .await
        .expect("propose over TLS")
        .into_inner();
    let done = wait_phase(&mut client, &call.id, &["Succeeded", "Failed", "Denied"]).await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);

    // A plain-text client gets nothing: no token crosses in clear.
    let plain = async {
        let channel = Channel::from_shared(format!("http://{}", server.addr))
            .expect("url")
            .connect()
            .await?;
        ToolgateClient::new(channel)
            .get_call(req(
                AGENT,
                pb::GetCallRequest {
                    id: call.id.clone(),
                },
            ))
            .await
            .map(drop)
            .map_err(|s| Box::new(s) as Box<dyn std::error::Error>)?;
        Ok::<(), Box<dyn std::error::Error>>(())
    };
    assert!(plain.await.is_err(), "a plain-text client was served");

    // The command line's client: with --ca it works, without it the certificate is refused.
    let list = |ca: Option<&str>| {
        let mut cmd = std::process::Command::new(toolgate_binary());
        cmd.args([
            "--server",
            &format!("https://{}", server.addr),
            "--token",
            AGENT,
        ]);
        if let Some(ca) = ca {
            cmd.args(["--ca", ca]);
        }
        cmd.arg("list").output().expect("toolgate list")
    };
    let ok = list(Some(&c));
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains(&call.id));
    let refused = list(None);
    assert!(!refused.status.success());
}

#[test]
fn a_non_loopback_address_needs_tls_and_bad_tls_files_are_named() {
    let dir = setup();
    let run = |extra: &[&str]| {
        local_command(
            dir.path(),
            &dir.path().join("data"),
            &dir.path().join("workspace"),
        )
        .args(extra)
        .output()
        .expect("toolgate local")
    };
    let out = run(&["--listen", "0.0.0.0:0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not a loopback address") && err.contains("--tls-cert"),
        "{err}"
    );
    let bogus = dir.path().join("bogus.pem");
    std::fs::write(&bogus, "not a certificate").expect("bogus");
    let b = bogus.display().to_string();
    let out = run(&["--tls-cert", &b, "--tls-key", &b]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--tls-cert") && err.contains("CERTIFICATE"),
        "{err}"
    );
    let out = run(&["--tls-cert", &b]);
    assert!(
        !out.status.success(),
        "a certificate without its key is refused"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_refuses_a_client_without_a_certificate() {
    let dir = setup();
    let (cert, key) = certificate(dir.path(), "server");
    let (client_cert, client_key) = certificate(dir.path(), "agent");
    let (c, k, ca) = (
        cert.display().to_string(),
        key.display().to_string(),
        client_cert.display().to_string(),
    );
    let mut args = tls_args(&c, &k, "127.0.0.1:0");
    args.extend(["--tls-client-ca", &ca]);
    let server = Server::start_with(
        dir.path(),
        &dir.path().join("data"),
        &dir.path().join("workspace"),
        &args,
    );
    let anonymous = async {
        let mut client = tls_client(&server.addr, &cert, None).await?;
        client
            .list_calls(req(AGENT, pb::ListCallsRequest::default()))
            .await
            .map_err(|s| Box::new(s) as Box<dyn std::error::Error>)?;
        Ok::<(), Box<dyn std::error::Error>>(())
    };
    assert!(
        anonymous.await.is_err(),
        "a client without a certificate was served"
    );
    let mut client = tls_client(&server.addr, &cert, Some((&client_cert, &client_key)))
        .await
        .expect("mTLS connects");
    client
        .list_calls(req(AGENT, pb::ListCallsRequest::default()))
        .await
        .expect("served with a client certificate");
}

/// A certificate renewed on disk (cert-manager, a mounted Secret) is served without a restart;
/// files that stop loading keep the last good pair.
#[tokio::test(flavor = "multi_thread")]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let dir = setup();
    let (cert, key) = certificate(dir.path(), "server");
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let server = Server::start_with(
        dir.path(),
        &dir.path().join("data"),
        &dir.path().join("workspace"),
        &tls_args(&c, &k, "127.0.0.1:0"),
    );
    let first = dir.path().join("first.crt");
    std::fs::copy(&cert, &first).expect("keep the first");
    tls_client(&server.addr, &first, None)
        .await
        .expect("the first certificate");
    // A half-written rotation: the server keeps the first.
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\ntruncated").expect("broken");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    tls_client(&server.addr, &first, None)
        .await
        .expect("still the first certificate");
    // The renewal lands: new connections get the new certificate.
    let renewed = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
        .expect("certificate");
    write_private(&key, &renewed.signing_key.serialize_pem());
    std::fs::write(&cert, renewed.cert.pem()).expect("renewed");
    let mut served_new = false;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        if tls_client(&server.addr, &cert, None).await.is_ok() {
            served_new = true;
            break;
        }
    }
    assert!(served_new, "the renewed certificate was never served");
    assert!(
        tls_client(&server.addr, &first, None).await.is_err(),
        "the old certificate is still served"
    );
}

/// A certificate for 127.0.0.1 and localhost that expired in 2021.
fn expired_certificate(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .expect("params");
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("cert");
    let (c, k) = (dir.join("expired.crt"), dir.join("expired.key"));
    std::fs::write(&c, cert.pem()).expect("cert");
    write_private(&k, &key.serialize_pem());
    (c, k)
}

/// The command line's client against a TLS server: what it says when the certificate has
/// expired, when the CA is the wrong one, and when the server wants a client certificate.
#[tokio::test(flavor = "multi_thread")]
async fn the_command_line_says_what_is_wrong_with_a_certificate() {
    let dir = setup();
    let list = |addr: &str, extra: &[&str]| {
        std::process::Command::new(toolgate_binary())
            .args(["--server", &format!("https://{addr}"), "--token", AGENT])
            .args(extra)
            .arg("list")
            .output()
            .expect("toolgate list")
    };

    let (cert, key) = expired_certificate(dir.path());
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let mut expired = Server::start_with(
        dir.path(),
        &dir.path().join("data"),
        &dir.path().join("workspace"),
        &tls_args(&c, &k, "127.0.0.1:0"),
    );
    let out = list(&expired.addr, &["--ca", &c]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.to_lowercase().contains("expired"), "{err}");
    expired.stop();

    let (cert, key) = certificate(dir.path(), "server");
    let (other_ca, _) = certificate(dir.path(), "other");
    let (client_cert, client_key) = certificate(dir.path(), "agent");
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let client_ca = client_cert.display().to_string();
    let mut args = tls_args(&c, &k, "127.0.0.1:0");
    args.extend(["--tls-client-ca", &client_ca]);
    let server = Server::start_with(
        dir.path(),
        &dir.path().join("data"),
        &dir.path().join("workspace"),
        &args,
    );
    let out = list(&server.addr, &["--ca", &other_ca.display().to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("is not signed by the CA this client trusts") && err.contains("other.crt"),
        "{err}"
    );

    // Mutual TLS: without a client certificate refused, with one served.
    let out = list(&server.addr, &["--ca", &c]);
    assert!(!out.status.success(), "served without a client certificate");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("requires a client certificate"), "{err}");
    let out = list(
        &server.addr,
        &[
            "--ca",
            &c,
            "--client-cert",
            &client_ca,
            "--client-key",
            &client_key.display().to_string(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
