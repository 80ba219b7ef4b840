//! ToolCall: one proposed action and everything toolgate recorded about it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    ActionType, Condition, LocalObjectRef, RiskSeverity, RiskTier, Timestamp, any_json, any_object,
};

/// One proposed action: the tool (pinned by digest), the args, the public intent and the
/// principal toolgate authenticated. Immutable once created; status tells its causal chain.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(
        group = "toolgate.dev",
        version = "v1alpha1",
        kind = "ToolCall",
        namespaced,
        status = "ToolCallStatus",
        shortname = "tc",
        category = "toolgate",
        doc = "One proposed tool call: tool version, args, intent and principal. Status records each step of its causal chain.",
        selectable = ".spec.toolRef.name",
        selectable = ".spec.principal",
        selectable = ".spec.dryRun",
        selectable = ".status.phase",
        printcolumn(name = "Tool", type_ = "string", json_path = ".spec.toolRef.name"),
        printcolumn(name = "Principal", type_ = "string", json_path = ".spec.principal"),
        printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
        printcolumn(
            name = "Risk",
            type_ = "string",
            json_path = ".status.authorization.riskLevel"
        ),
        printcolumn(
            name = "Tier",
            type_ = "string",
            json_path = ".status.authorization.riskTier",
            priority = "1"
        ),
        printcolumn(
            name = "Decision",
            type_ = "string",
            json_path = ".status.authorization.decision"
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
    {"rule": "self == oldSelf", "message": "a ToolCall's spec is immutable: propose a new call instead"}
]))]
pub struct ToolCallSpec {
    /// The tool to call, pinned to the version (digest) the caller saw.
    pub tool_ref: ToolRef,
    /// The authenticated principal (`system:serviceaccount:team-a:fixer`). Set by toolgate
    /// from the caller's identity, never trusted from the caller.
    #[schemars(length(min = 1, max = 512))]
    pub principal: String,
    /// The principal's groups, as its authenticator reported them; ToolGrant subjects of kind
    /// Group match these. Set by toolgate's agent API from the token; a person creating a call
    /// may list only groups they are in (the admission policy checks each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 256)))]
    pub principal_groups: Vec<String>,
    /// Arguments of the call; validated against the tool's input schema before any policy check.
    #[schemars(schema_with = "any_object")]
    pub args: serde_json::Value,
    /// The public reason for the call. Not hidden reasoning: an auditable summary.
    pub intent: CallIntent,
    /// Who proposed the call.
    #[serde(default)]
    pub proposed_by: ProposedBy,
    /// The agent session the call belongs to (for `allowForSession` approvals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub session_id: Option<String>,
    /// The run inside the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub run_id: Option<String>,
    /// A key that makes a retried proposal return the same call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub idempotency_key: Option<String>,
    /// Ask the tool what it would do without doing it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// Set by toolgate on a call a subagent proposes with its delegation token: the delegation
    /// it belongs to. Its grants are the delegator's, limited to the subagent's allowed tools,
    /// and it counts against the delegation's budget. Never trusted from a caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation: Option<CallDelegation>,
}

/// The delegation a subagent's call belongs to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallDelegation {
    /// The delegation call (a call of a subagent tool) in the same namespace.
    #[schemars(length(min = 1, max = 253))]
    pub parent_call: String,
    /// The parent call's principal: the grants the subagent's calls are decided with.
    #[schemars(length(min = 1, max = 512))]
    pub delegator: String,
    /// The delegator's groups, as recorded on the parent call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 256)))]
    pub delegator_groups: Vec<String>,
}

/// A pinned tool reference.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolRef {
    /// ToolDescriptor name in the call's namespace.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub name: String,
    /// The descriptor's content digest the caller saw (`sha256:…`); a different current digest
    /// denies the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub digest: Option<String>,
}

/// Who proposed a call.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProposedBy {
    /// A model, through a tool view.
    #[default]
    Model,
    /// A planner component.
    Planner,
    /// A human.
    User,
    /// toolgate or the platform itself.
    System,
    /// A subagent.
    Subagent,
}

/// The public, auditable reason for a call.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallIntent {
    /// What the user wants overall.
    #[schemars(length(min = 1, max = 2048))]
    pub user_goal: String,
    /// The step this call serves.
    #[schemars(length(min = 1, max = 2048))]
    pub current_task: String,
    /// The kind of action; must be one of the tool's action types.
    pub action_type: ActionType,
    /// What the call acts on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<CallTarget>,
    /// The effects the caller expects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_effects: Option<ExpectedEffects>,
    /// Why this call, in one or two sentences.
    #[schemars(length(min = 1, max = 2048))]
    pub rationale_summary: String,
    /// References to evidence (artifacts of earlier calls, documents).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 2048)))]
    pub evidence_refs: Vec<String>,
    /// The caller's confidence, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub confidence_percent: Option<u8>,
}

/// What a call acts on.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallTarget {
    /// The kind of target.
    pub kind: TargetKind,
    /// The target itself (`src/serializer.ts`, `https://…`).
    #[serde(rename = "ref")]
    #[schemars(length(min = 1, max = 2048))]
    pub ref_: String,
}

/// Kinds of call targets.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// A file.
    File,
    /// A repository.
    Repo,
    /// A URL.
    Url,
    /// An API.
    Api,
    /// A database.
    Database,
    /// A calendar.
    Calendar,
    /// Email.
    Email,
    /// Agent memory.
    Memory,
    /// Another agent.
    Agent,
}

/// Effects the caller expects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExpectedEffects {
    /// Resources expected to be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 2048)))]
    pub reads: Vec<String>,
    /// Resources expected to be written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 2048)))]
    pub writes: Vec<String>,
    /// Whether something outside the sandbox changes.
    #[serde(default)]
    pub external_side_effect: bool,
    /// Whether a user will see the effect.
    #[serde(default)]
    pub user_visible_side_effect: bool,
}

/// Observed state of a ToolCall, written by toolgate only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallStatus {
    /// Where the call is in its life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<CallPhase>,
    /// SHA-256 of the canonical (RFC 8785) args; what an approval binds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub args_digest: Option<String>,
    /// The descriptor digest the call was decided against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub tool_digest: Option<String>,
    /// The policy decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// The grant whose budget this call used when it was authorized; cleared when the unit is
    /// given back (the call ended before it started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_charged: Option<LocalObjectRef>,
    /// Where and as whom the call ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<CallRuntime>,
    /// The result the executor reported, bounded and redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CallResult>,
    /// The `.metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// One condition per step of the causal chain (see `CallConditionType`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Where a call is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CallPhase {
    /// Received, not yet validated and decided.
    Pending,
    /// Waiting for a human approval.
    AwaitingApproval,
    /// Allowed; the sandbox is being prepared.
    Authorized,
    /// Running in its sandbox.
    Running,
    /// Finished and its result recorded.
    Succeeded,
    /// Failed at some step; the conditions say which and why.
    Failed,
    /// Refused by validation or policy.
    Denied,
    /// Cancelled by the caller or an approver.
    Cancelled,
}

/// The policy decision for a call.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Authorization {
    /// `allow`, `requireApproval` or `deny`.
    pub decision: DecisionOutcome,
    /// The computed tier.
    pub risk_tier: RiskTier,
    /// The descriptor's declared risk level.
    pub risk_level: RiskSeverity,
    /// The grant that matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_ref: Option<LocalObjectRef>,
    /// The approval that authorized the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_ref: Option<LocalObjectRef>,
    /// What confirmed an L5 call besides its approval: the second approval, or the dry run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<Confirmation>,
    /// Shadow ToolPolicies that would have forbidden the call (nothing else came of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub shadow_forbids: Vec<PolicyForbid>,
    /// Scopes the tool requires that no grant gave.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_scopes: Vec<String>,
    /// Why, as stable codes with readable messages.
    #[serde(default)]
    pub reasons: Vec<DecisionReason>,
    /// When the decision was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<Timestamp>,
}

/// A Cedar policy of a ToolPolicy that matched a call.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyForbid {
    /// The ToolPolicy.
    pub tool_policy: String,
    /// The policy's id in it (`<ToolPolicy>/<@id or position>`).
    pub policy: String,
    /// What the policy says (`@reason`).
    pub reason: String,
}

/// The second confirmation of an L5 call.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Confirmation {
    /// `dry_run` or `second_approver`.
    pub kind: crate::StrongConfirmation,
    /// The dry-run ToolCall or the second ToolApproval.
    pub name: String,
}

/// Outcome of a policy decision.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum DecisionOutcome {
    /// The call may run.
    Allow,
    /// The call may run after a bound approval.
    RequireApproval,
    /// The call may not run.
    Deny,
}

/// One reason of a decision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionReason {
    /// Stable machine code (`grant-matched`, `missing-scope`).
    #[schemars(length(max = 64))]
    pub code: String,
    /// What a person reads.
    #[schemars(length(max = 2048))]
    pub message: String,
}

/// Where and as whom a call ran. Names only, never values.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallRuntime {
    /// The adapter that ran the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// The sandbox policy applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_policy_ref: Option<LocalObjectRef>,
    /// The credential binding used (by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_binding_ref: Option<LocalObjectRef>,
    /// The pod that ran the call (cluster runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// When the executor started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// When the executor finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
    /// When the call's pod, NetworkPolicy, ConfigMap and Secret were removed after it ended
    /// (cluster runtime): set once, so a later reconcile of the ended call removes nothing again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children_removed_at: Option<Timestamp>,
}

/// The result of a call: bounded, redacted, with references to the full output.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallResult {
    /// `success`, `error`, `partial` or `cancelled`.
    pub status: ResultStatus,
    /// Exit code of the process (cli adapter) or HTTP status (http adapter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// A redacted preview, bounded by the tool's context policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub output_preview: Option<String>,
    /// Structured output validated against the tool's output schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub structured_output: Option<serde_json::Value>,
    /// The full output, stored in the artifact store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub artifacts: Vec<ArtifactRef>,
    /// Effects the executor observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effects_observed: Option<ObservedEffects>,
    /// Verifier checks on the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifier: Option<Verifier>,
    /// The error, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
    /// Resource usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// Status of a result.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResultStatus {
    /// The tool did what was asked.
    Success,
    /// The tool failed.
    Error,
    /// Part of the work was done (output cut, some steps failed).
    Partial,
    /// Cancelled before it finished.
    Cancelled,
}

/// A reference to one stored artifact.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactRef {
    /// Identifier of the artifact, unique within the call.
    #[schemars(length(min = 1, max = 253))]
    pub artifact_id: String,
    /// What the artifact is.
    pub kind: ArtifactKind,
    /// Where it is stored (`s3://bucket/ns/call/stdout`, `file:///…`).
    #[schemars(length(min = 1, max = 2048))]
    pub uri: String,
    /// SHA-256 of the content (`sha256:…`).
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub content_hash: String,
    /// Size in bytes.
    #[schemars(range(min = 0))]
    pub size_bytes: u64,
    /// MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 255))]
    pub content_type: Option<String>,
    /// The event that produced the artifact (invariant 9).
    #[schemars(length(min = 1, max = 253))]
    pub event_id: String,
    /// A one-line summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub summary: Option<String>,
}

/// Kinds of artifacts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactKind {
    /// Tool output (stdout, response body).
    ToolOutput,
    /// A file the tool produced.
    File,
    /// A diff of the workspace.
    Diff,
    /// A screenshot.
    Screenshot,
    /// A log (stderr).
    Log,
    /// A dataset.
    Dataset,
}

/// Effects the executor observed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedEffects {
    /// Resources read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<String>,
    /// Resources created or changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// Resources deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deletes: Vec<String>,
    /// External endpoints called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external_calls: Vec<String>,
    /// Connections the call's egress proxy refused, as `METHOD host:port[/path] (why)`: a name
    /// or address the SandboxPolicy does not allow, a private address behind an allowed name,
    /// an encrypted DNS resolver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_calls: Vec<String>,
}

/// Verifier checks on a result.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Verifier {
    /// Overall verdict.
    pub status: VerifierStatus,
    /// The checks.
    #[serde(default)]
    pub checks: Vec<VerifierCheck>,
}

/// Overall verdict of a verifier.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifierStatus {
    /// Every check passed.
    Passed,
    /// A check failed.
    Failed,
    /// Not verified.
    Skipped,
}

/// One verifier check.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifierCheck {
    /// Name of the check (`exit-code`, `output-schema`).
    pub name: String,
    /// `pass`, `fail` or `warn`.
    pub result: CheckResult,
    /// Details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Result of one verifier check.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckResult {
    /// Passed.
    Pass,
    /// Failed.
    Fail,
    /// Passed with a warning.
    Warn,
}

/// An error of a call.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallError {
    /// Stable machine code (`timeout`, `exit-nonzero`).
    pub code: String,
    /// Redacted message.
    #[schemars(length(max = 2048))]
    pub message: String,
    /// Whether a retry may succeed.
    pub retryable: bool,
    /// Whether the message may be shown to the end user.
    #[serde(default)]
    pub safe_to_show_user: bool,
}

/// Resource usage of a call.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Wall-clock time, in milliseconds.
    pub latency_ms: u64,
    /// Bytes of output produced.
    #[serde(default)]
    pub output_bytes: u64,
    /// Tokens the preview adds to the model's context (estimate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_added_to_context: Option<u64>,
    /// How long the tool waited for its pod's NetworkPolicy to be in force before it started
    /// (the executor's egress gate), in milliseconds; absent when no gate applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_gate_ms: Option<u64>,
}
