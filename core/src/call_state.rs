//! The call state machine: one condition per step of the causal chain, and the phase it leads
//! to. Both runtimes record steps through here, so `kubectl describe`, ExplainCall and the local
//! event log tell the same story.

use jiff::Timestamp;
use toolgate_crds::conditions::{
    APPROVAL_REQUESTED, ARGS_VALIDATED, ARTIFACT_PERSISTED, FINISHED, POLICY_CHECKED,
    RESULT_VALIDATED, STATE_UPDATED,
};
use toolgate_crds::{
    CallPhase, CallResult, Condition, ConditionStatus, DecisionOutcome, ResultStatus, ToolCallSpec,
    ToolCallStatus, VerifierStatus,
};

use crate::decision::Decision;

/// One step of a call: a condition, and the phase after it (if it changes).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Condition type: a step of `CALL_CHAIN`, or `Cancelled`.
    pub kind: &'static str,
    /// Whether the step succeeded.
    pub status: ConditionStatus,
    /// CamelCase reason.
    pub reason: String,
    /// What a person reads. Never a credential.
    pub message: String,
    /// The phase after the step.
    pub phase: Option<CallPhase>,
}

impl Step {
    /// A step that held.
    pub fn ok(kind: &'static str, reason: impl Into<String>, message: impl Into<String>) -> Self {
        Step {
            kind,
            status: ConditionStatus::True,
            reason: reason.into(),
            message: message.into(),
            phase: None,
        }
    }

    /// A step that failed.
    pub fn failed(
        kind: &'static str,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Step {
            status: ConditionStatus::False,
            ..Step::ok(kind, reason, message)
        }
    }

    /// Set the phase the step leads to.
    pub fn then(mut self, phase: CallPhase) -> Self {
        self.phase = Some(phase);
        self
    }
}

/// Record a step in a status: the condition is replaced by type (its transition time kept when
/// the status did not change), the phase set.
pub fn apply(status: &mut ToolCallStatus, step: &Step, now: Timestamp, generation: i64) {
    let condition = Condition {
        type_: step.kind.to_string(),
        status: step.status,
        reason: step.reason.clone(),
        message: step.message.clone(),
        last_transition_time: toolgate_crds::Timestamp(now),
        observed_generation: Some(generation),
    };
    match status.conditions.iter_mut().find(|c| c.type_ == step.kind) {
        Some(c) => {
            let kept = (c.status == step.status).then_some(c.last_transition_time);
            *c = condition;
            if let Some(t) = kept {
                c.last_transition_time = t;
            }
        }
        None => status.conditions.push(condition),
    }
    if let Some(p) = step.phase {
        status.phase = Some(p);
    }
    status.observed_generation = Some(generation);
}

/// Whether a call in this phase is over.
pub fn is_terminal(phase: Option<CallPhase>) -> bool {
    matches!(
        phase,
        Some(CallPhase::Succeeded | CallPhase::Failed | CallPhase::Denied | CallPhase::Cancelled)
    )
}

/// The phase as the API spells it.
pub fn phase_name(phase: Option<CallPhase>) -> &'static str {
    match phase {
        None | Some(CallPhase::Pending) => "Pending",
        Some(CallPhase::AwaitingApproval) => "AwaitingApproval",
        Some(CallPhase::Authorized) => "Authorized",
        Some(CallPhase::Running) => "Running",
        Some(CallPhase::Succeeded) => "Succeeded",
        Some(CallPhase::Failed) => "Failed",
        Some(CallPhase::Denied) => "Denied",
        Some(CallPhase::Cancelled) => "Cancelled",
    }
}

/// The first step of every call: it was received and recorded.
pub fn requested(spec: &ToolCallSpec) -> Step {
    Step::ok(
        toolgate_crds::conditions::TOOL_CALL_REQUESTED,
        "Accepted",
        format!(
            "{} proposed {} ({})",
            spec.principal, spec.tool_ref.name, spec.intent.current_task
        ),
    )
    .then(CallPhase::Pending)
}

/// When the decision taken again right before running no longer allows the call: the steps that
/// end it (the manifests changed, the approval expired or stopped binding, the grant went).
pub fn recheck_steps(d: &Decision) -> Option<Vec<Step>> {
    if d.outcome == DecisionOutcome::Allow {
        return None;
    }
    let code = d.reasons.last().map_or("decision-changed", |r| r.code);
    Some(vec![
        Step::failed(
            POLICY_CHECKED,
            camel(code),
            format!("checked again before running: {}", reasons_text(d)),
        ),
        Step::failed(STATE_UPDATED, "Denied", "the call ended without running")
            .then(CallPhase::Denied),
    ])
}

/// What an allowed call runs with, found before anything runs (invariant 10).
#[derive(Debug, Clone, Copy)]
pub struct RunTarget<'a> {
    /// The registered tool.
    pub tool: &'a crate::registry::RegisteredTool,
    /// Name of its sandbox policy.
    pub policy_name: &'a str,
    /// The sandbox policy.
    pub policy: &'a toolgate_crds::SandboxPolicySpec,
    /// Its credential binding, by name, if it has one.
    pub binding: Option<(&'a str, &'a toolgate_crds::CredentialBindingSpec)>,
}

/// The steps that end a call that cannot run: the condition at fault, then `StateUpdated`.
pub fn cannot_run(kind: &'static str, reason: &str, message: impl Into<String>) -> Vec<Step> {
    vec![
        Step::failed(kind, reason.to_string(), message),
        Step::failed(STATE_UPDATED, "Failed", "the call ended without running")
            .then(CallPhase::Failed),
    ]
}

/// Look up the tool, its sandbox policy and its credential binding in a namespace. Both runtimes
/// use this, so a call that cannot run fails for the same reason with the same words.
pub fn run_target<'a>(
    registry: &'a crate::registry::Registry,
    objects: &'a crate::manifest::ObjectSet,
    namespace: &str,
    tool_name: &str,
) -> Result<RunTarget<'a>, Vec<Step>> {
    use crate::manifest::Spec;
    use toolgate_crds::conditions::{CREDENTIALS_BOUND, SANDBOX_PREPARED};
    let tool = registry.tool(namespace, tool_name).ok_or_else(|| {
        cannot_run(
            SANDBOX_PREPARED,
            "ToolMissing",
            format!("tool {tool_name} is gone"),
        )
    })?;
    let policy_name = tool
        .spec
        .sandbox_policy_ref
        .as_ref()
        .map(|r| r.name.as_str())
        .ok_or_else(|| {
            cannot_run(
                SANDBOX_PREPARED,
                "SandboxPolicyMissing",
                format!("tool {tool_name} names no sandboxPolicyRef; nothing runs without one"),
            )
        })?;
    let policy = match objects
        .find("SandboxPolicy", namespace, policy_name)
        .map(|o| &o.spec)
    {
        Some(Spec::SandboxPolicy(p)) => &**p,
        _ => {
            return Err(cannot_run(
                SANDBOX_PREPARED,
                "SandboxPolicyMissing",
                format!("SandboxPolicy {policy_name} does not exist in {namespace}"),
            ));
        }
    };
    let binding = match &tool.spec.credential_binding_ref {
        None => None,
        Some(r) => match objects
            .find("CredentialBinding", namespace, &r.name)
            .map(|o| &o.spec)
        {
            Some(Spec::CredentialBinding(b)) => Some((r.name.as_str(), &**b)),
            _ => {
                return Err(cannot_run(
                    CREDENTIALS_BOUND,
                    "BindingMissing",
                    format!("CredentialBinding {} does not exist in {namespace}", r.name),
                ));
            }
        },
    };
    Ok(RunTarget {
        tool,
        policy_name,
        policy,
        binding,
    })
}

/// `grant-matched` → `GrantMatched` (condition reasons are CamelCase).
pub fn camel(code: &str) -> String {
    code.split(['-', '_'])
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn after(elapsed: Option<std::time::Duration>) -> String {
    elapsed.map_or_else(String::new, |e| format!(" after {} ms", e.as_millis()))
}

/// A decision's reasons in one line: `message (code); …`.
pub fn reasons_text(d: &Decision) -> String {
    d.reasons
        .iter()
        .map(|r| format!("{} ({})", r.message, r.code))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether the call can be placed where this runtime runs calls, found before anyone is asked
/// to approve it (invariant 10: the sandbox policy is resolved before anything executes; a human
/// should not approve a call whose sandbox cannot be honoured). `place` is the runtime's own
/// check of the target (local: the sandbox plan; cluster: the pod's NetworkPolicy and
/// confinement); `None` when the call can be placed.
pub fn unplaceable(
    registry: &crate::registry::Registry,
    objects: &crate::manifest::ObjectSet,
    namespace: &str,
    tool_name: &str,
    place: impl FnOnce(&RunTarget<'_>) -> Result<(), String>,
) -> Option<Vec<Step>> {
    use toolgate_crds::conditions::SANDBOX_PREPARED;
    let target = match run_target(registry, objects, namespace, tool_name) {
        Ok(t) => t,
        Err(steps) => return Some(steps),
    };
    place(&target).err().map(|e| {
        cannot_run(
            SANDBOX_PREPARED,
            "SandboxRefused",
            format!("SandboxPolicy {}: {e}", target.policy_name),
        )
    })
}

/// The steps a decision adds: ArgsValidated, PolicyChecked, and ApprovalRequested or the end.
/// A call the decision lets run (now or once approved) must also be placeable: `unplaceable`
/// (see [`unplaceable`]) is asked then, and its steps end the call before ApprovalRequested.
pub fn decision_steps(
    status: &mut ToolCallStatus,
    spec: &ToolCallSpec,
    d: &Decision,
    required_scopes: &[String],
    now: Timestamp,
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
                format!(
                    "{}: {}",
                    if v.pointer.is_empty() {
                        "/"
                    } else {
                        &v.pointer
                    },
                    v.message
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        steps.push(Step::failed(ARGS_VALIDATED, "ArgsInvalid", v).then(CallPhase::Denied));
        steps.push(Step::failed(
            STATE_UPDATED,
            "Denied",
            "the call ended without running",
        ));
        return steps;
    }
    if d.args_digest.is_some() {
        steps.push(Step::ok(
            ARGS_VALIDATED,
            "SchemaOk",
            format!(
                "args match the input schema of {} ({})",
                spec.tool_ref.name,
                d.args_digest.as_deref().unwrap_or_default()
            ),
        ));
    }
    let first_code = d.reasons.last().map(|r| r.code).unwrap_or("decided");
    if d.outcome != DecisionOutcome::Deny
        && let Some(refused) = unplaceable()
    {
        let reason = if d.outcome == DecisionOutcome::Allow {
            "Allowed"
        } else {
            "ApprovalRequired"
        };
        steps.push(Step::ok(POLICY_CHECKED, reason, reasons));
        steps.extend(refused);
        return steps;
    }
    match d.outcome {
        DecisionOutcome::Deny => {
            steps.push(
                Step::failed(POLICY_CHECKED, camel(first_code), reasons).then(CallPhase::Denied),
            );
        }
        DecisionOutcome::RequireApproval => {
            steps.push(Step::ok(POLICY_CHECKED, "ApprovalRequired", reasons));
            let tier = d.risk_tier.map(|t| t.to_string()).unwrap_or_default();
            let scopes = required_scopes.join(", ");
            steps.push(
                Step::ok(
                    APPROVAL_REQUESTED,
                    "AwaitingApproval",
                    format!(
                        "risk {tier}, scopes [{scopes}]: an approver other than {} must approve args {} for tool version {}",
                        spec.principal,
                        d.args_digest.as_deref().unwrap_or_default(),
                        d.tool_digest.as_deref().unwrap_or_default()
                    ),
                )
                .then(CallPhase::AwaitingApproval),
            );
        }
        DecisionOutcome::Allow => {
            steps.push(Step::ok(POLICY_CHECKED, "Allowed", reasons).then(CallPhase::Authorized));
        }
    }
    if d.outcome == DecisionOutcome::Deny {
        steps.push(Step::failed(
            STATE_UPDATED,
            "Denied",
            "the call ended without running",
        ));
    }
    steps
}

/// Finished, ResultValidated, ArtifactPersisted, StateUpdated from the executor's result.
pub fn finished_steps(
    status: &mut ToolCallStatus,
    result: &CallResult,
    elapsed: Option<std::time::Duration>,
) -> Vec<Step> {
    let ok = result.status == ResultStatus::Success;
    let exit = result
        .exit_code
        .map_or("no exit code".into(), |c| format!("exit code {c}"));
    let mut steps = vec![if ok {
        Step::ok(FINISHED, "Completed", format!("{exit}{}", after(elapsed)))
    } else {
        // The error's message names what happened (which exit code, which signal, which limit)
        // and the tool's own words; only without an error does the exit code lead.
        let message = match &result.error {
            Some(e) if e.message.trim().is_empty() => format!("{}{}", e.code, after(elapsed)),
            Some(e) => format!("{}{}: {}", e.code, after(elapsed), e.message),
            None => format!(
                "{exit}{}: {}",
                after(elapsed),
                format!("{:?}", result.status).to_lowercase()
            ),
        };
        Step::failed(FINISHED, "ToolFailed", message)
    }];
    match &result.verifier {
        Some(v) if v.status == VerifierStatus::Failed => steps.push(Step::failed(
            RESULT_VALIDATED,
            "VerifierFailed",
            v.checks
                .iter()
                .map(|c| {
                    format!(
                        "{}: {:?}{}",
                        c.name,
                        c.result,
                        c.message
                            .as_deref()
                            .map(|m| format!(" ({m})"))
                            .unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        )),
        Some(v) => steps.push(Step::ok(
            RESULT_VALIDATED,
            "Verified",
            v.checks
                .iter()
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
                .join(", "),
        )),
        None => steps.push(Step::ok(
            RESULT_VALIDATED,
            "Bounded",
            "the result fits its bounds; no verifier configured",
        )),
    }
    steps.push(if result.artifacts.is_empty() {
        Step::ok(
            ARTIFACT_PERSISTED,
            "NoArtifacts",
            "the call produced no output to store",
        )
    } else {
        Step::ok(
            ARTIFACT_PERSISTED,
            "Stored",
            result
                .artifacts
                .iter()
                .map(|a| {
                    format!(
                        "{} ({} bytes, {})",
                        a.artifact_id, a.size_bytes, a.content_hash
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        )
    });
    let verified = !matches!(&result.verifier, Some(v) if v.status == VerifierStatus::Failed);
    steps.push(if ok && verified {
        Step::ok(STATE_UPDATED, "Succeeded", "the result is recorded").then(CallPhase::Succeeded)
    } else {
        Step::failed(STATE_UPDATED, "Failed", "the result is recorded").then(CallPhase::Failed)
    });
    status.result = Some(result.clone());
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_are_replaced_by_type_and_keep_their_transition_time() {
        let mut s = ToolCallStatus::default();
        let t0: Timestamp = "2026-11-30T00:00:00Z".parse().expect("t0");
        let t1: Timestamp = "2026-11-30T00:01:00Z".parse().expect("t1");
        apply(&mut s, &Step::ok("ArgsValidated", "SchemaOk", "ok"), t0, 1);
        apply(
            &mut s,
            &Step::ok("ArgsValidated", "SchemaOk", "again"),
            t1,
            1,
        );
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(s.conditions[0].last_transition_time.0, t0);
        assert_eq!(s.conditions[0].message, "again");
        apply(
            &mut s,
            &Step::failed("ArgsValidated", "ArgsInvalid", "no").then(CallPhase::Denied),
            t1,
            1,
        );
        assert_eq!(s.conditions[0].last_transition_time.0, t1);
        assert_eq!(s.phase, Some(CallPhase::Denied));
        assert!(is_terminal(s.phase));
        assert_eq!(phase_name(s.phase), "Denied");
    }
}
