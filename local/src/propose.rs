//! ProposeCall on the embedded runtime: the proposal checked, its tool named as registered, the
//! idempotency key honoured, the call decided by the core and recorded before the caller hears
//! (and started in the same write when a sandbox waits for it and no credential is needed).

use jiff::Timestamp;
use toolgate_api::{ApiError, Caller};
use toolgate_core::lifecycle::{Call, propose, same_proposal};
use toolgate_crds::CallPhase;

use crate::runtime::{Recorded, Runtime, internal};
use crate::store::CallRecord;

impl Runtime {
    /// Propose a call as `caller`.
    pub async fn propose(
        &self,
        caller: &Caller,
        req: toolgate_proto::v1::ProposeCallRequest,
    ) -> Result<CallRecord, ApiError> {
        let proposal = toolgate_api::request::Proposal::validate(caller, &req)?;
        let namespace = proposal.namespace.clone();
        let loaded = self.loaded();
        let registry = &loaded.policies.registry;
        toolgate_core::lifecycle::may_propose_in(registry, &namespace, &caller.grantee())?;
        let tool_name = registry.resolve_name(&namespace, &proposal.tool);
        // Pin the version decided against, so the record names it (invariant 1).
        let digest = proposal.tool_digest.clone().or_else(|| {
            registry
                .tool(&namespace, &tool_name)
                .map(|t| t.digest.clone())
        });
        let actions = registry
            .tool(&namespace, &tool_name)
            .map(|t| t.spec.intent.action_types.clone());
        let spec = proposal.into_spec(caller, tool_name, digest, actions.as_deref())?;
        let guard = self.write_lock().await;
        let idem_key = spec
            .idempotency_key
            .as_ref()
            .map(|k| format!("{namespace}/{}/{k}", caller.name()));
        if let Some(key) = &idem_key
            && let Some(existing) = self.inner.store.by_idempotency_key(key).map_err(internal)?
            && let Some(rec) = self.inner.store.get(&existing).map_err(internal)?
        {
            same_proposal(&rec.id, &rec.spec, &spec)?;
            return Ok(rec);
        }
        let now = Timestamp::now();
        let mut rec = CallRecord {
            id: toolgate_api::request::new_call_name(now),
            namespace: namespace.clone(),
            spec,
            status: Default::default(),
            created_at: now,
            groups: caller.principal.groups.clone(),
            approvals: Vec::new(),
            sandbox: None,
            events: 0,
            attempts: 0,
            leases: Vec::new(),
            traceparent: toolgate_api::trace::request_traceparent(),
            delegation_token: None,
        };
        let session = self.session_approvals(&rec)?;
        let config = &self.inner.config;
        let mut status = rec.status.clone();
        // One snapshot for the proposal and, when it starts at once, its start: decided once.
        let snap = self.snapshot(&loaded, &rec, &[], &session, &[])?;
        let steps = {
            let call = Call {
                namespace: &rec.namespace,
                name: &rec.id,
                spec: &rec.spec,
                status: &rec.status,
            };
            propose(&snap, &call, &mut status, |target| {
                crate::place::sandbox_plan(config, &loaded.hidden, target)
                    .map(drop)
                    .map_err(|e| e.to_string())
            })
        };
        rec.status = status;
        let mut recorded = Recorded::default();
        self.record(&mut rec, &steps, &mut recorded)?;
        // An authorized call that needs nothing asked first starts in this same write.
        let started = crate::run::start_with_proposal(self, &mut rec, &snap)?;
        let placed = match started {
            Some(at_once) => {
                self.record(&mut rec, &at_once.steps, &mut recorded)?;
                at_once.placed
            }
            None => None,
        };
        let rec = self.commit(rec, recorded, idem_key.as_deref())?;
        drop(guard);
        match placed {
            Some(placed) => crate::run::spawn_placed(self, rec.clone(), placed),
            None if rec.status.phase == Some(CallPhase::Authorized) => {
                crate::run::spawn(self, rec.id.clone());
            }
            None => {}
        }
        Ok(rec)
    }
}
