//! ToolGrant: who may use which tools, with which scopes, budget and expiry.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{ActionType, Condition, RiskSeverity, RiskTier, Timestamp};

/// Grants subjects the use of tools, by name or by selector, with scopes, a budget, a validity
/// window and an approval override. Grants only widen within what the tool's descriptor allows.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(
        group = "toolgate.dev",
        version = "v1alpha1",
        kind = "ToolGrant",
        namespaced,
        status = "ToolGrantStatus",
        shortname = "tg",
        category = "toolgate",
        doc = "Grants principals (service accounts, users, groups) the use of tools with scopes, a budget and an expiry.",
        printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
        printcolumn(name = "Expires", type_ = "string", json_path = ".spec.expiresAt"),
        printcolumn(name = "Used", type_ = "integer", json_path = ".status.callsUsed"),
        printcolumn(name = "Limit", type_ = "integer", json_path = ".spec.budget.maxCalls"),
        printcolumn(
            name = "Hourly",
            type_ = "integer",
            json_path = ".spec.budget.maxCallsPerHour"
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
        "rule": "!has(self.notBefore) || !has(self.expiresAt) || self.expiresAt > self.notBefore",
        "message": "expiresAt must be after notBefore",
        "fieldPath": ".expiresAt"
    },
    {
        "rule": "size(self.tools.names) > 0 || has(self.tools.selector)",
        "message": "a grant must name tools (tools.names) or select them (tools.selector)",
        "fieldPath": ".tools"
    }
]))]
pub struct ToolGrantSpec {
    /// Who the grant is for.
    #[schemars(length(min = 1, max = 64))]
    pub subjects: Vec<Subject>,
    /// Which tools the grant covers.
    pub tools: ToolSelection,
    /// Scopes the grant gives its subjects for the covered tools.
    #[serde(default)]
    #[schemars(
        length(max = 64),
        inner(
            length(min = 1, max = 128),
            regex(pattern = r"^[a-z0-9][a-z0-9:._*/-]*$")
        )
    )]
    pub scopes: Vec<String>,
    /// Call budget; no budget means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// The grant is not valid before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Timestamp>,
    /// The grant is not valid from this time on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
    /// How the grant changes the approval a tool's risk calls for. Never waives approval for a
    /// tool whose descriptor says `always`.
    #[serde(default)]
    pub approval: ApprovalOverride,
    /// Revokes the grant at once; status says since when.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revoked: bool,
    /// Why the grant exists or was revoked (for reviewers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
}

/// A principal a grant is for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// The kind of principal.
    pub kind: SubjectKind,
    /// The name: a service account name, a user name or a group name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of a ServiceAccount; defaults to the grant's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

/// The kind of principal.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SubjectKind {
    /// A Kubernetes service account (`system:serviceaccount:<ns>:<name>`).
    ServiceAccount,
    /// A user as authenticated by the API server or the local runtime.
    User,
    /// A group of users.
    Group,
}

/// Which tools a grant covers: named ones, selected ones, or both.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolSelection {
    /// ToolDescriptor names (in the grant's namespace).
    #[serde(default)]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub names: Vec<String>,
    /// Tools selected by action type, risk or labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ToolSelector>,
}

/// Selects tools by action type, risk and labels. All given criteria must match.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolSelector {
    /// A tool matches if every one of its action types is in this list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 18))]
    pub action_types: Vec<ActionType>,
    /// A tool matches if its declared risk level is at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_risk: Option<RiskSeverity>,
    /// A tool matches if its computed tier is at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tier: Option<RiskTier>,
    /// A tool matches if its descriptor carries all these labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}

/// A call budget.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// Calls allowed over the grant's lifetime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_calls: Option<u64>,
    /// Calls allowed in any rolling hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_calls_per_hour: Option<u64>,
}

/// How a grant changes the approval a tool's risk calls for.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalOverride {
    /// `default` keeps the tier defaults, `always` asks for every call, `waive` skips the
    /// approval the tier would ask for (never for a descriptor whose policy is `always`).
    #[serde(default)]
    pub mode: ApprovalOverrideMode,
    /// With `waive`: the highest tier whose approval is waived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_waived_tier: Option<RiskTier>,
}

/// The approval override mode of a grant.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ApprovalOverrideMode {
    /// The tier defaults apply.
    #[default]
    Default,
    /// Every call needs approval.
    Always,
    /// Approval the tier calls for is waived, up to `maxWaivedTier`.
    Waive,
}

/// Observed state of a ToolGrant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolGrantStatus {
    /// `Pending` (before notBefore), `Active`, `Expired`, `Revoked` or `Exhausted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<GrantState>,
    /// Calls counted against the budget: every call authorized under this grant, less those
    /// that ended before they started (their unit is given back).
    #[serde(default)]
    pub calls_used: u64,
    /// Calls authorized in each of the last 60 minutes (the rolling hour of
    /// `budget.maxCallsPerHour`), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 60))]
    pub hourly: Vec<MinuteCount>,
    /// The calls charged most recently, so a charge repeated after a restart is not counted
    /// twice, and a refund finds its minute (the last 1,000).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub recent_charges: Vec<BudgetCharge>,
    /// The `.metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (`Active`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Calls authorized in one minute.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MinuteCount {
    /// Minutes since the Unix epoch.
    pub minute: i64,
    /// Calls authorized in it.
    pub calls: u64,
}

/// A call charged to a grant's budget.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetCharge {
    /// The call (`namespace/name` on a cluster, its id locally).
    #[schemars(length(min = 1, max = 320))]
    pub call: String,
    /// The minute it was charged in (minutes since the Unix epoch).
    pub minute: i64,
}

/// State of a grant.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum GrantState {
    /// Not valid yet.
    Pending,
    /// Valid.
    Active,
    /// Past its expiry.
    Expired,
    /// Revoked.
    Revoked,
    /// Budget used up.
    Exhausted,
}
