//! ToolPolicy: rules over the arguments of calls, in Cedar, that can only narrow what grants
//! allow.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::Condition;

/// Cedar `forbid` policies a platform team writes over who calls (principal: a ServiceAccount or
/// User, in its Groups), what (action: the tool, `Action::"github.create-issue"`), on what
/// (resource: the intent's Target) and with which args (`context.args`, typed from the tool's
/// input schema; also `context.riskTier`, `context.actionType`, `context.dryRun`,
/// `context.namespace`, `context.time`). Evaluated after the built-in rules: a matching forbid
/// denies the call (enforce) or is only recorded (shadow). Never widens a grant.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(
        group = "toolgate.dev",
        version = "v1alpha1",
        kind = "ToolPolicy",
        namespaced,
        status = "ToolPolicyStatus",
        shortname = "tp",
        category = "toolgate",
        doc = "Cedar forbid policies over a call's principal, tool, target and typed args; they narrow what grants allow (enforce) or record what they would have refused (shadow).",
        printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
        printcolumn(name = "Policies", type_ = "integer", json_path = ".status.policies"),
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
        "rule": "self.policies.trim().size() > 0",
        "message": "a ToolPolicy needs at least one Cedar policy (spec.policies)",
        "fieldPath": ".policies"
    }
]))]
pub struct ToolPolicySpec {
    /// `enforce` (a matching forbid denies the call) or `shadow` (it is recorded on the call, as
    /// an Event and a metric, and nothing else changes: try a policy on live traffic first).
    #[serde(default)]
    pub mode: PolicyMode,
    /// What the policies are for, for reviewers.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024))]
    pub description: String,
    /// Cedar policies, `forbid` only (a grant is what permits). `@id("…")` names a policy and
    /// `@reason("…")` is what a denied caller reads.
    #[schemars(length(min = 1, max = 262144))]
    pub policies: String,
}

/// Whether a ToolPolicy acts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicyMode {
    /// A matching forbid denies the call.
    #[default]
    Enforce,
    /// A matching forbid is recorded, nothing else.
    Shadow,
}

impl PolicyMode {
    /// The name in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyMode::Enforce => "enforce",
            PolicyMode::Shadow => "shadow",
        }
    }
}

/// Observed state of a ToolPolicy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolPolicyStatus {
    /// How many Cedar policies it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policies: Option<u32>,
    /// The `.metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (`Ready`: the policies parse and type-check against the namespace's tools).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
