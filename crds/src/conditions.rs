//! Condition types and reasons, in one place so every runtime tells the same story, and the one
//! helper that sets a condition.

use crate::{Condition, ConditionStatus, Timestamp};

/// The causal chain of one call (DESIGN.md), in order. Each is a ToolCall condition type and an
/// event reason.
pub const CALL_CHAIN: [&str; 12] = [
    TOOL_CALL_REQUESTED,
    ARGS_VALIDATED,
    POLICY_CHECKED,
    APPROVAL_REQUESTED,
    APPROVAL_GRANTED,
    SANDBOX_PREPARED,
    CREDENTIALS_BOUND,
    STARTED,
    FINISHED,
    RESULT_VALIDATED,
    ARTIFACT_PERSISTED,
    STATE_UPDATED,
];

/// The call was received and recorded.
pub const TOOL_CALL_REQUESTED: &str = "ToolCallRequested";
/// The args satisfied the tool's input schema.
pub const ARGS_VALIDATED: &str = "ArgsValidated";
/// The policy decided.
pub const POLICY_CHECKED: &str = "PolicyChecked";
/// A human approval was requested.
pub const APPROVAL_REQUESTED: &str = "ApprovalRequested";
/// A bound approval was granted.
pub const APPROVAL_GRANTED: &str = "ApprovalGranted";
/// The sandbox was resolved and prepared.
pub const SANDBOX_PREPARED: &str = "SandboxPrepared";
/// The credential was brokered into the sandbox.
pub const CREDENTIALS_BOUND: &str = "CredentialsBound";
/// The executor started.
pub const STARTED: &str = "Started";
/// The executor finished.
pub const FINISHED: &str = "Finished";
/// The result passed its verifier.
pub const RESULT_VALIDATED: &str = "ResultValidated";
/// The full output was stored.
pub const ARTIFACT_PERSISTED: &str = "ArtifactPersisted";
/// toolgate recorded the final state.
pub const STATE_UPDATED: &str = "StateUpdated";
/// The call was cancelled (outside the chain: it can end the call at any step).
pub const CANCELLED: &str = "Cancelled";
/// The call's leased credential was revoked in its broker once the call ended (outside the
/// chain: set after the end, `False` while a revocation is being retried).
pub const CREDENTIALS_REVOKED: &str = "CredentialsRevoked";

/// Ready condition of policies and bindings.
pub const READY: &str = "Ready";
/// Active condition of grants.
pub const ACTIVE: &str = "Active";

/// Every reason a toolgate condition gives, by the condition it belongs to. Nothing else spells
/// one; a reason derived from a decision's code (`grant-matched` → `GrantMatched`) is made by
/// `toolgate_core::lifecycle::camel`.
pub mod reason {
    // ToolCallRequested
    /// The call was received and recorded.
    pub const ACCEPTED: &str = "Accepted";

    // ArgsValidated
    /// The args match the input schema.
    pub const SCHEMA_OK: &str = "SchemaOk";
    /// The args break the input schema.
    pub const ARGS_INVALID: &str = "ArgsInvalid";

    // PolicyChecked
    /// The policy allows the call.
    pub const ALLOWED: &str = "Allowed";
    /// The policy allows the call once a human approves it.
    pub const APPROVAL_REQUIRED: &str = "ApprovalRequired";

    // ApprovalRequested
    /// Waiting for a bound approval.
    pub const AWAITING_APPROVAL: &str = "AwaitingApproval";
    /// The tool's descriptor changed while the call waited.
    pub const TOOL_CHANGED: &str = "ToolChanged";

    // ApprovalGranted
    /// A bound approval was given.
    pub const APPROVED: &str = "Approved";
    /// An approver denied the call.
    pub const DENIED_BY_APPROVER: &str = "DeniedByApprover";
    /// An L5 call is approved once and waits for its second confirmation (a second approver or
    /// a dry run, as its tool asks).
    pub const AWAITING_CONFIRMATION: &str = "AwaitingConfirmation";

    // SandboxPrepared
    /// The sandbox policy resolved into a sandbox (a pod or a local sandbox).
    pub const RESOLVED: &str = "Resolved";
    /// The sandbox policy cannot be honoured here.
    pub const SANDBOX_REFUSED: &str = "SandboxRefused";
    /// The runtime could not set the sandbox up (files, folders).
    pub const SANDBOX_SETUP_FAILED: &str = "SandboxSetupFailed";
    /// The tool names no sandbox policy, or the policy does not exist.
    pub const SANDBOX_POLICY_MISSING: &str = "SandboxPolicyMissing";
    /// The tool is gone.
    pub const TOOL_MISSING: &str = "ToolMissing";
    /// The workspace PersistentVolumeClaim the policy names does not exist.
    pub const WORKSPACE_CLAIM_MISSING: &str = "WorkspaceClaimMissing";
    /// The RuntimeClass the policy names does not exist.
    pub const RUNTIME_CLASS_MISSING: &str = "RuntimeClassMissing";

    // CredentialsBound
    /// The tool uses no credential.
    pub const NOT_REQUIRED: &str = "NotRequired";
    /// The credential was brokered into the sandbox.
    pub const BROKERED: &str = "Brokered";
    /// The broker could not issue the credential.
    pub const BROKER_FAILED: &str = "BrokerFailed";
    /// The broker (Vault) could not be reached, is sealed or did not answer in time; nothing
    /// was started (also on Ready of a binding and on CredentialsRevoked).
    pub const BROKER_UNAVAILABLE: &str = "BrokerUnavailable";
    /// The broker refused: a path the broker's identity may not read, or a login refused (also
    /// on Ready of a binding and on CredentialsRevoked).
    pub const BROKER_FORBIDDEN: &str = "BrokerForbidden";
    /// The credential binding does not exist.
    pub const BINDING_MISSING: &str = "BindingMissing";

    // CredentialsRevoked
    /// The lease of the call's credential was revoked.
    pub const LEASE_REVOKED: &str = "LeaseRevoked";
    /// Revoking the lease failed; it is retried with backoff.
    pub const REVOKE_FAILED: &str = "RevokeFailed";

    // Started
    /// The executor was started (in the local sandbox, or its pod was created).
    pub const EXECUTOR_STARTED: &str = "ExecutorStarted";
    /// A delegation: no sandbox of its own; its subagent acts with a token scoped to it.
    pub const DELEGATED: &str = "Delegated";
    /// toolgate stopped while the call ran (also on Finished).
    pub const INTERRUPTED: &str = "Interrupted";

    // Finished
    /// The tool ended well.
    pub const COMPLETED: &str = "Completed";
    /// The tool ended with an error.
    pub const TOOL_FAILED: &str = "ToolFailed";
    /// The executor gave no result.
    pub const EXECUTOR_FAILED: &str = "ExecutorFailed";
    /// The call's pod disappeared before it reported.
    pub const POD_MISSING: &str = "PodMissing";

    // ResultValidated
    /// The verifier checks passed.
    pub const VERIFIED: &str = "Verified";
    /// A verifier check failed.
    pub const VERIFIER_FAILED: &str = "VerifierFailed";
    /// No verifier; the result fits its bounds.
    pub const BOUNDED: &str = "Bounded";

    // ArtifactPersisted
    /// The full output was stored.
    pub const STORED: &str = "Stored";
    /// There was no output to store.
    pub const NO_ARTIFACTS: &str = "NoArtifacts";

    // StateUpdated
    /// The call succeeded.
    pub const SUCCEEDED: &str = "Succeeded";
    /// The call failed.
    pub const FAILED: &str = "Failed";
    /// The call was denied.
    pub const DENIED: &str = "Denied";

    // Cancelled
    /// Someone cancelled the call.
    pub const CANCELLED_BY_USER: &str = "CancelledByUser";

    // Ready (SandboxPolicy, CredentialBinding)
    /// The object is usable.
    pub const VALID: &str = "Valid";
    /// The binding's broker answers for it.
    pub const BROKERABLE: &str = "Brokerable";

    // Ready (ToolPolicy)
    /// Every policy parses, forbids and type-checks against the namespace's tools.
    pub const COMPILED: &str = "Compiled";
    /// A policy does not compile; the calls it names are refused until it is fixed (enforce).
    pub const POLICY_INVALID: &str = "PolicyInvalid";
    /// A shadow ToolPolicy would have forbidden a call (an Event on the call).
    pub const SHADOW_FORBID: &str = "ShadowForbid";

    // Active (ToolGrant)
    /// The grant is in force.
    pub const ACTIVE: &str = "Active";
    /// The grant's window has not begun.
    pub const NOT_YET_VALID: &str = "NotYetValid";
    /// The grant's window has ended.
    pub const EXPIRED: &str = "Expired";
    /// The grant was revoked.
    pub const REVOKED: &str = "Revoked";
    /// The grant's budget is spent (also on PolicyChecked or ApprovalGranted of a call refused
    /// for it).
    pub const BUDGET_EXHAUSTED: &str = "BudgetExhausted";
}

/// Set a condition in a list, by type: its transition time is kept while its status stays the
/// same (a reconcile that finds nothing new does not churn), and changes when the status flips.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(c) => {
            let kept = (c.status == new.status).then_some(c.last_transition_time);
            *c = new;
            if let Some(t) = kept {
                c.last_transition_time = t;
            }
        }
        None => conditions.push(new),
    }
}

/// A condition as of `now`, for [`set_condition`].
pub fn condition(
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
    now: Timestamp,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message: message.into(),
        last_transition_time: now,
        observed_generation: generation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_time_changes_only_when_the_status_flips() {
        let t0 = Timestamp("2026-11-30T00:00:00Z".parse().expect("t0"));
        let t1 = Timestamp("2026-11-30T00:01:00Z".parse().expect("t1"));
        let mut list = Vec::new();
        set_condition(
            &mut list,
            condition(
                READY,
                ConditionStatus::True,
                reason::VALID,
                "ok",
                t0,
                Some(1),
            ),
        );
        set_condition(
            &mut list,
            condition(
                READY,
                ConditionStatus::True,
                reason::VALID,
                "again",
                t1,
                Some(2),
            ),
        );
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].last_transition_time, t0);
        assert_eq!(list[0].message, "again");
        assert_eq!(list[0].observed_generation, Some(2));
        set_condition(
            &mut list,
            condition(
                READY,
                ConditionStatus::False,
                reason::BROKER_FAILED,
                "no",
                t1,
                Some(2),
            ),
        );
        assert_eq!(list[0].last_transition_time, t1);
    }
}
