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
