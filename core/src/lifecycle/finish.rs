//! How a call ends once it ran or was stopped: from the executor's result, without one,
//! interrupted by a restart, or cancelled.

use toolgate_crds::conditions::{
    ARTIFACT_PERSISTED, CANCELLED, CREDENTIALS_REVOKED, FINISHED, RESULT_VALIDATED, STARTED,
    STATE_UPDATED, reason,
};
use toolgate_crds::{CallPhase, CallResult, ResultStatus, ToolCallStatus, VerifierStatus};

use super::Refusal;
use super::step::{Step, after, is_terminal, phase_name};

/// Finished, ResultValidated, ArtifactPersisted, StateUpdated from the executor's result.
pub fn finished_steps(
    status: &mut ToolCallStatus,
    result: &CallResult,
    elapsed: Option<std::time::Duration>,
) -> Vec<Step> {
    let ok = result.status == ResultStatus::Success;
    let mut steps = vec![finished(result, elapsed, ok), validated(result)];
    steps.push(if result.artifacts.is_empty() {
        Step::ok(
            ARTIFACT_PERSISTED,
            reason::NO_ARTIFACTS,
            "the call produced no output to store",
        )
    } else {
        Step::ok(
            ARTIFACT_PERSISTED,
            reason::STORED,
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
        Step::ok(STATE_UPDATED, reason::SUCCEEDED, "the result is recorded")
            .then(CallPhase::Succeeded)
    } else {
        Step::failed(STATE_UPDATED, reason::FAILED, "the result is recorded")
            .then(CallPhase::Failed)
    });
    status.result = Some(result.clone());
    steps
}

fn finished(result: &CallResult, elapsed: Option<std::time::Duration>, ok: bool) -> Step {
    let exit = result
        .exit_code
        .map_or("no exit code".into(), |c| format!("exit code {c}"));
    if ok {
        return Step::ok(
            FINISHED,
            reason::COMPLETED,
            format!("{exit}{}", after(elapsed)),
        );
    }
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
    Step::failed(FINISHED, reason::TOOL_FAILED, message)
}

fn validated(result: &CallResult) -> Step {
    match &result.verifier {
        Some(v) if v.status == VerifierStatus::Failed => Step::failed(
            RESULT_VALIDATED,
            reason::VERIFIER_FAILED,
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
        ),
        Some(v) => Step::ok(
            RESULT_VALIDATED,
            reason::VERIFIED,
            v.checks
                .iter()
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        None => Step::ok(
            RESULT_VALIDATED,
            reason::BOUNDED,
            "the result fits its bounds; no verifier configured",
        ),
    }
}

/// The executor ended without a result (it could not start, crashed, or its pod died): why,
/// in words the runtime found (never a credential: redact before).
pub fn no_result(reason: &'static str, why: impl Into<String>) -> Vec<Step> {
    vec![
        Step::failed(FINISHED, reason, why),
        Step::failed(
            STATE_UPDATED,
            reason::FAILED,
            "the call failed; see Finished",
        )
        .then(CallPhase::Failed),
    ]
}

/// toolgate stopped while the call ran. An idempotent tool runs again; any other is failed, not
/// repeated (it may or may not have taken effect).
pub fn interrupted(idempotent: bool) -> Vec<Step> {
    if idempotent {
        vec![
            Step::failed(
                STARTED,
                reason::INTERRUPTED,
                "toolgate stopped while the call ran; the tool is idempotent, so it runs again",
            )
            .then(CallPhase::Authorized),
        ]
    } else {
        vec![
            Step::failed(
                FINISHED,
                reason::INTERRUPTED,
                "toolgate stopped while the call ran; the tool is not idempotent, so it is not run again (it may or may not have taken effect)",
            )
            .then(CallPhase::Failed),
        ]
    }
}

/// Whether a call can be cancelled: not once it ended.
pub fn may_cancel(name: &str, status: &ToolCallStatus) -> Result<(), Refusal> {
    if is_terminal(status.phase) {
        return Err(Refusal::FailedPrecondition {
            code: "call-ended",
            message: format!("call {name} already ended ({})", phase_name(status.phase)),
        });
    }
    Ok(())
}

/// The step of a cancellation, recorded once whatever ran is stopped.
pub fn cancelled(who_and_why: &str) -> Vec<Step> {
    vec![
        Step::ok(
            CANCELLED,
            reason::CANCELLED_BY_USER,
            format!("cancelled by {who_and_why}"),
        )
        .then(CallPhase::Cancelled),
    ]
}

/// What a cancellation records: who and why, in one line (the cluster keeps it in an
/// annotation until the controller stops the pod).
pub fn cancellation(who: &str, reason: &str) -> String {
    let reason = if reason.is_empty() {
        "no reason given"
    } else {
        reason
    };
    format!("{who}: {reason}")
}

/// Whether a call's leased credential is to be revoked now: once the call ended, or when
/// toolgate finds it running after a restart (no sandbox survives one, so no tool still uses it).
pub fn lease_to_revoke(status: &ToolCallStatus, after_restart: bool) -> bool {
    after_restart || is_terminal(status.phase)
}

/// CredentialsRevoked after revoking the lease of `binding`: `Ok`, or the broker's reason and
/// words (the runtime retries with backoff and records each failure).
pub fn revocation(binding: &str, outcome: Result<(), (&'static str, String)>) -> Vec<Step> {
    vec![match outcome {
        Ok(()) => Step::ok(
            CREDENTIALS_REVOKED,
            reason::LEASE_REVOKED,
            format!("the lease of CredentialBinding {binding} was revoked"),
        ),
        Err((broker_reason, why)) => Step::failed(
            CREDENTIALS_REVOKED,
            reason::REVOKE_FAILED,
            format!(
                "revoking the lease of CredentialBinding {binding} failed ({broker_reason}): {why}; retried with backoff"
            ),
        ),
    }]
}

/// The longest wait between two attempts to revoke a lease.
pub const MAX_REVOCATION_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A failed attempt to revoke the lease of `binding`, as the call records it, and when to try
/// again: the step (none when the call already says exactly this), and a wait as long as the
/// failure has lasted (from CredentialsRevoked=False's transition: 1 s, 2 s, 4 s, … up to
/// [`MAX_REVOCATION_WAIT`]). Read from the status alone, so a restarted runtime picks up the same
/// backoff.
pub fn revocation_failed(
    status: &ToolCallStatus,
    binding: &str,
    broker_reason: &'static str,
    why: String,
    now: jiff::Timestamp,
) -> (Vec<Step>, std::time::Duration) {
    let previous = status.conditions.iter().find(|c| {
        c.type_ == CREDENTIALS_REVOKED && c.status == toolgate_crds::ConditionStatus::False
    });
    let wait = previous
        .and_then(|c| now.duration_since(c.last_transition_time.0).try_into().ok())
        .unwrap_or(std::time::Duration::ZERO)
        .clamp(std::time::Duration::from_secs(1), MAX_REVOCATION_WAIT);
    let mut steps = revocation(binding, Err((broker_reason, why)));
    if previous.map(|c| &c.message) == steps.first().map(|s| &s.message) {
        steps.clear();
    }
    (steps, wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_revocation_is_said_once_and_waits_as_long_as_it_has_lasted() {
        let t0 = jiff::Timestamp::UNIX_EPOCH;
        let mut status = ToolCallStatus::default();
        let (steps, wait) =
            revocation_failed(&status, "b", "BrokerUnavailable", "sealed".into(), t0);
        assert_eq!(steps.len(), 1);
        assert_eq!(wait, std::time::Duration::from_secs(1));
        crate::lifecycle::apply(&mut status, &steps[0], t0, 1);
        let later = t0 + jiff::SignedDuration::from_secs(8);
        let (steps, wait) =
            revocation_failed(&status, "b", "BrokerUnavailable", "sealed".into(), later);
        assert!(steps.is_empty(), "the same failure is not recorded twice");
        assert_eq!(wait, std::time::Duration::from_secs(8));
        let (steps, _) = revocation_failed(&status, "b", "BrokerForbidden", "denied".into(), later);
        assert_eq!(steps.len(), 1, "a new failure is recorded");
        let much_later = t0 + jiff::SignedDuration::from_secs(3600);
        let (_, wait) = revocation_failed(
            &status,
            "b",
            "BrokerUnavailable",
            "sealed".into(),
            much_later,
        );
        assert_eq!(wait, MAX_REVOCATION_WAIT);
    }
}
