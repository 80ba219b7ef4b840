//! The call state machine: one condition per step of the causal chain, and the phase it leads
//! to. Both runtimes record steps through here, so `kubectl describe`, ExplainCall and the local
//! event log tell the same story.

use jiff::Timestamp;
use toolgate_crds::{CallPhase, Condition, ConditionStatus, ToolCallStatus};

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
