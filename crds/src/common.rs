//! Types shared by several kinds: references, action types, risk, conditions, timestamps.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// A reference to another toolgate object in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectRef {
    /// Name of the referenced object, in the namespace of the referring object.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub name: String,
}

/// The action taxonomy: what kind of thing a tool does. Drives risk and approval.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ActionType {
    /// Read data without side effects.
    Read,
    /// Search or list.
    Search,
    /// Inspect state (status, metadata).
    Inspect,
    /// Local computation without writing the workspace.
    Compute,
    /// Transform data in memory.
    Transform,
    /// Generate content.
    Generate,
    /// Write or create files or records.
    Write,
    /// Modify existing content in place.
    Patch,
    /// Run a program.
    Execute,
    /// Deploy to an environment.
    Deploy,
    /// Send information to an external system (issue, message, email).
    ExternalSend,
    /// Spend money.
    Purchase,
    /// Delete data.
    Delete,
    /// Change permissions or administer a system.
    Admin,
    /// Authentication flows. Never handles a secret in the model's view.
    Auth,
    /// Read agent memory.
    MemoryRead,
    /// Write agent memory.
    MemoryWrite,
    /// Delegate to a subagent.
    SubagentDelegate,
}

impl ActionType {
    /// Every action type, in declaration order.
    pub const ALL: [ActionType; 18] = [
        ActionType::Read,
        ActionType::Search,
        ActionType::Inspect,
        ActionType::Compute,
        ActionType::Transform,
        ActionType::Generate,
        ActionType::Write,
        ActionType::Patch,
        ActionType::Execute,
        ActionType::Deploy,
        ActionType::ExternalSend,
        ActionType::Purchase,
        ActionType::Delete,
        ActionType::Admin,
        ActionType::Auth,
        ActionType::MemoryRead,
        ActionType::MemoryWrite,
        ActionType::SubagentDelegate,
    ];

    /// The wire name (`external_send`).
    pub fn as_str(self) -> &'static str {
        match self {
            ActionType::Read => "read",
            ActionType::Search => "search",
            ActionType::Inspect => "inspect",
            ActionType::Compute => "compute",
            ActionType::Transform => "transform",
            ActionType::Generate => "generate",
            ActionType::Write => "write",
            ActionType::Patch => "patch",
            ActionType::Execute => "execute",
            ActionType::Deploy => "deploy",
            ActionType::ExternalSend => "external_send",
            ActionType::Purchase => "purchase",
            ActionType::Delete => "delete",
            ActionType::Admin => "admin",
            ActionType::Auth => "auth",
            ActionType::MemoryRead => "memory_read",
            ActionType::MemoryWrite => "memory_write",
            ActionType::SubagentDelegate => "subagent_delegate",
        }
    }
}

impl fmt::Display for ActionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The severity a descriptor declares (`risk.level`).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RiskSeverity {
    /// Reads and local computation.
    Low,
    /// Workspace writes and external reads.
    Medium,
    /// External writes.
    High,
    /// Destructive, admin, deploy or purchase.
    Critical,
}

impl RiskSeverity {
    /// The wire name (`medium`).
    pub fn as_str(self) -> &'static str {
        match self {
            RiskSeverity::Low => "low",
            RiskSeverity::Medium => "medium",
            RiskSeverity::High => "high",
            RiskSeverity::Critical => "critical",
        }
    }
}

impl fmt::Display for RiskSeverity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The permission tier (L0 pure read … L5 destructive or admin), computed by toolgate from action
/// types and effects.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum RiskTier {
    /// Pure read, no side effect.
    L0,
    /// Local compute, no workspace write.
    L1,
    /// Workspace write.
    L2,
    /// External read.
    L3,
    /// External write.
    L4,
    /// Destructive, admin, deploy or purchase.
    L5,
}

impl RiskTier {
    /// The wire name (`L4`).
    pub fn as_str(self) -> &'static str {
        match self {
            RiskTier::L0 => "L0",
            RiskTier::L1 => "L1",
            RiskTier::L2 => "L2",
            RiskTier::L3 => "L3",
            RiskTier::L4 => "L4",
            RiskTier::L5 => "L5",
        }
    }

    /// A short human label (`external write`).
    pub fn label(self) -> &'static str {
        match self {
            RiskTier::L0 => "pure read",
            RiskTier::L1 => "local compute",
            RiskTier::L2 => "workspace write",
            RiskTier::L3 => "external read",
            RiskTier::L4 => "external write",
            RiskTier::L5 => "destructive/admin",
        }
    }
}

impl fmt::Display for RiskTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Status of a condition, as in Kubernetes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known yet.
    Unknown,
}

impl ConditionStatus {
    /// As it is written in a status (`True`, `False`, `Unknown`).
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// A status condition in the standard Kubernetes form.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition; for a ToolCall, one step of the causal chain (`ArgsValidated`).
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316), regex(pattern = r"^[A-Za-z][A-Za-z0-9]*$"))]
    pub type_: String,
    /// Whether the condition holds: True, False or Unknown.
    pub status: ConditionStatus,
    /// A CamelCase machine-readable reason for the last transition (`SchemaOk`).
    #[schemars(
        length(min = 1, max = 1024),
        regex(pattern = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    )]
    pub reason: String,
    /// A human-readable explanation of the last transition. Never carries a credential.
    #[serde(default)]
    #[schemars(length(max = 32768))]
    pub message: String,
    /// When the condition last changed status.
    pub last_transition_time: Timestamp,
    /// The `.metadata.generation` this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
}

/// An RFC 3339 timestamp (`2026-11-30T05:29:21Z`). Parsed, so a bad value is an error.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(transparent)]
pub struct Timestamp(pub jiff::Timestamp);

impl JsonSchema for Timestamp {
    fn schema_name() -> Cow<'static, str> {
        "Timestamp".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "format": "date-time"})
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A schema for a field that holds arbitrary JSON (args, JSON Schemas, structured output).
pub(crate) fn any_json(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}

/// A schema for a field that holds an arbitrary JSON object.
pub(crate) fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// A schema for an optional field that holds an arbitrary JSON object.
pub(crate) fn any_object_opt(g: &mut SchemaGenerator) -> Schema {
    any_object(g)
}

/// `^sha256:<64 hex>$`: the digest form used for tool versions and args.
pub const DIGEST_PATTERN: &str = r"^sha256:[a-f0-9]{64}$";
