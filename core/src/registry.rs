//! Descriptor registration (lint → lifecycle and digest) and the indexed registry of tools and
//! grants that decisions and views read. Indexes keep the cost of a decision independent of how
//! many tools and grants exist.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use toolgate_crds::{
    ActionType, Lifecycle, LintFinding, ToolDescriptorSpec, ToolGrantSpec, ToolPolicySpec,
    TrustLevel,
};

use crate::cedar::{Problem, ToolPolicies};
use crate::findings::{Severity, descriptor_findings};
use crate::manifest::{Object, ObjectSet, Spec};
use crate::principal::{Principal, SubjectName, with_subject_name};
use crate::{digest, risk};

pub use crate::registered::RegisteredTool;

/// Register a descriptor: lint it against the objects it refers to, decide its lifecycle and
/// compute its digest.
pub fn register(obj: &Object, spec: &ToolDescriptorSpec, set: &ObjectSet) -> RegisteredTool {
    let findings = descriptor_findings(obj, spec, set);
    let digest = digest::descriptor_digest(spec).unwrap_or_else(|_| digest::sha256(b""));
    let reviewed = obj
        .meta
        .annotations
        .get(crate::findings::poisoning::REVIEWED_ANNOTATION)
        .is_some_and(|d| *d == digest);
    let lifecycle = lifecycle_of(spec, &findings, reviewed);
    let input_validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&spec.schemas.input_schema)
        .ok()
        .map(Arc::new);
    let text = crate::rank::ToolText::of(spec);
    let positive_terms = text.terms();
    let mut negative_terms = BTreeSet::new();
    for s in spec
        .description
        .do_not_use_when
        .iter()
        .chain(&spec.intent.negative_intent_hints)
    {
        negative_terms.extend(terms(s));
    }
    negative_terms.retain(|t| !positive_terms.contains(t));
    RegisteredTool {
        namespace: obj.meta.namespace().to_string(),
        name: obj.meta.name.clone(),
        labels: obj.meta.labels.clone(),
        spec: Arc::new(spec.clone()),
        lifecycle,
        digest,
        tier: risk::descriptor_tier(spec),
        findings: findings
            .into_iter()
            .map(|(_, path, code, message)| LintFinding {
                code: code.into(),
                path,
                message,
            })
            .collect(),
        input_validator,
        positive_terms,
        negative_terms,
        text,
        required_args: spec
            .schemas
            .input_schema
            .get("required")
            .and_then(serde_json::Value::as_array)
            .map_or(0, Vec::len),
    }
}

/// The lifecycle a descriptor's findings put it in. Errors decide the failure state; the most
/// fundamental problem wins (a broken schema before a permission problem before a sandbox one).
/// Instruction-like text blocks a tool from outside; in a first-party or workspace tool it keeps
/// the tool `verified` (out of every view, not callable) until `reviewed` says a person read this
/// exact version. A tool discovered on an MCP server, or a skill's script, stays `discovered`
/// until then.
pub fn lifecycle_of(
    spec: &ToolDescriptorSpec,
    findings: &[crate::findings::Local],
    reviewed: bool,
) -> Lifecycle {
    let poisoned = |severity: Severity| {
        findings
            .iter()
            .any(|(s, _, c, _)| *s == severity && *c == crate::findings::poisoning::CODE)
    };
    if spec.disabled {
        return Lifecycle::Disabled;
    }
    if spec.provenance.trust_level == TrustLevel::Untrusted || poisoned(Severity::Error) {
        return Lifecycle::Blocked;
    }
    let errors: Vec<(&str, &str)> = findings
        .iter()
        .filter(|(s, ..)| *s == Severity::Error)
        .map(|(_, path, code, _)| (path.as_str(), *code))
        .collect();
    let any = |pred: &dyn Fn(&str, &str) -> bool| errors.iter().any(|(p, c)| pred(p, c));
    if any(&|_, c| {
        matches!(
            c,
            "invalid-json-schema"
                | "example-args-invalid"
                | "template-unknown-arg"
                | "template-syntax"
        )
    }) {
        return Lifecycle::InvalidSchema;
    }
    if any(&|p, c| p.starts_with("spec.sandboxPolicyRef") || c.starts_with("sandbox-")) {
        return Lifecycle::SandboxLintFailed;
    }
    if !errors.is_empty() {
        return Lifecycle::PermissionLintFailed;
    }
    if poisoned(Severity::Warning) && !reviewed {
        return Lifecycle::Verified;
    }
    // Discovered on an MCP server or declared by a skill: out of every view until a person read
    // this version.
    if matches!(
        spec.source.type_,
        toolgate_crds::SourceType::Mcp | toolgate_crds::SourceType::Skill
    ) && !reviewed
    {
        return Lifecycle::Discovered;
    }
    if spec.deprecation.is_some() {
        return Lifecycle::Deprecated;
    }
    Lifecycle::Enabled
}

pub use crate::rank::terms;

/// A grant with the usage that counts against its budget.
#[derive(Debug, Clone)]
pub struct GrantEntry {
    /// Namespace of the grant.
    pub namespace: String,
    /// Name of the grant.
    pub name: String,
    /// The spec.
    pub spec: Arc<ToolGrantSpec>,
    /// Calls counted so far.
    pub usage: GrantUsage,
}

/// Calls counted against a grant's budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GrantUsage {
    /// Over the grant's lifetime.
    pub calls_total: u64,
    /// In the last hour.
    pub calls_last_hour: u64,
    /// When the oldest unit of the last hour leaves the window (none when it is empty).
    pub window_frees_at: Option<jiff::Timestamp>,
}

/// What each grant (namespace, name) used of its budget, as its ledger says.
pub type GrantUsages = std::collections::HashMap<(String, String), GrantUsage>;

/// The grants with the usage `usages` records for them (a grant without a ledger used nothing).
pub fn with_usage(grants: &[&GrantEntry], usages: &GrantUsages) -> Vec<GrantEntry> {
    grants
        .iter()
        .map(|g| {
            let mut g = (*g).clone();
            if let Some(u) = usages.get(&(g.namespace.clone(), g.name.clone())) {
                g.usage = *u;
            }
            g
        })
        .collect()
}

/// The registry's maps. Their keys come from manifests and every decision looks some up: foldhash
/// (seeded per process) instead of SipHash, which was a tenth of a decision's time.
type Index<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A namespace's grants by the names their subjects give tools to, one map per kind of name, so
/// that a principal's own strings are the lookup keys.
#[derive(Debug, Default, Clone)]
struct GrantsBySubject {
    users: Index<String, Vec<usize>>,
    groups: Index<String, Vec<usize>>,
    service_accounts_of: Index<String, Vec<usize>>,
}

impl GrantsBySubject {
    fn insert(&mut self, name: SubjectName<'_>, grant: usize) {
        let (map, key) = match name {
            SubjectName::User(n) => (&mut self.users, n),
            SubjectName::Group(n) => (&mut self.groups, n),
            SubjectName::ServiceAccountsOf(n) => (&mut self.service_accounts_of, n),
        };
        match map.get_mut(key) {
            Some(grants) => grants.push(grant),
            None => {
                map.insert(key.to_string(), vec![grant]);
            }
        }
    }

    fn get(&self, name: SubjectName<'_>) -> &[usize] {
        let (map, key) = match name {
            SubjectName::User(n) => (&self.users, n),
            SubjectName::Group(n) => (&self.groups, n),
            SubjectName::ServiceAccountsOf(n) => (&self.service_accounts_of, n),
        };
        map.get(key).map_or(&[], Vec::as_slice)
    }
}

/// Tools and grants, indexed by namespace, name, action type and subject.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    tools: Vec<RegisteredTool>,
    // Keyed by namespace first, so a lookup borrows its keys instead of building a tuple of
    // owned strings on every decision.
    by_name: Index<String, Index<String, usize>>,
    by_action: Index<String, Index<ActionType, Vec<usize>>>,
    by_namespace: Index<String, Vec<usize>>,
    grants: Vec<GrantEntry>,
    grants_by_subject: Index<String, GrantsBySubject>,
    /// namespace → term → tools whose name, summary, use-when or examples contain it.
    positive_index: Index<String, Index<String, Vec<usize>>>,
    /// namespace → term → tools whose do-not-use-when hints contain it.
    negative_index: Index<String, Index<String, Vec<usize>>>,
    /// namespace → how many tools and how long their texts are, for ranking.
    corpora: Index<String, crate::rank::Corpus>,
    /// namespace → term → each tool's weighted frequency of it, in `positive_index`'s order
    /// (filled once all tools are in: it depends on the namespace's mean field lengths).
    term_weights: Index<String, Index<String, Vec<f64>>>,
    /// Position of each tool when all are sorted by (namespace, name): a cheap, stable tie-break.
    name_rank: Vec<u32>,
    /// namespace → its ToolPolicies, compiled against its tools.
    tool_policies: Index<String, ToolPolicies>,
    /// What did not compile in them (lint reports these).
    policy_problems: Vec<(String, Problem)>,
}

impl Registry {
    /// Register every descriptor and index every grant of a checked object set.
    pub fn from_objects(set: &ObjectSet) -> Self {
        let mut r = Registry::default();
        for obj in set.iter() {
            match &obj.spec {
                Spec::ToolDescriptor(d) => r.insert_tool(register(obj, d, set)),
                Spec::ToolGrant(g) => r.add_grant(GrantEntry {
                    namespace: obj.meta.namespace().to_string(),
                    name: obj.meta.name.clone(),
                    spec: Arc::new((**g).clone()),
                    usage: GrantUsage::default(),
                }),
                _ => {}
            }
        }
        r.rank_names();
        r.compile_tool_policies(set);
        r
    }

    /// Compile each namespace's ToolPolicies against its tools (once every tool is in).
    fn compile_tool_policies(&mut self, set: &ObjectSet) {
        let mut by_namespace: BTreeMap<&str, Vec<(&str, &ToolPolicySpec)>> = BTreeMap::new();
        for obj in set.iter() {
            if let Spec::ToolPolicy(p) = &obj.spec {
                by_namespace
                    .entry(obj.meta.namespace())
                    .or_default()
                    .push((obj.meta.name.as_str(), &**p));
            }
        }
        for (ns, policies) in by_namespace {
            let (compiled, problems) = ToolPolicies::compile(self.tools_in(ns), &policies);
            self.policy_problems
                .extend(problems.into_iter().map(|p| (ns.to_string(), p)));
            self.tool_policies.insert(ns.to_string(), compiled);
        }
    }

    /// Every namespace's compiled ToolPolicies.
    pub fn all_tool_policies(&self) -> impl Iterator<Item = (&str, &ToolPolicies)> {
        self.tool_policies.iter().map(|(ns, p)| (ns.as_str(), p))
    }

    /// A namespace's compiled ToolPolicies, if it has any.
    pub fn tool_policies(&self, namespace: &str) -> Option<&ToolPolicies> {
        self.tool_policies.get(namespace).filter(|p| !p.is_empty())
    }

    /// What did not compile in the ToolPolicies, by namespace.
    pub fn policy_problems(&self) -> &[(String, Problem)] {
        &self.policy_problems
    }

    fn rank_names(&mut self) {
        self.weigh_terms();
        let mut order: Vec<usize> = (0..self.tools.len()).collect();
        order.sort_by(|&a, &b| {
            let (ta, tb) = (&self.tools[a], &self.tools[b]);
            (&ta.namespace, &ta.name).cmp(&(&tb.namespace, &tb.name))
        });
        self.name_rank = vec![0; self.tools.len()];
        for (rank, i) in order.into_iter().enumerate() {
            self.name_rank[i] = u32::try_from(rank).unwrap_or(u32::MAX);
        }
    }

    /// Each posting's weighted term frequency, against its namespace's mean field lengths.
    fn weigh_terms(&mut self) {
        let mut weights: Index<String, Index<String, Vec<f64>>> = Index::default();
        for (ns, terms) in &self.positive_index {
            let average = self
                .corpora
                .get(ns)
                .map(|c| c.average())
                .unwrap_or_default();
            let per_tool: HashMap<usize, std::collections::BTreeMap<String, f64>> = terms
                .values()
                .flatten()
                .copied()
                .collect::<BTreeSet<usize>>()
                .into_iter()
                .map(|i| (i, self.tools[i].text.weights(&average)))
                .collect();
            let ns_weights = weights.entry(ns.clone()).or_default();
            for (term, tools) in terms {
                ns_weights.insert(
                    term.clone(),
                    tools
                        .iter()
                        .map(|i| {
                            per_tool
                                .get(i)
                                .and_then(|w| w.get(term))
                                .copied()
                                .unwrap_or(0.0)
                        })
                        .collect(),
                );
            }
        }
        self.term_weights = weights;
    }

    /// The tools of a namespace whose text holds `term`, and each one's weighted frequency of it.
    pub fn weighted_postings(&self, namespace: &str, term: &str) -> (&[usize], &[f64]) {
        let tools = self.tools_with_term(namespace, term, false);
        let weights = self
            .term_weights
            .get(namespace)
            .and_then(|m| m.get(term))
            .map_or(&[][..], Vec::as_slice);
        if weights.len() == tools.len() {
            (tools, weights)
        } else {
            (&[], &[])
        }
    }

    /// The tool's position in (namespace, name) order.
    pub fn name_rank(&self, i: usize) -> u32 {
        self.name_rank.get(i).copied().unwrap_or(u32::MAX)
    }

    /// Add a registered tool (a later one with the same name replaces the earlier); names are
    /// ranked once all are in (`from_objects`).
    fn insert_tool(&mut self, tool: RegisteredTool) {
        if let Some(i) = self.tool_index(&tool.namespace, &tool.name) {
            self.tools[i] = tool;
            self.reindex_tools();
            self.rank_names();
            return;
        }
        let i = self.tools.len();
        for a in &tool.spec.intent.action_types {
            self.by_action
                .entry(tool.namespace.clone())
                .or_default()
                .entry(*a)
                .or_default()
                .push(i);
        }
        self.by_namespace
            .entry(tool.namespace.clone())
            .or_default()
            .push(i);
        let pos = self
            .positive_index
            .entry(tool.namespace.clone())
            .or_default();
        for t in &tool.positive_terms {
            pos.entry(t.clone()).or_default().push(i);
        }
        self.corpora
            .entry(tool.namespace.clone())
            .or_default()
            .add(&tool.text);
        let neg = self
            .negative_index
            .entry(tool.namespace.clone())
            .or_default();
        for t in &tool.negative_terms {
            neg.entry(t.clone()).or_default().push(i);
        }
        self.by_name
            .entry(tool.namespace.clone())
            .or_default()
            .insert(tool.name.clone(), i);
        self.tools.push(tool);
    }

    fn reindex_tools(&mut self) {
        let tools = std::mem::take(&mut self.tools);
        self.by_name.clear();
        self.by_action.clear();
        self.by_namespace.clear();
        self.positive_index.clear();
        self.negative_index.clear();
        self.corpora.clear();
        for t in tools {
            self.insert_tool(t);
        }
    }

    /// Add a grant.
    pub fn add_grant(&mut self, grant: GrantEntry) {
        let i = self.grants.len();
        let by_subject = self
            .grants_by_subject
            .entry(grant.namespace.clone())
            .or_default();
        for s in &grant.spec.subjects {
            with_subject_name(s, &grant.namespace, |name| by_subject.insert(name, i));
        }
        self.grants.push(grant);
    }

    /// Set the usage of a grant (from status or the local store).
    pub fn set_usage(&mut self, namespace: &str, name: &str, usage: GrantUsage) {
        for g in self
            .grants
            .iter_mut()
            .filter(|g| g.namespace == namespace && g.name == name)
        {
            g.usage = usage;
        }
    }

    /// A tool by namespace and name.
    pub fn tool(&self, namespace: &str, name: &str) -> Option<&RegisteredTool> {
        self.tool_index(namespace, name).map(|i| &self.tools[i])
    }

    /// Every tool of a namespace, in registration order.
    pub fn tools_in(&self, namespace: &str) -> impl Iterator<Item = &RegisteredTool> {
        self.by_namespace
            .get(namespace)
            .into_iter()
            .flatten()
            .map(|&i| &self.tools[i])
    }

    /// The object name of the tool a request names: its object name, its canonical name, or
    /// the provider-safe name a view showed (`file_read`). A name nothing matches stays as it
    /// is, so the decision says the tool was not found.
    pub fn resolve_name(&self, namespace: &str, requested: &str) -> String {
        if self.tool(namespace, requested).is_some() {
            return requested.to_string();
        }
        self.tools_in(namespace)
            .find(|t| {
                t.spec.canonical_name == requested
                    || crate::names::provider_name(&t.spec.canonical_name, &mut Default::default())
                        == requested
            })
            .map_or_else(|| requested.to_string(), |t| t.name.clone())
    }

    /// Number of tools.
    pub fn tool_count(&self) -> usize {
        self.tools.len()
    }

    /// A tool by its registry index.
    pub fn tool_at(&self, i: usize) -> &RegisteredTool {
        &self.tools[i]
    }

    /// Registry indexes of a namespace's tools, optionally only those of an action type.
    pub fn tool_indexes(&self, namespace: &str, action: Option<ActionType>) -> &[usize] {
        let v = match action {
            Some(a) => self.by_action.get(namespace).and_then(|m| m.get(&a)),
            None => self.by_namespace.get(namespace),
        };
        v.map_or(&[], Vec::as_slice)
    }

    /// Registry index of a tool.
    pub fn tool_index(&self, namespace: &str, name: &str) -> Option<usize> {
        self.by_name.get(namespace)?.get(name).copied()
    }

    /// Tools of a namespace whose ranking terms include `term` (positive) or whose
    /// do-not-use-when hints do (negative).
    pub fn tools_with_term(&self, namespace: &str, term: &str, negative: bool) -> &[usize] {
        let index = if negative {
            &self.negative_index
        } else {
            &self.positive_index
        };
        index
            .get(namespace)
            .and_then(|m| m.get(term))
            .map_or(&[], Vec::as_slice)
    }

    /// How many tools a namespace has and how long their texts are.
    pub fn corpus(&self, namespace: &str) -> crate::rank::Corpus {
        self.corpora.get(namespace).copied().unwrap_or_default()
    }

    /// Every tool.
    pub fn tools(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.iter()
    }

    /// Every grant.
    pub fn grants(&self) -> impl Iterator<Item = &GrantEntry> {
        self.grants.iter()
    }

    /// The grants of a namespace whose subjects include the principal, sorted by name.
    pub fn grants_for(&self, namespace: &str, principal: &Principal) -> Vec<&GrantEntry> {
        let Some(by_subject) = self.grants_by_subject.get(namespace) else {
            return Vec::new();
        };
        let mut out: Vec<&GrantEntry> = Vec::new();
        principal.for_each_subject_name(|name| {
            out.extend(by_subject.get(name).iter().map(|&i| &self.grants[i]));
        });
        // A grant naming the principal twice (as a user and by a group) is found twice; names
        // are unique in a namespace, so the copies sort next to each other.
        out.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        out.dedup_by(|a, b| std::ptr::eq(*a, *b));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_drop_stop_words_and_case() {
        let t = terms("Run the Test-suite for one file");
        assert_eq!(t, terms("run test suite one file"));
        assert!(!t.contains("the") && !t.contains("for"));
        assert_eq!(terms("files deleted"), terms("file delete"));
    }
}
