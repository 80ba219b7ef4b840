//! The metrics of calls, the same names in both runtimes (`toolgate_call_phase_transitions_total`,
//! `toolgate_call_decisions_total`, `toolgate_shadow_forbids_total`, the durations of calls,
//! approval waits and starts, calls in flight, build info), counted from the steps a runtime
//! records. Labels are bounded: phases, outcomes, tiers, ToolPolicy names, and the names of
//! registered tools (a call of a tool no descriptor names is `unregistered`: a proposal cannot
//! make a label).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use toolgate_core::lifecycle::{Step, phase_name};
use toolgate_crds::conditions::{
    APPROVAL_GRANTED, APPROVAL_REQUESTED, POLICY_CHECKED, STARTED, TOOL_CALL_REQUESTED,
};
use toolgate_crds::{CallPhase, ToolCallStatus};

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

/// Labels of an ended call: its tool (registered tools only) and the phase it ended in.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The tool's canonical name, or `unregistered`.
    pub tool: String,
    /// Succeeded, Failed, Denied, Cancelled.
    pub outcome: String,
}

/// Labels of an approval wait: how it was answered (`granted`; a denial ends the call, counted by
/// its outcome).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    /// The tool's canonical name, or `unregistered`.
    pub tool: String,
}

/// Labels of the build info: the version and which runtime.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The crate version.
    pub version: String,
    /// `local` or `operator`.
    pub runtime: String,
}

/// 5 ms to about 22 minutes, doubling: a call of `true` on a warm sandbox to a long test run.
fn seconds_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.005, 2.0, 19)
}

fn histogram() -> Histogram {
    Histogram::new(seconds_buckets())
}

/// The metrics of calls.
#[derive(Clone)]
pub struct CallMetrics {
    /// Calls entering each phase.
    pub call_phases: Family<PhaseLabels, Counter>,
    /// Decisions by outcome and tier.
    pub decisions: Family<DecisionLabels, Counter>,
    /// Calls a shadow ToolPolicy would have forbidden.
    pub shadow_forbids: Family<ShadowLabels, Counter>,
    /// From proposal to the end, by tool and outcome.
    pub call_seconds: Family<OutcomeLabels, Histogram, fn() -> Histogram>,
    /// From the approval request to the approval, by tool.
    pub approval_wait_seconds: Family<ToolLabels, Histogram, fn() -> Histogram>,
    /// From authorized (allowed, or approved) to the executor started in its sandbox, by tool.
    pub start_seconds: Family<ToolLabels, Histogram, fn() -> Histogram>,
    /// Calls running now (set by the runtime when scraped).
    pub in_flight: Gauge,
    /// 1, labelled with the build.
    pub build_info: Family<BuildLabels, Gauge>,
}

impl Default for CallMetrics {
    fn default() -> Self {
        CallMetrics {
            call_phases: Family::default(),
            decisions: Family::default(),
            shadow_forbids: Family::default(),
            call_seconds: Family::new_with_constructor(histogram),
            approval_wait_seconds: Family::new_with_constructor(histogram),
            start_seconds: Family::new_with_constructor(histogram),
            in_flight: Gauge::default(),
            build_info: Family::default(),
        }
    }
}

impl CallMetrics {
    /// Register the metrics (under the registry's prefix, `toolgate`), the build info of
    /// `runtime` (`local`, `operator`) set.
    pub fn register(&self, registry: &mut Registry, runtime: &str) {
        self.build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                runtime: runtime.into(),
            })
            .set(1);
        registry.register(
            "build_info",
            "The running build: its version and runtime",
            self.build_info.clone(),
        );
        registry.register_with_unit(
            "call_duration",
            "ToolCalls from proposal to their end, by tool and outcome",
            prometheus_client::registry::Unit::Seconds,
            self.call_seconds.clone(),
        );
        registry.register_with_unit(
            "approval_wait",
            "ToolCalls from the approval request to the approval, by tool",
            prometheus_client::registry::Unit::Seconds,
            self.approval_wait_seconds.clone(),
        );
        registry.register_with_unit(
            "call_start",
            "ToolCalls from authorized to the executor started in its sandbox, by tool",
            prometheus_client::registry::Unit::Seconds,
            self.start_seconds.clone(),
        );
        registry.register(
            "calls_in_flight",
            "ToolCalls running now",
            self.in_flight.clone(),
        );
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

    /// Count what recording `steps` on a call of `namespace` and `tool` did (its status after
    /// them): each phase entered once, the decision, its shadow forbids, and the durations the
    /// steps end (measured from the status's condition times to now).
    pub fn record(&self, namespace: &str, tool: &str, status: &ToolCallStatus, steps: &[Step]) {
        self.time(tool, status, steps, jiff::Timestamp::now());
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

impl CallMetrics {
    /// The durations `steps` end: the call's (a terminal phase entered), its approval wait (an
    /// approval granted) and its start (the executor started).
    fn time(&self, tool: &str, status: &ToolCallStatus, steps: &[Step], now: jiff::Timestamp) {
        // A tool no descriptor version resolved for is not a label (anyone may propose a name).
        let tool = if status.tool_digest.is_some() {
            tool
        } else {
            "unregistered"
        };
        let since = |kind: &str| {
            toolgate_crds::conditions::transition_time(&status.conditions, kind)
                .map(|t| now.duration_since(t).as_secs_f64().max(0.0))
        };
        let tool_labels = || ToolLabels { tool: tool.into() };
        for s in steps {
            if s.kind == APPROVAL_GRANTED
                && let Some(waited) = since(APPROVAL_REQUESTED)
            {
                self.approval_wait_seconds
                    .get_or_create(&tool_labels())
                    .observe(waited);
            }
            if s.kind == STARTED {
                // Authorized when the approval came, else when the policy allowed it.
                let from = since(APPROVAL_GRANTED).or_else(|| since(POLICY_CHECKED));
                if let Some(took) = from {
                    self.start_seconds
                        .get_or_create(&tool_labels())
                        .observe(took);
                }
            }
        }
        let ended = steps.iter().filter_map(|s| s.phase).any(|p| {
            matches!(
                p,
                CallPhase::Succeeded | CallPhase::Failed | CallPhase::Denied | CallPhase::Cancelled
            )
        });
        if ended && let Some(took) = since(TOOL_CALL_REQUESTED) {
            self.call_seconds
                .get_or_create(&OutcomeLabels {
                    tool: tool.into(),
                    outcome: phase_name(status.phase).into(),
                })
                .observe(took);
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
