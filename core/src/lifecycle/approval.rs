//! Approvals: a contract bound to what the approver was shown, issued once the call and the
//! request agree, and the transition of a call that waits for one.

use toolgate_crds::conditions::{APPROVAL_GRANTED, APPROVAL_REQUESTED, reason};
use toolgate_crds::{
    ApprovalDecision, CallPhase, DecisionOutcome, LocalObjectRef, ToolApprovalSpec, ToolCallStatus,
};

use super::Refusal;
use super::ended_without_running;
use super::snapshot::{Call, Snapshot};
use super::step::{Step, camel, phase_name, reasons_text};

/// Longest an approval may be valid, in seconds.
pub const MAX_TTL_SECONDS: u32 = 86_400;
/// How long an approval is valid when the request does not say.
pub const DEFAULT_TTL_SECONDS: u32 = 900;

/// What an approver asks for.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalRequest<'a> {
    /// Who approves (authenticated).
    pub approver: &'a str,
    /// Allow once, for the session, or deny.
    pub decision: ApprovalDecision,
    /// The args and tool digests the approver was shown (not for a denial).
    pub shown: Option<(&'a str, &'a str)>,
    /// Seconds the approval is valid (0: [`DEFAULT_TTL_SECONDS`]).
    pub ttl_seconds: u32,
    /// A note.
    pub comment: &'a str,
}

/// The approval contract for a call waiting for one, or why none can be issued: the approver is
/// not the proposer, the call waits, the digests shown are the call's, a session approval needs a
/// session, and an L5 call already approved by this approver needs someone else. The contract
/// grants the tool's required scopes as `snapshot` has them. Whether the approver may approve in
/// the namespace at all is the runtime's (tokens file or RBAC).
pub fn issue(
    snapshot: &Snapshot<'_>,
    call: &Call<'_>,
    request: &ApprovalRequest<'_>,
) -> Result<ToolApprovalSpec, Refusal> {
    let now = snapshot.now;
    let scopes: &[String] = snapshot
        .tool(call)
        .map_or(&[], |t| &t.spec.permissions.required_scopes);
    if request.approver == call.spec.principal {
        return Err(Refusal::PermissionDenied {
            code: "approval-self",
            message: format!(
                "{} proposed call {}; an approver must be someone else",
                request.approver, call.name
            ),
        });
    }
    let status = call.status;
    if status.phase != Some(CallPhase::AwaitingApproval) {
        return Err(Refusal::FailedPrecondition {
            code: "not-awaiting-approval",
            message: format!(
                "call {} is {}, not AwaitingApproval",
                call.name,
                phase_name(status.phase)
            ),
        });
    }
    if request.decision != ApprovalDecision::Deny {
        second_approver_is_another(snapshot, call, request.approver)?;
    }
    let args_digest = status.args_digest.clone().unwrap_or_default();
    let tool_digest = status.tool_digest.clone().unwrap_or_default();
    if let Some(shown) = request.shown {
        shown_is_current(shown, &args_digest, &tool_digest)?;
    }
    if request.ttl_seconds > MAX_TTL_SECONDS {
        return Err(Refusal::InvalidArgument {
            field: "ttl_seconds",
            message: format!(
                "expected at most {MAX_TTL_SECONDS}, got {}",
                request.ttl_seconds
            ),
        });
    }
    let session_id = match request.decision {
        ApprovalDecision::AllowForSession => Some(call.spec.session_id.clone().ok_or_else(
            || Refusal::InvalidArgument {
                field: "for_session",
                message: "the call has no session_id; approve it once instead".into(),
            },
        )?),
        _ => None,
    };
    let Some(auth) = &status.authorization else {
        return Err(Refusal::FailedPrecondition {
            code: "not-decided",
            message: format!("call {} waits for approval without a decision", call.name),
        });
    };
    let ttl = if request.ttl_seconds == 0 {
        DEFAULT_TTL_SECONDS
    } else {
        request.ttl_seconds
    };
    let expires_at = now
        .checked_add(jiff::SignedDuration::from_secs(i64::from(ttl)))
        .map_err(|e| Refusal::InvalidArgument {
            field: "ttl_seconds",
            message: e.to_string(),
        })?;
    Ok(ToolApprovalSpec {
        call_ref: LocalObjectRef {
            name: call.name.to_string(),
        },
        args_digest,
        tool_digest,
        risk_tier: auth.risk_tier,
        scopes: scopes.to_vec(),
        principal: call.spec.principal.clone(),
        approver: request.approver.to_string(),
        decision: request.decision,
        session_id,
        expires_at: toolgate_crds::Timestamp(expires_at),
        comment: (!request.comment.is_empty()).then(|| request.comment.to_string()),
    })
}

/// Whether `caller` may see a call proposed by `proposer` (get, watch, list, explain): its
/// proposer, or someone who reads calls in its namespace (RBAC's `get toolcalls` on a cluster,
/// `readerIn` or `approverIn` in a tokens file). Others are told the call is not found, so ids
/// of others' calls are not disclosed.
pub fn may_see(caller: &str, proposer: &str, reader_in_namespace: bool) -> bool {
    caller == proposer || reader_in_namespace
}

/// Whether `caller` may answer for a call (approve, deny or cancel it): its proposer, or an
/// approver of its namespace. Who approves where is the runtime's to know (its tokens file, or
/// RBAC on ToolApprovals); what follows from it is decided here.
pub fn may_answer(
    caller: &str,
    call: &Call<'_>,
    approver_in_namespace: bool,
) -> Result<(), Refusal> {
    if caller == call.spec.principal || approver_in_namespace {
        return Ok(());
    }
    Err(Refusal::PermissionDenied {
        code: "not-an-approver",
        message: format!(
            "{caller} may not approve, deny or cancel call {}: only its proposer and the approvers of namespace {} may",
            call.name, call.namespace
        ),
    })
}

/// The approval `request` makes, named `name`, when it binds the call: [`issue`]d, then refused
/// as `approval-not-binding` when the call, decided with it, waits for exactly what it waited
/// for without it (an L5 call that needs a dry run, approved again). An approval that changes
/// nothing is not stored: the approver is told what the call still waits for.
pub fn approve(
    before: &Snapshot<'_>,
    call: &Call<'_>,
    request: &ApprovalRequest<'_>,
    name: &str,
) -> Result<ToolApprovalSpec, Refusal> {
    let spec = issue(before, call, request)?;
    let after = before.with_approval(crate::decision::ApprovalEntry {
        name,
        spec: &spec,
        consumed: false,
    });
    let (was, is) = (before.decide(call), after.decide(call));
    if is.outcome == DecisionOutcome::RequireApproval && is.codes() == was.codes() {
        let why = is
            .reasons
            .last()
            .map(|r| format!("{} ({})", r.message, r.code))
            .unwrap_or_default();
        return Err(Refusal::FailedPrecondition {
            code: "approval-not-binding",
            message: format!(
                "the approval would not change what call {} waits for: {why}",
                call.name
            ),
        });
    }
    Ok(spec)
}

/// The approvals ExplainCall names for a call: its own, in the order they were given (a denial
/// and an L5 call's two approvers included), and the session approval that authorized it when
/// that was another call's. Each with its approver.
pub fn explained_approvals<'s>(
    snapshot: &Snapshot<'s>,
    call: &Call<'_>,
) -> Vec<(&'s str, &'s str)> {
    let binding = call
        .status
        .authorization
        .as_ref()
        .and_then(|a| a.approval_ref.as_ref())
        .map(|r| r.name.as_str());
    snapshot
        .approvals
        .iter()
        .filter(|a| a.spec.call_ref.name == call.name || Some(a.name) == binding)
        .map(|a| (a.name, a.spec.approver.as_str()))
        .collect()
}

/// An L5 call approved once and waiting for a second approver cannot be approved again by the
/// first: the decision's own reasons say whether it waits for one.
fn second_approver_is_another(
    snapshot: &Snapshot<'_>,
    call: &Call<'_>,
    approver: &str,
) -> Result<(), Refusal> {
    let decision = snapshot.decide(call);
    let first = decision
        .approval
        .as_deref()
        .and_then(|name| snapshot.approval(name));
    match first {
        Some(first)
            if decision.outcome == DecisionOutcome::RequireApproval
                && decision.codes().contains(&"second-approver-required")
                && first.spec.approver == approver =>
        {
            Err(Refusal::FailedPrecondition {
                code: "approval-same-approver",
                message: format!(
                    "{approver} already approved call {} ({}); an L5 call needs a second approver other than {approver} and {}",
                    call.name, first.name, call.spec.principal
                ),
            })
        }
        _ => Ok(()),
    }
}

/// The digests an approver was shown must be the call's own: args and tool version.
fn shown_is_current(
    (args, tool): (&str, &str),
    args_digest: &str,
    tool_digest: &str,
) -> Result<(), Refusal> {
    if args != args_digest {
        return Err(Refusal::FailedPrecondition {
            code: "approval-args-changed",
            message: format!("the approver was shown args {args}, the call's are {args_digest}"),
        });
    }
    if tool != tool_digest {
        return Err(Refusal::FailedPrecondition {
            code: "approval-tool-changed",
            message: format!(
                "the approver was shown tool version {tool}, the call's is {tool_digest}"
            ),
        });
    }
    Ok(())
}

/// A call waiting for approval, looked at again (an approval arrived, the manifests changed):
/// approved, denied, ended because its tool changed, or still waiting (no steps).
pub fn awaiting(
    snapshot: &Snapshot<'_>,
    call: &Call<'_>,
    status: &mut ToolCallStatus,
) -> Vec<Step> {
    if status.phase != Some(CallPhase::AwaitingApproval) {
        return Vec::new();
    }
    // What an approver would see is not what the proposer saw: the call ends (invariant 6).
    let now_digest = snapshot.tool(call).map(|t| t.digest.as_str());
    if now_digest != status.tool_digest.as_deref() {
        return vec![
            Step::failed(
                APPROVAL_REQUESTED,
                reason::TOOL_CHANGED,
                format!(
                    "the tool's descriptor changed while the call waited (was {}, now {}); propose the call again",
                    status.tool_digest.as_deref().unwrap_or_default(),
                    now_digest.unwrap_or("removed")
                ),
            )
            .then(CallPhase::Denied),
            ended_without_running(),
        ];
    }
    let decision = snapshot.decide(call);
    let approval = decision
        .approval
        .as_deref()
        .and_then(|name| snapshot.approval(name));
    match decision.outcome {
        DecisionOutcome::RequireApproval => awaiting_confirmation(snapshot, decision, status),
        DecisionOutcome::Allow => {
            status.authorization = decision.authorization(snapshot.now);
            let (name, approver, ttl) = approval.map_or(("", "", String::new()), |a| {
                (
                    a.name,
                    a.spec.approver.as_str(),
                    format!(", until {}", a.spec.expires_at),
                )
            });
            let confirmed = decision
                .confirmation
                .as_ref()
                .and_then(|_| decision.reasons.iter().find(|r| r.code == "l5-confirmed"))
                .map(|r| format!("; {}", r.message))
                .unwrap_or_default();
            vec![
                Step::ok(
                    APPROVAL_GRANTED,
                    reason::APPROVED,
                    format!(
                        "{approver} approved ({name}) bound to args {} and tool {}{ttl}{confirmed}",
                        status.args_digest.as_deref().unwrap_or_default(),
                        status.tool_digest.as_deref().unwrap_or_default()
                    ),
                )
                .then(CallPhase::Authorized),
            ]
        }
        DecisionOutcome::Deny => {
            status.authorization = decision.authorization(snapshot.now);
            let code = decision.reasons.last().map_or("denied", |r| r.code);
            let first = match approval {
                Some(a) if code == "approval-denied" => Step::failed(
                    APPROVAL_GRANTED,
                    reason::DENIED_BY_APPROVER,
                    format!(
                        "{} denied the call{}",
                        a.spec.approver,
                        a.spec
                            .comment
                            .as_deref()
                            .map(|c| format!(": {c}"))
                            .unwrap_or_default()
                    ),
                ),
                _ => Step::failed(APPROVAL_GRANTED, camel(code), reasons_text(decision)),
            };
            vec![first.then(CallPhase::Denied), ended_without_running()]
        }
    }
}

/// An L5 call approved once keeps waiting for its second confirmation: ApprovalGranted says
/// so, with what is missing and why each candidate does not count (the decision's reasons after
/// the approval), once: no step when the condition already says it.
fn awaiting_confirmation(
    snapshot: &Snapshot<'_>,
    decision: &crate::decision::Decision,
    status: &mut ToolCallStatus,
) -> Vec<Step> {
    let missing = ["second-approver-required", "dry-run-required"];
    let waits =
        decision.approval.is_some() && decision.reasons.iter().any(|r| missing.contains(&r.code));
    if !waits {
        return Vec::new();
    }
    let after_approval = decision
        .reasons
        .iter()
        .rposition(|r| r.code == "approval-granted")
        .map_or(0, |i| i + 1);
    let message = decision.reasons[after_approval..]
        .iter()
        .map(|r| format!("{} ({})", r.message, r.code))
        .collect::<Vec<_>>()
        .join("; ");
    let said = status.conditions.iter().any(|c| {
        c.type_ == APPROVAL_GRANTED
            && c.reason == reason::AWAITING_CONFIRMATION
            && c.message == message
    });
    if said {
        return Vec::new();
    }
    status.authorization = decision.authorization(snapshot.now);
    vec![Step::failed(
        APPROVAL_GRANTED,
        reason::AWAITING_CONFIRMATION,
        message,
    )]
}

/// The state each of a call's own approvals is in, as the call stands now: bound, expired, or
/// voided and why (`approval-tool-changed: …`). A used-up approval stays consumed and is left
/// out. The runtime records these where approvals are shown (a ToolApproval's status).
pub fn approval_states<'s>(
    snapshot: &Snapshot<'s>,
    call: &Call<'_>,
) -> Vec<(&'s str, toolgate_crds::ApprovalState, Option<String>)> {
    use crate::approval::{ApprovalSubject, VoidReason, check_approval};
    use toolgate_crds::ApprovalState;
    let Some(tool) = snapshot.tool(call) else {
        return Vec::new();
    };
    let subject = ApprovalSubject {
        call_name: call.name,
        session_id: call.spec.session_id.as_deref(),
        args_digest: call.status.args_digest.as_deref().unwrap_or_default(),
        tool_digest: &tool.digest,
        tier: tool.tier,
        scopes: &tool.spec.permissions.required_scopes,
        principal: &call.spec.principal,
    };
    snapshot
        .approvals
        .iter()
        .filter(|a| a.spec.call_ref.name == call.name && !a.consumed)
        .map(
            |a| match check_approval(a.spec, false, &subject, snapshot.now) {
                Ok(()) => (a.name, ApprovalState::Bound, None),
                Err(VoidReason::Expired(_)) => (a.name, ApprovalState::Expired, None),
                Err(e) => (
                    a.name,
                    ApprovalState::Voided,
                    Some(format!("{}: {e}", e.code())),
                ),
            },
        )
        .collect()
}
