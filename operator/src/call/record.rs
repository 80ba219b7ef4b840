//! Recording steps on a ToolCall: its status by server-side apply, one Event per transition
//! (the steps recorded together, told in one note), and the phase and decision metrics.

use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use toolgate_core::lifecycle::{Step, apply, budget_move, settle};
use toolgate_crds::conditions::POLICY_CHECKED;
use toolgate_crds::{ConditionStatus, ToolCall, ToolCallStatus, ToolGrant};

use super::{Context, Error, kube_error};
use crate::kit::FIELD_MANAGER;
use crate::policies::call_of;

/// Reads and writes of a grant's ledger before a charge gives up (each conflict is another
/// replica or call charging at the same moment).
const BUDGET_ATTEMPTS: usize = 32;

/// Who owns a grant's ledger fields (`kubectl get -o yaml --show-managed-fields` says so).
const BUDGET_FIELD_MANAGER: &str = "toolgate-budget";

impl Context {
    /// Record steps on the call's status (server-side apply) and publish one Event for them. A
    /// transition that authorizes the call charges its grant's budget first, one that ends it
    /// before it started gives the unit back ([`Context::budget`]).
    pub(super) async fn record(
        &self,
        call: &ToolCall,
        status: &mut ToolCallStatus,
        steps: &[Step],
    ) -> Result<(), Error> {
        if steps.is_empty() {
            return Ok(());
        }
        let began = std::time::SystemTime::now();
        let mut steps = steps.to_vec();
        self.budget(call, status, &mut steps).await?;
        let steps = steps.as_slice();
        let generation = call.metadata.generation.unwrap_or(1);
        for s in steps {
            apply(status, s, jiff::Timestamp::now(), generation);
        }
        let ns = call
            .namespace()
            .ok_or_else(|| Error::NoNamespace(call.name_any()))?;
        // Written against the version the steps were decided from: a replica or a reconcile
        // that read the call before another wrote it is refused (409) and decides again from
        // what is there, instead of overwriting a newer state with an older one.
        let patch = serde_json::json!({
            "apiVersion": toolgate_crds::API_VERSION,
            "kind": "ToolCall",
            "metadata": {"resourceVersion": call.metadata.resource_version},
            "status": status,
        });
        match Api::<ToolCall>::namespaced(self.client.clone(), &ns)
            .patch_status(
                &call.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                return Err(Error::Stale(call.name_any()));
            }
            Err(e) => return Err(kube_error("patching the call's status")(e)),
        }
        self.count(&ns, &call.spec.tool_ref.name, status, steps);
        self.config
            .tracer
            .record(&super::traced(call), status, steps, began);
        let reference = call.object_ref(&());
        self.shadowed(call, status, steps, &reference).await;
        if let Err(e) = self.recorder.publish(&event_of(steps), &reference).await {
            tracing::warn!(call = %call.name_any(), error = %e, "publishing an event");
        }
        tracing::info!(call = %call.name_any(), namespace = %ns, steps = ?steps.iter().map(|s| s.kind).collect::<Vec<_>>(), phase = ?status.phase, "recorded");
        Ok(())
    }

    /// Charge or refund the grant's budget the steps call for, on the grant's status under
    /// optimistic concurrency (a conflicting write is read again and retried), so two replicas,
    /// a restart or a burst never spend one unit twice or lose one. An exhausted budget turns the
    /// authorizing step into the refusal.
    async fn budget(
        &self,
        call: &ToolCall,
        status: &mut ToolCallStatus,
        steps: &mut Vec<Step>,
    ) -> Result<(), Error> {
        let movement = budget_move(status, steps);
        let Some(grant) = movement.grant().map(str::to_string) else {
            return Ok(());
        };
        let ns = call
            .namespace()
            .ok_or_else(|| Error::NoNamespace(call.name_any()))?;
        let name = call.name_any();
        let api = Api::<ToolGrant>::namespaced(self.client.clone(), &ns);
        for attempt in 0..BUDGET_ATTEMPTS {
            // The cached grant first (usually current: no request but the write); after a
            // conflict, or without a version to write against, the API server's.
            let cached = match attempt {
                0 => self
                    .cache
                    .grant(&ns, &grant)
                    .filter(|g| g.metadata.resource_version.is_some()),
                _ => None,
            };
            let g = match cached {
                Some(g) => Arc::unwrap_or_clone(g),
                None => match api
                    .get_opt(&grant)
                    .await
                    .map_err(kube_error("reading the grant's budget"))?
                {
                    Some(g) => g,
                    // The grant is gone: nothing to count; the re-check before running denies it.
                    None => return Ok(()),
                },
            };
            let before = g.status.clone().unwrap_or_default();
            let mut ledger = before.clone();
            let (mut next_steps, mut next_status) = (steps.clone(), status.clone());
            let current = next_status.clone();
            settle(
                &movement,
                &call_of(call, &name, &ns, &current),
                &mut next_steps,
                &mut next_status,
                g.spec.budget.as_ref(),
                &mut ledger,
                jiff::Timestamp::now(),
            );
            if ledger != before {
                let patch = serde_json::json!({
                    "metadata": {"resourceVersion": g.metadata.resource_version},
                    "status": {
                        "callsUsed": ledger.calls_used,
                        "hourly": ledger.hourly,
                        "recentCharges": ledger.recent_charges,
                    },
                });
                match api
                    .patch_status(
                        &grant,
                        &PatchParams {
                            field_manager: Some(BUDGET_FIELD_MANAGER.into()),
                            ..PatchParams::default()
                        },
                        &Patch::Merge(&patch),
                    )
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => continue,
                    Err(e) => return Err(kube_error("writing the grant's budget")(e)),
                }
            }
            *steps = next_steps;
            *status = next_status;
            return Ok(());
        }
        Err(Error::BudgetContended(format!("{ns}/{grant}")))
    }

    /// A decision a shadow ToolPolicy would have refused: an Event on the call, once per decision
    /// recorded (the count is [`toolgate_api::metrics::CallMetrics::record`]'s).
    async fn shadowed(
        &self,
        call: &ToolCall,
        status: &ToolCallStatus,
        steps: &[Step],
        reference: &k8s_openapi::api::core::v1::ObjectReference,
    ) {
        if !steps.iter().any(|s| s.kind == POLICY_CHECKED) {
            return;
        }
        let Some(a) = &status.authorization else {
            return;
        };
        for f in &a.shadow_forbids {
            let event = Event {
                type_: EventType::Warning,
                reason: toolgate_crds::conditions::reason::SHADOW_FORBID.into(),
                note: Some(
                    format!(
                        "shadow ToolPolicy {} would forbid this call ({}): {}",
                        f.tool_policy, f.policy, f.reason
                    )
                    .chars()
                    .take(1000)
                    .collect(),
                ),
                action: POLICY_CHECKED.into(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&event, reference).await {
                tracing::warn!(call = %call.name_any(), error = %e, "publishing an event");
            }
        }
    }

    /// Phase transitions, decisions and shadow forbids, by bounded labels.
    fn count(&self, ns: &str, tool: &str, status: &ToolCallStatus, steps: &[Step]) {
        self.metrics.calls.record(ns, tool, status, steps);
    }
}

/// One Event for the steps of one transition: a person reading `kubectl describe` sees each
/// transition once, and a call costs an Event POST per status write rather than per step. Its
/// reason is the first step that failed (a Warning), or the last step; its note names every step
/// with its reason and message, in order.
fn event_of(steps: &[Step]) -> Event {
    let failed = steps.iter().find(|s| s.status == ConditionStatus::False);
    let headline = failed.or(steps.last());
    let mut note = String::new();
    for s in steps {
        if !note.is_empty() {
            note.push_str("; ");
        }
        note.push_str(&format!("{}: {} ({})", s.kind, s.reason, s.message));
    }
    Event {
        type_: if failed.is_some() {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: headline
            .map(|s| s.reason.chars().take(128).collect())
            .unwrap_or_default(),
        note: Some(note.chars().take(1000).collect()),
        action: headline.map(|s| s.kind.to_string()).unwrap_or_default(),
        secondary: None,
    }
}
