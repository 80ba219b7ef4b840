//! The operator's Prometheus metrics, bounded labels only: the calls' (the same as `toolgate
//! local`'s) and every controller's reconciles (durations, errors by category).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// `toolcall`, `tooldescriptor`, `toolgrant`.
    pub controller: String,
    /// `ok` or `error`.
    pub result: String,
}

/// Labels of a reconcile error: the controller (three values) and its category (a handful,
/// from each controller's `Error::category`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// `toolcall`, `tooldescriptor`, `toolgrant`, `sandboxpolicy`, `credentialbinding`.
    pub controller: String,
    /// `KubeApiFailed`, `InvalidObject`, …
    pub category: String,
}

/// The operator's metrics: the calls' (the same as `toolgate local`'s) and its reconciles'.
pub struct Metrics {
    /// Phases, decisions and shadow forbids of calls.
    pub calls: toolgate_api::metrics::CallMetrics,
    /// Reconcile durations.
    pub reconcile_seconds: Family<ReconcileLabels, Histogram>,
    /// Reconcile errors by category.
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    registry: Registry,
    /// Counts the calls running now, once the ToolCall controller has its cache.
    running: std::sync::OnceLock<Box<dyn Fn() -> usize + Send + Sync>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("toolgate");
        let calls = toolgate_api::metrics::CallMetrics::default();
        calls.register(&mut registry, "operator");
        let reconcile_seconds = Family::<ReconcileLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 14))
        });
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile",
            reconcile_seconds.clone(),
        );
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by controller and category",
            reconcile_errors.clone(),
        );
        Metrics {
            calls,
            reconcile_seconds,
            reconcile_errors,
            registry,
            running: std::sync::OnceLock::new(),
        }
    }
}

impl Metrics {
    /// The text exposition, the calls in flight counted now.
    pub fn encode(&self) -> String {
        if let Some(running) = self.running.get() {
            self.calls
                .in_flight
                .set(i64::try_from(running()).unwrap_or(i64::MAX));
        }
        toolgate_api::metrics::encode(&self.registry)
    }

    /// Count the calls in flight with `running` (the ToolCall cache's Running calls) when scraped.
    pub fn count_running_with(&self, running: impl Fn() -> usize + Send + Sync + 'static) {
        let _ = self.running.set(Box::new(running));
    }

    /// Time a reconcile.
    pub fn observe(&self, controller: &str, ok: bool, elapsed: Duration) {
        self.reconcile_seconds
            .get_or_create(&ReconcileLabels {
                controller: controller.into(),
                result: if ok { "ok" } else { "error" }.into(),
            })
            .observe(elapsed.as_secs_f64());
    }
}

impl Metrics {
    /// Count a failed reconcile by category.
    pub fn error(&self, controller: &str, category: &str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                controller: controller.into(),
                category: category.into(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_have_bounded_labels_and_encode() {
        let m = Metrics::default();
        use toolgate_api::metrics::{DecisionLabels, PhaseLabels};
        m.calls
            .call_phases
            .get_or_create(&PhaseLabels {
                phase: "Succeeded".into(),
            })
            .inc();
        m.calls
            .decisions
            .get_or_create(&DecisionLabels {
                decision: "allow".into(),
                tier: "L0".into(),
            })
            .inc();
        m.observe("toolcall", true, Duration::from_millis(3));
        let text = m.encode();
        assert!(
            text.contains("toolgate_call_phase_transitions_total{phase=\"Succeeded\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("toolgate_call_decisions_total{decision=\"allow\",tier=\"L0\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("toolgate_reconcile_duration_seconds_bucket"),
            "{text}"
        );
    }
}
