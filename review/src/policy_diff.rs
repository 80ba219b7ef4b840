//! Effective permissions and how a policy change moves them: for each principal named by a
//! grant and each tool, what it could do before and after, for a pull-request comment.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use jiff::Timestamp;
use serde::Serialize;
use toolgate_crds::{RiskTier, SubjectKind};

use toolgate_core::decision::{approval_needed, authorize_principal};
use toolgate_core::principal::Principal;
use toolgate_core::registry::Registry;

/// What a principal can do with a tool, as a decision would say for valid args.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Access {
    /// `allow`, `approval` or `deny`.
    pub access: AccessLevel,
    /// The tool's tier, if the tool exists.
    pub tier: Option<RiskTier>,
    /// Why (the decision code: `grant-matched`, `no-grant`, `tool-not-enabled`, …).
    pub code: &'static str,
    /// The grant that gives it, if any.
    pub grant: Option<String>,
}

/// A coarse access level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum AccessLevel {
    /// No call can run.
    Deny,
    /// Calls run after a human approval.
    Approval,
    /// Calls run.
    Allow,
}

/// What `principal` can do with `tool` in `namespace` under `registry` at `now`.
pub fn effective_access(
    registry: &Registry,
    namespace: &str,
    principal: &Principal,
    tool: &str,
    now: Timestamp,
) -> Access {
    let Some(t) = registry.tool(namespace, tool) else {
        return Access {
            access: AccessLevel::Deny,
            tier: None,
            code: "tool-not-found",
            grant: None,
        };
    };
    let deny = |code| Access {
        access: AccessLevel::Deny,
        tier: Some(t.tier),
        code,
        grant: None,
    };
    if !t.is_callable() {
        return deny("tool-not-enabled");
    }
    if t.spec.provenance.trust_level == toolgate_crds::TrustLevel::Untrusted {
        return deny("untrusted-provenance");
    }
    let grants = registry.grants_for(namespace, principal);
    match authorize_principal(t, &grants, namespace, principal, now) {
        Err(r) => deny(r.code),
        Ok(_)
            if registry
                .tool_policies(namespace)
                .and_then(|p| p.forbids_every_call(t, principal, namespace, now))
                .is_some() =>
        {
            deny("policy-forbidden")
        }
        Ok((grant, _)) => {
            let (needs, _) = approval_needed(t, &grant.spec, false);
            Access {
                access: if needs {
                    AccessLevel::Approval
                } else {
                    AccessLevel::Allow
                },
                tier: Some(t.tier),
                code: "grant-matched",
                grant: Some(grant.name.clone()),
            }
        }
    }
}

/// One changed permission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionChange {
    /// Namespace.
    pub namespace: String,
    /// The subject as written in grants (`agent fixer`, `user alice`, `group reviewers`).
    pub who: String,
    /// The principal name the access was computed for.
    pub principal: String,
    /// Tool name.
    pub tool: String,
    /// Before.
    pub before: Access,
    /// After.
    pub after: Access,
    /// One sentence for people.
    pub summary: String,
}

/// A principal standing for a grant subject, and how to name it in a sentence.
fn subject_principals(r: &Registry) -> BTreeSet<(String, String, Principal)> {
    let mut out = BTreeSet::new();
    for g in r.grants() {
        for s in &g.spec.subjects {
            let (who, p) = match s.kind {
                SubjectKind::ServiceAccount => {
                    let ns = s.namespace.as_deref().unwrap_or(&g.namespace);
                    (
                        format!("agent `{}`", s.name),
                        Principal::new(format!("system:serviceaccount:{ns}:{}", s.name)),
                    )
                }
                SubjectKind::User => (format!("user `{}`", s.name), Principal::new(s.name.clone())),
                SubjectKind::Group => (
                    format!("group `{}`", s.name),
                    Principal::new(format!("group-member:{}", s.name))
                        .with_groups([s.name.clone()]),
                ),
            };
            out.insert((g.namespace.clone(), who, p));
        }
    }
    out
}

/// Every permission that differs between two policy folders, sorted.
pub fn diff_policies(old: &Registry, new: &Registry, now: Timestamp) -> Vec<PermissionChange> {
    let mut subjects = subject_principals(old);
    subjects.extend(subject_principals(new));
    let tools: BTreeSet<(String, String)> = old
        .tools()
        .chain(new.tools())
        .map(|t| (t.namespace.clone(), t.name.clone()))
        .collect();
    let mut changes = Vec::new();
    for (ns, who, principal) in &subjects {
        for (tns, tool) in tools.iter().filter(|(tns, _)| tns == ns) {
            let before = effective_access(old, tns, principal, tool, now);
            let after = effective_access(new, tns, principal, tool, now);
            if before.access == after.access
                && (before.tier == after.tier || after.access == AccessLevel::Deny)
            {
                continue;
            }
            let summary = sentence(who, tool, &before, &after);
            changes.push(PermissionChange {
                namespace: ns.clone(),
                who: who.clone(),
                principal: principal.name.clone(),
                tool: tool.clone(),
                before,
                after,
                summary,
            });
        }
    }
    changes
}

fn tier_text(a: &Access) -> String {
    a.tier
        .map_or_else(|| "unknown tier".into(), |t| format!("{t} {}", t.label()))
}

fn sentence(who: &str, tool: &str, before: &Access, after: &Access) -> String {
    use AccessLevel::*;
    let tier = tier_text(after);
    match (before.access, after.access) {
        (Deny, Allow) => format!("{who} can now call `{tool}` ({tier}) without approval"),
        (Deny, Approval) => format!("{who} can now call `{tool}` ({tier}) with approval"),
        (Approval, Allow) => format!("{who} no longer needs approval to call `{tool}` ({tier})"),
        (Allow, Approval) => format!("{who} now needs approval to call `{tool}` ({tier})"),
        (_, Deny) => format!("{who} can no longer call `{tool}` ({})", after.code),
        _ => format!(
            "`{tool}` moved from {} to {} for {who}",
            tier_text(before),
            tier
        ),
    }
}

fn level(a: &Access) -> String {
    let l = match a.access {
        AccessLevel::Allow => "allow",
        AccessLevel::Approval => "approval",
        AccessLevel::Deny => "deny",
    };
    match (a.access, a.tier) {
        (AccessLevel::Deny, _) => format!("deny ({})", a.code),
        (_, Some(t)) => format!("{l} ({t})"),
        (_, None) => l.into(),
    }
}

/// A Markdown report fit for a pull-request comment.
pub fn markdown(changes: &[PermissionChange]) -> String {
    let mut s = String::from("### toolgate: effective permission changes\n\n");
    if changes.is_empty() {
        s.push_str("No principal gains or loses access to any tool.\n");
        return s;
    }
    let widened = changes
        .iter()
        .filter(|c| c.after.access > c.before.access)
        .count();
    let _ = writeln!(
        s,
        "{} change(s), {widened} widening access.\n",
        changes.len()
    );
    for c in changes {
        let mark = if c.after.access > c.before.access {
            "⚠️"
        } else {
            "·"
        };
        let _ = writeln!(s, "- {mark} {} (namespace `{}`)", c.summary, c.namespace);
    }
    s.push_str(
        "\n| namespace | principal | tool | before | after |\n| --- | --- | --- | --- | --- |\n",
    );
    for c in changes {
        let _ = writeln!(
            s,
            "| {} | {} | `{}` | {} | {} |",
            c.namespace,
            c.who,
            c.tool,
            level(&c.before),
            level(&c.after)
        );
    }
    s
}

/// A Cedar rule of a ToolPolicy that a change adds, removes or alters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleChange {
    /// Namespace.
    pub namespace: String,
    /// The ToolPolicy.
    pub tool_policy: String,
    /// The rule's id (`<ToolPolicy>/<@id or position>`).
    pub rule: String,
    /// `added`, `removed`, `changed` (its text) or `mode` (enforce ⇄ shadow only).
    pub change: &'static str,
    /// `enforce` or `shadow` before, if it existed.
    pub mode_before: Option<&'static str>,
    /// After, if it exists.
    pub mode_after: Option<&'static str>,
    /// The rule as written after (before, if removed).
    pub text: String,
}

/// Every Cedar rule that differs between two policy folders, by namespace and id.
pub fn rule_changes(old: &Registry, new: &Registry) -> Vec<RuleChange> {
    use std::collections::BTreeMap;
    let rules = |r: &Registry| -> BTreeMap<(String, String), toolgate_core::cedar::Rule> {
        r.all_tool_policies()
            .flat_map(|(ns, p)| {
                p.rules()
                    .iter()
                    .map(move |(id, rule)| ((ns.to_string(), id.clone()), rule.clone()))
            })
            .collect()
    };
    let (before, after) = (rules(old), rules(new));
    let keys: BTreeSet<&(String, String)> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter_map(|key| {
            let (b, a) = (before.get(key), after.get(key));
            let change = match (b, a) {
                (None, Some(_)) => "added",
                (Some(_), None) => "removed",
                (Some(b), Some(a)) if b.text != a.text => "changed",
                (Some(b), Some(a)) if b.mode != a.mode => "mode",
                _ => return None,
            };
            let text = a.or(b).map(|r| r.text.clone()).unwrap_or_default();
            Some(RuleChange {
                namespace: key.0.clone(),
                tool_policy: a.or(b).map(|r| r.tool_policy.clone()).unwrap_or_default(),
                rule: key.1.clone(),
                change,
                mode_before: b.map(|r| r.mode.as_str()),
                mode_after: a.map(|r| r.mode.as_str()),
                text,
            })
        })
        .collect()
}

/// The Cedar rules a change moves, for a pull-request comment (empty when none).
pub fn rules_markdown(changes: &[RuleChange]) -> String {
    if changes.is_empty() {
        return String::new();
    }
    let mut s = String::from("\n#### ToolPolicy rules\n\n");
    for c in changes {
        let what = match (c.change, c.mode_before, c.mode_after) {
            ("added", _, Some(m)) => format!("adds {m} rule"),
            ("removed", Some(m), _) => format!("removes {m} rule"),
            ("mode", Some(b), Some(a)) => format!("switches rule from {b} to {a}:"),
            (_, _, Some(m)) => format!("changes {m} rule"),
            _ => "changes rule".into(),
        };
        let _ = writeln!(
            s,
            "- ToolPolicy `{}` (namespace `{}`) {what} `{}`",
            c.tool_policy, c.namespace, c.rule
        );
        let _ = writeln!(
            s,
            "  ```cedar\n  {}\n  ```",
            c.text.trim().replace('\n', "\n  ")
        );
    }
    s
}

/// A call as recorded (a ToolCall export, the embedded runtime's store), to decide again.
#[derive(Debug, Clone)]
pub struct RecordedCall {
    /// Namespace.
    pub namespace: String,
    /// Name (the call id).
    pub name: String,
    /// The spec as proposed.
    pub spec: toolgate_crds::ToolCallSpec,
    /// When it was decided (the replay decides at that time).
    pub decided_at: Timestamp,
    /// The decision recorded then, if any.
    pub recorded: Option<toolgate_crds::DecisionOutcome>,
}

/// A recorded call the change would decide differently.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayChange {
    /// `namespace/name`.
    pub call: String,
    /// The tool.
    pub tool: String,
    /// Who made it.
    pub principal: String,
    /// Decided under the folder before the change.
    pub before: ReplayDecision,
    /// Decided under the folder after it.
    pub after: ReplayDecision,
    /// What was recorded when it ran, if known.
    pub recorded: Option<&'static str>,
}

/// One side of a replayed decision.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayDecision {
    /// `allow`, `requireApproval` or `deny`.
    pub outcome: &'static str,
    /// The deciding reason code.
    pub code: &'static str,
    /// Its message.
    pub message: String,
}

/// Decide every recorded call again under both folders, at the time it was decided, and keep
/// those whose outcome differs. A replay asks what the policy would have said: calls are decided
/// against the tools' current versions (their pinned digests are not compared), without
/// approvals, dry runs or budgets (the recorded ones belong to the past).
pub fn replay(old: &Registry, new: &Registry, calls: &[RecordedCall]) -> Vec<ReplayChange> {
    use toolgate_core::decision::{CallUnderReview, decide_in};
    let decide = |r: &Registry, c: &RecordedCall, spec: &toolgate_crds::ToolCallSpec| {
        let principal =
            Principal::new(spec.principal.clone()).with_groups(spec.principal_groups.clone());
        decide_in(
            r,
            &CallUnderReview {
                namespace: &c.namespace,
                name: &c.name,
                spec,
                principal: &principal,
                dry_runs: &[],
                tool_policies: None,
                delegation: None,
            },
            &[],
            c.decided_at,
            &toolgate_core::args::ArgsLimits::default(),
        )
    };
    let side = |d: &toolgate_core::decision::Decision| {
        let last = d.reasons.last();
        ReplayDecision {
            outcome: crate::policy_test::outcome_name(d.outcome),
            code: last.map_or("", |r| r.code),
            message: last.map(|r| r.message.clone()).unwrap_or_default(),
        }
    };
    calls
        .iter()
        .filter_map(|c| {
            let mut spec = c.spec.clone();
            spec.tool_ref.digest = None;
            let (b, a) = (decide(old, c, &spec), decide(new, c, &spec));
            (b.outcome != a.outcome).then(|| ReplayChange {
                call: format!("{}/{}", c.namespace, c.name),
                tool: spec.tool_ref.name.clone(),
                principal: spec.principal.clone(),
                before: side(&b),
                after: side(&a),
                recorded: c.recorded.map(crate::policy_test::outcome_name),
            })
        })
        .collect()
}

/// A replay report for a pull-request comment.
pub fn replay_markdown(replayed: usize, changes: &[ReplayChange]) -> String {
    let mut s = format!("\n#### Replay of {replayed} recorded call(s)\n\n");
    if changes.is_empty() {
        s.push_str("No recorded call would be decided differently.\n");
        return s;
    }
    let _ = writeln!(
        s,
        "{} call(s) would be decided differently:\n",
        changes.len()
    );
    s.push_str("| call | tool | principal | before | after | why (after) |\n| --- | --- | --- | --- | --- | --- |\n");
    for c in changes {
        let _ = writeln!(
            s,
            "| {} | `{}` | {} | {} | {} | {} ({}) |",
            c.call,
            c.tool,
            c.principal,
            c.before.outcome,
            c.after.outcome,
            c.after.message.replace('|', "\\|"),
            c.after.code
        );
    }
    s
}
