//! ToolApproval: a human's decision bound to exactly what it was shown.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, LocalObjectRef, RiskTier, Timestamp};

/// An approval contract: the call, the digest of the args shown, the tool version, the risk and
/// scopes shown, the principal, an expiry and the decision. Any change to what it binds voids
/// it. Agents may not create these (RBAC).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(
        group = "toolgate.dev",
        version = "v1alpha1",
        kind = "ToolApproval",
        namespaced,
        status = "ToolApprovalStatus",
        shortname = "ta",
        category = "toolgate",
        doc = "A human's approval or denial of one ToolCall, bound to the args digest, tool digest, risk and scopes it was shown.",
        printcolumn(name = "Call", type_ = "string", json_path = ".spec.callRef.name"),
        printcolumn(name = "Decision", type_ = "string", json_path = ".spec.decision"),
        printcolumn(
            name = "Approver",
            type_ = "string",
            json_path = ".spec.approver",
            priority = "1"
        ),
        printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
        printcolumn(name = "Expires", type_ = "string", json_path = ".spec.expiresAt"),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        ),
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self == oldSelf", "message": "a ToolApproval's spec is immutable: create a new approval instead"},
    {"rule": "self.approver != self.principal", "message": "an approver may not approve their own call (approver equals principal)", "fieldPath": ".approver"},
    {"rule": "self.decision != 'allowForSession' || has(self.sessionId)", "message": "allowForSession needs the sessionId it is valid for", "fieldPath": ".sessionId"}
]))]
pub struct ToolApprovalSpec {
    /// The call approved.
    pub call_ref: LocalObjectRef,
    /// SHA-256 of the canonical args the approver was shown (`sha256:…`).
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub args_digest: String,
    /// Digest of the tool version the approver was shown.
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub tool_digest: String,
    /// The risk tier the approver was shown.
    pub risk_tier: RiskTier,
    /// The scopes the approver was shown.
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(min = 1, max = 128)))]
    pub scopes: Vec<String>,
    /// The call's principal.
    #[schemars(length(min = 1, max = 512))]
    pub principal: String,
    /// Who decided. Set by toolgate from the approver's identity.
    #[schemars(length(min = 1, max = 512))]
    pub approver: String,
    /// `allowOnce`, `allowForSession` or `deny`.
    pub decision: ApprovalDecision,
    /// The session an `allowForSession` approval covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub session_id: Option<String>,
    /// After this time the approval is void.
    pub expires_at: Timestamp,
    /// A note from the approver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub comment: Option<String>,
}

/// An approver's decision.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ApprovalDecision {
    /// Run this call once.
    AllowOnce,
    /// Run calls with the same args digest and tool version in this session.
    AllowForSession,
    /// Do not run the call.
    Deny,
}

/// Observed state of a ToolApproval.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolApprovalStatus {
    /// `Pending`, `Bound` (matches its call), `Consumed`, `Voided` or `Expired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ApprovalState>,
    /// Why the approval was voided (`args-digest-changed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub void_reason: Option<String>,
    /// The `.metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (`Bound`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// State of an approval.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ApprovalState {
    /// Not checked yet.
    Pending,
    /// Matches its call and is usable.
    Bound,
    /// Used by the call it approved (allowOnce).
    Consumed,
    /// Something it binds changed.
    Voided,
    /// Past its expiry.
    Expired,
}
