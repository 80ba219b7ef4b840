//! Who is calling. The principal of every call comes from here, never from a request field.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use toolgate_core::principal::Principal;

use crate::error::ApiError;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The principal (`system:serviceaccount:team-a:fixer`, `alice@example.com`) with groups.
    pub principal: Principal,
    /// Namespaces where the caller may approve, deny and inspect others' calls.
    pub approver_in: Vec<String>,
    /// Namespaces where the caller may read others' calls without answering for them (an
    /// auditor, a dashboard, or an agent's team: RBAC's `get toolcalls` on a cluster).
    pub reader_in: Vec<String>,
    /// Set when the caller is a subagent acting with a delegation token: the delegation its
    /// calls belong to.
    pub delegation: Option<toolgate_crds::CallDelegation>,
}

impl Caller {
    /// The subagent of delegation `call` (in `namespace`, proposed as `spec`), acting with its
    /// token: its own identity, no approvals, its calls carrying the delegation.
    pub fn delegated(namespace: &str, call: &str, spec: &toolgate_crds::ToolCallSpec) -> Caller {
        Caller {
            principal: Principal::new(toolgate_core::delegation::principal(namespace, call)),
            approver_in: vec![],
            reader_in: vec![],
            delegation: Some(toolgate_crds::CallDelegation {
                parent_call: call.to_string(),
                delegator: spec.principal.clone(),
                delegator_groups: spec.principal_groups.clone(),
            }),
        }
    }

    /// Whose grants the caller's calls are decided by: a subagent's delegator (narrowed by its
    /// delegation), anyone else's own.
    pub fn grantee(&self) -> Principal {
        match &self.delegation {
            Some(d) => Principal::new(d.delegator.clone()).with_groups(d.delegator_groups.clone()),
            None => self.principal.clone(),
        }
    }

    /// The principal's name.
    pub fn name(&self) -> &str {
        &self.principal.name
    }

    /// Whether the caller may approve calls in `namespace`.
    pub fn approves_in(&self, namespace: &str) -> bool {
        self.approver_in.iter().any(|n| n == namespace || n == "*")
    }

    /// Whether the caller may read others' calls in `namespace`: a reader or an approver there.
    pub fn reads_in(&self, namespace: &str) -> bool {
        self.approves_in(namespace) || self.reader_in.iter().any(|n| n == namespace || n == "*")
    }
}

/// Turns a bearer token into a caller: a local tokens file, or Kubernetes TokenReview.
#[tonic::async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// The caller a token belongs to, or `None`.
    async fn authenticate(&self, token: &str) -> Option<Caller>;
}

/// One entry of a tokens file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TokenEntry {
    token: String,
    principal: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    approver_in: Vec<String>,
    #[serde(default)]
    reader_in: Vec<String>,
}

/// A tokens file: a YAML list of `{token, principal, groups, approverIn, readerIn}`. Tokens are kept only
/// as SHA-256 digests in memory and looked up by digest.
#[derive(Debug, Default)]
pub struct TokenFile {
    by_digest: HashMap<[u8; 32], Caller>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl TokenFile {
    /// Read a tokens file. Refuses files others can read, and entries without a token.
    pub fn load(path: &Path) -> Result<Self, ApiError> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path)
            .map_err(|e| ApiError::Config(format!("tokens file {}: {e}", path.display())))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(ApiError::Config(format!(
                "tokens file {}: mode {:o} lets others read it; expected 600 (chmod 600 {})",
                path.display(),
                meta.permissions().mode() & 0o777,
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| ApiError::Config(format!("tokens file {}: {e}", path.display())))?;
        Self::parse(&text)
            .map_err(|e| ApiError::Config(format!("tokens file {}: {e}", path.display())))
    }

    /// Parse the YAML text of a tokens file.
    pub fn parse(text: &str) -> Result<Self, String> {
        let entries: Vec<TokenEntry> = serde_norway::from_str(text).map_err(|e| {
            format!("expected a list of {{token, principal, groups, approverIn, readerIn}}: {e}")
        })?;
        let mut by_digest = HashMap::new();
        for (i, e) in entries.into_iter().enumerate() {
            if e.token.len() < 16 {
                return Err(format!("[{i}].token: expected at least 16 characters"));
            }
            if e.principal.is_empty() {
                return Err(format!("[{i}].principal: expected a principal name"));
            }
            let caller = Caller {
                delegation: None,
                principal: Principal::new(e.principal).with_groups(e.groups),
                approver_in: e.approver_in,
                reader_in: e.reader_in,
            };
            if by_digest.insert(digest(&e.token), caller).is_some() {
                return Err(format!("[{i}].token: the same token appears twice"));
            }
        }
        Ok(TokenFile { by_digest })
    }

    /// Add an identity (the demo mints its own tokens).
    pub fn insert(&mut self, token: &str, caller: Caller) {
        self.by_digest.insert(digest(token), caller);
    }
}

impl TokenFile {
    /// The caller a token belongs to.
    pub fn lookup(&self, token: &str) -> Option<Caller> {
        self.by_digest.get(&digest(token)).cloned()
    }
}

#[tonic::async_trait]
impl Authenticator for TokenFile {
    async fn authenticate(&self, token: &str) -> Option<Caller> {
        self.lookup(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_map_to_principals() {
        let f = TokenFile::parse(
            "- {token: aaaaaaaaaaaaaaaaaaaa, principal: 'system:serviceaccount:team-a:fixer'}\n- {token: bbbbbbbbbbbbbbbbbbbb, principal: alice@example.com, groups: [team-a-reviewers], approverIn: [team-a]}\n- {token: cccccccccccccccccccc, principal: audit@example.com, readerIn: [team-a]}\n",
        )
        .expect("parsed");
        let fixer = f.lookup("aaaaaaaaaaaaaaaaaaaa").expect("fixer");
        assert_eq!(fixer.name(), "system:serviceaccount:team-a:fixer");
        assert!(!fixer.approves_in("team-a") && !fixer.reads_in("team-a"));
        let alice = f.lookup("bbbbbbbbbbbbbbbbbbbb").expect("alice");
        assert!(alice.approves_in("team-a") && !alice.approves_in("team-b"));
        assert!(
            alice.reads_in("team-a"),
            "an approver reads what she approves"
        );
        let audit = f.lookup("cccccccccccccccccccc").expect("audit");
        assert!(audit.reads_in("team-a") && !audit.reads_in("team-b"));
        assert!(!audit.approves_in("team-a"), "a reader answers for nothing");
        assert!(f.lookup("nope").is_none());
    }

    #[test]
    fn bad_files_say_where() {
        let e = TokenFile::parse("- {token: short, principal: x}").expect_err("short");
        assert!(e.starts_with("[0].token:"), "{e}");
        let e = TokenFile::parse("- {token: aaaaaaaaaaaaaaaaaaaa, principal: x, admin: true}")
            .expect_err("unknown field");
        assert!(e.contains("admin"), "{e}");
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any text as a tokens file: a clear error or a token map, never a panic.
        #[test]
        fn token_files_never_panic(text in "\\PC{0,200}") {
            let _ = TokenFile::parse(&text);
        }

        /// Tokens that were not issued do not authenticate.
        #[test]
        fn unknown_tokens_fail(token in "\\PC{0,64}") {
            let f = TokenFile::parse("- {token: aaaaaaaaaaaaaaaaaaaa, principal: x}").expect("file");
            prop_assume!(token != "aaaaaaaaaaaaaaaaaaaa");
            prop_assert!(f.lookup(&token).is_none());
        }
    }
}
