//! Who is calling: an authenticated identity and its groups. Never taken from the caller's
//! own claims: the runtime that authenticated the caller builds it.

use std::fmt;

use toolgate_crds::{Subject, SubjectKind};

/// An authenticated principal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal {
    /// The user name (`system:serviceaccount:team-a:fixer`, `alice@example.com`).
    pub name: String,
    /// The groups the authenticator reported.
    pub groups: Vec<String>,
}

const SA_PREFIX: &str = "system:serviceaccount:";

impl Principal {
    /// A principal with no groups beyond the implicit service-account ones.
    pub fn new(name: impl Into<String>) -> Self {
        Principal {
            name: name.into(),
            groups: Vec::new(),
        }
    }

    /// With these groups.
    pub fn with_groups(mut self, groups: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.groups = groups.into_iter().map(Into::into).collect();
        self
    }

    /// `(namespace, name)` if this is a Kubernetes service account.
    pub fn service_account(&self) -> Option<(&str, &str)> {
        let rest = self.name.strip_prefix(SA_PREFIX)?;
        let (ns, name) = rest.split_once(':')?;
        (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
    }

    /// Each name grants may give this principal tools by (a name may come twice): its user name,
    /// its groups, and a service account's two implicit groups. Every decision looks its
    /// principal's grants up by them, so they borrow the principal's strings.
    pub fn for_each_subject_name(&self, mut f: impl FnMut(SubjectName<'_>)) {
        f(SubjectName::User(&self.name));
        for g in &self.groups {
            f(SubjectName::of_group(g));
        }
        if let Some((ns, _)) = self.service_account() {
            f(SubjectName::Group(SA_GROUP));
            f(SubjectName::ServiceAccountsOf(ns));
        }
    }

    /// A short display name (`fixer` for a service account).
    pub fn short_name(&self) -> &str {
        self.service_account()
            .map_or(self.name.as_str(), |(_, n)| n)
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// A name grants give tools to, as grant subjects and principals both carry it: they meet on
/// these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubjectName<'a> {
    /// A user (a service account's is `system:serviceaccount:<namespace>:<name>`).
    User(&'a str),
    /// A group other than a namespace's service accounts.
    Group(&'a str),
    /// The group of a namespace's service accounts (`system:serviceaccounts:<namespace>`), by
    /// its namespace: a service account's lookup then needs no name built.
    ServiceAccountsOf(&'a str),
}

const SA_GROUP: &str = "system:serviceaccounts";

impl<'a> SubjectName<'a> {
    /// The name of a group.
    pub fn of_group(group: &'a str) -> SubjectName<'a> {
        match group
            .strip_prefix(SA_GROUP)
            .and_then(|rest| rest.strip_prefix(':'))
        {
            Some(ns) if !ns.is_empty() && !ns.contains(':') => SubjectName::ServiceAccountsOf(ns),
            _ => SubjectName::Group(group),
        }
    }
}

/// `f` of the name a grant subject gives tools to; a ServiceAccount without a namespace is in the
/// grant's.
pub fn with_subject_name<R>(
    subject: &Subject,
    grant_namespace: &str,
    f: impl FnOnce(SubjectName<'_>) -> R,
) -> R {
    match subject.kind {
        SubjectKind::ServiceAccount => f(SubjectName::User(&format!(
            "{SA_PREFIX}{}:{}",
            subject.namespace.as_deref().unwrap_or(grant_namespace),
            subject.name
        ))),
        SubjectKind::User => f(SubjectName::User(&subject.name)),
        SubjectKind::Group => f(SubjectName::of_group(&subject.name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_accounts_parse() {
        let p = Principal::new("system:serviceaccount:team-a:fixer");
        assert_eq!(p.service_account(), Some(("team-a", "fixer")));
        assert_eq!(p.short_name(), "fixer");
        assert_eq!(
            Principal::new("system:serviceaccount:team-a").service_account(),
            None
        );
        assert_eq!(Principal::new("alice").service_account(), None);
    }

    fn names_of(p: &Principal) -> Vec<String> {
        let mut names = Vec::new();
        p.for_each_subject_name(|n| names.push(format!("{n:?}")));
        names
    }

    fn name_of(s: &Subject, namespace: &str) -> String {
        with_subject_name(s, namespace, |n| format!("{n:?}"))
    }

    #[test]
    fn subjects_and_principals_meet_on_names() {
        let sa = Subject {
            kind: SubjectKind::ServiceAccount,
            name: "fixer".into(),
            namespace: None,
        };
        let p = Principal::new("system:serviceaccount:team-a:fixer");
        assert!(names_of(&p).contains(&name_of(&sa, "team-a")));
        assert!(!names_of(&p).contains(&name_of(&sa, "team-b")));
        let group = |name: &str| Subject {
            kind: SubjectKind::Group,
            name: name.into(),
            namespace: None,
        };
        assert!(
            names_of(&Principal::new("bob").with_groups(["reviewers"]))
                .contains(&name_of(&group("reviewers"), "x"))
        );
        // A service account is in its namespace's group and in all service accounts'.
        for g in ["system:serviceaccounts:team-a", "system:serviceaccounts"] {
            assert!(names_of(&p).contains(&name_of(&group(g), "x")), "{g}");
        }
        assert!(!names_of(&p).contains(&name_of(&group("system:serviceaccounts:team-b"), "x")));
        // A user who reports a namespace's service-account group is found by it too.
        let bob = Principal::new("bob").with_groups(["system:serviceaccounts:team-a"]);
        assert!(names_of(&bob).contains(&name_of(&group("system:serviceaccounts:team-a"), "x")));
        // Names that only look alike stay apart.
        for odd in [
            "system:serviceaccounts:",
            "system:serviceaccounts:a:b",
            "system:serviceaccountsx",
        ] {
            assert_eq!(SubjectName::of_group(odd), SubjectName::Group(odd));
        }
        assert_ne!(
            name_of(&group("alice"), "x"),
            names_of(&Principal::new("alice"))[0]
        );
    }
}
