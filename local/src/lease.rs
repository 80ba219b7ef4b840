//! Revoking the leases a call holds once it ended (the core says when: [`lease_to_revoke`]):
//! retried with the core's backoff until the broker answers, each new failure recorded as
//! `CredentialsRevoked=False` with its reason, never dropped. A lease stays in the call's record
//! until it is revoked, so a restart picks up what a crash left.

use toolgate_core::lifecycle::{
    MAX_REVOCATION_WAIT, lease_to_revoke, revocation, revocation_failed,
};

use crate::broker::Lease;
use crate::runtime::Runtime;
use crate::store::CallRecord;

/// Revoke the leases of a call that ended.
pub(crate) fn revoke_held(rt: &Runtime, rec: &CallRecord) {
    revoke_if(rt, rec, false);
}

/// Revoke the leases a call holds after a restart: no sandbox survived it.
pub(crate) fn revoke_after_restart(rt: &Runtime, rec: &CallRecord) {
    revoke_if(rt, rec, true);
}

fn revoke_if(rt: &Runtime, rec: &CallRecord, after_restart: bool) {
    if !lease_to_revoke(&rec.status, after_restart) {
        return;
    }
    for lease in &rec.leases {
        spawn_revoke(rt.clone(), rec.id.clone(), lease.clone());
    }
}

fn spawn_revoke(rt: Runtime, id: String, lease: Lease) {
    tokio::spawn(async move {
        loop {
            match rt.inner.config.broker.revoke(&lease).await {
                Ok(()) => {
                    let recorded = rt
                        .transition(&id, |rec| {
                            rec.leases.retain(|l| l.id != lease.id);
                            Ok(revocation(&lease.binding, Ok(())))
                        })
                        .await;
                    if let Err(e) = recorded {
                        tracing::error!(call = %id, error = %e, "recording a revoked lease");
                    }
                    return;
                }
                Err(e) => {
                    let why = e.to_string();
                    tracing::warn!(call = %id, binding = %lease.binding, error = %why, "revoking a lease failed; retrying");
                    // Written only when the call does not say this failure yet; read otherwise.
                    let now = jiff::Timestamp::now();
                    let said = |status: &_| {
                        revocation_failed(status, &lease.binding, e.reason(), why.clone(), now)
                    };
                    let wait = match rt.stored(&id) {
                        Ok(rec) => {
                            let (steps, wait) = said(&rec.status);
                            if !steps.is_empty() {
                                let recorded =
                                    rt.transition(&id, |rec| Ok(said(&rec.status).0)).await;
                                if let Err(e) = recorded {
                                    tracing::error!(call = %id, error = %e, "recording a failed revocation");
                                }
                            }
                            wait
                        }
                        Err(e) => {
                            tracing::error!(call = %id, error = %e, "reading a call whose lease failed to revoke");
                            MAX_REVOCATION_WAIT
                        }
                    };
                    tokio::time::sleep(wait).await;
                }
            }
        }
    });
}
