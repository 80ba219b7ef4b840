//! CancelCall on the embedded runtime: a waiting or authorized call ends at once; a running one
//! has its sandbox killed, and the run records the cancellation when the sandbox is gone.

use toolgate_api::{ApiError, Caller};
use toolgate_core::lifecycle::{cancellation, cancelled, may_answer, may_cancel};
use toolgate_crds::CallPhase;

use crate::runtime::{Runtime, call_of, lock};
use crate::slot::kill_group;
use crate::store::CallRecord;

impl Runtime {
    /// Cancel a call: its principal or an approver of its namespace.
    pub async fn cancel(
        &self,
        caller: &Caller,
        id: &str,
        reason: &str,
    ) -> Result<CallRecord, ApiError> {
        let rec = self.get(caller, id)?;
        may_answer(
            caller.name(),
            &call_of(&rec),
            caller.approves_in(&rec.namespace),
        )?;
        may_cancel(&rec.id, &rec.status)?;
        let who = cancellation(caller.name(), reason);
        // A running delegation has no sandbox to kill: it ends here (its token with it).
        let delegation = self.subagent_of(&self.loaded(), &rec).is_some();
        if rec.status.phase == Some(CallPhase::Running) && !delegation {
            lock(&self.inner.cancelled).insert(id.to_string(), who);
            if let Some(pgid) = lock(&self.inner.running).get(id).copied() {
                kill_group(pgid);
            }
            // The run records the cancellation when the sandbox is gone.
            return self.get(caller, id);
        }
        self.transition(id, |rec| {
            may_cancel(&rec.id, &rec.status)?;
            Ok(cancelled(&who))
        })
        .await
    }
}
