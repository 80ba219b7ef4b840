//! ToolDescriptor: the canonical capability contract of one tool version.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    ActionType, Condition, LocalObjectRef, RiskSeverity, Timestamp, any_json, any_object,
};

/// The capability contract of one tool: what it does, when to use it, its input schema, the
/// effects it declares, its risk, who may approve it, where it runs and how much of its output
/// the model may see. The content digest in status versions it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(
        group = "toolgate.dev",
        version = "v1alpha1",
        kind = "ToolDescriptor",
        namespaced,
        status = "ToolDescriptorStatus",
        shortname = "td",
        category = "toolgate",
        doc = "A tool's capability contract: description, schemas, effects, risk, permissions, sandbox, credentials, context policy and execution.",
        printcolumn(name = "Tool", type_ = "string", json_path = ".spec.canonicalName"),
        printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
        printcolumn(name = "Risk", type_ = "string", json_path = ".spec.risk.level"),
        printcolumn(name = "Lifecycle", type_ = "string", json_path = ".status.lifecycle"),
        printcolumn(name = "Digest", type_ = "string", json_path = ".status.digest"),
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
        "rule": "!self.risk.destructive || self.effects.dryRunSupported || self.permissions.approvalPolicy == 'always'",
        "message": "a destructive tool must support dry run (effects.dryRunSupported: true) or require approval every time (permissions.approvalPolicy: always)",
        "fieldPath": ".risk.destructive"
    },
    {
        "rule": "!has(self.permissions.strongConfirmation) || self.permissions.strongConfirmation != 'dry_run' || self.effects.dryRunSupported",
        "message": "strongConfirmation dry_run needs a tool that supports dry runs (effects.dryRunSupported: true); use second_approver",
        "fieldPath": ".permissions.strongConfirmation"
    },
    {
        "rule": "self.execution.adapter != 'cli' || (has(self.execution.argv) && size(self.execution.argv) > 0) || has(self.execution.script)",
        "message": "a cli tool needs an argv template (execution.argv) or a skill's script (execution.script): toolgate never runs a shell",
        "fieldPath": ".execution.argv"
    },
    {
        "rule": "!has(self.execution.script) || (self.execution.adapter == 'cli' && self.source.type == 'skill')",
        "message": "execution.script is a skill's script: a cli tool whose source.type is skill",
        "fieldPath": ".execution.script"
    },
    {
        "rule": "self.execution.adapter != 'builtin' || has(self.execution.builtin)",
        "message": "a builtin tool names its operation (execution.builtin: fs.write or fs.delete)",
        "fieldPath": ".execution.builtin"
    },
    {
        "rule": "self.execution.adapter != 'http' || has(self.execution.http)",
        "message": "an http tool needs execution.http (method and urlTemplate)",
        "fieldPath": ".execution.http"
    },
    {
        "rule": "(self.execution.adapter == 'subagent') == has(self.subagent) && (self.execution.adapter != 'subagent' || self.source.type == 'subagent')",
        "message": "a subagent tool (source.type subagent) delegates with execution.adapter: subagent and says what it allows in spec.subagent; no other tool has a subagent block",
        "fieldPath": ".subagent"
    },
    {
        "rule": "self.execution.adapter != 'mcp' || (has(self.execution.mcp) && ((has(self.execution.argv) && size(self.execution.argv) > 0) != has(self.execution.mcp.url)))",
        "message": "an mcp tool names its tool there (execution.mcp.tool) and its server: a command started on stdio (execution.argv) or a streamable HTTP endpoint (execution.mcp.url), one of them",
        "fieldPath": ".execution.mcp"
    }
]))]
pub struct ToolDescriptorSpec {
    /// Stable dotted name the tool is known by (`file.write`). Agents see it mapped to each
    /// provider's naming rules.
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[a-z0-9]([a-z0-9_.-]*[a-z0-9])?$")
    )]
    pub canonical_name: String,
    /// A human-friendly name for consoles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub display_name: Option<String>,
    /// Semantic version of the tool's contract (`1.0.0`).
    #[schemars(regex(
        pattern = r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$"
    ))]
    pub version: String,
    /// Where the tool comes from.
    pub source: ToolSource,
    /// What the model is told about the tool.
    pub description: ToolDescription,
    /// The actions and domains the tool serves; used to select candidates for a view.
    pub intent: ToolIntentSpec,
    /// Input, output and error JSON Schemas.
    pub schemas: ToolSchemas,
    /// The effects the tool declares. Every field is required: an undeclared effect is an error.
    pub effects: ToolEffects,
    /// The declared risk.
    pub risk: ToolRisk,
    /// Approval policy and scopes a caller must hold.
    pub permissions: ToolPermissions,
    /// The SandboxPolicy the tool runs under. Required for every tool that executes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_policy_ref: Option<LocalObjectRef>,
    /// The CredentialBinding whose identity the tool acts with, if it needs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_binding_ref: Option<LocalObjectRef>,
    /// How much of the tool and its output the model may see.
    pub context_policy: ContextPolicy,
    /// How the executor runs the tool.
    pub execution: Execution,
    /// Where the descriptor came from and how far it is trusted.
    pub provenance: Provenance,
    /// Observability switches for this tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observability: Option<Observability>,
    /// Marks the tool deprecated: it stays callable for existing grants but views rank it last
    /// and its lifecycle reads `deprecated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecation: Option<Deprecation>,
    /// The delegation a `subagent` tool grants: what the subagent may use and for how long.
    /// Required with `execution.adapter: subagent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent: Option<SubagentSpec>,
    /// Disables the tool: calls are denied and it never appears in a view.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
}

/// Where a tool comes from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolSource {
    /// The kind of source.
    #[serde(rename = "type")]
    pub type_: SourceType,
    /// An identifier of the source (package, server or script id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub source_id: Option<String>,
    /// Package that provides the tool (CLI tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub package_name: Option<String>,
    /// MCP server the tool was discovered on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub server_id: Option<String>,
    /// Upstream URI (HTTP API, MCP endpoint, repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub uri: Option<String>,
}

/// The kind of source a tool comes from.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SourceType {
    /// Built into toolgate's executor.
    Builtin,
    /// A command-line program run from an argv template.
    Cli,
    /// A script shipped by a skill, registered as a tool.
    Skill,
    /// A tool discovered on an MCP server and normalized.
    Mcp,
    /// An HTTP API.
    Http,
    /// Delegation to a subagent.
    Subagent,
}

/// What the model is told about a tool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolDescription {
    /// One or two sentences on what the tool does.
    #[schemars(length(min = 1, max = 1024))]
    pub summary: String,
    /// Situations where the tool is the right choice.
    #[serde(default)]
    #[schemars(length(max = 32), inner(length(min = 1, max = 512)))]
    pub use_when: Vec<String>,
    /// Situations where the tool must not be used; also negative ranking hints.
    #[serde(default)]
    #[schemars(length(max = 32), inner(length(min = 1, max = 512)))]
    pub do_not_use_when: Vec<String>,
    /// Worked examples: a request and the args it should produce.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub examples: Vec<ToolExample>,
}

/// A worked example for a tool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolExample {
    /// What a user asked.
    #[schemars(length(min = 1, max = 1024))]
    pub user_request: String,
    /// The args the tool should be called with; must validate against the input schema.
    #[schemars(schema_with = "any_json")]
    pub expected_args: serde_json::Value,
}

/// The actions and domains a tool serves.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolIntentSpec {
    /// The action types the tool performs. Decides the risk tier with the declared effects.
    #[schemars(length(min = 1, max = 18))]
    pub action_types: Vec<ActionType>,
    /// Domains the tool belongs to (`code`, `vcs`, `web`, `tracker`).
    #[serde(default)]
    #[schemars(length(max = 16), inner(length(min = 1, max = 63)))]
    pub domains: Vec<String>,
    /// Phrases a user's goal must contain for the tool to be a candidate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 256)))]
    pub required_user_intent: Vec<String>,
    /// Phrases that make the tool a poor match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 256)))]
    pub negative_intent_hints: Vec<String>,
}

/// The JSON Schemas of a tool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolSchemas {
    /// JSON Schema (draft 2020-12) the call's args must satisfy. Must describe an object.
    #[schemars(schema_with = "any_object")]
    pub input_schema: serde_json::Value,
    /// JSON Schema of the structured output, when the tool returns JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::any_object_opt")]
    pub output_schema: Option<serde_json::Value>,
    /// JSON Schema of the tool's error payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::any_object_opt")]
    pub error_schema: Option<serde_json::Value>,
}

/// The effects a tool declares. All booleans are required (invariant 13).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolEffects {
    /// Resource patterns the tool reads (`workspace:**`, `https://api.github.com/**`).
    pub reads: Vec<ResourcePattern>,
    /// Resource patterns the tool writes.
    pub writes: Vec<ResourcePattern>,
    /// Resource patterns the tool deletes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deletes: Vec<ResourcePattern>,
    /// Whether the tool calls anything outside the sandbox.
    pub external_calls: bool,
    /// Whether user data leaves toolgate through the tool.
    pub sends_user_data: bool,
    /// Whether the tool changes any state at all.
    pub mutates_state: bool,
    /// Whether calling twice with the same args has the effect of calling once.
    pub idempotent: bool,
    /// Whether the effect can be undone.
    pub reversible: bool,
    /// Whether the tool supports a dry run that reports what it would do.
    pub dry_run_supported: bool,
}

/// A resource pattern: `scheme:glob`, e.g. `workspace:src/**` or `https://api.github.com/**`.
pub type ResourcePattern = String;

/// The declared risk of a tool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolRisk {
    /// Declared severity. Must not be lower than its action types imply.
    pub level: RiskSeverity,
    /// Whether the tool destroys data or state.
    pub destructive: bool,
    /// Whether the tool reaches an open world (arbitrary hosts or data).
    pub open_world: bool,
    /// Money the tool may spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub financial_cost: Option<FinancialCost>,
    /// How sensitive the data the tool touches is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privacy_risk: Option<PrivacyRisk>,
}

/// Money a tool may spend.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FinancialCost {
    /// Free.
    None,
    /// Small fixed cost.
    Low,
    /// Billed per use.
    Metered,
    /// Not known.
    Unknown,
}

/// How sensitive the data a tool touches is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PrivacyRisk {
    /// No personal data.
    None,
    /// Low sensitivity.
    Low,
    /// Medium sensitivity.
    Medium,
    /// High sensitivity.
    High,
}

/// Approval policy and scopes of a tool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolPermissions {
    /// When a human must approve a call: `never`, `on_request` (when the call asks), `on_risk`
    /// (by the tier defaults) or `always`.
    pub approval_policy: ApprovalPolicy,
    /// Scopes a grant must give the caller (`workspace:write`, `github:issues:write`).
    #[serde(default)]
    #[schemars(
        length(max = 32),
        inner(
            length(min = 1, max = 128),
            regex(pattern = r"^[a-z0-9][a-z0-9:._*/-]*$")
        )
    )]
    pub required_scopes: Vec<String>,
    /// If set, only these principals may ever call the tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 253)))]
    pub allowed_principals: Vec<String>,
    /// Principals that may never call the tool, whatever their grants say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 253)))]
    pub blocked_principals: Vec<String>,
    /// The boundary the tool's effects stay inside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_boundary: Option<TenantBoundary>,
    /// What an L5 call (destructive, admin, deploy, purchase) needs besides its approval:
    /// `dry_run` (a successful dry run of the same args, by the same principal, shortly before)
    /// or `second_approver` (a second approval from someone other than the first approver and
    /// the principal). Unset: `dry_run` when the tool supports dry runs, else `second_approver`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strong_confirmation: Option<StrongConfirmation>,
}

/// The second confirmation an L5 call needs besides its approval.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StrongConfirmation {
    /// A successful dry run of the same args by the same principal within
    /// `DRY_RUN_VALID_SECONDS` before the call is authorized.
    DryRun,
    /// Two approvals from two different approvers, neither the principal.
    SecondApprover,
}

impl StrongConfirmation {
    /// The name in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            StrongConfirmation::DryRun => "dry_run",
            StrongConfirmation::SecondApprover => "second_approver",
        }
    }
}

impl std::fmt::Display for StrongConfirmation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ToolDescriptorSpec {
    /// The confirmation an L5 call of this tool needs: the declared one, else a dry run when
    /// the tool supports one, else a second approver.
    pub fn strong_confirmation(&self) -> StrongConfirmation {
        self.permissions
            .strong_confirmation
            .unwrap_or(if self.effects.dry_run_supported {
                StrongConfirmation::DryRun
            } else {
                StrongConfirmation::SecondApprover
            })
    }
}

/// When a human must approve a call.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalPolicy {
    /// Never ask (only honoured up to what the risk tier allows).
    Never,
    /// Ask when the call or the grant requests it.
    OnRequest,
    /// Ask when the risk tier's default says so (L4 and L5).
    OnRisk,
    /// Ask for every call.
    Always,
}

/// The boundary a tool's effects stay inside.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TenantBoundary {
    /// One user.
    User,
    /// One organization.
    Org,
    /// One workspace.
    Workspace,
    /// One project.
    Project,
}

/// How much of a tool and its output the model may see.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextPolicy {
    /// Whether the tool may appear in a model's tool view at all.
    pub expose_to_model: bool,
    /// How much output the model may see: nothing, a bounded preview, the validated structured
    /// output, or everything (still redacted and bounded by the sandbox's output caps).
    pub expose_output_to_model: OutputExposure,
    /// Upper bound of the preview, in tokens (about 4 bytes each).
    #[schemars(range(min = 0, max = 100000))]
    pub max_output_preview_tokens: u32,
    /// Name of a redaction policy applied on top of credential redaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub redaction_policy: Option<String>,
}

/// How much output the model may see.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputExposure {
    /// Nothing; only the status.
    None,
    /// A bounded, redacted preview.
    Preview,
    /// The validated structured output.
    Structured,
    /// The full output (redacted, bounded by the sandbox output caps).
    Full,
}

/// How the executor runs a tool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    /// The adapter that runs the tool.
    pub adapter: ExecutionAdapter,
    /// Container image of the executor for this tool (cluster runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub image: Option<String>,
    /// argv template for the `cli` adapter, or the command of an `mcp` tool's stdio server. Each
    /// element is one argument; `{{name}}` is replaced by the arg `name` (`cli` only). Never
    /// passed to a shell.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), inner(length(min = 1, max = 4096)))]
    pub argv: Vec<String>,
    /// Template for the process's standard input (`{{content}}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub stdin: Option<String>,
    /// Working directory, relative to the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub working_dir: Option<String>,
    /// Request template for the `http` adapter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpExecution>,
    /// The operation of the `builtin` adapter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin: Option<BuiltinOperation>,
    /// The tool of the `mcp` adapter: which tool of the server `argv` starts (stdio), called
    /// with the call's args as its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpExecution>,
    /// A skill's script, carried here so the sandbox needs nothing of the skill's folder: the
    /// executor writes it into the sandbox's private `/tmp` and runs `interpreter`, the script,
    /// then `argv` (its arguments, templates as for `cli`). Its content is part of the digest:
    /// a changed script is a new version that needs a new review.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<ScriptExecution>,
    /// Wall-clock limit of one attempt, in milliseconds.
    #[schemars(range(min = 100, max = 3600000))]
    pub timeout_ms: u32,
    /// Retries on failure.
    #[serde(default)]
    pub retry_policy: RetryPolicy,
}

/// A skill's script run by the `cli` adapter.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScriptExecution {
    /// Where the script lives in its skill (`scripts/run_test.py`); its base name is the file
    /// the executor writes.
    #[schemars(
        length(min = 1, max = 512),
        regex(pattern = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
    )]
    pub path: String,
    /// The program that runs it, and its options (`[python3, -B]`); never a shell with `-c`.
    #[schemars(length(min = 1, max = 16), inner(length(min = 1, max = 4096)))]
    pub interpreter: Vec<String>,
    /// The script's text (UTF-8, at most 256 KiB).
    #[schemars(length(min = 1, max = 262144))]
    pub content: String,
}

/// A tool on an MCP server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpExecution {
    /// The tool's name on its server (`get_current_time`), as `tools/list` gave it.
    #[schemars(length(min = 1, max = 256))]
    pub tool: String,
    /// The server's streamable HTTP endpoint; absent: the server is `execution.argv`, started
    /// on stdio inside the call's sandbox. The call's credential (if any) is its bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 8, max = 2048),
        regex(pattern = r"^https?://[^\s/]+(/\S*)?$")
    )]
    pub url: Option<String>,
}

/// The adapter that runs a tool.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionAdapter {
    /// Run a program from an argv template.
    Cli,
    /// Send an HTTP request from a template.
    Http,
    /// A function built into the executor.
    Builtin,
    /// Invoke a tool on an MCP server.
    Mcp,
    /// Delegate to a subagent: no sandbox; toolgate issues the subagent a token scoped to this
    /// call, and the subagent ends the call with its summary and result.
    Subagent,
}

/// A governed delegation to a subagent. toolgate runs no model: the subagent is an external
/// agent that authenticates with the delegation token toolgate issues for one call (to the
/// call's principal, once), scoped to it and dead when it ends.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubagentSpec {
    /// Which agent the delegation is for (`code-reviewer`); the identity its calls are recorded
    /// under is `system:toolgate:delegation:<namespace>:<call>`.
    #[schemars(length(min = 1, max = 128))]
    pub agent_id: String,
    /// The tools the subagent may call: its grants are the delegator's, limited to these.
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 128)))]
    pub allowed_tools: Vec<String>,
    /// What of the parent's context the subagent gets and what comes back.
    pub context_policy: SubagentContextPolicy,
    /// The delegation's budget.
    pub budget: SubagentBudget,
}

/// What crosses a delegation, each way.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubagentContextPolicy {
    /// What of the parent call the subagent is handed with its token: `none` (the args only),
    /// `summary` (also the parent's intent), `selected_refs` (also its evidence references).
    pub inherit_parent_context: InheritContext,
    /// Whether the parent's result lists what each of the subagent's calls returned (its
    /// previews); otherwise only the count and the call ids.
    #[serde(default)]
    pub return_transcript: bool,
    /// Whether the subagent's summary becomes the parent's output preview.
    #[serde(default = "yes")]
    pub return_summary: bool,
}

fn yes() -> bool {
    true
}

/// What of the parent's context a subagent gets.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InheritContext {
    /// The args alone.
    None,
    /// The args and the parent's intent (goal, task, rationale).
    Summary,
    /// The args, the intent and the parent's evidence references.
    SelectedRefs,
}

/// A delegation's budget.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubagentBudget {
    /// Calls the subagent may have decided (a denied proposal counts nothing).
    #[schemars(range(min = 1, max = 10000))]
    pub max_calls: u32,
    /// Tokens the subagent says it may spend (reported by the subagent with its result; toolgate
    /// does not meter a model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u64>,
    /// How long the delegation lives after it started; then it fails and its token dies.
    #[schemars(range(min = 1000, max = 86400000))]
    pub timeout_ms: u64,
}

/// Operations built into the executor, for what a CLI cannot do safely without a shell.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BuiltinOperation {
    /// Write `args.content` to `args.path` under a write root (dry run: report only).
    #[serde(rename = "fs.write")]
    FsWrite,
    /// Delete the file `args.path` under a write root (dry run: report only).
    #[serde(rename = "fs.delete")]
    FsDelete,
}

/// An HTTP request template.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpExecution {
    /// HTTP method.
    pub method: HttpMethod,
    /// URL template; `{{name}}` in a path segment is percent-encoded from the arg `name`.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub url_template: String,
    /// Extra request headers (values may use templates; never a secret).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Args sent as the JSON body (by name). Empty: no body.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub body_args: Vec<String>,
    /// Header the credential goes into (`Authorization`), prefixed by `credentialPrefix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub credential_header: Option<String>,
    /// Prefix of the credential header's value (`Bearer `).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub credential_prefix: Option<String>,
}

/// HTTP methods the http adapter sends.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// GET
    Get,
    /// POST
    Post,
    /// PUT
    Put,
    /// PATCH
    Patch,
    /// DELETE
    Delete,
}

/// Retries on failure.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// How many times to retry.
    #[serde(default)]
    #[schemars(range(min = 0, max = 10))]
    pub max_retries: u32,
    /// Error codes that are retried (`timeout`, `http_503`).
    #[serde(default)]
    #[schemars(length(max = 16), inner(length(min = 1, max = 64)))]
    pub retry_on: Vec<String>,
    /// Pause before a retry, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 600000))]
    pub backoff_ms: Option<u32>,
}

/// Where a descriptor came from and how far it is trusted.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Provenance {
    /// Trust in the tool's origin. `untrusted` tools are never allowed.
    pub trust_level: TrustLevel,
    /// Digest of the upstream manifest the descriptor was normalized from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub manifest_hash: Option<String>,
    /// Signature over the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub signature: Option<String>,
    /// Where the source of the tool lives.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = 2048)))]
    pub source_refs: Vec<String>,
}

/// Trust in a tool's origin.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TrustLevel {
    /// Written by the platform team.
    FirstParty,
    /// From the workspace's own repository.
    Workspace,
    /// From a vendor or community.
    ThirdParty,
    /// Unknown origin; never allowed.
    Untrusted,
}

/// Observability switches for a tool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Observability {
    /// Whether args are written to logs (redacted).
    #[serde(default)]
    pub log_args: bool,
    /// Whether the result preview is written to logs (redacted).
    #[serde(default)]
    pub log_result_preview: bool,
    /// How much of a call is audited.
    #[serde(default = "default_audit")]
    pub audit_level: AuditLevel,
}

fn default_audit() -> AuditLevel {
    AuditLevel::Basic
}

/// How much of a call is audited.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditLevel {
    /// No audit beyond conditions.
    None,
    /// Decisions and results.
    Basic,
    /// Everything, including args (redacted).
    Full,
}

/// A deprecation notice.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Deprecation {
    /// Why, and what to use instead.
    #[schemars(length(min = 1, max = 1024))]
    pub message: String,
    /// The canonical name of the replacement tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub replaced_by: Option<String>,
}

/// Observed state of a ToolDescriptor, written by toolgate.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolDescriptorStatus {
    /// Registration lifecycle: `enabled` tools are callable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// Content digest of the spec (`sha256:…`); a ToolCall's `toolRef.digest` must equal it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub digest: Option<String>,
    /// Problems the registration lint found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<LintFinding>,
    /// When the current digest was first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_at: Option<Timestamp>,
    /// The `.metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (`Ready`, `Linted`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Registration lifecycle of a tool.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Lifecycle {
    /// Seen, not checked yet.
    Discovered,
    /// Lint passed, not enabled yet.
    Verified,
    /// Callable.
    Enabled,
    /// Switched off by `spec.disabled`.
    Disabled,
    /// Schemas are not valid JSON Schema.
    InvalidSchema,
    /// Permissions are inconsistent with action types, effects or risk.
    PermissionLintFailed,
    /// The sandbox policy is missing or too open for the tool.
    SandboxLintFailed,
    /// Blocked (untrusted provenance).
    Blocked,
    /// Deprecated by `spec.deprecation`.
    Deprecated,
}

/// One problem a lint found.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LintFinding {
    /// Stable machine code (`risk-below-action-type`).
    #[schemars(length(max = 64))]
    pub code: String,
    /// Field path (`spec.risk.level`).
    #[schemars(length(max = 512))]
    pub path: String,
    /// What was expected and what was found.
    #[schemars(length(max = 2048))]
    pub message: String,
}
