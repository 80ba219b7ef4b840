//! The HTTP adapter: a request rendered from the template, the credential in a header from its
//! file, the response captured under the same caps, redirects only inside the allowed domains.

use std::time::{Duration, Instant};

use serde_json::Value;
use toolgate_contract::egress::{EgressRules, is_private};
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
/// host is not every service that host runs. Decided by the rules the egress proxy keeps
/// ([`toolgate_contract::egress`]).
pub fn url_allowed(url: &reqwest::Url, allowed: &[String]) -> bool {
    EgressRules::new(false, allowed, &[], false).is_ok_and(|rules| url_allowed_by(url, &rules))
}

fn url_allowed_by(url: &reqwest::Url, rules: &EgressRules) -> bool {
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return false;
    };
    let default = if url.scheme() == "http" { 80 } else { 443 };
    rules.check_host(host, port, default).is_ok()
}

/// The host of a URL when it is an IP literal.
fn literal_ip(url: &reqwest::Url) -> Option<std::net::IpAddr> {
    match url.host()? {
        url::Host::Ipv4(a) => Some(a.into()),
        url::Host::Ipv6(a) => Some(a.into()),
        url::Host::Domain(_) => None,
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
    let rules = EgressRules::new(false, allowed_domains, &[], false).map_err(|e| e.to_string())?;
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        let ok = attempt.previous().len() < 5 && url_allowed_by(attempt.url(), &rules);
        if ok { attempt.follow() } else { attempt.stop() }
    });
    let mut builder = reqwest::Client::builder();
    if let Some(proxy) = crate::egress::proxy_url() {
        // The sandbox's one way out; the proxy checks names and addresses again.
        builder =
            builder.proxy(reqwest::Proxy::all(proxy).map_err(|e| format!("http client: {e}"))?);
        if let Some(pem) = crate::egress::ca() {
            for cert in reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| format!("the call's CA bundle: {e}"))?
            {
                builder = builder.add_root_certificate(cert);
            }
        }
    } else if deny_private_networks {
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
