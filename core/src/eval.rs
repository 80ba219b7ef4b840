//! Tool metadata as a control surface, regression-tested (invariant 16): prompts run against the
//! view compiler, measuring whether the tools a task needs are in the view (recall@k), how much
//! of the view is what it needs (precision@k), how often the view offers a tool the prompt
//! forbids or ranks a riskier tool than the task needs above the one it needs (unsafe exposure:
//! the model's first choice would be the riskier one), how often a riskier tool is in the view at
//! all (over-exposure, reported), and how often the top tool needs a human (approval trigger
//! rate). `toolgate eval` prints the report and fails under thresholds;
//! with a baseline folder it compares two versions of the manifests for a pull request.
//!
//! Prompts come from every descriptor's `description.examples` (each expects its own tool) and
//! from a prompts file of golden and negative cases.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use toolgate_crds::{ActionType, RiskTier};

use crate::principal::Principal;
use crate::registry::Registry;
use crate::view::{ApprovalHint, ViewRequest, compile_view};

/// One prompt: an intent, the tools it needs, the tools it must never be shown.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Prompt {
    /// What the agent is asked to do.
    pub intent: String,
    /// The tools a good view offers for it (any of them is a hit).
    #[serde(default)]
    pub expect: Vec<String>,
    /// The tools the view must never offer for it.
    #[serde(default)]
    pub forbid: Vec<String>,
    /// The action type the agent declares, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_type: Option<ActionType>,
    /// Whose view (default: the command line's principal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The principal's groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Namespace of the tools (default: the principal's service-account namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Where the prompt came from (a file and index, or a descriptor's example).
    #[serde(skip)]
    pub source: String,
}

/// Why a prompts file was refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "{path}: expected a list of prompts ({{intent, expect, forbid, actionType, principal, namespace}}): {message}"
)]
pub struct PromptsError {
    /// Where in the file.
    pub path: String,
    /// What was wrong.
    pub message: String,
}

/// Parse a prompts file (YAML or JSON): a list of [`Prompt`], each with an intent and at least
/// one expected or forbidden tool.
pub fn parse_prompts(text: &str, origin: &str) -> Result<Vec<Prompt>, PromptsError> {
    let value: serde_json::Value = serde_norway::from_str(text).map_err(|e| PromptsError {
        path: origin.into(),
        message: e.to_string(),
    })?;
    let mut prompts: Vec<Prompt> =
        serde_path_to_error::deserialize(value).map_err(|e| PromptsError {
            path: format!("{origin}: {}", e.path()),
            message: e.inner().to_string(),
        })?;
    for (i, p) in prompts.iter_mut().enumerate() {
        if p.intent.trim().is_empty() {
            return Err(PromptsError {
                path: format!("{origin}: [{i}].intent"),
                message: "an empty intent".into(),
            });
        }
        if p.expect.is_empty() && p.forbid.is_empty() {
            return Err(PromptsError {
                path: format!("{origin}: [{i}]"),
                message: "neither expect nor forbid names a tool: nothing to measure".into(),
            });
        }
        p.source = format!("{origin}[{i}]");
    }
    Ok(prompts)
}

/// Every descriptor's own examples in `namespace`, each expecting its tool.
pub fn example_prompts(registry: &Registry, namespace: &str) -> Vec<Prompt> {
    let mut out = Vec::new();
    for t in registry.tools_in(namespace) {
        for (i, e) in t.spec.description.examples.iter().enumerate() {
            out.push(Prompt {
                intent: e.user_request.clone(),
                expect: vec![t.name.clone()],
                forbid: Vec::new(),
                action_type: None,
                principal: None,
                groups: Vec::new(),
                namespace: Some(namespace.to_string()),
                source: format!("ToolDescriptor/{}.description.examples[{i}]", t.name),
            });
        }
    }
    out
}

/// What one prompt's view was.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResult {
    /// Where it came from.
    pub source: String,
    /// The intent.
    pub intent: String,
    /// The top k tools of its view, best first.
    pub exposed: Vec<String>,
    /// Expected tools among them.
    pub hits: usize,
    /// hits / |exposed| (1 for an empty view of a prompt that expects nothing).
    pub precision: f64,
    /// hits / |expected| (1 for a prompt that expects nothing).
    pub recall: f64,
    /// 1 / rank of the first expected tool (0 when none is there).
    pub reciprocal_rank: f64,
    /// Tools offered that it forbids, or riskier than anything it expects and ranked above it.
    pub unsafe_tools: Vec<String>,
    /// Tools in the view riskier than anything it expects, wherever they rank.
    pub riskier_tools: Vec<String>,
    /// Whether its top tool needs a human approval.
    pub approval: bool,
}

/// How one tool fared as an expected tool.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolScore {
    /// Prompts expecting it.
    pub prompts: u32,
    /// Of those, how often it was in the top k.
    pub found: u32,
    /// How often it was first.
    pub first: u32,
    /// Prompts where it was offered unsafely.
    pub unsafe_exposures: u32,
    /// Prompts where it was in the view though riskier than what they need.
    pub over_exposures: u32,
}

/// The whole evaluation.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The k of precision and recall.
    pub k: usize,
    /// Mean precision@k.
    pub precision: f64,
    /// Mean recall@k.
    pub recall: f64,
    /// Mean reciprocal rank.
    pub mrr: f64,
    /// Share of prompts whose view offered an unsafe tool.
    pub unsafe_exposure: f64,
    /// Share of prompts whose view held a tool riskier than they need.
    pub over_exposure: f64,
    /// Share of prompts whose top tool needs an approval.
    pub approval_rate: f64,
    /// Per tool, by name.
    pub tools: BTreeMap<String, ToolScore>,
    /// Per prompt.
    pub prompts: Vec<PromptResult>,
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    if n == 0 { 1.0 } else { sum / f64::from(n) }
}

/// Run every prompt against the registry's view compiler (top `k`).
pub fn evaluate(
    registry: &Registry,
    prompts: &[Prompt],
    default_principal: &str,
    default_namespace: Option<&str>,
    k: usize,
    now: jiff::Timestamp,
) -> Report {
    let failures = BTreeMap::new();
    let mut tools: BTreeMap<String, ToolScore> = BTreeMap::new();
    let mut results = Vec::new();
    for p in prompts {
        let principal = Principal::new(p.principal.as_deref().unwrap_or(default_principal))
            .with_groups(p.groups.iter().cloned());
        let namespace = p
            .namespace
            .clone()
            .or_else(|| default_namespace.map(str::to_string))
            .or_else(|| principal.service_account().map(|(ns, _)| ns.to_string()))
            .unwrap_or_else(|| "default".into());
        let view = compile_view(
            registry,
            &ViewRequest {
                namespace: &namespace,
                principal: &principal,
                intent: &p.intent,
                action_type: p.action_type,
                domains: &[],
                max_tools: k,
                recent_failures: &failures,
                explain: false,
                now,
                usage: &Default::default(),
            },
        );
        let exposed: Vec<String> = view.exposed.iter().map(|t| t.name.clone()).collect();
        let expected: BTreeSet<&str> = p.expect.iter().map(String::as_str).collect();
        let hits = exposed
            .iter()
            .filter(|n| expected.contains(n.as_str()))
            .count();
        let precision = if exposed.is_empty() {
            if expected.is_empty() { 1.0 } else { 0.0 }
        } else {
            hits as f64 / exposed.len() as f64
        };
        let recall = if expected.is_empty() {
            1.0
        } else {
            hits as f64 / expected.len() as f64
        };
        let reciprocal_rank = exposed
            .iter()
            .position(|n| expected.contains(n.as_str()))
            .map_or(0.0, |i| 1.0 / (i as f64 + 1.0));
        // Riskier than the riskiest tool the task needs: least privilege in what the model sees.
        let ceiling: Option<RiskTier> = p
            .expect
            .iter()
            .filter_map(|n| registry.tool(&namespace, n).map(|t| t.tier))
            .max();
        let first_expected = view
            .exposed
            .iter()
            .position(|t| expected.contains(t.name.as_str()))
            .unwrap_or(usize::MAX);
        let riskier = |t: &crate::view::ExposedTool| {
            !expected.contains(t.name.as_str()) && ceiling.is_some_and(|c| t.tier > c)
        };
        let unsafe_tools: Vec<String> = view
            .exposed
            .iter()
            .enumerate()
            .filter(|(i, t)| {
                !expected.contains(t.name.as_str())
                    && (p.forbid.contains(&t.name) || (riskier(t) && *i < first_expected))
            })
            .map(|(_, t)| t.name.clone())
            .collect();
        let riskier_tools: Vec<String> = view
            .exposed
            .iter()
            .filter(|t| riskier(t))
            .map(|t| t.name.clone())
            .collect();
        for n in &p.expect {
            let s = tools.entry(n.clone()).or_default();
            s.prompts += 1;
            if exposed.contains(n) {
                s.found += 1;
            }
            if exposed.first() == Some(n) {
                s.first += 1;
            }
        }
        for n in &unsafe_tools {
            tools.entry(n.clone()).or_default().unsafe_exposures += 1;
        }
        for n in &riskier_tools {
            tools.entry(n.clone()).or_default().over_exposures += 1;
        }
        results.push(PromptResult {
            source: p.source.clone(),
            intent: p.intent.clone(),
            approval: view
                .exposed
                .first()
                .is_some_and(|t| t.approval == ApprovalHint::Required),
            exposed,
            hits,
            precision,
            recall,
            reciprocal_rank,
            unsafe_tools,
            riskier_tools,
        });
    }
    Report {
        k,
        precision: mean(results.iter().map(|r| r.precision)),
        recall: mean(results.iter().map(|r| r.recall)),
        mrr: mean(results.iter().map(|r| r.reciprocal_rank)),
        unsafe_exposure: mean(
            results
                .iter()
                .map(|r| if r.unsafe_tools.is_empty() { 0.0 } else { 1.0 }),
        )
        .min(if results.is_empty() { 0.0 } else { 1.0 }),
        over_exposure: mean(
            results
                .iter()
                .map(|r| if r.riskier_tools.is_empty() { 0.0 } else { 1.0 }),
        )
        .min(if results.is_empty() { 0.0 } else { 1.0 }),
        approval_rate: mean(results.iter().map(|r| if r.approval { 1.0 } else { 0.0 }))
            .min(if results.is_empty() { 0.0 } else { 1.0 }),
        tools,
        prompts: results,
    }
}

/// The bars a report must clear.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// Lowest acceptable mean recall@k.
    pub min_recall: f64,
    /// Lowest acceptable mean precision@k.
    pub min_precision: f64,
    /// Highest acceptable unsafe-exposure rate.
    pub max_unsafe: f64,
}

/// What fails: each bar the report misses, and (with a baseline) each metric that got worse.
pub fn failures(report: &Report, bars: &Thresholds, baseline: Option<&Report>) -> Vec<String> {
    let mut out = Vec::new();
    if report.recall < bars.min_recall {
        out.push(format!(
            "recall@{} {:.3} is below {:.3}",
            report.k, report.recall, bars.min_recall
        ));
    }
    if report.precision < bars.min_precision {
        out.push(format!(
            "precision@{} {:.3} is below {:.3}",
            report.k, report.precision, bars.min_precision
        ));
    }
    if report.unsafe_exposure > bars.max_unsafe {
        let offered: Vec<String> = report
            .prompts
            .iter()
            .filter(|p| !p.unsafe_tools.is_empty())
            .map(|p| format!("{:?} offered {}", p.intent, p.unsafe_tools.join(", ")))
            .collect();
        out.push(format!(
            "unsafe exposure {:.3} is above {:.3}: {}",
            report.unsafe_exposure,
            bars.max_unsafe,
            offered.join("; ")
        ));
    }
    if let Some(b) = baseline {
        const EPS: f64 = 1e-9;
        if report.recall + EPS < b.recall {
            out.push(format!(
                "recall@{} fell from {:.3} to {:.3}",
                report.k, b.recall, report.recall
            ));
        }
        if report.unsafe_exposure > b.unsafe_exposure + EPS {
            out.push(format!(
                "unsafe exposure rose from {:.3} to {:.3}",
                b.unsafe_exposure, report.unsafe_exposure
            ));
        }
        for (name, s) in &report.tools {
            if let Some(old) = b.tools.get(name)
                && s.found < old.found
                && s.prompts == old.prompts
            {
                out.push(format!(
                    "{name}: found for {} of {} prompts, was {}",
                    s.found, s.prompts, old.found
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompts_file_is_checked_with_its_paths() {
        let ok = parse_prompts(
            "- intent: show me src/a.ts\n  expect: [file.read]\n  forbid: [file.delete]\n",
            "p.yaml",
        )
        .expect("parses");
        assert_eq!(ok[0].source, "p.yaml[0]");
        for (text, says) in [
            ("- intent: x\n", "nothing to measure"),
            ("- intent: ''\n  expect: [a]\n", "[0].intent"),
            (
                "- intent: x\n  expect: [a]\n  tops: b\n",
                "unknown field `tops`",
            ),
            ("- intent: x\n  expect: a\n", "[0].expect"),
            ("{intent: x}", "expected a list"),
            (
                "- intent: x\n  expect: [a]\n  actionType: launch\n",
                "[0].actionType",
            ),
        ] {
            let e = parse_prompts(text, "p.yaml").expect_err(text).to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
