//! The life of a call, written once: pure transitions over a [`Snapshot`] of what the call is
//! decided against. Both runtimes call these and only *place* what they decide (a pod, its
//! NetworkPolicy and Secret, or a local sandbox and its files) and *persist* it (server-side
//! apply, or the embedded store); neither decides anything of its own.
//!
//! ```text
//! propose ──► AwaitingApproval ──awaiting──► Authorized ──plan_run/start_steps──► Running
//!    │                │                                                          │
//!    └──► Denied ◄────┘ (denied, tool changed)                 finished_steps / no_result
//!                                                                                 ▼
//!                                        cancelled (any time before the end) ──► Succeeded | Failed
//! ```
//!
//! Every condition type and reason comes from `toolgate_crds::conditions`; a step becomes a
//! condition through [`apply`] alone.

mod approval;
mod budget;
mod explain;
mod finish;
mod propose;
mod run;
mod snapshot;
mod step;

pub use approval::{
    ApprovalRequest, DEFAULT_TTL_SECONDS, MAX_TTL_SECONDS, approval_states, approve, awaiting,
    explained_approvals, issue, may_answer, may_see,
};
pub use budget::{BudgetMove, budget_move, settle};
pub use explain::sandbox_view;
pub use finish::{
    MAX_REVOCATION_WAIT, cancellation, cancelled, finished_steps, interrupted, lease_to_revoke,
    may_cancel, no_result, revocation, revocation_failed,
};
pub use propose::{decision_steps, may_propose_in, propose, requested, same_proposal, unplaceable};
pub use run::{
    Credential, DelegationStart, Run, RunTarget, Start, adapter_name, plan_run, recheck_steps,
    run_target, start, start_delegation, start_steps,
};
pub use snapshot::{Call, Policies, Snapshot};
pub use step::{PHASES, Step, apply, camel, is_terminal, phase_name, reasons_text};

use toolgate_crds::CallPhase;
use toolgate_crds::conditions::{STATE_UPDATED, reason};

/// Why a request about a call is refused; the API turns it into a status with the code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The caller may not do this.
    #[error("{message}")]
    PermissionDenied {
        /// Stable code.
        code: &'static str,
        /// What and why.
        message: String,
    },
    /// The call is not in a state that allows it.
    #[error("{message}")]
    FailedPrecondition {
        /// Stable code.
        code: &'static str,
        /// What and why.
        message: String,
    },
    /// A field of the request is wrong.
    #[error("{field}: {message}")]
    InvalidArgument {
        /// The field.
        field: &'static str,
        /// Expected and got.
        message: String,
    },
    /// An idempotency key reused with different content.
    #[error("{message}")]
    AlreadyExists {
        /// Stable code.
        code: &'static str,
        /// What and why.
        message: String,
    },
}

/// The steps that end a call that cannot run: the condition at fault, then StateUpdated.
pub fn cannot_run(kind: &'static str, reason: &str, message: impl Into<String>) -> Vec<Step> {
    vec![
        Step::failed(kind, reason.to_string(), message),
        Step::failed(
            STATE_UPDATED,
            reason::FAILED,
            "the call ended without running",
        )
        .then(CallPhase::Failed),
    ]
}

/// StateUpdated of a call that ended before it ran.
pub(crate) fn ended_without_running() -> Step {
    Step::failed(
        STATE_UPDATED,
        reason::DENIED,
        "the call ended without running",
    )
    .then(CallPhase::Denied)
}
