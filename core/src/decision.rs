//! Policy decisions: may this principal make this call, now, and does a human have to approve?
//!
//! Deterministic: the same inputs give the same decision. Args are validated first (invariant 3)
//! and the result is part of the decision record; nothing here executes anything (invariant 4).

use std::borrow::Cow;
use std::fmt::Write as _;

use jiff::Timestamp;
use serde::Serialize;
use toolgate_crds::{
    ApprovalDecision, ApprovalOverrideMode, ApprovalPolicy, Authorization, Confirmation,
    DecisionOutcome, DecisionReason, LocalObjectRef, RiskSeverity, RiskTier, StrongConfirmation,
    ToolApprovalSpec, ToolCallSpec, ToolGrantSpec, TrustLevel,
};

use crate::approval::{
    ApprovalSubject, DRY_RUN_VALID_SECONDS, DryRunEntry, check_approval, check_dry_run,
};
use crate::args::{ArgsLimits, ArgsReport, Violation, validate_sized_args_with};
use crate::cedar::{CedarCall, ToolPolicies};
use crate::digest;
use crate::principal::Principal;
use crate::registry::{GrantEntry, RegisteredTool, Registry};

/// The scope a grant must give for workspace writes (L2).
pub const WORKSPACE_WRITE_SCOPE: &str = "workspace:write";

/// One reason of a decision, with a stable machine code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reason {
    /// Stable code (`grant-matched`).
    pub code: &'static str,
    /// What a person reads.
    pub message: String,
}

/// Room for the text of one reason: the longest common one (a version note with a 71-byte digest)
/// fits, so writing it allocates once; `format!` guesses low and grows the string two or three
/// times.
const REASON_CAPACITY: usize = 128;

/// A reason's text, like `format!` but in one allocation of [`REASON_CAPACITY`].
macro_rules! reason {
    ($($arg:tt)*) => {{
        let mut text = String::with_capacity(REASON_CAPACITY);
        let _ = text.write_fmt(format_args!($($arg)*));
        text
    }};
}

/// A reason's text from its pieces in one allocation of the exact size: the reasons of an allowed
/// call are written this way (`format!`'s machinery was a sixth of a decision's time).
fn joined(pieces: &[&str]) -> String {
    joined_with_room(pieces, 0)
}

/// [`joined`], with `room` bytes more for what the caller appends.
fn joined_with_room(pieces: &[&str], room: usize) -> String {
    let mut text = String::with_capacity(pieces.iter().map(|p| p.len()).sum::<usize>() + room);
    for p in pieces {
        text.push_str(p);
    }
    text
}

/// A policy decision and everything it was based on.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// allow, requireApproval or deny.
    pub outcome: DecisionOutcome,
    /// The tool's tier, when the tool was found.
    pub risk_tier: Option<RiskTier>,
    /// The tool's declared level, when the tool was found.
    pub risk_level: Option<RiskSeverity>,
    /// The tool digest the call was decided against.
    pub tool_digest: Option<String>,
    /// The digest of the canonical args.
    pub args_digest: Option<String>,
    /// The args validation result.
    pub args_violations: Vec<ViolationRecord>,
    /// The grant that matched.
    pub grant: Option<String>,
    /// The approval that authorized or denied the call (of an L5 call waiting for its second
    /// confirmation: the first approval).
    pub approval: Option<String>,
    /// What confirmed an L5 call besides its approval: the second approval or the dry run.
    pub confirmation: Option<Confirmation>,
    /// Shadow ToolPolicies that would have forbidden the call.
    pub shadow_forbids: Vec<toolgate_crds::PolicyForbid>,
    /// Required scopes no live grant gives.
    pub missing_scopes: Vec<String>,
    /// Why, in order.
    pub reasons: Vec<Reason>,
}

/// An args violation in a decision record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ViolationRecord {
    /// JSON pointer.
    pub pointer: String,
    /// Rule broken.
    pub rule: String,
    /// Expected and found.
    pub message: String,
}

impl From<Violation> for ViolationRecord {
    fn from(v: Violation) -> Self {
        ViolationRecord {
            pointer: v.pointer,
            rule: v.rule,
            message: v.message,
        }
    }
}

impl Decision {
    fn new() -> Self {
        Decision {
            outcome: DecisionOutcome::Deny,
            risk_tier: None,
            risk_level: None,
            tool_digest: None,
            args_digest: None,
            args_violations: Vec::new(),
            grant: None,
            approval: None,
            confirmation: None,
            shadow_forbids: Vec::new(),
            missing_scopes: Vec::new(),
            // An allowed call gives four reasons: one allocation.
            reasons: Vec::with_capacity(4),
        }
    }

    fn because(&mut self, code: &'static str, message: impl Into<String>) {
        self.reasons.push(Reason {
            code,
            message: message.into(),
        });
    }

    fn deny(mut self, code: &'static str, message: impl Into<String>) -> Self {
        self.outcome = DecisionOutcome::Deny;
        self.because(code, message);
        self
    }

    /// The reason codes, in order.
    pub fn codes(&self) -> Vec<&'static str> {
        self.reasons.iter().map(|r| r.code).collect()
    }

    /// The status form of the decision.
    pub fn authorization(&self, now: Timestamp) -> Option<Authorization> {
        Some(Authorization {
            decision: self.outcome,
            risk_tier: self.risk_tier?,
            risk_level: self.risk_level?,
            grant_ref: self.grant.clone().map(|name| LocalObjectRef { name }),
            approval_ref: self.approval.clone().map(|name| LocalObjectRef { name }),
            confirmation: self.confirmation.clone(),
            shadow_forbids: self.shadow_forbids.clone(),
            missing_scopes: self.missing_scopes.clone(),
            reasons: self
                .reasons
                .iter()
                .map(|r| DecisionReason {
                    code: r.code.into(),
                    message: r.message.clone(),
                })
                .collect(),
            decided_at: Some(toolgate_crds::Timestamp(now)),
        })
    }
}

/// A call to decide on.
#[derive(Debug, Clone, Copy)]
pub struct CallUnderReview<'a> {
    /// Namespace of the call.
    pub namespace: &'a str,
    /// Name of the call.
    pub name: &'a str,
    /// The spec.
    pub spec: &'a ToolCallSpec,
    /// The authenticated principal (never the spec's claim alone).
    pub principal: &'a Principal,
    /// The namespace's recent successful dry runs of the tool (what confirms an L5 call whose
    /// tool asks for a dry run).
    pub dry_runs: &'a [DryRunEntry<'a>],
    /// The namespace's ToolPolicies (Cedar), evaluated once the built-in rules allow the call.
    pub tool_policies: Option<&'a ToolPolicies>,
    /// The delegation a subagent's call belongs to, as the runtime found it (`None` for a call
    /// that is not a subagent's, or whose delegation is gone: then it is denied).
    pub delegation: Option<&'a crate::subagent::Scope>,
}

/// An approval with whether it was already used.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalEntry<'a> {
    /// Name of the approval.
    pub name: &'a str,
    /// The spec.
    pub spec: &'a ToolApprovalSpec,
    /// Whether an allowOnce approval was already used.
    pub consumed: bool,
}

/// Decide against the registry: look up the tool and the principal's grants, then [`decide`].
pub fn decide_in(
    registry: &Registry,
    call: &CallUnderReview<'_>,
    approvals: &[ApprovalEntry<'_>],
    now: Timestamp,
    limits: &ArgsLimits,
) -> Decision {
    let tool = registry.tool(call.namespace, &call.spec.tool_ref.name);
    let grants = registry.grants_for(call.namespace, call.principal);
    let call = CallUnderReview {
        tool_policies: registry.tool_policies(call.namespace),
        ..*call
    };
    decide(&call, tool, &grants, approvals, now, limits)
}

/// Why a step of [`decide`] denies the call: its reason code and text.
struct Denied(&'static str, String);

impl Denied {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Denied(code, message.into())
    }
}

/// Decide on a call. `grants` are the grants of the call's namespace whose subjects include the
/// principal (the registry's index finds them); `approvals` those that may bind the call.
/// The steps run in the order of the causal chain; the first that denies ends the decision.
pub fn decide(
    call: &CallUnderReview<'_>,
    tool: Option<&RegisteredTool>,
    grants: &[&GrantEntry],
    approvals: &[ApprovalEntry<'_>],
    now: Timestamp,
    limits: &ArgsLimits,
) -> Decision {
    let mut d = Decision::new();
    let steps = |d: &mut Decision| -> Result<DecisionOutcome, Denied> {
        let tool = registered(d, call, tool)?;
        within_delegation(d, call, tool)?;
        args_valid(d, call, tool, limits)?;
        this_version_for_this_intent(d, call, tool)?;
        let grant = granted(d, call, tool, grants, now)?;
        tool_policies_allow(d, call, tool, now)?;
        approved(d, call, tool, &grant.spec, approvals, now)
    };
    match steps(&mut d) {
        Ok(outcome) => {
            d.outcome = outcome;
            d
        }
        Err(Denied(code, message)) => d.deny(code, message),
    }
}

/// Invariant 1: a registered tool, whose tier, level and digest the decision records.
fn registered<'t>(
    d: &mut Decision,
    call: &CallUnderReview<'_>,
    tool: Option<&'t RegisteredTool>,
) -> Result<&'t RegisteredTool, Denied> {
    let Some(tool) = tool else {
        return Err(Denied::new(
            "tool-not-found",
            reason!(
                "no tool {:?} is registered in namespace {}",
                call.spec.tool_ref.name,
                call.namespace
            ),
        ));
    };
    d.risk_tier = Some(tool.tier);
    d.risk_level = Some(tool.spec.risk.level);
    d.tool_digest = Some(tool.digest.clone());
    Ok(tool)
}

/// A subagent's call stays within its delegation (live, an allowed tool, budget left); it is
/// decided with the delegator's grants.
fn within_delegation(
    d: &mut Decision,
    call: &CallUnderReview<'_>,
    tool: &RegisteredTool,
) -> Result<(), Denied> {
    let spec = call.spec;
    if let Some(delegation) = &spec.delegation {
        match call.delegation {
            None => {
                return Err(Denied::new(
                    "delegation-not-live",
                    reason!(
                        "delegation {} is not a running call",
                        delegation.parent_call
                    ),
                ));
            }
            Some(scope) => {
                if let Err((code, message)) = scope.admits(&tool.name) {
                    return Err(Denied::new(code, message));
                }
                d.because(
                    "delegation-admits",
                    reason!(
                        "delegation {} allows {} ({} of {} call(s) used)",
                        scope.parent,
                        tool.name,
                        scope.calls_used,
                        scope.max_calls
                    ),
                );
            }
        }
    }

    Ok(())
}

/// Invariant 3: args before policy — the input schema, the size and depth limits, and paths
/// that stay in the workspace.
fn args_valid(
    d: &mut Decision,
    call: &CallUnderReview<'_>,
    tool: &RegisteredTool,
    limits: &ArgsLimits,
) -> Result<(), Denied> {
    let spec = call.spec;
    // A tool whose input schema does not even compile cannot validate args: say what it is.
    if tool.input_validator.is_none() && !tool.is_callable() {
        return Err(Denied::new(
            "tool-not-enabled",
            reason!("{} is {:?}, not enabled", tool.name, tool.lifecycle),
        ));
    }

    let (args_digest, canonical_len) = digest::args_digest_sized(&spec.args);
    d.args_digest = args_digest.ok();
    let report: ArgsReport = match &tool.input_validator {
        Some(v) => {
            let mut report = validate_sized_args_with(v, &spec.args, canonical_len, limits);
            if report.is_valid() {
                report.violations = crate::args::path_violations(
                    &tool.spec.schemas.input_schema,
                    &spec.args,
                    tool.spec.execution.adapter == toolgate_crds::ExecutionAdapter::Builtin,
                );
            }
            report
        }
        None => ArgsReport {
            violations: vec![Violation {
                pointer: String::new(),
                rule: "schema".into(),
                message: "the tool's input schema does not compile".into(),
            }],
        },
    };
    if !report.is_valid() {
        let n = report.violations.len();
        d.args_violations = report.violations.into_iter().map(Into::into).collect();
        let first = &d.args_violations[0];
        let at = if first.pointer.is_empty() {
            "/".to_string()
        } else {
            first.pointer.clone()
        };
        let msg = reason!("{n} args violation(s); first at {at}: {}", first.message);
        return Err(Denied::new("args-invalid", msg));
    }
    d.because(
        "args-valid",
        joined(&["args satisfy the input schema of ", &tool.name]),
    );

    Ok(())
}

/// The tool is callable in the version the call pins (or the current one), trusted, and does
/// what the intent says.
fn this_version_for_this_intent(
    d: &mut Decision,
    call: &CallUnderReview<'_>,
    tool: &RegisteredTool,
) -> Result<(), Denied> {
    let spec = call.spec;
    if let Some(why) = tool.held_for_review() {
        return Err(Denied::new(
            "description-review",
            reason!("{} is held: {why}", tool.name),
        ));
    }
    if !tool.is_callable() {
        return Err(Denied::new(
            "tool-not-enabled",
            reason!("{} is {:?}, not enabled", tool.name, tool.lifecycle),
        ));
    }
    match &spec.tool_ref.digest {
        Some(pinned) if *pinned != tool.digest => {
            return Err(Denied::new(
                "tool-digest-mismatch",
                reason!(
                    "the call pins {} but {} is now {}: fetch a new tool view",
                    pinned,
                    tool.name,
                    tool.digest
                ),
            ));
        }
        Some(_) => d.because(
            "tool-version-pinned",
            joined(&[&tool.name, " at ", &tool.digest]),
        ),
        None => d.because(
            "tool-version-resolved",
            joined(&[
                "no digest pinned; decided against the current version ",
                &tool.digest,
            ]),
        ),
    }
    if tool.spec.provenance.trust_level == TrustLevel::Untrusted {
        return Err(Denied::new(
            "untrusted-provenance",
            reason!(
                "{} has untrusted provenance and is never allowed",
                tool.name
            ),
        ));
    }
    if !tool
        .spec
        .intent
        .action_types
        .contains(&spec.intent.action_type)
    {
        return Err(Denied::new(
            "action-type-mismatch",
            reason!(
                "the intent says {} but {} only does {}",
                spec.intent.action_type,
                tool.name,
                tool.spec
                    .intent
                    .action_types
                    .iter()
                    .map(|a| a.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    Ok(())
}

/// A grant of the principal's covers the tool, with the scopes it requires.
fn granted<'g>(
    d: &mut Decision,
    call: &CallUnderReview<'_>,
    tool: &RegisteredTool,
    grants: &[&'g GrantEntry],
    now: Timestamp,
) -> Result<&'g GrantEntry, Denied> {
    let (grant, required) =
        match authorize_principal(tool, grants, call.namespace, call.principal, now) {
            Ok(ok) => ok,
            Err(refusal) => {
                d.missing_scopes = refusal.missing_scopes;
                return Err(Denied::new(refusal.code, refusal.message));
            }
        };
    d.grant = Some(grant.name.clone());
    let mut matched = joined_with_room(
        &[
            "grant ",
            &grant.name,
            " gives ",
            call.principal.short_name(),
            " the tool ",
            &tool.name,
            " with scopes [",
        ],
        required.iter().map(|s| s.len() + 2).sum::<usize>() + 1,
    );
    for (i, scope) in required.iter().enumerate() {
        if i > 0 {
            matched.push_str(", ");
        }
        matched.push_str(scope);
    }
    matched.push(']');
    d.because("grant-matched", matched);

    Ok(grant)
}

/// ToolPolicies narrow what the grant allows: a forbid denies, a shadow one is recorded.
fn tool_policies_allow(
    d: &mut Decision,
    call: &CallUnderReview<'_>,
    tool: &RegisteredTool,
    now: Timestamp,
) -> Result<(), Denied> {
    let spec = call.spec;
    if let Some(policies) = call.tool_policies {
        let verdict = policies.evaluate(&CedarCall {
            tool,
            principal: call.principal,
            namespace: call.namespace,
            args: &spec.args,
            target: spec.intent.target.as_ref(),
            action_type: spec.intent.action_type,
            dry_run: spec.dry_run,
            now,
        });
        for s in verdict.shadow.into_iter().take(32) {
            d.because(
                "policy-shadow-forbid",
                reason!(
                    "shadow ToolPolicy {} would forbid this call ({}): {}",
                    s.tool_policy,
                    s.policy,
                    s.reason
                ),
            );
            d.shadow_forbids.push(toolgate_crds::PolicyForbid {
                tool_policy: s.tool_policy,
                policy: s.policy,
                reason: s.reason,
            });
        }
        if let Some(f) = verdict.forbidden.first() {
            return Err(Denied::new(
                "policy-forbidden",
                reason!(
                    "ToolPolicy {} forbids this call ({}): {}",
                    f.tool_policy,
                    f.policy,
                    f.reason
                ),
            ));
        }
    }

    Ok(())
}

/// Whether a human has to approve, and whether one did: a binding approval (a denial ends the
/// call), and for an L5 call the second confirmation its tool asks for.
fn approved(
    d: &mut Decision,
    call: &CallUnderReview<'_>,
    tool: &RegisteredTool,
    grant: &toolgate_crds::ToolGrantSpec,
    approvals: &[ApprovalEntry<'_>],
    now: Timestamp,
) -> Result<DecisionOutcome, Denied> {
    let spec = call.spec;
    let perms = &tool.spec.permissions;
    let dry_run = spec.dry_run && tool.spec.effects.dry_run_supported;
    let (needs, why) = approval_needed(tool, grant, dry_run);
    d.because(
        if needs {
            "approval-required"
        } else {
            "approval-not-required"
        },
        joined(&why.pieces()),
    );
    if !needs {
        return Ok(DecisionOutcome::Allow);
    }
    let args_digest = d.args_digest.clone().unwrap_or_default();
    let subject = ApprovalSubject {
        call_name: call.name,
        session_id: spec.session_id.as_deref(),
        args_digest: &args_digest,
        tool_digest: &tool.digest,
        tier: tool.tier,
        scopes: &perms.required_scopes,
        principal: &call.principal.name,
    };
    let mut sorted: Vec<&ApprovalEntry<'_>> = approvals.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(b.name));
    let mut granted = Vec::new();
    for a in sorted {
        match check_approval(a.spec, a.consumed, &subject, now) {
            Ok(()) if a.spec.decision == ApprovalDecision::Deny => {
                d.approval = Some(a.name.to_string());
                return Err(Denied::new(
                    "approval-denied",
                    reason!("{} denied the call ({})", a.spec.approver, a.name),
                ));
            }
            Ok(()) => granted.push(a),
            Err(void) => d.because(void.code(), reason!("approval {} is void: {void}", a.name)),
        }
    }
    let Some(first) = granted.first() else {
        return Ok(DecisionOutcome::RequireApproval);
    };
    d.approval = Some(first.name.to_string());
    d.because(
        "approval-granted",
        reason!(
            "{} approved ({:?}) until {}",
            first.spec.approver,
            first.spec.decision,
            first.spec.expires_at
        ),
    );
    Ok(if tool.tier == RiskTier::L5 && !dry_run {
        confirm_l5(d, tool, &subject, &granted, call.dry_runs, now)
    } else {
        DecisionOutcome::Allow
    })
}

/// An approved L5 call needs its second confirmation, the one its tool asks for: a second
/// approver (not the first, not the principal) or a recent successful dry run of the same args
/// by the same principal. Without it the call keeps waiting, and the reasons say what is missing
/// and why each candidate does not count.
fn confirm_l5(
    d: &mut Decision,
    tool: &RegisteredTool,
    subject: &ApprovalSubject<'_>,
    granted: &[&ApprovalEntry<'_>],
    dry_runs: &[DryRunEntry<'_>],
    now: Timestamp,
) -> DecisionOutcome {
    let kind = tool.spec.strong_confirmation();
    let first = granted[0];
    let found = match kind {
        StrongConfirmation::SecondApprover => {
            for a in &granted[1..] {
                if a.spec.approver == first.spec.approver {
                    d.because(
                        "approval-same-approver",
                        reason!(
                            "approval {} is by {} again; a second approval must come from another approver",
                            a.name, a.spec.approver
                        ),
                    );
                }
            }
            granted[1..]
                .iter()
                .find(|a| a.spec.approver != first.spec.approver)
                .map(|a| {
                    (
                        a.name.to_string(),
                        reason!("{} approved too ({})", a.spec.approver, a.name),
                    )
                })
        }
        StrongConfirmation::DryRun => {
            let mut newest_first: Vec<&DryRunEntry<'_>> = dry_runs.iter().collect();
            newest_first.sort_by(|a, b| b.finished_at.cmp(&a.finished_at).then(a.name.cmp(b.name)));
            let mut found = None;
            for r in newest_first {
                match check_dry_run(r, subject, now) {
                    Ok(()) => {
                        found = Some((
                            r.name.to_string(),
                            reason!(
                                "dry run {} of the same args succeeded at {}",
                                r.name,
                                r.finished_at
                            ),
                        ));
                        break;
                    }
                    Err(void) => d.because(void.code(), reason!("{void}")),
                }
            }
            found
        }
    };
    match found {
        Some((name, message)) => {
            d.because("l5-confirmed", message);
            d.confirmation = Some(Confirmation { kind, name });
            DecisionOutcome::Allow
        }
        None => {
            let (code, message) = match kind {
                StrongConfirmation::SecondApprover => (
                    "second-approver-required",
                    reason!(
                        "{} is L5: besides {}'s approval it needs a second approver other than {} and {}",
                        tool.name,
                        first.spec.approver,
                        first.spec.approver,
                        subject.principal
                    ),
                ),
                StrongConfirmation::DryRun => (
                    "dry-run-required",
                    reason!(
                        "{} is L5: besides the approval it needs a successful dry run of args {} by {} within the last {} s; propose the same call as a dry run first (`--dry-run` on the command line, `dry_run` in the API, `dryRun: true` in a ToolCall)",
                        tool.name,
                        subject.args_digest,
                        subject.principal,
                        DRY_RUN_VALID_SECONDS
                    ),
                ),
            };
            d.because(code, message);
            DecisionOutcome::RequireApproval
        }
    }
}

/// Why a principal may not use a tool, before any approval question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Stable code.
    pub code: &'static str,
    /// What a person reads.
    pub message: String,
    /// Required scopes no live grant gives.
    pub missing_scopes: Vec<String>,
}

fn refuse(code: &'static str, message: String) -> Refusal {
    Refusal {
        code,
        message,
        missing_scopes: Vec::new(),
    }
}

/// Whether the principal may use the tool at all: the descriptor's principal lists, then a
/// live grant in the namespace that covers the tool and gives every required scope. Returns the
/// grant and the scopes it had to give. Shared by decisions, views and policy diffs.
pub fn authorize_principal<'g, 't>(
    tool: &'t RegisteredTool,
    grants: &[&'g GrantEntry],
    namespace: &str,
    principal: &Principal,
    now: Timestamp,
) -> Result<(&'g GrantEntry, Cow<'t, [String]>), Refusal> {
    let perms = &tool.spec.permissions;
    if perms.blocked_principals.contains(&principal.name) {
        return Err(refuse(
            "principal-blocked",
            reason!("{principal} is blocked from {}", tool.name),
        ));
    }
    if !perms.allowed_principals.is_empty() && !perms.allowed_principals.contains(&principal.name) {
        return Err(refuse(
            "principal-not-allowed",
            reason!(
                "{principal} is not among the principals allowed to call {}",
                tool.name
            ),
        ));
    }
    // One pass over the principal's grants, allocation-free until there is something to say:
    // every decision and every candidate of a view comes through here.
    let mut required: Cow<'t, [String]> = Cow::Borrowed(&perms.required_scopes);
    if tool.tier == RiskTier::L2 && !required.iter().any(|s| s == WORKSPACE_WRITE_SCOPE) {
        required.to_mut().push(WORKSPACE_WRITE_SCOPE.into());
    }
    fn missing_of<'a>(
        required: &'a [String],
        g: &'a GrantEntry,
    ) -> impl Iterator<Item = &'a String> {
        required
            .iter()
            .filter(|s| !g.spec.scopes.iter().any(|have| scope_covers(have, s)))
    }
    let mut any_covering = false;
    let mut first_dead: Option<Dead<'g>> = None;
    let mut best: Option<(&'g GrantEntry, usize)> = None;
    for &g in grants {
        if g.namespace != namespace || !covers(&g.spec, tool) {
            continue;
        }
        any_covering = true;
        if let Some(why) = dead(g, now) {
            first_dead.get_or_insert(why);
            continue;
        }
        let missing = missing_of(&required, g).count();
        if best.is_none_or(|(_, m)| missing < m) {
            best = Some((g, missing));
        }
    }
    if !any_covering {
        return Err(refuse(
            "no-grant",
            reason!(
                "no grant in {namespace} gives {principal} the tool {}",
                tool.name
            ),
        ));
    }
    let Some((grant, missing)) = best else {
        return Err(match first_dead {
            Some(why) => refuse(why.code(), reason!("{why}")),
            None => refuse("no-grant", String::new()),
        });
    };
    if tool.tier >= RiskTier::L3 && perms.required_scopes.is_empty() {
        return Err(refuse(
            "scopes-undeclared",
            reason!(
                "{} is {} ({}) but declares no required scopes; such a tool is never granted implicitly",
                tool.name,
                tool.tier,
                tool.tier.label()
            ),
        ));
    }
    if missing == 0 {
        return Ok((grant, required));
    }
    let missing: Vec<String> = missing_of(&required, grant).cloned().collect();
    Err(Refusal {
        code: "missing-scopes",
        message: reason!(
            "grant {} lacks scope(s) {} that {} requires",
            grant.name,
            missing.join(", "),
            tool.name
        ),
        missing_scopes: missing,
    })
}

/// Whether a grant's tool selection covers a tool.
pub fn covers(grant: &ToolGrantSpec, tool: &RegisteredTool) -> bool {
    if grant.tools.names.contains(&tool.name) {
        return true;
    }
    let Some(sel) = &grant.tools.selector else {
        return false;
    };
    (sel.action_types.is_empty()
        || tool
            .spec
            .intent
            .action_types
            .iter()
            .all(|a| sel.action_types.contains(a)))
        && sel.max_risk.is_none_or(|m| tool.spec.risk.level <= m)
        && sel.max_tier.is_none_or(|m| tool.tier <= m)
        && sel
            .match_labels
            .iter()
            .all(|(k, v)| tool.labels.get(k) == Some(v))
}

/// Why a grant is not usable now, kept as what it refers to and written out only where it is
/// read: a decision passes over every grant of its principal and says why for the first dead one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dead<'g> {
    /// Revoked.
    Revoked(&'g str),
    /// Valid only from this time.
    NotYetValid(&'g str, &'g toolgate_crds::Timestamp),
    /// Expired at this time.
    Expired(&'g str, &'g toolgate_crds::Timestamp),
    /// A budget limit reached.
    BudgetExhausted(crate::budget::Exhausted),
}

impl Dead<'_> {
    /// The reason code.
    pub fn code(&self) -> &'static str {
        match self {
            Dead::Revoked(_) => "grant-revoked",
            Dead::NotYetValid(..) => "grant-not-yet-valid",
            Dead::Expired(..) => "grant-expired",
            Dead::BudgetExhausted(_) => "budget-exhausted",
        }
    }
}

impl std::fmt::Display for Dead<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dead::Revoked(grant) => write!(f, "grant {grant} is revoked"),
            Dead::NotYetValid(grant, from) => write!(f, "grant {grant} is valid from {from}"),
            Dead::Expired(grant, at) => write!(f, "grant {grant} expired at {at}"),
            Dead::BudgetExhausted(e) => e.fmt(f),
        }
    }
}

/// Why a grant is not usable now, if it is not.
pub fn dead(g: &GrantEntry, now: Timestamp) -> Option<Dead<'_>> {
    if g.spec.revoked {
        return Some(Dead::Revoked(&g.name));
    }
    if let Some(nb) = &g.spec.not_before
        && now < nb.0
    {
        return Some(Dead::NotYetValid(&g.name, nb));
    }
    if let Some(exp) = &g.spec.expires_at
        && now >= exp.0
    {
        return Some(Dead::Expired(&g.name, exp));
    }
    g.spec
        .budget
        .as_ref()
        .and_then(|b| crate::budget::exhausted(&g.name, b, &g.usage))
        .map(Dead::BudgetExhausted)
}

/// The state of a grant at `now` and when it next changes by itself (a start or an expiry), so a
/// controller can requeue exactly then.
pub fn grant_state(
    grant: &ToolGrantSpec,
    usage: &crate::registry::GrantUsage,
    now: Timestamp,
) -> (toolgate_crds::GrantState, Option<Timestamp>) {
    use toolgate_crds::GrantState;
    if grant.revoked {
        return (GrantState::Revoked, None);
    }
    if let Some(nb) = grant.not_before
        && now < nb.0
    {
        return (GrantState::Pending, Some(nb.0));
    }
    if let Some(exp) = grant.expires_at
        && now >= exp.0
    {
        return (GrantState::Expired, None);
    }
    let next = grant.expires_at.map(|e| e.0);
    match grant
        .budget
        .as_ref()
        .and_then(|b| crate::budget::exhausted("", b, usage))
    {
        // An hourly limit frees up by itself: look again then.
        Some(e) => {
            let next = match (next, e.resets_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            (GrantState::Exhausted, next)
        }
        None => (GrantState::Active, next),
    }
}

/// `github:*` covers `github:issues:write`; `*` covers everything; otherwise equality.
pub fn scope_covers(have: &str, want: &str) -> bool {
    have == want
        || have == "*"
        || have
            .strip_suffix('*')
            .is_some_and(|prefix| want.starts_with(prefix))
}

/// Which rule decides whether a call needs a human approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalRule<'t> {
    /// The descriptor's policy is `always` (the tool's name).
    ToolAlways(&'t str),
    /// The grant's approval mode is `always`.
    GrantAlways,
    /// A dry run of a tool that supports one.
    DryRun,
    /// The tier runs without approval.
    TierRuns(RiskTier),
    /// The grant waives approval up to this tier.
    Waived(RiskTier),
    /// The tier needs an approval.
    TierNeeds(RiskTier),
}

/// Why a call does or does not need a human approval: kept as what it refers to and written out
/// only where a person reads it (a view asks for every candidate and reads none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalWhy<'t> {
    /// The rule that decided.
    pub rule: ApprovalRule<'t>,
    /// What an L5 call needs besides its approval.
    pub also_needs: Option<StrongConfirmation>,
}

impl ApprovalWhy<'_> {
    /// The text's pieces, in order (the unused ones empty): written by [`joined`] on a
    /// decision's path without the formatting machinery.
    fn pieces(&self) -> [&str; 5] {
        let also = match self.also_needs {
            None => "",
            Some(StrongConfirmation::DryRun) => {
                "; as L5 it also needs a successful dry run of the same args shortly before"
            }
            Some(StrongConfirmation::SecondApprover) => {
                "; as L5 it also needs a second, different approver"
            }
        };
        match self.rule {
            ApprovalRule::ToolAlways(tool) => {
                [tool, " requires approval for every call", also, "", ""]
            }
            ApprovalRule::GrantAlways => [
                "the grant requires approval for every call",
                also,
                "",
                "",
                "",
            ],
            ApprovalRule::DryRun => ["a dry run changes nothing", also, "", "", ""],
            ApprovalRule::TierRuns(tier) => [
                tier.as_str(),
                " (",
                tier.label(),
                ") runs without approval",
                also,
            ],
            ApprovalRule::Waived(cap) => [
                "the grant waives approval up to ",
                cap.as_str(),
                also,
                "",
                "",
            ],
            ApprovalRule::TierNeeds(tier) => [
                tier.as_str(),
                " (",
                tier.label(),
                ") needs a human approval",
                also,
            ],
        }
    }
}

impl std::fmt::Display for ApprovalWhy<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.pieces().iter().try_for_each(|p| f.write_str(p))
    }
}

/// Whether a call of this tool needs approval under this grant, and why.
///
/// Defaults by tier (DESIGN.md): L0–L3 run; L4 and L5 need approval. The descriptor's policy
/// can ask for more (`always`) but `never` does not waive the tier default; only a grant can
/// (invariant 5), up to L4, and never for a descriptor that says `always`. A dry run of a tool
/// that supports one changes nothing, so it needs no approval unless the policy is `always`.
fn approval_needed_by_rules<'t>(
    tool: &'t RegisteredTool,
    grant: &ToolGrantSpec,
    dry_run: bool,
) -> (bool, ApprovalRule<'t>) {
    let policy = tool.spec.permissions.approval_policy;
    if policy == ApprovalPolicy::Always {
        return (true, ApprovalRule::ToolAlways(&tool.name));
    }
    if grant.approval.mode == ApprovalOverrideMode::Always {
        return (true, ApprovalRule::GrantAlways);
    }
    if dry_run {
        return (false, ApprovalRule::DryRun);
    }
    let tier_needs = tool.tier >= RiskTier::L4;
    if !tier_needs {
        return (false, ApprovalRule::TierRuns(tool.tier));
    }
    if grant.approval.mode == ApprovalOverrideMode::Waive {
        let cap = grant
            .approval
            .max_waived_tier
            .unwrap_or(RiskTier::L4)
            .min(RiskTier::L4);
        if tool.tier <= cap {
            return (false, ApprovalRule::Waived(cap));
        }
    }
    (true, ApprovalRule::TierNeeds(tool.tier))
}

/// Whether a call of `tool` under `grant` needs a human approval, and why; an L5 call that is
/// not a dry run is told what it needs besides (its tool's strong confirmation).
pub fn approval_needed<'t>(
    tool: &'t RegisteredTool,
    grant: &ToolGrantSpec,
    dry_run: bool,
) -> (bool, ApprovalWhy<'t>) {
    let (needs, rule) = approval_needed_by_rules(tool, grant, dry_run);
    let also_needs =
        (needs && !dry_run && tool.tier == RiskTier::L5).then(|| tool.spec.strong_confirmation());
    (needs, ApprovalWhy { rule, also_needs })
}
