//! What a call is decided against: the shared caches ([`crate::cache`]), unless they would end
//! the call — a deny, or no tool, policy or binding to run with — which may only mean that a
//! new object has not reached them yet; then the API server's view
//! ([`crate::policies::dereference`]).

use toolgate_core::lifecycle::{Call, Snapshot, run_target};
use toolgate_crds::DecisionOutcome;

/// Whether a snapshot would end the call: then it is confirmed against the API server.
pub(super) fn would_end(snapshot: &Snapshot<'_>, call: &Call<'_>) -> bool {
    snapshot.decide(call).outcome == DecisionOutcome::Deny
        || run_target(
            snapshot.registry,
            snapshot.objects,
            call.namespace,
            &call.spec.tool_ref.name,
        )
        .is_err()
}
