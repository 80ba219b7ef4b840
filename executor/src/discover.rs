//! Listing an MCP server's tools (`initialize`, every page of `tools/list`, its version), written
//! once for whoever discovers: the embedded runtime (a stdio server in its sandbox, an HTTP one
//! from the runtime) and the operator (an HTTP server from the operator's pod). An HTTP server
//! is reached under the SandboxPolicy's egress rules, through the same client the `http`
//! adapter uses.

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
};

/// What a server listed.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// Its tools, as JSON (what `toolgate_core::mcp` normalizes).
    pub tools: Vec<serde_json::Value>,
    /// `serverInfo.version`, if it said.
    pub version: Option<String>,
}

/// Where and how an HTTP server may be reached.
#[derive(Debug, Clone, Copy)]
pub struct HttpTarget<'a> {
    /// The streamable HTTP endpoint.
    pub url: &'a str,
    /// The SandboxPolicy's `network.allowDomains`.
    pub allowed_domains: &'a [String],
    /// The SandboxPolicy's `network.denyPrivateNetworks`.
    pub deny_private_networks: bool,
    /// The bearer token (a brokered credential), if the server wants one.
    pub bearer: Option<&'a str>,
}

/// `initialize`, every page of `tools/list`, and the server's version, over any transport.
pub async fn list_over<T, E, A>(transport: T) -> Result<Listed, String>
where
    T: rmcp::transport::IntoTransport<rmcp::RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let client = ().serve(transport).await.map_err(|e| format!("it did not initialize: {e}"))?;
    let version = client
        .peer_info()
        .and_then(|i| i.server_info.as_ref().map(|s| s.version.clone()));
    let tools = client
        .list_all_tools()
        .await
        .map_err(|e| format!("tools/list: {e}"));
    let _ = client.cancel().await;
    let tools = tools?
        .into_iter()
        .map(|t| serde_json::to_value(t).map_err(|e| format!("a tool: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Listed { tools, version })
}

/// List an HTTP server's tools within `deadline`.
pub async fn list_http(target: HttpTarget<'_>, deadline: Duration) -> Result<Listed, String> {
    let parsed =
        reqwest::Url::parse(target.url).map_err(|e| format!("url {:?}: {e}", target.url))?;
    let client = crate::http::egress_client_with(
        &parsed,
        target.allowed_domains,
        target.deny_private_networks,
        deadline,
    )?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(target.url);
    if let Some(b) = target.bearer {
        config = config.auth_header(b.trim());
    }
    let transport = StreamableHttpClientTransport::with_client(client, config);
    match tokio::time::timeout(deadline, list_over(transport)).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "no answer to initialize and tools/list within {} s",
            deadline.as_secs()
        )),
    }
}
