//! A step of a call: one condition of the causal chain and the phase it leads to, and the one
//! place a step becomes a condition in a status.

use jiff::Timestamp;
use toolgate_crds::conditions::{condition, set_condition};
use toolgate_crds::{CallPhase, ConditionStatus, ToolCallStatus};

use crate::decision::Decision;

/// One step of a call: a condition, and the phase after it (if it changes).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Condition type: a step of `CALL_CHAIN`, or `Cancelled`.
    pub kind: &'static str,
    /// Whether the step succeeded.
    pub status: ConditionStatus,
    /// CamelCase reason (a constant of `toolgate_crds::conditions::reason`, or [`camel`] of a
    /// decision code).
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

/// Record a step in a status: the condition is set by type (its transition time kept when the
/// status did not change, [`set_condition`]), the phase set.
pub fn apply(status: &mut ToolCallStatus, step: &Step, now: Timestamp, generation: i64) {
    set_condition(
        &mut status.conditions,
        condition(
            step.kind,
            step.status,
            &step.reason,
            step.message.clone(),
            toolgate_crds::Timestamp(now),
            Some(generation),
        ),
    );
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

/// Every phase, in the order a call can pass through them.
pub const PHASES: [CallPhase; 8] = [
    CallPhase::Pending,
    CallPhase::AwaitingApproval,
    CallPhase::Authorized,
    CallPhase::Running,
    CallPhase::Succeeded,
    CallPhase::Failed,
    CallPhase::Denied,
    CallPhase::Cancelled,
];

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

/// A decision's reasons in one line: `message (code); …`.
pub fn reasons_text(d: &Decision) -> String {
    d.reasons
        .iter()
        .map(|r| format!("{} ({})", r.message, r.code))
        .collect::<Vec<_>>()
        .join("; ")
}

/// ` after 12 ms`, or nothing.
pub(crate) fn after(elapsed: Option<std::time::Duration>) -> String {
    elapsed.map_or_else(String::new, |e| format!(" after {} ms", e.as_millis()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_crds::conditions::{ARGS_VALIDATED, reason};

    #[test]
    fn conditions_are_replaced_by_type_and_keep_their_transition_time() {
        let mut s = ToolCallStatus::default();
        let t0: Timestamp = "2026-11-30T00:00:00Z".parse().expect("t0");
        let t1: Timestamp = "2026-11-30T00:01:00Z".parse().expect("t1");
        apply(
            &mut s,
            &Step::ok(ARGS_VALIDATED, reason::SCHEMA_OK, "ok"),
            t0,
            1,
        );
        apply(
            &mut s,
            &Step::ok(ARGS_VALIDATED, reason::SCHEMA_OK, "again"),
            t1,
            1,
        );
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(s.conditions[0].last_transition_time.0, t0);
        assert_eq!(s.conditions[0].message, "again");
        apply(
            &mut s,
            &Step::failed(ARGS_VALIDATED, reason::ARGS_INVALID, "no").then(CallPhase::Denied),
            t1,
            1,
        );
        assert_eq!(s.conditions[0].last_transition_time.0, t1);
        assert_eq!(s.phase, Some(CallPhase::Denied));
        assert!(is_terminal(s.phase));
        assert_eq!(phase_name(s.phase), "Denied");
    }
}
