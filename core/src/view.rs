//! Tool views: the few tools a model sees for one step, each with the reason it is there, and
//! every hidden candidate with the policy decision that hid it (invariant 15).
//!
//! candidates (action type, domain) → policy filter (lifecycle, exposure, grants, scopes) →
//! ranking (intent words against name, summary and use-when; do-not-use-when and recent
//! failures lower) → top N. Output adapters render the view for each model provider without
//! leaking internal fields.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};
use toolgate_crds::{ActionType, Lifecycle, RiskSeverity, RiskTier, TrustLevel};

use crate::decision::{approval_needed, authorize_principal};
use crate::principal::Principal;
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
    /// Ranking score (higher first).
    pub score: i64,
    /// Why it is in the view.
    pub reason: String,
    /// The grant that makes it available.
    pub grant: String,
    #[serde(skip)]
    tool: RegisteredTool,
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
}

/// Provider payload formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewFormat {
    /// toolgate's own form, with reasons.
    Canonical,
    /// OpenAI function tools.
    OpenAi,
    /// Anthropic tools.
    Anthropic,
    /// MCP `tools/list` entries.
    Mcp,
}

/// Compile a view.
pub fn compile_view(registry: &Registry, req: &ViewRequest<'_>) -> ToolView {
    let mut hidden = Vec::new();
    let candidates: Vec<&RegisteredTool> = match req.action_type {
        Some(a) => {
            if req.explain {
                for t in registry.tools_in(req.namespace) {
                    if !t.spec.intent.action_types.contains(&a) {
                        hidden.push(HiddenTool {
                            name: t.name.clone(),
                            code: "action-type-mismatch",
                            reason: format!("does not do {a}"),
                        });
                    }
                }
            }
            registry.tools_for_action(req.namespace, a).collect()
        }
        None => registry.tools_in(req.namespace).collect(),
    };
    let grants = registry.grants_for(req.namespace, req.principal);
    let query = terms(req.intent);
    let mut ranked: Vec<ExposedTool> = Vec::new();
    for tool in candidates {
        if !req.domains.is_empty()
            && !tool
                .spec
                .intent
                .domains
                .iter()
                .any(|d| req.domains.contains(d))
        {
            hidden.push(HiddenTool {
                name: tool.name.clone(),
                code: "domain-mismatch",
                reason: format!("not in domain(s) {}", req.domains.join(", ")),
            });
            continue;
        }
        if !tool.is_callable() {
            hidden.push(HiddenTool {
                name: tool.name.clone(),
                code: "tool-not-enabled",
                reason: format!("lifecycle is {:?}", tool.lifecycle),
            });
            continue;
        }
        if tool.spec.provenance.trust_level == TrustLevel::Untrusted {
            hidden.push(HiddenTool {
                name: tool.name.clone(),
                code: "untrusted-provenance",
                reason: "untrusted tools are never shown".into(),
            });
            continue;
        }
        if !tool.spec.context_policy.expose_to_model {
            hidden.push(HiddenTool {
                name: tool.name.clone(),
                code: "not-exposed",
                reason: "contextPolicy.exposeToModel is false".into(),
            });
            continue;
        }
        let (grant, scopes) =
            match authorize_principal(tool, &grants, req.namespace, req.principal, req.now) {
                Ok(ok) => ok,
                Err(refusal) => {
                    hidden.push(HiddenTool {
                        name: tool.name.clone(),
                        code: refusal.code,
                        reason: refusal.message,
                    });
                    continue;
                }
            };
        let (needs, _) = approval_needed(tool, &grant.spec, false);
        let positive = query.intersection(&tool.positive_terms).count() as i64;
        let negative = query.intersection(&tool.negative_terms).count() as i64;
        let failures = i64::from(req.recent_failures.get(&tool.name).copied().unwrap_or(0));
        let deprecated = tool.lifecycle == Lifecycle::Deprecated;
        let score = 10 * positive - 8 * negative - 5 * failures - if deprecated { 20 } else { 0 };
        if negative > 0 && negative >= positive {
            hidden.push(HiddenTool {
                name: tool.name.clone(),
                code: "negative-match",
                reason: format!(
                    "the intent matches its do-not-use-when hints ({})",
                    shared(&query, &tool.negative_terms)
                ),
            });
            continue;
        }
        let mut reason = format!("granted by {} with [{}]", grant.name, scopes.join(", "));
        if positive > 0 {
            reason.push_str(&format!(
                "; intent matches {}",
                shared(&query, &tool.positive_terms)
            ));
        }
        if failures > 0 {
            reason.push_str(&format!("; {failures} recent failure(s)"));
        }
        if needs {
            reason.push_str(&format!("; {} calls need approval", tool.tier));
        }
        ranked.push(ExposedTool {
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
            score,
            reason,
            grant: grant.name.clone(),
            tool: tool.clone(),
        });
    }
    ranked.sort_by(|a, b| b.score.cmp(&a.score).then_with(|| a.name.cmp(&b.name)));
    let max = req.max_tools.max(1);
    for t in ranked.drain(max.min(ranked.len())..) {
        hidden.push(HiddenTool {
            reason: format!("ranked below the top {max} (score {})", t.score),
            name: t.name,
            code: "ranked-out",
        });
    }
    let mut used = BTreeSet::new();
    for t in &mut ranked {
        t.provider_name = provider_name(&t.canonical_name, &mut used);
    }
    hidden.sort_by(|a, b| a.name.cmp(&b.name));
    ToolView {
        exposed: ranked,
        hidden,
    }
}

fn shared(a: &BTreeSet<String>, b: &BTreeSet<String>) -> String {
    a.intersection(b)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A provider-safe name (`^[a-zA-Z0-9_-]{1,64}$`): dots become `__`; a name that is too long
/// or already taken gets a short digest suffix. [`ToolView::resolve`] maps it back.
pub fn provider_name(canonical: &str, used: &mut BTreeSet<String>) -> String {
    let mut name: String = canonical
        .replace('.', "__")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.len() > 64 || used.contains(&name) {
        let suffix = &crate::digest::sha256(canonical.as_bytes())[7..15];
        name.truncate(55);
        name = format!("{name}_{suffix}");
    }
    used.insert(name.clone());
    name
}

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
    let d = &t.tool.spec.description;
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
    s
}

fn render_tool(t: &ExposedTool, format: ViewFormat) -> Value {
    let spec = &t.tool.spec;
    let schema = spec.schemas.input_schema.clone();
    match format {
        ViewFormat::OpenAi => json!({
            "type": "function",
            "function": {"name": t.provider_name, "description": model_description(t), "parameters": schema}
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
            "approval": t.approval,
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
