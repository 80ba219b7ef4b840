//! ApproveCall and DenyCall on the embedded runtime: the core issues the approval contract
//! bound to what the approver was shown; the runtime keeps it with the call and lets the core
//! decide again.

use toolgate_api::{ApiError, Caller};
use toolgate_core::lifecycle::{ApprovalRequest, approve, awaiting, may_answer};
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
        may_answer(
            caller.name(),
            &call_of(&rec),
            caller.approves_in(&rec.namespace),
        )?;
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
                let session = self.session_approvals(rec)?;
                let earlier = self.snapshot(&loaded, rec, &rec.approvals, &session, &dry_runs)?;
                let name = approval_name(&rec.id, rec.approvals.len());
                let spec = approve(&earlier, &call_of(rec), &request, &name)?;
                let mut approvals = rec.approvals.clone();
                approvals.push(ApprovalRecord {
                    name,
                    spec,
                    consumed: false,
                });
                let snap = self.snapshot(&loaded, rec, &approvals, &session, &dry_runs)?;
                let mut status = rec.status.clone();
                let steps = awaiting(&snap, &call_of(rec), &mut status);
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
