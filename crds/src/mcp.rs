//! McpServer: an MCP server whose tools toolgate discovers and governs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, LocalObjectRef, Timestamp};
use crate::descriptor::{Lifecycle, TrustLevel};

/// An MCP server whose tools become ToolDescriptors (`<server>.<tool>`): discovered with
/// `tools/list`, normalized (annotations believed as far as the trust level says), and kept out
/// of every view until a platform team enables each tool's reviewed digest here. Only grants
/// make an enabled tool callable. Re-discovered now and then: a tool whose description, schemas
/// or annotations changed is `discovered` again (a rug pull), and waiting calls end.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(
        group = "toolgate.dev",
        version = "v1alpha1",
        kind = "McpServer",
        namespaced,
        status = "McpServerStatus",
        shortname = "mcps",
        category = "toolgate",
        doc = "An MCP server whose tools toolgate discovers, normalizes and governs: out of every view until a reviewed digest is enabled, callable only through grants.",
        printcolumn(name = "Trust", type_ = "string", json_path = ".spec.trustLevel"),
        printcolumn(name = "Tools", type_ = "integer", json_path = ".status.toolCount"),
        printcolumn(
            name = "Enabled",
            type_ = "integer",
            json_path = ".status.enabledCount"
        ),
        printcolumn(
            name = "Ready",
            type_ = "string",
            json_path = ".status.conditions[?(@.type==\"Ready\")].status"
        ),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        ),
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.command) && size(self.command) > 0) != has(self.url)",
        "message": "an McpServer is either a command toolgate starts on stdio (spec.command) or a streamable HTTP endpoint (spec.url), not both and not neither",
        "fieldPath": ".command"
    },
    {
        "rule": "!has(self.credentialBindingRef) || has(self.url)",
        "message": "spec.credentialBindingRef is the auth header of an HTTP server (spec.url); a stdio server gets no credential",
        "fieldPath": ".credentialBindingRef"
    }
]))]
pub struct McpServerSpec {
    /// The command that starts the server on stdio (no shell), run inside the sandbox of
    /// `sandboxPolicyRef` for discovery and for every call of its tools. Either this or `url`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 4096)))]
    pub command: Vec<String>,
    /// The server's streamable HTTP endpoint (`https://mcp.example.com/mcp`), reached under the
    /// egress rules of `sandboxPolicyRef` (its host must be in `network.allowDomains`). Either
    /// this or `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 8, max = 2048),
        regex(pattern = r"^https?://[^\s/]+(/\S*)?$")
    )]
    pub url: Option<String>,
    /// On a cluster, the image a stdio server's pods run (its discovery and every call of its
    /// tools): the executor image with the server inside. Default: the operator's executor
    /// image. `toolgate local` runs the command from the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
    /// The CredentialBinding whose value is sent as `Authorization: Bearer <value>` to an HTTP
    /// server, brokered for each call (and for discovery) and never shown to a model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_binding_ref: Option<LocalObjectRef>,
    /// How far its annotations are believed: `first_party` and `workspace` set effects and risk;
    /// from `third_party` only a hint that raises risk counts; `untrusted` tools are blocked.
    pub trust_level: TrustLevel,
    /// The SandboxPolicy the server runs under.
    pub sandbox_policy_ref: LocalObjectRef,
    /// The tools a reviewer enabled, each with the descriptor digest they read
    /// (`toolgate mcp normalize` and this object's status show it). Any other tool, or one whose
    /// digest changed, stays `discovered`.
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub enabled: Vec<EnabledTool>,
    /// Seconds between two discoveries (a changed tool is caught within this).
    #[serde(default = "default_rediscover")]
    #[schemars(range(min = 1, max = 86400))]
    pub rediscover_seconds: u32,
    /// The longest one discovery may take (start, `initialize`, every page of `tools/list`);
    /// a server that does not answer in time keeps the tools it had.
    #[serde(default = "default_discovery_timeout")]
    #[schemars(range(min = 1, max = 600))]
    pub discovery_timeout_seconds: u32,
}

fn default_rediscover() -> u32 {
    300
}

fn default_discovery_timeout() -> u32 {
    30
}

/// A tool enabled after review.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnabledTool {
    /// The tool's name on the server (`get_current_time`).
    #[schemars(length(min = 1, max = 128))]
    pub tool: String,
    /// The digest of the descriptor the reviewer read (`sha256:…`).
    #[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))]
    pub digest: String,
}

/// What the last discovery found.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerStatus {
    /// The `.metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (`Ready`: the last discovery answered).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// When the server last answered `tools/list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_discovery: Option<Timestamp>,
    /// Tools discovered.
    #[serde(default)]
    pub tool_count: u32,
    /// Tools enabled (their reviewed digest is current).
    #[serde(default)]
    pub enabled_count: u32,
    /// Each tool as discovered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<DiscoveredTool>,
}

/// One tool of a server, as discovered.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredTool {
    /// Its name on the server.
    pub tool: String,
    /// Its ToolDescriptor (`<server>.<tool>`).
    pub descriptor: String,
    /// The descriptor's digest: what a reviewer enables.
    pub digest: String,
    /// Where it stands.
    pub lifecycle: Lifecycle,
}
