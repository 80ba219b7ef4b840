//! A descriptor after registration: what decisions, views and ToolPolicies read of a tool
//! ([`crate::registry`] registers them).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use toolgate_crds::{Lifecycle, LintFinding, RiskTier, ToolDescriptorSpec};

/// A descriptor after registration.
#[derive(Debug, Clone)]
pub struct RegisteredTool {
    /// Namespace of the descriptor.
    pub namespace: String,
    /// Object name (what grants and calls use).
    pub name: String,
    /// Labels (grant selectors match them).
    pub labels: BTreeMap<String, String>,
    /// The spec.
    pub spec: Arc<ToolDescriptorSpec>,
    /// Registration lifecycle.
    pub lifecycle: Lifecycle,
    /// Content digest of the spec.
    pub digest: String,
    /// Computed tier.
    pub tier: RiskTier,
    /// Why the lifecycle is what it is.
    pub findings: Vec<LintFinding>,
    /// The compiled input schema, when it compiles.
    pub input_validator: Option<Arc<jsonschema::Validator>>,
    /// Words of the name, summary, use-when hints, parameters and domains, for ranking.
    pub positive_terms: BTreeSet<String>,
    /// The same words by field, counted ([`crate::rank`]).
    pub text: crate::rank::ToolText,
    /// How many args its input schema requires (a ranking tie-break).
    pub required_args: usize,
    /// Words of the do-not-use-when and negative hints, for ranking.
    pub negative_terms: BTreeSet<String>,
}

impl RegisteredTool {
    /// Whether calls may run: enabled or deprecated (still callable, ranked last).
    pub fn is_callable(&self) -> bool {
        matches!(self.lifecycle, Lifecycle::Enabled | Lifecycle::Deprecated)
    }

    /// Why a tool is held back for instruction-like text in what a model would see, if it is:
    /// its first such finding, as `path: message`.
    pub fn held_for_review(&self) -> Option<String> {
        if self.is_callable() {
            return None;
        }
        self.findings
            .iter()
            .find(|f| f.code == crate::findings::poisoning::CODE)
            .map(|f| format!("{}: {}", f.path, f.message))
    }
}
