//! The agent API's methods over the cluster's objects.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::{WatchStreamExt, watcher};
use toolgate_api::convert::{artifact_of, tool_view};
use toolgate_api::request::{Proposal, namespace_of, new_call_name};
use toolgate_api::{ApiError, Backend, BoxStream, Caller};
use toolgate_core::lifecycle::{
    ApprovalRequest, cancellation, is_terminal, may_cancel, may_see, phase_name, same_proposal,
    sandbox_view,
};
use toolgate_crds::{ApprovalDecision, ToolCall};
use toolgate_proto::v1 as pb;

use super::{KubeBackend, events_of, message};
use crate::call::CANCEL_ANNOTATION;
use crate::policies::call_of;
use toolgate_api::internal;

/// How long CompleteDelegation waits for the controller to end the delegation it reported.
const REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

#[tonic::async_trait]
impl Backend for KubeBackend {
    async fn view(
        &self,
        caller: &Caller,
        req: pb::GetToolViewRequest,
    ) -> Result<pb::ToolView, ApiError> {
        let ns = namespace_of(caller, &req.namespace)?;
        self.in_scope(&ns)?;
        let cluster = self.cache.namespace(&ns, "");
        // A subagent's view follows its parent call's tool, read from the API server.
        let parent = match &caller.delegation {
            Some(d) => Api::<ToolCall>::namespaced(self.client.clone(), &ns)
                .get_opt(&d.parent_call)
                .await
                .map_err(internal)?,
            None => None,
        };
        toolgate_api::convert::caller_view(
            &cluster.policies,
            &cluster.usage,
            &ns,
            caller,
            &req,
            parent.as_ref().map(|p| p.spec.tool_ref.name.as_str()),
        )
    }

    async fn propose(
        &self,
        caller: &Caller,
        req: pb::ProposeCallRequest,
    ) -> Result<pb::Call, ApiError> {
        let proposal = Proposal::validate(caller, &req)?;
        let ns = proposal.namespace.clone();
        self.in_scope(&ns)?;
        let mut cluster = self.cache.namespace(&ns, "");
        let grantee = caller.grantee();
        if toolgate_core::lifecycle::may_propose_in(&cluster.policies.registry, &ns, &grantee)
            .is_err()
        {
            // The cache may not have seen a grant applied a moment ago: the API server says
            // before the caller is refused (only this path pays the reads).
            cluster = crate::policies::dereference(&self.client, &ns, "")
                .await
                .map_err(internal)?;
            toolgate_core::lifecycle::may_propose_in(&cluster.policies.registry, &ns, &grantee)?;
        }
        let registry = &cluster.policies.registry;
        let tool = registry.resolve_name(&ns, &proposal.tool);
        // Pin the version the call is decided against (invariant 1).
        let digest = proposal
            .tool_digest
            .clone()
            .or_else(|| registry.tool(&ns, &tool).map(|t| t.digest.clone()));
        let name = match &proposal.idempotency_key {
            // The same key from the same principal names the same object.
            Some(key) => {
                use sha2::{Digest, Sha256};
                let h = Sha256::digest(format!("{}/{key}", caller.name()).as_bytes());
                format!("call-{}", hex::encode(&h[..10]))
            }
            None => new_call_name(jiff::Timestamp::now()),
        };
        let actions = registry
            .tool(&ns, &tool)
            .map(|t| t.spec.intent.action_types.clone());
        let spec = proposal.into_spec(caller, tool, digest, actions.as_deref())?;
        let api = Api::<ToolCall>::namespaced(self.client.clone(), &ns);
        let mut object = ToolCall::new(&name, spec.clone());
        // A subagent's call is found by its delegation.
        if let Some(d) = &spec.delegation {
            object.metadata.labels = Some(
                [(
                    crate::delegation::PARENT_LABEL.to_string(),
                    d.parent_call.clone(),
                )]
                .into_iter()
                .collect(),
            );
        }
        // The agent's trace context: the call's spans join its trace.
        if let Some(tp) = toolgate_api::trace::request_traceparent() {
            object.metadata.annotations = Some(
                [(toolgate_api::trace::TRACEPARENT_ANNOTATION.to_string(), tp)]
                    .into_iter()
                    .collect(),
            );
        }
        match api.create(&PostParams::default(), &object).await {
            Ok(created) => Ok(message(&created)),
            Err(kube::Error::Api(e)) if e.code == 409 && spec.idempotency_key.is_some() => {
                let existing = api.get(&name).await.map_err(internal)?;
                same_proposal(&format!("{ns}/{name}"), &existing.spec, &spec)?;
                Ok(message(&existing))
            }
            Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => {
                Err(ApiError::InvalidArgument {
                    field: "args_json".into(),
                    message: e.message,
                })
            }
            Err(e) => Err(internal(e)),
        }
    }

    async fn get(&self, caller: &Caller, id: &str) -> Result<pb::Call, ApiError> {
        Ok(message(&self.visible(caller, id).await?))
    }

    async fn list(
        &self,
        caller: &Caller,
        req: pb::ListCallsRequest,
    ) -> Result<pb::ListCallsResponse, ApiError> {
        let size = toolgate_api::request::page_size(&req)?;
        // One namespace when asked: a namespaced LIST, not every call the operator can see.
        // Through `DeserializeGuard`: one call that does not deserialize is left out (and
        // logged), not the reason nobody can list the others.
        let api = if req.namespace.is_empty() {
            self.scope.api::<DeserializeGuard<ToolCall>>(&self.client)
        } else {
            self.in_scope(&req.namespace)?;
            Api::<DeserializeGuard<ToolCall>>::namespaced(self.client.clone(), &req.namespace)
        };
        let calls = api.list(&ListParams::default()).await.map_err(internal)?;
        let mut readable: BTreeMap<String, bool> = BTreeMap::new();
        let mut out = Vec::new();
        let mut items: Vec<ToolCall> = calls
            .items
            .iter()
            .filter_map(|g| crate::kit::valid(g).map(std::sync::Arc::unwrap_or_clone))
            .collect();
        items.sort_by_key(|c| (c.namespace(), c.name_any()));
        for c in items {
            let id = format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any());
            if !req.page_token.is_empty() && id <= req.page_token {
                continue;
            }
            let ns = c.namespace().unwrap_or_default();
            // Its proposer needs no SubjectAccessReview; others are asked once per namespace.
            if !may_see(caller.name(), &c.spec.principal, false) {
                let reader = match readable.get(&ns) {
                    Some(a) => *a,
                    None => {
                        let a = self.may(caller, "list", "toolcalls", &ns).await;
                        readable.insert(ns.clone(), a);
                        a
                    }
                };
                if !may_see(caller.name(), &c.spec.principal, reader) {
                    continue;
                }
            }
            let phase = phase_name(c.status.as_ref().and_then(|s| s.phase));
            if !toolgate_api::request::list_filter_matches(
                &req,
                &ns,
                phase,
                &c.spec.tool_ref.name,
                &c.spec.principal,
            ) {
                continue;
            }
            out.push(message(&c));
            if out.len() > size {
                break;
            }
        }
        Ok(toolgate_api::request::page(out, size))
    }

    async fn watch(&self, caller: &Caller, id: &str) -> Result<BoxStream<pb::CallEvent>, ApiError> {
        let call = self.visible(caller, id).await?;
        let ns = call.namespace().unwrap_or_default();
        let api = Api::<ToolCall>::namespaced(self.client.clone(), &ns);
        let updates = watcher(
            api,
            watcher::Config::default().fields(&format!("metadata.name={}", call.name_any())),
        )
        .applied_objects()
        .map_err(internal);
        let id = id.to_string();
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            let mut sent = 0usize;
            futures::pin_mut!(updates);
            while let Some(update) = updates.next().await {
                let call = match update {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                let status = call.status.clone().unwrap_or_default();
                let events = events_of(&id, &status);
                // Conditions only ever get added along the chain; send what is new.
                for e in events.into_iter().skip(sent) {
                    sent += 1;
                    let end = e.terminal;
                    if tx.send(Ok(e)).await.is_err() || end {
                        return;
                    }
                }
            }
        });
        Ok(tokio_stream::wrappers::ReceiverStream::new(rx).boxed())
    }

    async fn cancel(
        &self,
        caller: &Caller,
        req: pb::CancelCallRequest,
    ) -> Result<pb::Call, ApiError> {
        let call = self.visible(caller, &req.id).await?;
        let ns = call.namespace().unwrap_or_default();
        self.may_answer(caller, &call).await?;
        may_cancel(&req.id, &call.status.clone().unwrap_or_default())?;
        let patch = serde_json::json!({"metadata": {"annotations": {CANCEL_ANNOTATION: cancellation(caller.name(), &req.reason)}}});
        let patched = Api::<ToolCall>::namespaced(self.client.clone(), &ns)
            .patch(
                &call.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(internal)?;
        Ok(message(&patched))
    }

    async fn approve(
        &self,
        caller: &Caller,
        req: pb::ApproveCallRequest,
    ) -> Result<pb::Call, ApiError> {
        self.approval(
            caller,
            &req.id,
            ApprovalRequest {
                approver: caller.name(),
                decision: if req.for_session {
                    ApprovalDecision::AllowForSession
                } else {
                    ApprovalDecision::AllowOnce
                },
                shown: Some((&req.args_digest, &req.tool_digest)),
                ttl_seconds: req.ttl_seconds,
                comment: &req.comment,
            },
        )
        .await
    }

    async fn deny(&self, caller: &Caller, req: pb::DenyCallRequest) -> Result<pb::Call, ApiError> {
        self.approval(
            caller,
            &req.id,
            ApprovalRequest {
                approver: caller.name(),
                decision: ApprovalDecision::Deny,
                shown: None,
                ttl_seconds: 0,
                comment: &req.comment,
            },
        )
        .await
    }

    async fn explain(&self, caller: &Caller, id: &str) -> Result<pb::Explanation, ApiError> {
        let call = self.visible(caller, id).await?;
        let ns = call.namespace().unwrap_or_default();
        let status = call.status.clone().unwrap_or_default();
        let name = call.name_any();
        let cluster = self.cache.namespace(&ns, &name);
        let lifecycle_call = call_of(&call, &name, &ns, &status);
        let view = tool_view(
            &cluster.policies,
            &cluster.usage,
            &ns,
            &lifecycle_call.principal(),
            &toolgate_api::convert::explanation_view_request(&ns, &call.spec),
            None,
        )?;
        let snapshot = cluster.snapshot();
        let sandbox = sandbox_view(
            &snapshot,
            &lifecycle_call,
            serde_json::json!({
                "runtime": "cluster",
                "pod": status.runtime.as_ref().and_then(|r| r.pod_name.clone()),
            }),
        );
        let (approval, approver) = toolgate_api::convert::approvals_line(
            &toolgate_core::lifecycle::explained_approvals(&snapshot, &lifecycle_call),
        );
        Ok(toolgate_api::convert::explanation(
            message(&call),
            &status,
            toolgate_api::convert::Trace {
                view: Some(view),
                events: events_of(id, &status),
                approver,
                approval,
                sandbox,
                children: self.children(&ns, &name).await?,
            },
        ))
    }

    async fn delegation_token(
        &self,
        caller: &Caller,
        req: pb::GetDelegationTokenRequest,
    ) -> Result<pb::DelegationToken, ApiError> {
        let call = self.visible(caller, &req.call_id).await?;
        let ns = call.namespace().unwrap_or_default();
        crate::delegation::issue(&self.client, &self.cache, caller, &ns, &call).await
    }

    async fn complete_delegation(
        &self,
        caller: &Caller,
        req: pb::CompleteDelegationRequest,
    ) -> Result<pb::Call, ApiError> {
        let (d, report) = toolgate_api::request::delegation_report(caller, req)?;
        let ns = namespace_of(caller, "")?;
        let parent =
            crate::delegation::report(&self.client, &self.cache, &ns, &d.parent_call, report)
                .await?;
        // The controller ends the delegation from the report: answer with the call as it
        // ended, as the embedded runtime does, unless that takes longer than a client waits.
        let api = Api::<ToolCall>::namespaced(self.client.clone(), &ns);
        let ended =
            kube::runtime::wait::await_condition(api, &d.parent_call, |c: Option<&ToolCall>| {
                c.is_none_or(|c| is_terminal(c.status.as_ref().and_then(|s| s.phase)))
            });
        match tokio::time::timeout(REPORT_WAIT, ended).await {
            Ok(Ok(Some(call))) => Ok(message(&call)),
            Ok(Ok(None)) => Err(ApiError::NotFound {
                what: format!("call {ns}/{}", d.parent_call),
            }),
            Ok(Err(e)) => Err(internal(e)),
            Err(_) => Ok(message(&parent)),
        }
    }

    async fn skill(
        &self,
        caller: &Caller,
        req: pb::GetSkillRequest,
    ) -> Result<pb::Skill, ApiError> {
        let ns = namespace_of(caller, &req.namespace)?;
        self.in_scope(&ns)?;
        let cluster = self.cache.namespace(&ns, "");
        if !cluster.policies.skills.iter().any(|s| s.name == req.name) {
            return Err(ApiError::NotFound {
                what: format!("Skill {ns}/{}", req.name),
            });
        }
        // The instructions are read now, from the files the status was computed from or newer.
        let skill = kube::Api::<toolgate_crds::Skill>::namespaced(self.client.clone(), &ns)
            .get_opt(&req.name)
            .await
            .map_err(internal)?
            .ok_or_else(|| ApiError::NotFound {
                what: format!("Skill {ns}/{}", req.name),
            })?;
        let loaded = crate::skill::read(&self.client, &ns, &skill)
            .await
            .map_err(
                |crate::skill::Unread(code, message)| ApiError::FailedPrecondition {
                    code: if code == "ReferenceMissing" {
                        "skill-files-missing"
                    } else {
                        "skill-invalid"
                    },
                    message,
                },
            )?;
        toolgate_api::convert::skill_message(&cluster.policies, &ns, &req.name, Some(loaded))
    }

    async fn artifact(
        &self,
        caller: &Caller,
        req: pb::GetArtifactRequest,
    ) -> Result<BoxStream<pb::ArtifactChunk>, ApiError> {
        let call = self.visible(caller, &req.call_id).await?;
        let status = call.status.clone().unwrap_or_default();
        let artifact = artifact_of(&status, &req.call_id, &req.artifact_id)?;
        let not_found = || ApiError::NotFound {
            what: format!("artifact {:?} of call {}", req.artifact_id, req.call_id),
        };
        let store = toolgate_artifacts::ArtifactStore::open(&self.artifacts).map_err(internal)?;
        let bytes = store.read(&artifact.uri).await.map_err(|e| match e {
            toolgate_artifacts::ReadError::Missing { .. } => not_found(),
            other => internal(other),
        })?;
        let chunks: Vec<Result<pb::ArtifactChunk, ApiError>> = bytes
            .chunks(64 * 1024)
            .enumerate()
            .map(|(i, c)| {
                Ok(pb::ArtifactChunk {
                    data: c.to_vec(),
                    content_hash: if i == 0 {
                        artifact.content_hash.clone()
                    } else {
                        String::new()
                    },
                    size_bytes: if i == 0 { artifact.size_bytes } else { 0 },
                })
            })
            .collect();
        Ok(futures::stream::iter(chunks).boxed())
    }
}

impl KubeBackend {
    /// A delegation's calls (its subagent's), oldest first.
    async fn children(&self, ns: &str, parent: &str) -> Result<Vec<String>, ApiError> {
        Ok(crate::delegation::children(&self.client, ns, parent)
            .await
            .map_err(internal)?
            .iter()
            .map(|c| c.name_any())
            .collect())
    }
}
