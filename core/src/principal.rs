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

    /// The keys under which grants for this principal are indexed, sorted, each once.
    pub fn subject_keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        self.for_each_subject_key(|k| keys.push(k.to_string()));
        keys.sort();
        keys.dedup();
        keys
    }

    /// Each key under which grants for this principal are indexed (a key may come twice), built
    /// in one buffer: every decision looks its principal's grants up by them.
    pub fn for_each_subject_key(&self, mut f: impl FnMut(&str)) {
        let mut key = String::with_capacity(64);
        let mut with = |kind: &str, name: &str| {
            key.clear();
            key.push_str(kind);
            key.push_str(name);
            f(&key);
        };
        with("user:", &self.name);
        for g in &self.groups {
            with("group:", g);
        }
        if let Some((ns, _)) = self.service_account() {
            with("group:", "system:serviceaccounts");
            with("group:system:serviceaccounts:", ns);
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

/// The index key of a grant subject; a ServiceAccount without a namespace is in the grant's.
pub fn subject_key(subject: &Subject, grant_namespace: &str) -> String {
    match subject.kind {
        SubjectKind::ServiceAccount => format!(
            "user:{SA_PREFIX}{}:{}",
            subject.namespace.as_deref().unwrap_or(grant_namespace),
            subject.name
        ),
        SubjectKind::User => format!("user:{}", subject.name),
        SubjectKind::Group => format!("group:{}", subject.name),
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
        assert!(
            p.subject_keys()
                .contains(&"group:system:serviceaccounts:team-a".to_string())
        );
        assert_eq!(
            Principal::new("system:serviceaccount:team-a").service_account(),
            None
        );
        assert_eq!(Principal::new("alice").service_account(), None);
    }

    #[test]
    fn subjects_and_principals_meet_on_keys() {
        let sa = Subject {
            kind: SubjectKind::ServiceAccount,
            name: "fixer".into(),
            namespace: None,
        };
        let p = Principal::new("system:serviceaccount:team-a:fixer");
        assert!(p.subject_keys().contains(&subject_key(&sa, "team-a")));
        assert!(!p.subject_keys().contains(&subject_key(&sa, "team-b")));
        let g = Subject {
            kind: SubjectKind::Group,
            name: "reviewers".into(),
            namespace: None,
        };
        assert!(
            Principal::new("bob")
                .with_groups(["reviewers"])
                .subject_keys()
                .contains(&subject_key(&g, "x"))
        );
    }
}
