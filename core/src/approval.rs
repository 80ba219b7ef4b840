//! Approval contracts (invariant 6): an approval is valid only for exactly what it showed.

use std::collections::BTreeSet;

use jiff::Timestamp;
use toolgate_crds::{ApprovalDecision, RiskTier, ToolApprovalSpec};

/// What the call looks like now, to compare an approval against.
#[derive(Debug, Clone)]
pub struct ApprovalSubject<'a> {
    /// Name of the call.
    pub call_name: &'a str,
    /// The call's session, if any.
    pub session_id: Option<&'a str>,
    /// Digest of the call's canonical args.
    pub args_digest: &'a str,
    /// The tool's current digest.
    pub tool_digest: &'a str,
    /// The tool's current tier.
    pub tier: RiskTier,
    /// The tool's current required scopes.
    pub scopes: &'a [String],
    /// The call's principal.
    pub principal: &'a str,
}

/// Why an approval does not apply. Each has a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VoidReason {
    /// It approves another call (and is not a session approval).
    #[error("the approval is for call {approved:?}, not {call:?}")]
    OtherCall {
        /// The call it approves.
        approved: String,
        /// This call.
        call: String,
    },
    /// A session approval for another session.
    #[error("the approval covers session {approved:?}, the call is in {call:?}")]
    OtherSession {
        /// Approved session.
        approved: String,
        /// The call's session.
        call: String,
    },
    /// The args changed since the approver saw them.
    #[error("the args changed since approval (approved {approved}, now {now})")]
    ArgsChanged {
        /// Approved digest.
        approved: String,
        /// Current digest.
        now: String,
    },
    /// The tool version changed.
    #[error("the tool changed since approval (approved version {approved}, now {now})")]
    ToolChanged {
        /// Approved digest.
        approved: String,
        /// Current digest.
        now: String,
    },
    /// The risk tier changed.
    #[error("the risk changed since approval (approved {approved}, now {now})")]
    RiskChanged {
        /// Approved tier.
        approved: RiskTier,
        /// Current tier.
        now: RiskTier,
    },
    /// The scopes changed.
    #[error("the scopes changed since approval (approved [{approved}], now [{now}])")]
    ScopesChanged {
        /// Approved scopes.
        approved: String,
        /// Current scopes.
        now: String,
    },
    /// It names a different principal.
    #[error("the approval is for principal {approved:?}, the call's is {call:?}")]
    PrincipalChanged {
        /// Approved principal.
        approved: String,
        /// The call's principal.
        call: String,
    },
    /// Past its expiry.
    #[error("the approval expired at {0}")]
    Expired(Timestamp),
    /// The approver is the call's principal.
    #[error("{0:?} approved their own call; an approver must be someone else")]
    SelfApproval(String),
    /// An allowOnce approval already used.
    #[error("the approval was already used by an earlier run")]
    Consumed,
    /// A session approval offered for an L5 call, which needs a confirmation per call.
    #[error(
        "an L5 (destructive/admin) call needs an allowOnce approval; allowForSession does not cover it"
    )]
    SessionApprovalForL5,
}

impl VoidReason {
    /// Stable machine code.
    pub fn code(&self) -> &'static str {
        match self {
            VoidReason::OtherCall { .. } => "approval-other-call",
            VoidReason::OtherSession { .. } => "approval-other-session",
            VoidReason::ArgsChanged { .. } => "approval-args-changed",
            VoidReason::ToolChanged { .. } => "approval-tool-changed",
            VoidReason::RiskChanged { .. } => "approval-risk-changed",
            VoidReason::ScopesChanged { .. } => "approval-scopes-changed",
            VoidReason::PrincipalChanged { .. } => "approval-principal-changed",
            VoidReason::Expired(_) => "approval-expired",
            VoidReason::SelfApproval(_) => "approval-self",
            VoidReason::Consumed => "approval-consumed",
            VoidReason::SessionApprovalForL5 => "approval-session-l5",
        }
    }
}

/// Check an approval against the call as it is now. `consumed` says whether an allowOnce
/// approval was already used. A `deny` approval that binds is `Ok` too: the caller reads the
/// decision.
pub fn check_approval(
    approval: &ToolApprovalSpec,
    consumed: bool,
    call: &ApprovalSubject<'_>,
    now: Timestamp,
) -> Result<(), VoidReason> {
    match approval.decision {
        ApprovalDecision::AllowForSession => {
            let approved = approval.session_id.as_deref().unwrap_or("");
            let current = call.session_id.unwrap_or("");
            if approved.is_empty() || approved != current {
                return Err(VoidReason::OtherSession {
                    approved: approved.into(),
                    call: current.into(),
                });
            }
            if call.tier == RiskTier::L5 {
                return Err(VoidReason::SessionApprovalForL5);
            }
        }
        ApprovalDecision::AllowOnce | ApprovalDecision::Deny => {
            if approval.call_ref.name != call.call_name {
                return Err(VoidReason::OtherCall {
                    approved: approval.call_ref.name.clone(),
                    call: call.call_name.into(),
                });
            }
        }
    }
    if approval.approver == call.principal {
        return Err(VoidReason::SelfApproval(approval.approver.clone()));
    }
    if approval.principal != call.principal {
        return Err(VoidReason::PrincipalChanged {
            approved: approval.principal.clone(),
            call: call.principal.into(),
        });
    }
    if approval.args_digest != call.args_digest {
        return Err(VoidReason::ArgsChanged {
            approved: approval.args_digest.clone(),
            now: call.args_digest.into(),
        });
    }
    if approval.tool_digest != call.tool_digest {
        return Err(VoidReason::ToolChanged {
            approved: approval.tool_digest.clone(),
            now: call.tool_digest.into(),
        });
    }
    if approval.risk_tier != call.tier {
        return Err(VoidReason::RiskChanged {
            approved: approval.risk_tier,
            now: call.tier,
        });
    }
    let approved: BTreeSet<&str> = approval.scopes.iter().map(String::as_str).collect();
    let current: BTreeSet<&str> = call.scopes.iter().map(String::as_str).collect();
    if approved != current {
        let join = |s: &BTreeSet<&str>| s.iter().copied().collect::<Vec<_>>().join(", ");
        return Err(VoidReason::ScopesChanged {
            approved: join(&approved),
            now: join(&current),
        });
    }
    if approval.expires_at.0 <= now {
        return Err(VoidReason::Expired(approval.expires_at.0));
    }
    if consumed && approval.decision == ApprovalDecision::AllowOnce {
        return Err(VoidReason::Consumed);
    }
    Ok(())
}

/// How long a successful dry run confirms an L5 call of the same args, in seconds: long enough
/// to read its report and approve, short enough that the world it saw is still the world.
pub const DRY_RUN_VALID_SECONDS: i64 = 900;

/// A successful dry run, as evidence for an L5 call (invariant 6 extended: it confirms exactly
/// the args and tool version it ran with, for the principal who ran it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DryRunEntry<'a> {
    /// The dry-run call's name.
    pub name: &'a str,
    /// Who ran it.
    pub principal: &'a str,
    /// The tool version it ran against.
    pub tool_digest: &'a str,
    /// The digest of its args.
    pub args_digest: &'a str,
    /// When it ended.
    pub finished_at: Timestamp,
}

impl<'a> DryRunEntry<'a> {
    /// The evidence a call is, when it is a dry run that succeeded (its StateUpdated condition
    /// says when); `None` for any other call.
    pub fn of(
        name: &'a str,
        spec: &'a toolgate_crds::ToolCallSpec,
        status: &'a toolgate_crds::ToolCallStatus,
    ) -> Option<Self> {
        use toolgate_crds::conditions::{STATE_UPDATED, reason};
        if !spec.dry_run || status.phase != Some(toolgate_crds::CallPhase::Succeeded) {
            return None;
        }
        let ended = status
            .conditions
            .iter()
            .find(|c| c.type_ == STATE_UPDATED && c.reason == reason::SUCCEEDED)?;
        Some(DryRunEntry {
            name,
            principal: &spec.principal,
            tool_digest: status.tool_digest.as_deref()?,
            args_digest: status.args_digest.as_deref()?,
            finished_at: ended.last_transition_time.0,
        })
    }
}

/// Why a dry run does not confirm a call. Each has a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DryRunVoid {
    /// It ran with other args.
    #[error("dry run {name} ran with args {ran}, the call's are {now}")]
    OtherArgs {
        /// The dry run.
        name: String,
        /// Its args digest.
        ran: String,
        /// The call's.
        now: String,
    },
    /// It ran against another tool version.
    #[error("dry run {name} ran against tool version {ran}, the call's is {now}")]
    OtherTool {
        /// The dry run.
        name: String,
        /// Its tool digest.
        ran: String,
        /// The call's.
        now: String,
    },
    /// Someone else ran it.
    #[error("dry run {name} was run by {ran:?}, not by {principal:?}")]
    OtherPrincipal {
        /// The dry run.
        name: String,
        /// Who ran it.
        ran: String,
        /// The call's principal.
        principal: String,
    },
    /// It is older than [`DRY_RUN_VALID_SECONDS`].
    #[error("dry run {name} ended at {finished_at}, more than {DRY_RUN_VALID_SECONDS} s ago")]
    Stale {
        /// The dry run.
        name: String,
        /// When it ended.
        finished_at: Timestamp,
    },
}

impl DryRunVoid {
    /// Stable machine code.
    pub fn code(&self) -> &'static str {
        match self {
            DryRunVoid::OtherArgs { .. } => "dry-run-other-args",
            DryRunVoid::OtherTool { .. } => "dry-run-other-tool",
            DryRunVoid::OtherPrincipal { .. } => "dry-run-other-principal",
            DryRunVoid::Stale { .. } => "dry-run-stale",
        }
    }
}

/// Check a dry run against the call as it is now: same principal, tool version and args, ended
/// within [`DRY_RUN_VALID_SECONDS`] before `now`.
pub fn check_dry_run(
    dry_run: &DryRunEntry<'_>,
    call: &ApprovalSubject<'_>,
    now: Timestamp,
) -> Result<(), DryRunVoid> {
    let name = || dry_run.name.to_string();
    if dry_run.principal != call.principal {
        return Err(DryRunVoid::OtherPrincipal {
            name: name(),
            ran: dry_run.principal.into(),
            principal: call.principal.into(),
        });
    }
    if dry_run.tool_digest != call.tool_digest {
        return Err(DryRunVoid::OtherTool {
            name: name(),
            ran: dry_run.tool_digest.into(),
            now: call.tool_digest.into(),
        });
    }
    if dry_run.args_digest != call.args_digest {
        return Err(DryRunVoid::OtherArgs {
            name: name(),
            ran: dry_run.args_digest.into(),
            now: call.args_digest.into(),
        });
    }
    let age = now.duration_since(dry_run.finished_at);
    // A dry run a skewed clock dates slightly after `now` is not older than the window.
    if age.as_secs() > DRY_RUN_VALID_SECONDS {
        return Err(DryRunVoid::Stale {
            name: name(),
            finished_at: dry_run.finished_at,
        });
    }
    Ok(())
}
