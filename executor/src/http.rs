//! The HTTP adapter: a request rendered from the template, the credential in a header from its
//! file, the response captured under the same caps, redirects only inside the allowed domains.

use std::time::{Duration, Instant};

use serde_json::Value;
use toolgate_contract::exec::ExecSpec;
use toolgate_contract::redact::Redactor;
use toolgate_crds::{ArtifactKind, CallResult, HttpMethod, ObservedEffects, ResultStatus};

use crate::outcome::{Ended, assemble, failure, open_output, target};
use crate::render::{render_text, render_url};
use crate::sink::Sink;
use crate::spec::{Credential, ExecError};
use toolgate_artifacts::ArtifactStore;

/// Whether `url` may be reached under the allowed domains: its host is one of them
/// (`*.example.com` matches subdomains only) and its port is the one the entry names
/// (`api.example.com:8443`), or the scheme's default port when the entry names none — an allowed
/// host is not every service that host runs.
pub fn url_allowed(url: &reqwest::Url, allowed: &[String]) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase();
    allowed.iter().any(|entry| {
        let entry = entry.to_ascii_lowercase();
        let (name, port) = match entry.rsplit_once(':') {
            Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
                (name.to_string(), port.parse::<u16>().ok())
            }
            _ => (entry.clone(), None),
        };
        let host_matches = match name.strip_prefix("*.") {
            Some(base) => host.len() > base.len() + 1 && host.ends_with(&format!(".{base}")),
            None => host == name,
        };
        let port_matches = match port {
            Some(p) => url.port_or_known_default() == Some(p),
            None => url.port().is_none(),
        };
        host_matches && port_matches
    })
}

/// The host of a URL when it is an IP literal.
fn literal_ip(url: &reqwest::Url) -> Option<std::net::IpAddr> {
    match url.host()? {
        url::Host::Ipv4(a) => Some(a.into()),
        url::Host::Ipv6(a) => Some(a.into()),
        url::Host::Domain(_) => None,
    }
}

/// Private, loopback, link-local, shared, unspecified, broadcast and multicast addresses: what
/// `denyPrivateNetworks` keeps a tool from reaching.
pub fn is_private(ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            a.is_private()
                || a.is_loopback()
                || a.is_link_local()
                || a.is_unspecified()
                || a.is_broadcast()
                || a.is_multicast()
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || o[0] == 0
        }
        IpAddr::V6(a) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                return is_private(IpAddr::V4(v4));
            }
            let first = a.segments()[0];
            a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

/// A resolver that drops private addresses, so a public name pointing inside (DNS rebinding,
/// a hostile record) cannot reach the private network.
struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| !is_private(a.ip()))
                .collect();
            if addrs.is_empty() {
                return Err(format!(
                    "{host} resolves only to private addresses, and the sandbox denies private networks"
                )
                .into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// A client that may reach `url` under the sandbox's egress rules, or why not: its host among
/// the allowed domains, no private address when they are denied (literal, or by name through
/// [`PublicOnly`]), redirects only inside the allowed domains, the tool's timeout. Every HTTP
/// request of a tool (the `http` adapter, an MCP server over streamable HTTP) goes through one.
pub(crate) fn egress_client(
    spec: &ExecSpec,
    url: &reqwest::Url,
) -> Result<reqwest::Client, ExecError> {
    egress_client_with(
        url,
        &spec.allowed_domains,
        spec.deny_private_networks,
        Duration::from_millis(spec.limits.timeout_ms),
    )
    .map_err(ExecError::Unrunnable)
}

/// [`egress_client`] for these rules (what the embedded runtime discovers an HTTP MCP server
/// with): the reason in words when `url` may not be reached.
pub fn egress_client_with(
    url: &reqwest::Url,
    allowed_domains: &[String],
    deny_private_networks: bool,
    timeout: Duration,
) -> Result<reqwest::Client, String> {
    if !url_allowed(url, allowed_domains) {
        let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
        return Err(format!(
            "{}{port} is not among the sandbox's allowed domains ({}; an entry without a port allows the scheme's default port only)",
            url.host_str().unwrap_or_default(),
            allowed_domains.join(", ")
        ));
    }
    if deny_private_networks
        && let Some(ip) = literal_ip(url)
        && is_private(ip)
    {
        return Err(format!(
            "{ip} is a private, loopback or link-local address and the sandbox denies private networks"
        ));
    }
    let allowed = allowed_domains.to_vec();
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        let ok = attempt.previous().len() < 5 && url_allowed(attempt.url(), &allowed);
        if ok { attempt.follow() } else { attempt.stop() }
    });
    let mut builder = reqwest::Client::builder();
    if deny_private_networks {
        builder = builder.dns_resolver(std::sync::Arc::new(PublicOnly));
    }
    builder
        .redirect(policy)
        .timeout(timeout)
        .build()
        .map_err(|e| format!("http client: {e}"))
}

pub(crate) async fn run_http(
    spec: &ExecSpec,
    credentials: &[Credential],
    store: &ArtifactStore,
    redactor: &Redactor,
) -> Result<CallResult, ExecError> {
    let Some(http) = &spec.execution.http else {
        return Err(ExecError::Unrunnable(
            "execution.http is missing: an http tool needs a request template".into(),
        ));
    };
    let url_text = render_url(&http.url_template, &spec.args)?;
    let url = reqwest::Url::parse(&url_text).map_err(|e| {
        ExecError::Unrunnable(format!(
            "execution.http.urlTemplate renders to an invalid URL: {e}"
        ))
    })?;
    let client = egress_client(spec, &url)?;
    let req = request(spec, credentials, &client, &url, http)?;

    let started = Instant::now();
    let mut body = open_output(
        spec,
        store,
        redactor,
        "response-body",
        "application/octet-stream",
    )
    .await?;
    let mut resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            let o = body.finish(None).await?;
            return Ok(send_failed(spec, &e, o.artifact, started));
        }
    };
    let status = i32::from(resp.status().as_u16());
    let final_host = resp.url().host_str().unwrap_or_default().to_string();
    let redirected_out = resp.status().is_redirection();
    let mut headers = String::new();
    for (k, v) in resp.headers() {
        headers.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
    }
    let mut structured = spec.output_schema.as_ref().map(|_| Vec::new());
    let mut timed_out = false;
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if let Some(s) = structured.as_mut()
                    && s.len() < 1024 * 1024
                {
                    s.extend_from_slice(&chunk[..chunk.len().min(1024 * 1024 - s.len())]);
                }
                body.write(&chunk).await?;
            }
            Ok(None) => break,
            Err(e) => {
                timed_out = e.is_timeout();
                break;
            }
        }
    }
    let out = body
        .finish(Some(format!("HTTP {status} response body")))
        .await?;
    let mut head = Sink::open(
        store,
        target(
            spec,
            "response-headers",
            ArtifactKind::Log,
            "text/plain; charset=utf-8",
            spec.limits.max_stderr_bytes,
            0,
        ),
        redactor,
    )
    .await?;
    head.write(headers.as_bytes()).await?;
    let head = head.finish(Some("response headers".into())).await?;
    let mut result = assemble(
        spec,
        out,
        None,
        Ended {
            code: Some(status),
            signal: None,
            timed_out,
        },
        structured,
        started,
    );
    result.artifacts.push(head.artifact);
    if redirected_out {
        result.error = Some(toolgate_crds::CallError {
            code: "redirect-refused".into(),
            message:
                "the server redirected outside the allowed domains; the redirect was not followed"
                    .into(),
            retryable: false,
            safe_to_show_user: true,
        });
        result.status = ResultStatus::Error;
    }
    result.effects_observed = Some(ObservedEffects {
        external_calls: vec![format!("{} {final_host}", http.method_name())],
        ..Default::default()
    });
    Ok(result)
}

/// The request the tool's template makes of the call's args: its method, headers (no line
/// breaks), the brokered credential in the header the descriptor names, a JSON body of the
/// body args in a stable key order.
fn request(
    spec: &ExecSpec,
    credentials: &[Credential],
    client: &reqwest::Client,
    url: &reqwest::Url,
    http: &toolgate_crds::HttpExecution,
) -> Result<reqwest::RequestBuilder, ExecError> {
    let method = match http.method {
        HttpMethod::Get => reqwest::Method::GET,
        HttpMethod::Post => reqwest::Method::POST,
        HttpMethod::Put => reqwest::Method::PUT,
        HttpMethod::Patch => reqwest::Method::PATCH,
        HttpMethod::Delete => reqwest::Method::DELETE,
    };
    let mut req = client.request(method, url.clone());
    for (name, template) in &http.headers {
        let value = render_text(
            template,
            &format!("execution.http.headers.{name}"),
            &spec.args,
        )?;
        if value.contains(['\r', '\n']) {
            return Err(ExecError::Unrunnable(format!(
                "execution.http.headers.{name}: a header value may not contain a line break"
            )));
        }
        req = req.header(name.as_str(), value);
    }
    if let Some(header) = &http.credential_header {
        let Some(cred) = credentials.first() else {
            return Err(ExecError::Unrunnable(format!(
                "execution.http.credentialHeader {header} is set but the call has no credential"
            )));
        };
        let value = format!(
            "{}{}",
            http.credential_prefix.as_deref().unwrap_or(""),
            cred.value
        );
        req = req.header(header.as_str(), value);
    }
    if !http.body_args.is_empty() {
        // Keys in sorted order whatever serde_json's map is built with: the same args always
        // make the same request.
        let body: std::collections::BTreeMap<String, Value> = http
            .body_args
            .iter()
            .filter_map(|k| {
                spec.args
                    .get(k)
                    .filter(|v| !v.is_null())
                    .map(|v| (k.clone(), v.clone()))
            })
            .collect();
        let bytes = serde_json::to_vec(&body)
            .map_err(|e| ExecError::Unrunnable(format!("request body: {e}")))?;
        req = req
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(bytes);
    }

    Ok(req)
}

/// The result of a request that got no response: a timeout, a refused redirect, or a failure to
/// connect (the response body artifact is empty).
fn send_failed(
    spec: &ExecSpec,
    e: &reqwest::Error,
    artifact: toolgate_crds::ArtifactRef,
    started: Instant,
) -> CallResult {
    let (code, retryable) = if e.is_timeout() {
        ("timeout", true)
    } else if e.is_redirect() {
        ("redirect-refused", false)
    } else {
        ("http-request-failed", true)
    };
    // reqwest's message may contain the URL; the redactor runs over it in execute().
    let message = format!(
        "{} {}: {e}",
        spec.execution
            .http
            .as_ref()
            .map_or("", |h| h.url_template.as_str()),
        "request failed"
    );
    failure(
        ResultStatus::Error,
        code,
        &message,
        retryable,
        vec![artifact],
        started,
    )
}

trait MethodName {
    fn method_name(&self) -> &'static str;
}

impl MethodName for toolgate_crds::HttpExecution {
    fn method_name(&self) -> &'static str {
        match self.method {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Delete => "DELETE",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_hosts_and_ports() {
        let allowed = vec![
            "api.github.com".to_string(),
            "*.example.com".to_string(),
            "127.0.0.1:8080".to_string(),
        ];
        let ok = |u: &str| url_allowed(&reqwest::Url::parse(u).expect("url"), &allowed);
        assert!(ok("https://api.github.com/repos"));
        assert!(ok("https://API.GitHub.com./repos"));
        assert!(ok("https://api.github.com:443/repos"));
        assert!(ok("http://a.example.com/"));
        assert!(ok("http://127.0.0.1:8080/mcp"));
        assert!(!ok("https://example.com/"));
        assert!(!ok("https://evil-example.com/"));
        assert!(!ok("https://api.github.com.evil.net/"));
        // Another port of an allowed host is another service.
        assert!(!ok("https://api.github.com:8443/"));
        assert!(!ok("http://127.0.0.1:9090/"));
        assert!(!ok("http://127.0.0.1/"));
    }
}
