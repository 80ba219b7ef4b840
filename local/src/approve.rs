//! ApproveCall and DenyCall on the embedded runtime: the core issues the approval contract
//! bound to what the approver was shown; the runtime keeps it with the call and lets the core
//! decide again.

use toolgate_api::{ApiError, Caller};
use toolgate_core::lifecycle::{ApprovalRequest, awaiting, issue};
use toolgate_crds::{ApprovalDecision, CallPhase};

use crate::runtime::{Runtime, call_of};
use crate::store::{ApprovalRecord, CallRecord};

impl Runtime {
    /// Approve (or deny) a call as `caller`, bound to the digests the approver was shown.
    pub async fn decide_approval(
        &self,
        caller: &Caller,
        id: &str,
        decision: ApprovalDecision,
        shown: Option<(&str, &str)>,
        ttl_seconds: u32,
        comment: &str,
    ) -> Result<CallRecord, ApiError> {
        let rec = self.get(caller, id)?;
        if caller.name() != rec.spec.principal && !caller.approves_in(&rec.namespace) {
            return Err(ApiError::PermissionDenied {
                code: "not-an-approver",
                message: format!(
                    "{} may not approve or deny calls in namespace {}",
                    caller.name(),
                    rec.namespace
                ),
            });
        }
        let loaded = self.loaded();
        let request = ApprovalRequest {
            approver: caller.name(),
            decision,
            shown,
            ttl_seconds,
            comment,
        };
        let rec = self
            .transition(id, |rec| {
                let dry_runs = self.dry_runs_for(&loaded, rec)?;
                let earlier = self.snapshot(&loaded, rec, &rec.approvals, &[], &dry_runs)?;
                let spec = issue(&earlier, &call_of(rec), &request)?;
                let mut approvals = rec.approvals.clone();
                approvals.push(ApprovalRecord {
                    name: approval_name(&rec.id, approvals.len()),
                    spec,
                    consumed: false,
                });
                let snap = self.snapshot(&loaded, rec, &approvals, &[], &dry_runs)?;
                let mut status = rec.status.clone();
                let steps = awaiting(&snap, &call_of(rec), &mut status);
                if steps.is_empty() {
                    let why = snap
                        .decide(&call_of(rec))
                        .reasons
                        .last()
                        .map(|r| r.message.clone())
                        .unwrap_or_default();
                    return Err(ApiError::FailedPrecondition {
                        code: "approval-not-binding",
                        message: format!("the approval does not authorize the call: {why}"),
                    });
                }
                rec.status = status;
                rec.approvals = approvals;
                Ok(steps)
            })
            .await?;
        if rec.status.phase == Some(CallPhase::Authorized) {
            crate::run::spawn(self, rec.id.clone());
        }
        Ok(rec)
    }
}

/// The name of a call's approval: `<call>-approval`, then `-approval-2`, … for an L5 call's
/// second approver.
fn approval_name(call: &str, earlier: usize) -> String {
    match earlier {
        0 => format!("{call}-approval"),
        n => format!("{call}-approval-{}", n + 1),
    }
}
