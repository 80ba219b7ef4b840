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

/// A documented name: a condition type, or a reason and the conditions it is given on. The
/// tables below are what the generated reference (`docs/reference/conditions.md`) lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Documented {
    /// The name as it appears in a status.
    pub name: &'static str,
    /// For a reason, the condition (or conditions) it is given on; empty for a type.
    pub on: &'static str,
    /// What it means (the constant's doc comment).
    pub doc: &'static str,
}

/// Declares each constant with its doc comment and lists them all, with the comment, in `ALL`.
macro_rules! documented {
    ($vis:vis const $all:ident; $( $(#[doc = $doc:literal])* $name:ident = $value:literal; )*) => {
        $( $(#[doc = $doc])* pub const $name: &str = $value; )*
        /// Every constant above, with its doc comment.
        $vis const $all: &[Documented] = &[
            $( Documented { name: $value, on: "", doc: concat!($($doc, "\n"),*) }, )*
        ];
    };
    ($vis:vis const $all:ident; $( $on:literal { $( $(#[doc = $doc:literal])* $name:ident = $value:literal; )* } )*) => {
        $( $( $(#[doc = $doc])* pub const $name: &str = $value; )* )*
        /// Every reason above, with the condition it is given on and its doc comment.
        $vis const $all: &[Documented] = &[
            $( $( Documented { name: $value, on: $on, doc: concat!($($doc, "\n"),*) }, )* )*
        ];
    };
}

documented! {
    pub const CONDITION_TYPES;
    /// The call was received and recorded.
    TOOL_CALL_REQUESTED = "ToolCallRequested";
    /// The args satisfied the tool's input schema.
    ARGS_VALIDATED = "ArgsValidated";
    /// The policy decided.
    POLICY_CHECKED = "PolicyChecked";
    /// A human approval was requested.
    APPROVAL_REQUESTED = "ApprovalRequested";
    /// A bound approval was granted.
    APPROVAL_GRANTED = "ApprovalGranted";
    /// The sandbox was resolved and prepared.
    SANDBOX_PREPARED = "SandboxPrepared";
    /// The credential was brokered into the sandbox.
    CREDENTIALS_BOUND = "CredentialsBound";
    /// The executor started.
    STARTED = "Started";
    /// The executor finished.
    FINISHED = "Finished";
    /// The result passed its verifier.
    RESULT_VALIDATED = "ResultValidated";
    /// The full output was stored.
    ARTIFACT_PERSISTED = "ArtifactPersisted";
    /// toolgate recorded the final state.
    STATE_UPDATED = "StateUpdated";
    /// The call was cancelled (outside the chain: it can end the call at any step).
    CANCELLED = "Cancelled";
    /// The call's leased credential was revoked in its broker once the call ended (outside the
    /// chain: set after the end, `False` while a revocation is being retried).
    CREDENTIALS_REVOKED = "CredentialsRevoked";
    /// Ready condition of policies and bindings.
    READY = "Ready";
    /// Active condition of grants.
    ACTIVE = "Active";
}

/// Every reason a toolgate condition gives, by the condition it belongs to. Nothing else spells
/// one; a reason derived from a decision's code (`grant-matched` → `GrantMatched`) is made by
/// `toolgate_core::lifecycle::camel`.
pub mod reason {
    use super::Documented;

    documented! {
        pub const ALL;
        "ToolCallRequested" {
            /// The call was received and recorded.
            ACCEPTED = "Accepted";
        }
        "ArgsValidated" {
            /// The args match the input schema.
            SCHEMA_OK = "SchemaOk";
            /// The args break the input schema.
            ARGS_INVALID = "ArgsInvalid";
        }
        "PolicyChecked" {
            /// The policy allows the call.
            ALLOWED = "Allowed";
            /// The policy allows the call once a human approves it.
            APPROVAL_REQUIRED = "ApprovalRequired";
        }
        "ApprovalRequested" {
            /// Waiting for a bound approval.
            AWAITING_APPROVAL = "AwaitingApproval";
            /// The tool's descriptor changed while the call waited.
            TOOL_CHANGED = "ToolChanged";
        }
        "ApprovalGranted" {
            /// A bound approval was given.
            APPROVED = "Approved";
            /// An approver denied the call.
            DENIED_BY_APPROVER = "DeniedByApprover";
            /// An L5 call is approved once and waits for its second confirmation (a second approver or
            /// a dry run, as its tool asks).
            AWAITING_CONFIRMATION = "AwaitingConfirmation";
        }
        "SandboxPrepared" {
            /// The sandbox policy resolved into a sandbox (a pod or a local sandbox).
            RESOLVED = "Resolved";
            /// The sandbox policy cannot be honoured here.
            SANDBOX_REFUSED = "SandboxRefused";
            /// The runtime could not set the sandbox up (files, folders).
            SANDBOX_SETUP_FAILED = "SandboxSetupFailed";
            /// The tool names no sandbox policy, or the policy does not exist.
            SANDBOX_POLICY_MISSING = "SandboxPolicyMissing";
            /// The tool is gone.
            TOOL_MISSING = "ToolMissing";
            /// The workspace PersistentVolumeClaim the policy names does not exist.
            WORKSPACE_CLAIM_MISSING = "WorkspaceClaimMissing";
            /// The RuntimeClass the policy names does not exist.
            RUNTIME_CLASS_MISSING = "RuntimeClassMissing";
        }
        "CredentialsBound" {
            /// The tool uses no credential.
            NOT_REQUIRED = "NotRequired";
            /// The credential was brokered into the sandbox.
            BROKERED = "Brokered";
            /// The broker could not issue the credential.
            BROKER_FAILED = "BrokerFailed";
            /// The broker (Vault) could not be reached, is sealed or did not answer in time; nothing
            /// was started (also on Ready of a binding and on CredentialsRevoked).
            BROKER_UNAVAILABLE = "BrokerUnavailable";
            /// The broker refused: a path the broker's identity may not read, or a login refused (also
            /// on Ready of a binding and on CredentialsRevoked).
            BROKER_FORBIDDEN = "BrokerForbidden";
            /// The credential binding does not exist.
            BINDING_MISSING = "BindingMissing";
            /// The binding's delivery mode cannot be honoured for this call: `proxy` on an
            /// operator started without an egress proxy (`--egress-proxy-address`). Nothing was
            /// issued.
            DELIVERY_UNSUPPORTED = "DeliveryUnsupported";
        }
        "CredentialsRevoked" {
            /// The lease of the call's credential was revoked.
            LEASE_REVOKED = "LeaseRevoked";
            /// Revoking the lease failed; it is retried with backoff.
            REVOKE_FAILED = "RevokeFailed";
        }
        "Started" {
            /// The executor was started (in the local sandbox, or its pod was created).
            EXECUTOR_STARTED = "ExecutorStarted";
            /// A delegation: no sandbox of its own; its subagent acts with a token scoped to it.
            DELEGATED = "Delegated";
            /// toolgate stopped while the call ran (also on Finished).
            INTERRUPTED = "Interrupted";
        }
        "Finished" {
            /// The tool ended well.
            COMPLETED = "Completed";
            /// The tool ended with an error.
            TOOL_FAILED = "ToolFailed";
            /// The executor gave no result.
            EXECUTOR_FAILED = "ExecutorFailed";
            /// The call's pod disappeared before it reported.
            POD_MISSING = "PodMissing";
        }
        "ResultValidated" {
            /// The verifier checks passed.
            VERIFIED = "Verified";
            /// A verifier check failed.
            VERIFIER_FAILED = "VerifierFailed";
            /// No verifier; the result fits its bounds.
            BOUNDED = "Bounded";
        }
        "ArtifactPersisted" {
            /// The full output was stored.
            STORED = "Stored";
            /// There was no output to store.
            NO_ARTIFACTS = "NoArtifacts";
        }
        "StateUpdated" {
            /// The call succeeded.
            SUCCEEDED = "Succeeded";
            /// The call failed.
            FAILED = "Failed";
            /// The call was denied.
            DENIED = "Denied";
        }
        "Cancelled" {
            /// Someone cancelled the call.
            CANCELLED_BY_USER = "CancelledByUser";
        }
        "Ready (SandboxPolicy, CredentialBinding)" {
            /// The object is usable.
            VALID = "Valid";
            /// The binding's broker answers for it.
            BROKERABLE = "Brokerable";
        }
        "Ready (ToolPolicy)" {
            /// Every policy parses, forbids and type-checks against the namespace's tools.
            COMPILED = "Compiled";
            /// A policy does not compile; the calls it names are refused until it is fixed (enforce).
            POLICY_INVALID = "PolicyInvalid";
            /// A shadow ToolPolicy would have forbidden a call (an Event on the call).
            SHADOW_FORBID = "ShadowForbid";
        }
        "Active (ToolGrant)" {
            /// The grant is in force.
            ACTIVE = "Active";
            /// The grant's window has not begun.
            NOT_YET_VALID = "NotYetValid";
            /// The grant's window has ended.
            EXPIRED = "Expired";
            /// The grant was revoked.
            REVOKED = "Revoked";
            /// The grant's budget is spent (also on PolicyChecked or ApprovalGranted of a call refused
            /// for it).
            BUDGET_EXHAUSTED = "BudgetExhausted";
        }
    }
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

/// When the condition of `type_` last changed, if the object has it: what the metrics and
/// traces of a call time its steps from.
pub fn transition_time(conditions: &[Condition], type_: &str) -> Option<jiff::Timestamp> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.last_transition_time.0)
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
