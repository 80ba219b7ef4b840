//! Delegations on the embedded runtime: what the core decides ([`toolgate_core::delegation`]),
//! placed here — the token's digest kept with the parent call, the subagent authenticated by it,
//! the parent's children found in the store, its end by report, cancellation or timeout.

use std::sync::Arc;

use jiff::Timestamp;
use sha2::{Digest, Sha256};
use toolgate_api::{ApiError, Authenticator, Caller};
use toolgate_core::delegation::{self, Child, Scope};
use toolgate_crds::{CallPhase, SubagentSpec};
use toolgate_proto::v1 as pb;

use crate::manifests::Loaded;
use crate::runtime::{Runtime, call_of, internal};
use crate::store::CallRecord;

fn token_digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

impl Runtime {
    /// The subagent block of a record's tool, when it is a delegation.
    pub(crate) fn subagent_of(&self, loaded: &Loaded, rec: &CallRecord) -> Option<SubagentSpec> {
        loaded
            .policies
            .registry
            .tool(&rec.namespace, &rec.spec.tool_ref.name)
            .and_then(|t| delegation::subagent_of(&t.spec).cloned())
    }

    /// A delegation's calls, oldest first.
    pub(crate) fn children(&self, parent: &CallRecord) -> Result<Vec<CallRecord>, ApiError> {
        let mut calls = self
            .store()
            .scan(None, usize::MAX, |r| {
                r.namespace == parent.namespace
                    && r.spec
                        .delegation
                        .as_ref()
                        .is_some_and(|d| d.parent_call == parent.id)
            })
            .map_err(internal)?;
        calls.sort_by_key(|c| c.created_at);
        Ok(calls)
    }

    /// The delegation a subagent's call is decided within (`None`: not a subagent's call, or
    /// its parent is gone, which denies it).
    pub(crate) fn delegation_scope(
        &self,
        loaded: &Loaded,
        rec: &CallRecord,
    ) -> Result<Option<Scope>, ApiError> {
        let Some(d) = &rec.spec.delegation else {
            return Ok(None);
        };
        let Some(parent) = self.store().get(&d.parent_call).map_err(internal)? else {
            return Ok(None);
        };
        if parent.namespace != rec.namespace {
            return Ok(None);
        }
        let used = self
            .children(&parent)?
            .iter()
            .filter(|c| c.id != rec.id && c.status.phase != Some(CallPhase::Denied))
            .count();
        let tool = loaded
            .policies
            .registry
            .tool(&parent.namespace, &parent.spec.tool_ref.name);
        Ok(Some(Scope::of(
            &rec.spec,
            &call_of(&parent),
            tool.map(|t| &*t.spec),
            u32::try_from(used).unwrap_or(u32::MAX),
            Timestamp::now(),
        )))
    }

    /// GetDelegationToken: the parent's principal, once, while the delegation lives.
    pub async fn delegation_token(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<pb::DelegationToken, ApiError> {
        let loaded = self.loaded();
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret)
            .map_err(|e| ApiError::Internal(format!("no randomness for a token: {e}")))?;
        let mut issued = None;
        self.transition(id, |rec| {
            let tool = loaded
                .policies
                .registry
                .tool(&rec.namespace, &rec.spec.tool_ref.name)
                .map(|t| &*t.spec);
            delegation::may_issue(
                caller.name(),
                &call_of(rec),
                tool,
                rec.delegation_token.is_some(),
                Timestamp::now(),
            )?;
            let subagent = tool.and_then(delegation::subagent_of).ok_or_else(|| {
                ApiError::Internal("a delegation without its subagent block".into())
            })?;
            let token = delegation::token(&rec.namespace, &rec.id, &secret);
            rec.delegation_token = Some(token_digest(&token));
            let expires = delegation::expires_at(&rec.status, subagent);
            issued = Some(pb::DelegationToken {
                token,
                handoff_json: delegation::handoff(
                    &rec.namespace,
                    &rec.id,
                    &rec.spec,
                    subagent,
                    expires,
                )
                .to_string(),
                expires_at: expires.map(|t| t.to_string()).unwrap_or_default(),
            });
            Ok(vec![])
        })
        .await?;
        issued.ok_or_else(|| ApiError::Internal("no token issued".into()))
    }

    /// The caller a delegation token stands for, while its delegation lives.
    pub(crate) fn delegated_caller(&self, token: &str) -> Option<Caller> {
        let (ns, id) = delegation::parse_token(token)?;
        let rec = self.store().get(id).ok()??;
        let digest = rec.delegation_token.as_deref()?;
        if rec.namespace != ns || digest != token_digest(token) {
            return None;
        }
        let subagent = self.subagent_of(&self.loaded(), &rec)?;
        delegation::live(&rec.status, &subagent, Timestamp::now()).ok()?;
        Some(Caller::delegated(&rec.namespace, &rec.id, &rec.spec))
    }

    /// CompleteDelegation: the subagent's report ends its delegation.
    pub async fn complete_delegation(
        &self,
        caller: &Caller,
        req: pb::CompleteDelegationRequest,
    ) -> Result<CallRecord, ApiError> {
        let (d, report) = toolgate_api::request::delegation_report(caller, req)?;
        let loaded = self.loaded();
        let parent = self.stored(&d.parent_call)?;
        let children = self.child_views(&parent)?;
        self.transition(&d.parent_call, |rec| {
            let tool = loaded
                .policies
                .registry
                .tool(&rec.namespace, &rec.spec.tool_ref.name)
                .map(|t| &*t.spec);
            let subagent = tool.and_then(delegation::subagent_of).ok_or_else(|| {
                ApiError::FailedPrecondition {
                    code: "tool-gone",
                    message: format!("the tool of delegation {} is gone", rec.id),
                }
            })?;
            let steps = delegation::ending(
                tool,
                subagent,
                &mut rec.status,
                Some(report.clone()),
                &children,
                Timestamp::now(),
            )?;
            Ok(steps.unwrap_or_default())
        })
        .await
    }

    /// A delegation's calls as its parent may see them.
    pub(crate) fn child_views(&self, parent: &CallRecord) -> Result<Vec<Child>, ApiError> {
        Ok(self
            .children(parent)?
            .into_iter()
            .map(|c| Child {
                id: c.id,
                tool: c.spec.tool_ref.name,
                phase: c.status.phase,
                preview: c.status.result.and_then(|r| r.output_preview),
            })
            .collect())
    }

    /// End a delegation when its time runs out, unless it ended before.
    pub(crate) fn expire_later(&self, id: String, subagent: SubagentSpec, at: Timestamp) {
        let rt = self.clone();
        tokio::spawn(async move {
            let wait = at.duration_since(Timestamp::now());
            // A little past the time: the monotonic timer and the wall clock may disagree.
            if let Ok(wait) = std::time::Duration::try_from(wait) {
                tokio::time::sleep(wait + std::time::Duration::from_millis(20)).await;
            }
            let Ok(parent) = rt.stored(&id) else { return };
            let children = rt.child_views(&parent).unwrap_or_default();
            let loaded = rt.loaded();
            let ended = rt
                .transition(&id, |rec| {
                    let tool = loaded
                        .policies
                        .registry
                        .tool(&rec.namespace, &rec.spec.tool_ref.name)
                        .map(|t| &*t.spec);
                    let ended = delegation::ending(
                        tool,
                        &subagent,
                        &mut rec.status,
                        None,
                        &children,
                        Timestamp::now(),
                    );
                    // Ended some other way before its time: nothing to do.
                    Ok(ended.ok().flatten().unwrap_or_default())
                })
                .await;
            if let Err(e) = ended {
                tracing::error!(call = %id, error = %e, "ending a delegation past its time");
            }
        });
    }
}

impl Runtime {
    /// `inner`'s callers, and the subagents of this runtime's live delegations.
    pub fn authenticator(&self, inner: Arc<dyn Authenticator>) -> Arc<dyn Authenticator> {
        Arc::new(WithDelegations {
            inner,
            runtime: self.clone(),
        })
    }
}

/// The tokens file's callers, and the subagents of live delegations.
pub struct WithDelegations {
    /// The authenticator of everyone else.
    pub inner: Arc<dyn Authenticator>,
    /// The runtime whose delegations' tokens count.
    pub runtime: Runtime,
}

#[tonic::async_trait]
impl Authenticator for WithDelegations {
    async fn authenticate(&self, token: &str) -> Option<Caller> {
        if token.starts_with(delegation::TOKEN_PREFIX) {
            return self.runtime.delegated_caller(token);
        }
        self.inner.authenticate(token).await
    }
}
