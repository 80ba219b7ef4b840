//! Recording steps on a ToolCall: its status by server-side apply, one Event per step, and the
//! phase and decision metrics.

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use toolgate_core::lifecycle::{Step, apply, phase_name};
use toolgate_crds::conditions::POLICY_CHECKED;
use toolgate_crds::{ConditionStatus, ToolCall, ToolCallStatus};

use super::{Context, Error, kube_error};
use crate::descriptor::FIELD_MANAGER;

impl Context {
    /// Record steps on the call's status (server-side apply) and publish one Event per step.
    pub(super) async fn record(
        &self,
        call: &ToolCall,
        status: &mut ToolCallStatus,
        steps: &[Step],
    ) -> Result<(), Error> {
        if steps.is_empty() {
            return Ok(());
        }
        let generation = call.metadata.generation.unwrap_or(1);
        for s in steps {
            apply(status, s, jiff::Timestamp::now(), generation);
        }
        let ns = call
            .namespace()
            .ok_or_else(|| Error::NoNamespace(call.name_any()))?;
        let patch = serde_json::json!({
            "apiVersion": toolgate_crds::API_VERSION,
            "kind": "ToolCall",
            "status": status,
        });
        Api::<ToolCall>::namespaced(self.client.clone(), &ns)
            .patch_status(
                &call.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(kube_error("patching the call's status"))?;
        self.count(status, steps);
        let reference = call.object_ref(&());
        for s in steps {
            let event = Event {
                type_: if s.status == ConditionStatus::False {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: s.reason.chars().take(128).collect(),
                note: Some(s.message.chars().take(1000).collect()),
                action: s.kind.to_string(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&event, &reference).await {
                tracing::warn!(call = %call.name_any(), error = %e, "publishing an event");
            }
        }
        tracing::info!(call = %call.name_any(), namespace = %ns, steps = ?steps.iter().map(|s| s.kind).collect::<Vec<_>>(), phase = ?status.phase, "recorded");
        Ok(())
    }

    /// Phase transitions and decisions, by bounded labels.
    fn count(&self, status: &ToolCallStatus, steps: &[Step]) {
        for s in steps {
            if let Some(phase) = s.phase {
                self.metrics
                    .call_phases
                    .get_or_create(&crate::ops::PhaseLabels {
                        phase: phase_name(Some(phase)).into(),
                    })
                    .inc();
            }
            if s.kind == POLICY_CHECKED
                && let Some(a) = &status.authorization
            {
                self.metrics
                    .decisions
                    .get_or_create(&crate::ops::DecisionLabels {
                        decision: serde_json::to_value(a.decision)
                            .ok()
                            .and_then(|v| v.as_str().map(String::from))
                            .unwrap_or_default(),
                        tier: a.risk_tier.to_string(),
                    })
                    .inc();
            }
        }
    }
}
