//! Tool views: the few tools a model sees for one step, each with the reason it is there, and
//! every hidden candidate with the policy decision that hid it (invariant 15).
//!
//! candidates (action type, domain) → policy filter (lifecycle, exposure, grants, scopes) →
//! ranking (intent words against name, summary and use-when; do-not-use-when and recent
//! failures lower) → top N. Output adapters render the view for each model provider without
//! leaking internal fields.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};
use toolgate_crds::{
    ActionType, Lifecycle, RiskSeverity, RiskTier, StrongConfirmation, ToolDescriptorSpec,
    TrustLevel,
};

use crate::decision::{approval_needed, authorize_principal};
use crate::principal::Principal;
use crate::rank;
use crate::registry::{RegisteredTool, Registry, terms};

/// What a view is compiled for.
#[derive(Debug, Clone)]
pub struct ViewRequest<'a> {
    /// Namespace of the tools and grants.
    pub namespace: &'a str,
    /// The authenticated principal.
    pub principal: &'a Principal,
    /// The intent in words (user goal and current task).
    pub intent: &'a str,
    /// Only tools that declare this action type, if set.
    pub action_type: Option<ActionType>,
    /// Only tools in one of these domains, if any.
    pub domains: &'a [String],
    /// At most this many tools.
    pub max_tools: usize,
    /// Recent failures per tool name; each lowers the tool's rank.
    pub recent_failures: &'a BTreeMap<String, u32>,
    /// Also list the namespace's tools that were never candidates (costs a pass over them).
    pub explain: bool,
    /// Decision time (grant expiry).
    pub now: Timestamp,
    /// What the grants used of their budgets (a tool whose only grants are spent is hidden).
    pub usage: &'a crate::registry::GrantUsages,
}

/// Whether calls of an exposed tool need approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ApprovalHint {
    /// Runs once proposed.
    None,
    /// A human approves before it runs.
    Required,
}

/// A tool in the view.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExposedTool {
    /// Object name.
    pub name: String,
    /// Canonical (dotted) name.
    pub canonical_name: String,
    /// The name in OpenAI and Anthropic payloads (`^[a-zA-Z0-9_-]{1,64}$`).
    pub provider_name: String,
    /// The version a call must pin.
    pub digest: String,
    /// Tier.
    pub tier: RiskTier,
    /// Declared risk.
    pub risk_level: RiskSeverity,
    /// Whether calls need approval.
    pub approval: ApprovalHint,
    /// What an L5 call needs besides its approval (a dry run of the same args first, or a
    /// second approver); `None` below L5.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<toolgate_crds::StrongConfirmation>,
    /// Ranking score (higher first): the intent's BM25F fit, lowered by recent failures.
    pub score: f64,
    /// Why it is in the view.
    pub reason: String,
    /// The grant that makes it available.
    pub grant: String,
    #[serde(skip)]
    spec: Arc<ToolDescriptorSpec>,
}

/// A candidate that is not in the view, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HiddenTool {
    /// Object name.
    pub name: String,
    /// Stable code (`no-grant`, `ranked-out`).
    pub code: &'static str,
    /// The policy decision in words.
    pub reason: String,
}

/// A compiled view.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolView {
    /// The tools the model sees, best first.
    pub exposed: Vec<ExposedTool>,
    /// The tools it does not see, each with its reason.
    pub hidden: Vec<HiddenTool>,
    /// Candidates never looked at because the view filled up first (large candidate sets
    /// without `explain`); they are neither exposed nor refused.
    pub not_ranked: usize,
}

/// Provider payload formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewFormat {
    /// toolgate's own form, with reasons.
    Canonical,
    /// OpenAI Chat Completions function tools.
    OpenAi,
    /// OpenAI Responses API function tools (flat: no `function` wrapper).
    OpenAiResponses,
    /// Anthropic tools.
    Anthropic,
    /// MCP `tools/list` entries.
    Mcp,
}

/// Candidate sets up to this size are scored by set intersection and all visited; larger ones
/// are scored through the registry's term index and visited in rank order only until the view
/// is full, so cost follows the view, not the registry.
const SMALL_CANDIDATE_SET: usize = 64;

/// Compile a view: the candidates (by grant or action type, then domain), each scored against
/// the intent, then visited in rank order — the policy filter hides what the principal may not
/// use, and the rest is exposed until the view is full. Every tool hidden on the way says why.
pub fn compile_view(registry: &Registry, req: &ViewRequest<'_>) -> ToolView {
    let mut hidden = Vec::new();
    let grants = crate::registry::with_usage(
        &registry.grants_for(req.namespace, req.principal),
        req.usage,
    );
    let grants: Vec<&crate::registry::GrantEntry> = grants.iter().collect();
    let candidates = candidates(registry, req, &grants, &mut hidden);
    let query = Query::of(registry, req);
    let small = candidates.len() <= SMALL_CANDIDATE_SET;
    let (mut order, anything_fits) = ranked(registry, req, &candidates, &query, small);
    // Visit in rank order: policy filter, then expose until the view is full. Only the head of
    // the order is sorted up front; the tail is sorted if the head runs out.
    let max = req.max_tools.max(1);
    let visit_all = small || req.explain;
    let mut sorted = if visit_all {
        order.len()
    } else {
        (max * 4).min(order.len())
    };
    if sorted < order.len() && sorted > 0 {
        order.select_nth_unstable_by(sorted - 1, Ranked::cmp_key);
    }
    order[..sorted].sort_unstable_by(Ranked::cmp_key);
    let mut exposed: Vec<ExposedTool> = Vec::new();
    let tool_policies = registry.tool_policies(req.namespace);
    let mut visited = 0;
    for j in 0..order.len() {
        if exposed.len() >= max && !visit_all {
            break;
        }
        if j == sorted {
            order[sorted..].sort_unstable_by(Ranked::cmp_key);
            sorted = order.len();
        }
        let ranked = &order[j];
        // Past the last tool the intent's words fit: the rest fit no better, and a view is
        // not filled with them.
        if ranked.unmatched && !ranked.negative_match && !req.explain {
            break;
        }
        visited += 1;
        let tool = registry.tool_at(ranked.index);
        let full = exposed.len() >= max;
        match judge(
            tool,
            ranked,
            &grants,
            req,
            &query,
            tool_policies,
            anything_fits,
            full,
        ) {
            Ok(e) => exposed.push(e),
            Err(h) => hidden.push(h),
        }
    }
    let mut used = BTreeSet::new();
    for t in &mut exposed {
        t.provider_name = provider_name(&t.canonical_name, &mut used);
    }
    hidden.sort_by(|a, b| a.name.cmp(&b.name));
    ToolView {
        exposed,
        hidden,
        not_ranked: order.len() - visited,
    }
}

/// The tools a view considers: by the principal's named grants when that is all it has (a
/// lookup per name), otherwise by action type from the index; then those in the asked domains.
/// With `explain`, what the action type or domain leaves out is hidden with its reason.
fn candidates(
    registry: &Registry,
    req: &ViewRequest<'_>,
    grants: &[&crate::registry::GrantEntry],
    hidden: &mut Vec<HiddenTool>,
) -> Vec<usize> {
    let by_name_only = grants.iter().all(|g| g.spec.tools.selector.is_none());
    let wants = |t: &RegisteredTool| {
        req.action_type
            .is_none_or(|a| t.spec.intent.action_types.contains(&a))
    };

    let mut candidates: Vec<usize> = if by_name_only && !req.explain {
        let names: BTreeSet<&str> = grants
            .iter()
            .flat_map(|g| g.spec.tools.names.iter().map(String::as_str))
            .collect();
        names
            .into_iter()
            .filter_map(|n| registry.tool_index(req.namespace, n))
            .filter(|&i| wants(registry.tool_at(i)))
            .collect()
    } else {
        registry
            .tool_indexes(req.namespace, req.action_type)
            .to_vec()
    };
    if req.explain
        && let Some(a) = req.action_type
    {
        for t in registry.tools_in(req.namespace).filter(|t| !wants(t)) {
            hidden.push(HiddenTool {
                name: t.name.clone(),
                code: "action-type-mismatch",
                reason: format!("does not do {a}"),
            });
        }
    }
    if !req.domains.is_empty() {
        let list = req.explain || candidates.len() <= SMALL_CANDIDATE_SET;
        candidates.retain(|&i| {
            let t = registry.tool_at(i);
            let keep = t
                .spec
                .intent
                .domains
                .iter()
                .any(|d| req.domains.contains(d));
            if !keep && list {
                hidden.push(HiddenTool {
                    name: t.name.clone(),
                    code: "domain-mismatch",
                    reason: format!("not in domain(s) {}", req.domains.join(", ")),
                });
            }
            keep
        });
    }
    candidates
}

/// The intent as a query: its words (and the everyday words for them, at half weight) with the
/// namespace's IDF, and the action it asks for.
struct Query {
    corpus: rank::Corpus,
    terms: BTreeSet<String>,
    weighted: Vec<(String, f64)>,
    action: rank::IntentAction,
}

impl Query {
    fn of(registry: &Registry, req: &ViewRequest<'_>) -> Query {
        let corpus = registry.corpus(req.namespace);
        let terms: BTreeSet<String> = terms(req.intent);
        let idf = |t: &str| corpus.idf(registry.tools_with_term(req.namespace, t, false).len());
        let mut weighted: Vec<(String, f64)> = terms.iter().map(|t| (t.clone(), idf(t))).collect();
        weighted.extend(rank::everyday_terms(&terms).into_iter().map(|t| {
            let w = 0.5 * idf(&t);
            (t, w)
        }));
        let action = req
            .action_type
            .map(rank::declared_action)
            .unwrap_or_else(|| rank::intent_action(req.intent));
        Query {
            corpus,
            terms,
            weighted,
            action,
        }
    }
}

/// Score: BM25F of the intent's words over the tool's fields ([`crate::rank`]), lowered by
/// each recent failure; do-not-use-when hints that match as many words as the tool does hide
/// it. A tool that does more than the intent asks (a writer for a read, a destroyer for a
/// change) ranks after every tool that fits without doing so; a deprecated one after the
/// rest; ties go to the tool with fewer required args (the simpler fit for a request that
/// says little), then the lower tier, then the name.
/// Returns the candidates' places in the order (unsorted) and whether the intent fits any.
fn ranked(
    registry: &Registry,
    req: &ViewRequest<'_>,
    candidates: &[usize],
    q: &Query,
    small: bool,
) -> (Vec<Ranked>, bool) {
    // Small sets: each candidate's text is scored. Large sets: one pass over the intent's words'
    // postings, whose weights the registry computed once (the same figures either way).
    let fits = if small {
        Scores::Few(
            candidates
                .iter()
                .map(|&i| {
                    (
                        i,
                        rank::fit(&registry.tool_at(i).text, &q.weighted, &q.corpus).score,
                    )
                })
                .filter(|(_, s)| *s > 0.0)
                .collect(),
        )
    } else {
        let mut scores = vec![0.0; registry.tool_count()];
        for (term, idf) in &q.weighted {
            let (tools, weights) = registry.weighted_postings(req.namespace, term);
            for (&i, &tf) in tools.iter().zip(weights) {
                scores[i] += rank::contribution(tf, *idf);
            }
        }
        Scores::Many(scores)
    };
    let mut negatives: HashMap<usize, i64> = HashMap::new();
    for term in &q.terms {
        for &i in registry.tools_with_term(req.namespace, term, true) {
            *negatives.entry(i).or_default() += 1;
        }
    }
    let anything_fits = candidates.iter().any(|&i| fits.get(i) > 0.0);
    let order: Vec<Ranked> = candidates
        .iter()
        .map(|&i| {
            let t = registry.tool_at(i);
            let fit = fits.get(i);
            let negative = negatives.get(&i).copied().unwrap_or(0);
            // Counted only where a do-not-use hint matched (the rare case).
            let positive = if fit > 0.0 && negative > 0 {
                q.terms.intersection(&t.positive_terms).count() as i64
            } else {
                0
            };
            let failures = if req.recent_failures.is_empty() {
                0
            } else {
                req.recent_failures.get(&t.name).copied().unwrap_or(0)
            };
            let demotion = rank::demotion(&t.spec, q.action);
            let mut score = fit * 0.5f64.powi(failures.min(64) as i32);
            if demotion == rank::Demotion::Lowered {
                score *= rank::LOWERED;
            }
            let required = t.required_args;
            Ranked {
                negative_match: negative > 0 && negative >= positive,
                unmatched: anything_fits && fit <= 0.0,
                riskier: demotion == rank::Demotion::After,
                lowered: demotion == rank::Demotion::Lowered,
                deprecated: t.lifecycle == Lifecycle::Deprecated,
                score: -(score * 1e6).round() as i64,
                required,
                tier: t.tier,
                name_rank: registry.name_rank(i),
                index: i,
                fitted: fit > 0.0,
            }
        })
        .collect();
    (order, anything_fits)
}

/// One visited tool: exposed, with the reason it is there, or hidden by the policy filter, a
/// do-not-use hint, no fit, or a view already `full`.
#[allow(
    clippy::too_many_arguments,
    reason = "the view's request, its query and the visit's state, each read by a different rule"
)]
fn judge(
    tool: &RegisteredTool,
    ranked: &Ranked,
    grants: &[&crate::registry::GrantEntry],
    req: &ViewRequest<'_>,
    q: &Query,
    tool_policies: Option<&crate::cedar::ToolPolicies>,
    anything_fits: bool,
    full: bool,
) -> Result<ExposedTool, HiddenTool> {
    let score = (-ranked.score) as f64 / 1e6;
    let max = req.max_tools.max(1);
    gate(tool)?;
    let (grant, scopes) =
        match authorize_principal(tool, grants, req.namespace, req.principal, req.now) {
            Ok(ok) => ok,
            Err(refusal) => {
                return Err(HiddenTool {
                    name: tool.name.clone(),
                    code: refusal.code,
                    reason: refusal.message,
                });
            }
        };
    // A ToolPolicy that forbids every call of the tool by this principal hides it.
    if let Some(f) = tool_policies
        .and_then(|p| p.forbids_every_call(tool, req.principal, req.namespace, req.now))
    {
        return Err(HiddenTool {
            name: tool.name.clone(),
            code: "policy-forbidden",
            reason: format!(
                "ToolPolicy {} forbids every call ({}): {}",
                f.tool_policy, f.policy, f.reason
            ),
        });
    }
    if ranked.negative_match {
        return Err(HiddenTool {
            name: tool.name.clone(),
            code: "negative-match",
            reason: format!(
                "the intent matches its do-not-use-when hints ({})",
                shared(&q.terms, &tool.negative_terms)
            ),
        });
    }
    if ranked.unmatched {
        return Err(HiddenTool {
            name: tool.name.clone(),
            code: "no-match",
            reason: "no word of the intent describes it".into(),
        });
    }
    if full {
        return Err(HiddenTool {
            name: tool.name.clone(),
            code: "ranked-out",
            reason: format!("ranked below the top {max} (score {score:.2})"),
        });
    }
    let (needs, _) = approval_needed(tool, &grant.spec, false);
    let mut reason = format!("granted by {} with [{}]", grant.name, scopes.join(", "));
    let matched = shared(&q.terms, &tool.positive_terms);
    if ranked.fitted {
        // The parts, for the few tools exposed only.
        let fit = rank::fit(&tool.text, &q.weighted, &q.corpus);
        reason.push_str(&format!(
            "; intent matches {matched} (score {score:.2}: {})",
            fit.explain()
        ));
    } else if !anything_fits && !q.terms.is_empty() {
        reason.push_str("; no word of the intent describes any tool: listed unranked");
    }
    if ranked.riskier {
        reason.push_str(
            "; declares a change and the intent asks for a read: ranked after the tools that only read",
        );
    }
    if ranked.lowered {
        reason.push_str(&format!(
            "; declares it destroys and the intent asks for a change: score x{}",
            rank::LOWERED
        ));
    }
    if let Some(f) = req.recent_failures.get(&tool.name).filter(|f| **f > 0) {
        reason.push_str(&format!("; {f} recent failure(s)"));
    }
    let confirmation =
        (needs && tool.tier == RiskTier::L5).then(|| tool.spec.strong_confirmation());
    match confirmation {
        Some(c) => reason.push_str(&format!(
            "; {} calls need approval and {}",
            tool.tier,
            match c {
                StrongConfirmation::DryRun => "a dry run of the same args first",
                StrongConfirmation::SecondApprover => "a second approver",
            }
        )),
        None if needs => reason.push_str(&format!("; {} calls need approval", tool.tier)),
        None => {}
    }
    Ok(ExposedTool {
        name: tool.name.clone(),
        canonical_name: tool.spec.canonical_name.clone(),
        provider_name: String::new(),
        digest: tool.digest.clone(),
        tier: tool.tier,
        risk_level: tool.spec.risk.level,
        approval: if needs {
            ApprovalHint::Required
        } else {
            ApprovalHint::None
        },
        confirmation,
        score,
        reason,
        grant: grant.name.clone(),
        spec: Arc::clone(&tool.spec),
    })
}

/// Each candidate's fit to the intent: a few scored one by one, or the whole registry's from the
/// postings.
enum Scores {
    Few(HashMap<usize, f64>),
    Many(Vec<f64>),
}

impl Scores {
    fn get(&self, i: usize) -> f64 {
        match self {
            Scores::Few(m) => m.get(&i).copied().unwrap_or(0.0),
            Scores::Many(v) => v.get(i).copied().unwrap_or(0.0),
        }
    }
}

/// A candidate's place in the order (see `compile_view`).
#[derive(Debug, Clone)]
struct Ranked {
    negative_match: bool,
    unmatched: bool,
    riskier: bool,
    lowered: bool,
    deprecated: bool,
    /// The score, negated and in millionths (an integer orders totally).
    score: i64,
    required: usize,
    tier: RiskTier,
    name_rank: u32,
    index: usize,
    fitted: bool,
}

impl Ranked {
    fn cmp_key(a: &Ranked, b: &Ranked) -> std::cmp::Ordering {
        // Tools the intent fits, then those its do-not-use-when hints rule out (visited to
        // say so), then those it does not fit at all.
        let key = |r: &Ranked| {
            (
                r.unmatched && !r.negative_match,
                r.negative_match,
                r.riskier,
                r.deprecated,
                r.score,
                r.required,
                r.tier,
                r.name_rank,
                r.index,
            )
        };
        key(a).cmp(&key(b))
    }
}

/// Lifecycle, provenance and exposure: what hides a tool before any grant is looked at.
fn gate(tool: &RegisteredTool) -> Result<(), HiddenTool> {
    let hide = |code, reason: String| {
        Err(HiddenTool {
            name: tool.name.clone(),
            code,
            reason,
        })
    };
    if let Some(why) = tool.held_for_review() {
        return hide("description-review", why);
    }
    if !tool.is_callable() {
        return hide(
            "tool-not-enabled",
            format!("lifecycle is {:?}", tool.lifecycle),
        );
    }
    if tool.spec.provenance.trust_level == TrustLevel::Untrusted {
        return hide(
            "untrusted-provenance",
            "untrusted tools are never shown".into(),
        );
    }
    if !tool.spec.context_policy.expose_to_model {
        return hide("not-exposed", "contextPolicy.exposeToModel is false".into());
    }
    Ok(())
}

fn shared(a: &BTreeSet<String>, b: &BTreeSet<String>) -> String {
    a.intersection(b)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

pub use crate::names::provider_name;

impl ToolView {
    /// The tool (object name) a provider's tool name refers to.
    pub fn resolve(&self, provider_or_canonical: &str) -> Option<&ExposedTool> {
        self.exposed.iter().find(|t| {
            t.provider_name == provider_or_canonical || t.canonical_name == provider_or_canonical
        })
    }

    /// Render the exposed tools for a provider.
    pub fn render(&self, format: ViewFormat) -> Value {
        Value::Array(
            self.exposed
                .iter()
                .map(|t| render_tool(t, format))
                .collect(),
        )
    }
}

/// The description a model reads: summary, when to use, when not to, and the approval hint.
fn model_description(t: &ExposedTool) -> String {
    let d = &t.spec.description;
    let mut s = d.summary.clone();
    if !d.use_when.is_empty() {
        s.push_str(&format!("\nUse when: {}.", d.use_when.join("; ")));
    }
    if !d.do_not_use_when.is_empty() {
        s.push_str(&format!(
            "\nDo not use when: {}.",
            d.do_not_use_when.join("; ")
        ));
    }
    if t.approval == ApprovalHint::Required {
        s.push_str(
            "\nCalls wait for a human approval before they run; state your rationale clearly.",
        );
    }
    match t.confirmation {
        Some(StrongConfirmation::DryRun) => s.push_str(
            "\nFirst propose the same call as a dry run (`dry_run` in the API, `--dry-run` on the command line); the real call runs only after that dry run succeeded and a human approved.",
        ),
        Some(StrongConfirmation::SecondApprover) => {
            s.push_str("\nTwo different humans must approve each call.")
        }
        None => {}
    }
    s
}

fn render_tool(t: &ExposedTool, format: ViewFormat) -> Value {
    let spec = &t.spec;
    let schema = spec.schemas.input_schema.clone();
    match format {
        ViewFormat::OpenAi => json!({
            "type": "function",
            "function": {"name": t.provider_name, "description": model_description(t), "parameters": schema}
        }),
        ViewFormat::OpenAiResponses => json!({
            "type": "function",
            "name": t.provider_name,
            "description": model_description(t),
            "parameters": schema,
            "strict": false,
        }),
        ViewFormat::Anthropic => {
            json!({"name": t.provider_name, "description": model_description(t), "input_schema": schema})
        }
        ViewFormat::Mcp => {
            let e = &spec.effects;
            json!({
                "name": t.canonical_name,
                "description": model_description(t),
                "inputSchema": schema,
                "annotations": {
                    "readOnlyHint": !e.mutates_state && e.writes.is_empty() && e.deletes.is_empty(),
                    "destructiveHint": spec.risk.destructive || !e.deletes.is_empty(),
                    "idempotentHint": e.idempotent,
                    "openWorldHint": spec.risk.open_world || e.external_calls,
                }
            })
        }
        ViewFormat::Canonical => json!({
            "name": t.name,
            "canonicalName": t.canonical_name,
            "version": spec.version,
            "digest": t.digest,
            "description": model_description(t),
            "inputSchema": schema,
            "riskTier": t.tier,
            "riskLevel": t.risk_level,
            "actionTypes": spec.intent.action_types,
            "approval": t.approval,
            "confirmation": t.confirmation,
            "reason": t.reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_names_are_valid_and_unique() {
        let mut used = BTreeSet::new();
        let a = provider_name("github.create-issue", &mut used);
        assert_eq!(a, "github__create-issue");
        let long = "a".repeat(70) + ".b";
        let b = provider_name(&long, &mut used);
        assert!(b.len() <= 64, "{b}");
        let c = provider_name("github.create-issue", &mut used);
        assert_ne!(a, c);
        let re = regex::Regex::new("^[a-zA-Z0-9_-]{1,64}$").unwrap();
        for n in [a, b, c] {
            assert!(re.is_match(&n), "{n}");
        }
    }
}
