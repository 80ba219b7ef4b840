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

use toolgate_core::principal::Principal;
use toolgate_core::registry::Registry;
use toolgate_core::view::{ApprovalHint, ViewRequest, compile_view};

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

/// The name of the SandboxPolicy and ToolGrant [`imported_servers`] adds.
pub const IMPORTED: &str = "imported-mcp-servers";

/// The manifests saved `tools/list` answers become when a platform team imports the servers at
/// `trust`, reviews every tool and grants them all to `principal`: what views would be after
/// the import. Each server is named after its list (`github.json` → `github.*` tools); the
/// tools share one SandboxPolicy and one ToolGrant (by selector: no name limit) with a scope
/// per server. Also the tools refused, with why.
pub fn imported_servers(
    lists: &[(String, Vec<serde_json::Value>)],
    namespace: &str,
    principal: &Principal,
    trust: toolgate_crds::TrustLevel,
) -> (Vec<toolgate_core::manifest::RawManifest>, Vec<String>) {
    use serde_json::json;
    let mut docs = Vec::new();
    let mut refused = Vec::new();
    if lists.is_empty() {
        return (docs, refused);
    }
    let mut scopes = Vec::new();
    let command = ["mcp-server".to_string()];
    for (server, tools) in lists {
        let config = toolgate_core::mcp::ServerConfig {
            name: server,
            trust,
            namespace,
            command: &command,
            url: None,
            credential_binding: None,
            image: None,
            sandbox_policy: IMPORTED,
            version: None,
        };
        let (normalized, bad) = toolgate_core::mcp::normalize(&config, tools);
        refused.extend(bad.into_iter().map(|r| format!("{server}: refused {r}")));
        for (i, t) in normalized.into_iter().enumerate() {
            scopes.extend(t.spec.permissions.required_scopes.iter().cloned());
            // A tool that writes locally (L2) also needs the workspace-write scope.
            if toolgate_core::risk::descriptor_tier(&t.spec) == toolgate_crds::RiskTier::L2 {
                scopes.push(toolgate_core::decision::WORKSPACE_WRITE_SCOPE.to_string());
            }
            let digest = toolgate_core::digest::descriptor_digest(&t.spec).unwrap_or_default();
            docs.push(toolgate_core::manifest::RawManifest {
                origin: toolgate_core::manifest::Origin {
                    source: format!("{server} (imported tools/list)"),
                    document: i,
                },
                value: json!({
                    "apiVersion": "toolgate.dev/v1alpha1",
                    "kind": "ToolDescriptor",
                    "metadata": {
                        "name": t.name,
                        "namespace": namespace,
                        "labels": {toolgate_core::mcp::SERVER_LABEL: server},
                        "annotations": {toolgate_core::findings::poisoning::REVIEWED_ANNOTATION: digest},
                    },
                    "spec": t.spec,
                }),
            });
        }
    }
    scopes.sort();
    scopes.dedup();
    let subject = match principal.service_account() {
        Some((ns, name)) => json!({"kind": "ServiceAccount", "name": name, "namespace": ns}),
        None => json!({"kind": "User", "name": principal.name}),
    };
    let origin = |document| toolgate_core::manifest::Origin {
        source: "imported tools/list".into(),
        document,
    };
    docs.push(toolgate_core::manifest::RawManifest {
        origin: origin(0),
        value: json!({
            "apiVersion": "toolgate.dev/v1alpha1",
            "kind": "SandboxPolicy",
            "metadata": {"name": IMPORTED, "namespace": namespace},
            "spec": {
                "mode": "read_only",
                "filesystem": {"cwd": "workspace", "readRoots": [], "writeRoots": []},
                "network": {"egress": "none"},
                "process": {"timeoutMs": 30000, "maxMemoryMb": 256, "maxProcesses": 16,
                            "maxStdoutBytes": 1_048_576, "maxStderrBytes": 65_536},
            },
        }),
    });
    docs.push(toolgate_core::manifest::RawManifest {
        origin: origin(1),
        value: json!({
            "apiVersion": "toolgate.dev/v1alpha1",
            "kind": "ToolGrant",
            "metadata": {"name": IMPORTED, "namespace": namespace},
            "spec": {
                "subjects": [subject],
                "tools": {"selector": {}},
                "scopes": scopes,
                "reason": "every tool of the imported servers, for evaluation",
            },
        }),
    });
    (docs, refused)
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
    /// Whether it names a tool it expects.
    pub expects: bool,
    /// Whether it asks only to read (its action type, or its words).
    pub read_intent: bool,
    /// A read that was offered a tool that destroys.
    pub destructive_offered: bool,
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
    /// What ranked the tools.
    pub ranker: Ranker,
    /// The k of precision and recall.
    pub k: usize,
    /// P@1: share of the prompts that expect a tool whose first tool is one of them.
    pub first_right: f64,
    /// P@k: share of the prompts that expect a tool with one of them in the top k.
    pub found_in_k: f64,
    /// Share of the read intents offered a tool that destroys.
    pub destructive_on_reads: f64,
    /// How many prompts ask only to read.
    pub read_prompts: usize,
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

/// A tool in a ranked list, as the metrics need it.
#[derive(Debug, Clone)]
struct Offered {
    name: String,
    tier: RiskTier,
    approval: bool,
}

impl Offered {
    fn of(t: &toolgate_core::view::ExposedTool) -> Self {
        Offered {
            name: t.name.clone(),
            tier: t.tier,
            approval: t.approval == ApprovalHint::Required,
        }
    }
}

/// Which ranking a report measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Ranker {
    /// toolgate's views.
    Toolgate,
    /// Plain BM25 over name and description of the same tools ([`toolgate_core::rank::bm25_baseline`]).
    Bm25,
}

fn namespace_of(p: &Prompt, principal: &Principal, default_namespace: Option<&str>) -> String {
    p.namespace
        .clone()
        .or_else(|| default_namespace.map(str::to_string))
        .or_else(|| principal.service_account().map(|(ns, _)| ns.to_string()))
        .unwrap_or_else(|| "default".into())
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
    evaluate_with(
        Ranker::Toolgate,
        registry,
        prompts,
        default_principal,
        default_namespace,
        k,
        now,
    )
}

/// Run every prompt through a ranker: toolgate's views, or plain BM25 over the tools the same
/// view would let the principal use (policy applied alike, so only the ranking differs).
pub fn evaluate_with(
    ranker: Ranker,
    registry: &Registry,
    prompts: &[Prompt],
    default_principal: &str,
    default_namespace: Option<&str>,
    k: usize,
    now: jiff::Timestamp,
) -> Report {
    let failures = BTreeMap::new();
    let usage = toolgate_core::registry::GrantUsages::default();
    let mut tools: BTreeMap<String, ToolScore> = BTreeMap::new();
    let mut results = Vec::new();
    for p in prompts {
        let principal = Principal::new(p.principal.as_deref().unwrap_or(default_principal))
            .with_groups(p.groups.iter().cloned());
        let namespace = namespace_of(p, &principal, default_namespace);
        let request = |intent, max_tools| ViewRequest {
            namespace: &namespace,
            principal: &principal,
            intent,
            action_type: p.action_type,
            domains: &[],
            max_tools,
            recent_failures: &failures,
            explain: false,
            now,
            usage: &usage,
        };
        let offered: Vec<Offered> = match ranker {
            Ranker::Toolgate => compile_view(registry, &request(&p.intent, k))
                .exposed
                .iter()
                .map(Offered::of)
                .collect(),
            Ranker::Bm25 => {
                // Every tool the principal may use for this action type, unranked.
                let all = compile_view(registry, &request("", registry.tool_count().max(1)));
                let documents: Vec<String> = all
                    .exposed
                    .iter()
                    .map(|t| {
                        let summary = registry
                            .tool(&namespace, &t.name)
                            .map_or("", |r| r.spec.description.summary.as_str());
                        format!("{} {summary}", t.canonical_name)
                    })
                    .collect();
                let scores = toolgate_core::rank::bm25_baseline(&documents, &p.intent);
                let mut order: Vec<usize> =
                    (0..documents.len()).filter(|&i| scores[i] > 0.0).collect();
                order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
                order
                    .into_iter()
                    .take(k)
                    .map(|i| Offered::of(&all.exposed[i]))
                    .collect()
            }
        };
        let result = measure(registry, p, &namespace, &offered);
        for n in &p.expect {
            let s = tools.entry(n.clone()).or_default();
            s.prompts += 1;
            if result.exposed.contains(n) {
                s.found += 1;
            }
            if result.exposed.first() == Some(n) {
                s.first += 1;
            }
        }
        for n in &result.unsafe_tools {
            tools.entry(n.clone()).or_default().unsafe_exposures += 1;
        }
        for n in &result.riskier_tools {
            tools.entry(n.clone()).or_default().over_exposures += 1;
        }
        results.push(result);
    }
    let share = |f: &dyn Fn(&PromptResult) -> bool| {
        mean(results.iter().map(|r| if f(r) { 1.0 } else { 0.0 })).min(if results.is_empty() {
            0.0
        } else {
            1.0
        })
    };
    let expecting: Vec<&PromptResult> = results.iter().filter(|r| r.expects).collect();
    let reads: Vec<&PromptResult> = results.iter().filter(|r| r.read_intent).collect();
    Report {
        ranker,
        k,
        precision: mean(results.iter().map(|r| r.precision)),
        recall: mean(results.iter().map(|r| r.recall)),
        mrr: mean(results.iter().map(|r| r.reciprocal_rank)),
        first_right: mean(
            expecting
                .iter()
                .map(|r| if r.reciprocal_rank >= 1.0 { 1.0 } else { 0.0 }),
        ),
        found_in_k: mean(expecting.iter().map(|r| if r.hits > 0 { 1.0 } else { 0.0 })),
        unsafe_exposure: share(&|r| !r.unsafe_tools.is_empty()),
        over_exposure: share(&|r| !r.riskier_tools.is_empty()),
        destructive_on_reads: if reads.is_empty() {
            0.0
        } else {
            mean(
                reads
                    .iter()
                    .map(|r| if r.destructive_offered { 1.0 } else { 0.0 }),
            )
        },
        read_prompts: reads.len(),
        approval_rate: share(&|r| r.approval),
        tools,
        prompts: results,
    }
}

/// The metrics of one prompt's ranked tools.
fn measure(registry: &Registry, p: &Prompt, namespace: &str, offered: &[Offered]) -> PromptResult {
    let exposed: Vec<String> = offered.iter().map(|t| t.name.clone()).collect();
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
    let first_expected = exposed
        .iter()
        .position(|n| expected.contains(n.as_str()))
        .unwrap_or(usize::MAX);
    let reciprocal_rank = if first_expected == usize::MAX {
        0.0
    } else {
        1.0 / (first_expected as f64 + 1.0)
    };
    // Riskier than the riskiest tool the task needs: least privilege in what the model sees.
    let ceiling: Option<RiskTier> = p
        .expect
        .iter()
        .filter_map(|n| registry.tool(namespace, n).map(|t| t.tier))
        .max();
    let riskier =
        |t: &Offered| !expected.contains(t.name.as_str()) && ceiling.is_some_and(|c| t.tier > c);
    let unsafe_tools: Vec<String> = offered
        .iter()
        .enumerate()
        .filter(|(i, t)| {
            !expected.contains(t.name.as_str())
                && (p.forbid.contains(&t.name) || (riskier(t) && *i < first_expected))
        })
        .map(|(_, t)| t.name.clone())
        .collect();
    let riskier_tools: Vec<String> = offered
        .iter()
        .filter(|t| riskier(t))
        .map(|t| t.name.clone())
        .collect();
    let read_intent = match p.action_type {
        Some(a) => {
            toolgate_core::rank::declared_action(a) == toolgate_core::rank::IntentAction::Read
        }
        None => {
            toolgate_core::rank::intent_action(&p.intent) == toolgate_core::rank::IntentAction::Read
        }
    };
    let destructive_offered = offered.iter().any(|t| {
        registry
            .tool(namespace, &t.name)
            .is_some_and(|r| toolgate_core::rank::destroys(&r.spec))
    });
    PromptResult {
        source: p.source.clone(),
        intent: p.intent.clone(),
        approval: offered.first().is_some_and(|t| t.approval),
        exposed,
        hits,
        precision,
        recall,
        reciprocal_rank,
        unsafe_tools,
        riskier_tools,
        expects: !expected.is_empty(),
        read_intent,
        destructive_offered: read_intent && destructive_offered,
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
    /// Lowest acceptable P@1.
    pub min_first_right: f64,
    /// Lowest acceptable P@k.
    pub min_found_in_k: f64,
    /// Highest acceptable share of read intents offered a tool that destroys.
    pub max_destructive_on_reads: f64,
}

/// What fails: each bar the report misses, (with a baseline) each metric that got worse, and
/// (with the plain BM25 ranking of the same run) P@1 or P@k below it.
pub fn failures(
    report: &Report,
    bars: &Thresholds,
    baseline: Option<&Report>,
    bm25: Option<&Report>,
) -> Vec<String> {
    let mut out = Vec::new();
    let k = report.k;
    for (name, got, bar) in [
        ("P@1", report.first_right, bars.min_first_right),
        ("P@k", report.found_in_k, bars.min_found_in_k),
    ] {
        if got < bar {
            out.push(format!("{name} {got:.3} is below {bar:.3} (k = {k})"));
        }
    }
    if report.destructive_on_reads > bars.max_destructive_on_reads {
        out.push(format!(
            "{:.3} of the read intents were offered a tool that destroys; at most {:.3}",
            report.destructive_on_reads, bars.max_destructive_on_reads
        ));
    }
    if let Some(b) = bm25 {
        const EPS: f64 = 1e-9;
        for (name, got, plain) in [
            ("P@1", report.first_right, b.first_right),
            ("P@k", report.found_in_k, b.found_in_k),
        ] {
            if got + EPS < plain {
                out.push(format!(
                    "{name} {got:.3} is below plain BM25's {plain:.3} on the same prompts (k = {k})"
                ));
            }
        }
    }
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
