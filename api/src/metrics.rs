//! The metrics of calls, the same names in both runtimes (`toolgate_call_phase_transitions_total`,
//! `toolgate_call_decisions_total`, `toolgate_shadow_forbids_total`), counted from the steps a
//! runtime records. Labels are bounded: phases, outcomes, tiers, ToolPolicy names.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use toolgate_core::lifecycle::{Step, phase_name};
use toolgate_crds::ToolCallStatus;
use toolgate_crds::conditions::POLICY_CHECKED;

/// Labels of a call transition: the phase it entered (eight values).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// Phase.
    pub phase: String,
}

/// Labels of a decision: outcome (three values) and risk tier (six).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// allow, requireApproval, deny.
    pub decision: String,
    /// L0–L5, or `unknown` when the tool was not found.
    pub tier: String,
}

/// Labels of a shadow forbid: the ToolPolicy (one per policy object a team writes).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShadowLabels {
    /// `namespace/name` of the ToolPolicy.
    pub tool_policy: String,
}

/// Counters of calls.
#[derive(Clone, Default)]
pub struct CallMetrics {
    /// Calls entering each phase.
    pub call_phases: Family<PhaseLabels, Counter>,
    /// Decisions by outcome and tier.
    pub decisions: Family<DecisionLabels, Counter>,
    /// Calls a shadow ToolPolicy would have forbidden.
    pub shadow_forbids: Family<ShadowLabels, Counter>,
}

impl CallMetrics {
    /// Register the counters (under the registry's prefix, `toolgate`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "call_phase_transitions",
            "ToolCalls entering a phase",
            self.call_phases.clone(),
        );
        registry.register(
            "call_decisions",
            "Policy decisions on ToolCalls, by outcome and risk tier",
            self.decisions.clone(),
        );
        registry.register(
            "shadow_forbids",
            "Calls a shadow ToolPolicy would have forbidden (nothing else came of it)",
            self.shadow_forbids.clone(),
        );
    }

    /// Count what recording `steps` on a call of `namespace` did (its status after them): each
    /// phase entered once, the decision, its shadow forbids.
    pub fn record(&self, namespace: &str, status: &ToolCallStatus, steps: &[Step]) {
        let mut last = None;
        for s in steps {
            // Two steps may lead to the same phase (PolicyChecked and StateUpdated of a denied
            // call): the call entered it once.
            if let Some(phase) = s.phase.filter(|p| Some(*p) != last) {
                last = Some(phase);
                self.call_phases
                    .get_or_create(&PhaseLabels {
                        phase: phase_name(Some(phase)).into(),
                    })
                    .inc();
            }
            if s.kind != POLICY_CHECKED {
                continue;
            }
            let Some(a) = &status.authorization else {
                continue;
            };
            self.decisions
                .get_or_create(&DecisionLabels {
                    decision: serde_json::to_value(a.decision)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default(),
                    tier: a.risk_tier.to_string(),
                })
                .inc();
            for f in &a.shadow_forbids {
                self.shadow_forbids
                    .get_or_create(&ShadowLabels {
                        tool_policy: format!("{namespace}/{}", f.tool_policy),
                    })
                    .inc();
            }
        }
    }
}

/// A registry's text exposition (OpenMetrics).
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
        out.clear();
    }
    out
}
