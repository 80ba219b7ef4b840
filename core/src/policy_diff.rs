//! Effective permissions and how a policy change moves them: for each principal named by a
//! grant and each tool, what it could do before and after, for a pull-request comment.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use jiff::Timestamp;
use serde::Serialize;
use toolgate_crds::{RiskTier, SubjectKind};

use crate::decision::{approval_needed, authorize_principal};
use crate::principal::Principal;
use crate::registry::Registry;

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
