//! Listing an MCP server's tools (`initialize`, every page of `tools/list`, its version), and
//! reading back what the executor's `discover` mode listed, written once for whoever discovers: the embedded runtime (a stdio server in its sandbox, an HTTP one
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
    /// The SandboxPolicy's network rules: its egress, allowed domains, private networks.
    pub network: &'a toolgate_crds::NetworkPolicy,
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
    if target.network.egress == toolgate_crds::EgressMode::None {
        return Err(format!(
            "its SandboxPolicy allows no egress, so {} cannot be reached",
            target.url
        ));
    }
    let parsed =
        reqwest::Url::parse(target.url).map_err(|e| format!("url {:?}: {e}", target.url))?;
    let client = crate::http::egress_client_with(
        &parsed,
        &target.network.allow_domains,
        target.network.deny_private_networks,
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

/// What a discovery run by the executor (`ExecSpec.discover`) found: its result checked, the
/// `tools` artifact read from the store it was written to and parsed (tools and the server's
/// version), as the runtimes' other discoveries return it.
pub async fn read_listed(
    result: &toolgate_crds::CallResult,
    store: &toolgate_artifacts::ArtifactStore,
) -> Result<Listed, String> {
    if result.status != toolgate_crds::ResultStatus::Success {
        return Err(result
            .error
            .as_ref()
            .map(|e| e.message.clone())
            .unwrap_or_else(|| "the discovery failed".into()));
    }
    let artifact = result
        .artifacts
        .iter()
        .find(|a| a.artifact_id == "tools")
        .ok_or_else(|| "the discovery wrote no tools artifact".to_string())?;
    let bytes = store
        .read(&artifact.uri)
        .await
        .map_err(|e| format!("reading {}: {e}", artifact.uri))?;
    let text = String::from_utf8_lossy(&bytes);
    let tools = toolgate_contract::mcp_list::parse_list(&text).map_err(|e| e.to_string())?;
    Ok(Listed {
        tools,
        version: toolgate_contract::mcp_list::saved_server_version(&text),
    })
}
