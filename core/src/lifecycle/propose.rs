//! A proposal: recorded, its args validated, decided by policy, and — when it may run, now or
//! once approved — its sandbox resolved before anyone is asked (invariant 10).

use toolgate_crds::conditions::{
    APPROVAL_REQUESTED, ARGS_VALIDATED, POLICY_CHECKED, TOOL_CALL_REQUESTED, reason,
};
use toolgate_crds::{CallPhase, DecisionOutcome, ToolCallSpec, ToolCallStatus};

use super::run::{RunTarget, run_target_of};
use super::snapshot::{Call, Snapshot};
use super::step::{Step, camel, reasons_text};
use super::{Refusal, cannot_run, ended_without_running};
use crate::decision::Decision;

/// Whether `principal` may propose calls in `namespace` at all: only where a grant names it.
/// Asked before a call is recorded and before its tool is looked up, so a namespace where the
/// caller has no grant keeps no record of the attempt and answers the same whether or not a tool
/// of that name exists there.
pub fn may_propose_in(
    registry: &crate::registry::Registry,
    namespace: &str,
    principal: &crate::principal::Principal,
) -> Result<(), Refusal> {
    if registry.grants_for(namespace, principal).is_empty() {
        return Err(Refusal::PermissionDenied {
            code: "no-grant-in-namespace",
            message: format!(
                "{} has no ToolGrant in namespace {namespace}: calls are proposed where a grant gives the caller tools",
                principal.name
            ),
        });
    }
    Ok(())
}

/// The steps of a new call: ToolCallRequested, then what the decision says (see
/// [`decision_steps`]). `place` is the runtime's check that it can run the call's target.
pub fn propose(
    snapshot: &Snapshot<'_>,
    call: &Call<'_>,
    status: &mut ToolCallStatus,
    place: impl FnOnce(&RunTarget<'_>) -> Result<(), String>,
) -> Vec<Step> {
    let decision = snapshot.decide(call);
    let scopes = snapshot
        .tool(call)
        .map(|t| t.spec.permissions.required_scopes.clone())
        .unwrap_or_default();
    let mut steps = vec![requested(call.spec)];
    steps.extend(decision_steps(
        status,
        call.spec,
        decision,
        &scopes,
        snapshot.now,
        || unplaceable(snapshot, call, place),
    ));
    steps
}

/// The first step of every call: it was received and recorded.
pub fn requested(spec: &ToolCallSpec) -> Step {
    Step::ok(
        TOOL_CALL_REQUESTED,
        reason::ACCEPTED,
        format!(
            "{} proposed {} ({})",
            spec.principal, spec.tool_ref.name, spec.intent.current_task
        ),
    )
    .then(CallPhase::Pending)
}

/// Whether the call can be placed where this runtime runs calls: its tool, sandbox policy and
/// credential binding exist, and `place` (the runtime's own check of the target: the local
/// sandbox plan, or the pod's NetworkPolicy and confinement) accepts them. `None` when it can.
pub fn unplaceable(
    snapshot: &Snapshot<'_>,
    call: &Call<'_>,
    place: impl FnOnce(&RunTarget<'_>) -> Result<(), String>,
) -> Option<Vec<Step>> {
    use toolgate_crds::conditions::SANDBOX_PREPARED;
    // A delegation is placed nowhere: its subagent's calls are, each when proposed.
    if snapshot
        .tool(call)
        .is_some_and(|t| crate::subagent::subagent_of(&t.spec).is_some())
    {
        return None;
    }
    let target = match run_target_of(snapshot, call) {
        Ok(t) => t,
        Err(steps) => return Some(steps),
    };
    place(&target).err().map(|e| {
        cannot_run(
            SANDBOX_PREPARED,
            reason::SANDBOX_REFUSED,
            format!("SandboxPolicy {}: {e}", target.policy_name),
        )
    })
}

/// The steps a decision adds: ArgsValidated, PolicyChecked, and ApprovalRequested or the end.
/// A call the decision lets run (now or once approved) must also be placeable: `unplaceable`
/// is asked then, and its steps end the call before ApprovalRequested.
pub fn decision_steps(
    status: &mut ToolCallStatus,
    spec: &ToolCallSpec,
    d: &Decision,
    required_scopes: &[String],
    now: jiff::Timestamp,
    unplaceable: impl FnOnce() -> Option<Vec<Step>>,
) -> Vec<Step> {
    status.args_digest = d.args_digest.clone();
    status.tool_digest = d.tool_digest.clone();
    status.authorization = d.authorization(now);
    let mut steps = Vec::new();
    let reasons = reasons_text(d);
    if !d.args_violations.is_empty() {
        let v = d
            .args_violations
            .iter()
            .map(|v| {
                let at = if v.pointer.is_empty() {
                    "/"
                } else {
                    &v.pointer
                };
                format!("{at}: {}", v.message)
            })
            .collect::<Vec<_>>()
            .join("; ");
        steps.push(Step::failed(ARGS_VALIDATED, reason::ARGS_INVALID, v).then(CallPhase::Denied));
        steps.push(ended_without_running());
        return steps;
    }
    if d.args_digest.is_some() {
        steps.push(Step::ok(
            ARGS_VALIDATED,
            reason::SCHEMA_OK,
            format!(
                "args match the input schema of {} ({})",
                spec.tool_ref.name,
                d.args_digest.as_deref().unwrap_or_default()
            ),
        ));
    }
    let checked = match d.outcome {
        DecisionOutcome::Allow => reason::ALLOWED,
        DecisionOutcome::RequireApproval => reason::APPROVAL_REQUIRED,
        DecisionOutcome::Deny => {
            let code = d.reasons.last().map_or("decided", |r| r.code);
            steps.push(Step::failed(POLICY_CHECKED, camel(code), reasons).then(CallPhase::Denied));
            steps.push(ended_without_running());
            return steps;
        }
    };
    steps.push(Step::ok(POLICY_CHECKED, checked, reasons));
    if let Some(refused) = unplaceable() {
        steps.extend(refused);
        return steps;
    }
    if d.outcome == DecisionOutcome::Allow {
        if let Some(last) = steps.last_mut() {
            last.phase = Some(CallPhase::Authorized);
        }
        return steps;
    }
    let tier = d.risk_tier.map(|t| t.to_string()).unwrap_or_default();
    // An L5 call says up front what confirms it besides the approval (the decision's words).
    let confirmation = d
        .reasons
        .iter()
        .find(|r| r.code == "approval-required")
        .filter(|_| d.risk_tier == Some(toolgate_crds::RiskTier::L5) && !spec.dry_run)
        .map(|r| format!(" ({})", r.message))
        .unwrap_or_default();
    steps.push(
        Step::ok(
            APPROVAL_REQUESTED,
            reason::AWAITING_APPROVAL,
            format!(
                "risk {tier}, scopes [{}]: an approver other than {} must approve args {} for tool version {}{confirmation}",
                required_scopes.join(", "),
                spec.principal,
                d.args_digest.as_deref().unwrap_or_default(),
                d.tool_digest.as_deref().unwrap_or_default()
            ),
        )
        .then(CallPhase::AwaitingApproval),
    );
    steps
}

/// The idempotency rule: a proposal with a key already used returns the call that key names,
/// when it asks for the same thing (tool, args, dry run); otherwise it is refused.
pub fn same_proposal(
    existing_id: &str,
    existing: &ToolCallSpec,
    new: &ToolCallSpec,
) -> Result<(), Refusal> {
    if existing.tool_ref.name == new.tool_ref.name
        && existing.args == new.args
        && existing.dry_run == new.dry_run
    {
        return Ok(());
    }
    Err(Refusal::AlreadyExists {
        code: "idempotency-key-reused",
        message: format!(
            "idempotency_key {:?} already names call {existing_id} with a different tool or args; use a new key",
            new.idempotency_key.as_deref().unwrap_or_default()
        ),
    })
}
