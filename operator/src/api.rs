//! The agent API (`toolgate.v1`) served by the operator, backed by the Kubernetes objects:
//! callers are authenticated with TokenReview and authorized with SubjectAccessReview, proposals
//! become ToolCalls (created by the operator's identity for the authenticated principal, which the
//! admission policy allows only this identity to do), approvals become ToolApprovals, and
//! WatchCall follows the call's status conditions. The same service and checks as `toolgate local`.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use toolgate_api::convert::{call_message, chain_position, tool_view};
use toolgate_api::request::{Proposal, namespace_of, new_call_name};
use toolgate_api::{ApiError, Authenticator, Backend, BoxStream, Caller};
use toolgate_core::call_state::{is_terminal, phase_name};
use toolgate_core::exec::ArtifactTarget;
use toolgate_core::principal::Principal;
use toolgate_crds::{
    ApprovalDecision, LocalObjectRef, ToolApproval, ToolApprovalSpec, ToolCall, ToolCallStatus,
    ToolDescriptor,
};
use toolgate_proto::v1 as pb;

use crate::scope::Scope;

/// Annotation through which CancelCall asks the operator to stop a call (a call's spec is
/// immutable; its metadata is not).
pub const CANCEL_ANNOTATION: &str = "toolgate.dev/cancel-requested";

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(e.to_string())
}

/// Callers authenticated by the API server (service-account and user tokens alike).
pub struct TokenReviewAuth {
    /// The operator's client.
    pub client: Client,
}

#[tonic::async_trait]
impl Authenticator for TokenReviewAuth {
    async fn authenticate(&self, token: &str) -> Option<Caller> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| tracing::warn!(error = %e, "TokenReview failed"))
            .ok()?;
        let status = reviewed.status?;
        if status.authenticated != Some(true) {
            return None;
        }
        let user = status.user?;
        Some(Caller {
            principal: Principal::new(user.username?).with_groups(user.groups.unwrap_or_default()),
            approver_in: vec![],
        })
    }
}

/// The backend over the cluster.
pub struct KubeBackend {
    /// The operator's client.
    pub client: Client,
    /// What the operator watches.
    pub scope: Scope,
    /// Where executors store artifacts (for GetArtifact).
    pub artifacts: ArtifactTarget,
    /// The policy objects tool views and explanations are computed from.
    pub cache: crate::cache::PolicyCache,
}

/// `namespace/name`: a call's id on a cluster.
fn split_id(id: &str) -> Result<(&str, &str), ApiError> {
    id.split_once('/')
        .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
        .ok_or_else(|| ApiError::field("id", format!("expected namespace/name, got {id:?}")))
}

fn message(call: &ToolCall) -> pb::Call {
    let ns = call.namespace().unwrap_or_default();
    let status = call.status.clone().unwrap_or_default();
    let created = call
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    let mut m = call_message(
        &format!("{ns}/{}", call.name_any()),
        &ns,
        &call.spec,
        &status,
        &created,
    );
    m.tool_digest = status
        .tool_digest
        .clone()
        .or_else(|| call.spec.tool_ref.digest.clone())
        .unwrap_or_default();
    m
}

/// The status conditions of a call as events, in the order of the causal chain.
fn events_of(call_id: &str, status: &ToolCallStatus) -> Vec<pb::CallEvent> {
    let mut conditions = status.conditions.clone();
    conditions.sort_by_key(|c| (chain_position(&c.type_), c.last_transition_time));
    let terminal = is_terminal(status.phase);
    let n = conditions.len();
    conditions
        .into_iter()
        .enumerate()
        .map(|(i, c)| pb::CallEvent {
            call_id: call_id.into(),
            sequence: i as u64 + 1,
            event_id: format!("{call_id}/{}", i + 1),
            r#type: c.type_.clone(),
            status: format!("{:?}", c.status),
            reason: c.reason.clone(),
            message: c.message.clone(),
            time: c.last_transition_time.to_string(),
            phase: phase_name(status.phase).into(),
            terminal: terminal && i + 1 == n,
        })
        .collect()
}

impl KubeBackend {
    fn in_scope(&self, ns: &str) -> Result<(), ApiError> {
        match &self.scope.0 {
            Some(s) if s != ns => Err(ApiError::PermissionDenied {
                code: "namespace-not-served",
                message: format!("this toolgate serves namespace {s}, not {ns}"),
            }),
            _ => Ok(()),
        }
    }

    /// Whether the caller may `verb` `resource` in `ns`, according to the API server's RBAC.
    async fn may(&self, caller: &Caller, verb: &str, resource: &str, ns: &str) -> bool {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.name().into()),
                groups: Some(caller.principal.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(ns.into()),
                    verb: Some(verb.into()),
                    group: Some(toolgate_crds::GROUP.into()),
                    resource: Some(resource.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
        {
            Ok(r) => r.status.is_some_and(|s| s.allowed),
            Err(e) => {
                tracing::warn!(error = %e, "SubjectAccessReview failed");
                false
            }
        }
    }

    /// A call the caller may see: its principal, or someone RBAC lets read calls there.
    async fn visible(&self, caller: &Caller, id: &str) -> Result<ToolCall, ApiError> {
        let (ns, name) = split_id(id)?;
        self.in_scope(ns)?;
        let not_found = || ApiError::NotFound {
            what: format!("call {id:?}"),
        };
        let call = Api::<ToolCall>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .map_err(internal)?
            .ok_or_else(not_found)?;
        if call.spec.principal == caller.name() || self.may(caller, "get", "toolcalls", ns).await {
            Ok(call)
        } else {
            Err(not_found())
        }
    }

    async fn approval(
        &self,
        caller: &Caller,
        id: &str,
        decision: ApprovalDecision,
        shown: Option<(&str, &str)>,
        ttl: u32,
        comment: &str,
    ) -> Result<pb::Call, ApiError> {
        let call = self.visible(caller, id).await?;
        let ns = call.namespace().unwrap_or_default();
        if caller.name() == call.spec.principal {
            return Err(ApiError::PermissionDenied {
                code: "approval-self",
                message: format!(
                    "{} proposed call {id}; an approver must be someone else",
                    caller.name()
                ),
            });
        }
        if !self.may(caller, "create", "toolapprovals", &ns).await {
            return Err(ApiError::PermissionDenied {
                code: "not-an-approver",
                message: format!(
                    "{} may not approve or deny calls in namespace {ns}",
                    caller.name()
                ),
            });
        }
        let status = call.status.clone().unwrap_or_default();
        if status.phase != Some(toolgate_crds::CallPhase::AwaitingApproval) {
            return Err(ApiError::FailedPrecondition {
                code: "not-awaiting-approval",
                message: format!(
                    "call {id} is {}, not AwaitingApproval",
                    phase_name(status.phase)
                ),
            });
        }
        let now_args = status.args_digest.clone().unwrap_or_default();
        let now_tool = status.tool_digest.clone().unwrap_or_default();
        if let Some((args, tool)) = shown {
            if args.is_empty() || tool.is_empty() {
                return Err(ApiError::field(
                    if args.is_empty() {
                        "args_digest"
                    } else {
                        "tool_digest"
                    },
                    "expected the digest the approver was shown (GetCall returns it)",
                ));
            }
            if args != now_args {
                return Err(ApiError::FailedPrecondition {
                    code: "approval-args-changed",
                    message: format!(
                        "the approver was shown args {args}, the call's are {now_args}"
                    ),
                });
            }
            if tool != now_tool {
                return Err(ApiError::FailedPrecondition {
                    code: "approval-tool-changed",
                    message: format!(
                        "the approver was shown tool version {tool}, the call's is {now_tool}"
                    ),
                });
            }
        }
        if ttl > 86_400 {
            return Err(ApiError::field(
                "ttl_seconds",
                format!("expected at most 86400, got {ttl}"),
            ));
        }
        let ttl = if ttl == 0 { 900 } else { ttl };
        let scopes = Api::<ToolDescriptor>::namespaced(self.client.clone(), &ns)
            .get_opt(&call.spec.tool_ref.name)
            .await
            .map_err(internal)?
            .map(|t| t.spec.permissions.required_scopes)
            .unwrap_or_default();
        let Some(auth) = status.authorization.clone() else {
            return Err(internal("a call awaiting approval has no decision"));
        };
        let expires = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_secs(i64::from(ttl)))
            .map_err(internal)?;
        let name = format!(
            "{}-{}",
            call.name_any().chars().take(40).collect::<String>(),
            &new_call_name(jiff::Timestamp::now())[5..]
        );
        let approval = ToolApproval::new(
            &name,
            ToolApprovalSpec {
                call_ref: LocalObjectRef {
                    name: call.name_any(),
                },
                args_digest: now_args,
                tool_digest: now_tool,
                risk_tier: auth.risk_tier,
                scopes,
                principal: call.spec.principal.clone(),
                approver: caller.name().into(),
                session_id: match decision {
                    ApprovalDecision::AllowForSession => {
                        Some(call.spec.session_id.clone().ok_or_else(|| {
                            ApiError::field(
                                "for_session",
                                "the call has no session_id; approve it once instead",
                            )
                        })?)
                    }
                    _ => None,
                },
                decision,
                expires_at: toolgate_crds::Timestamp(expires),
                comment: (!comment.is_empty()).then(|| comment.to_string()),
            },
        );
        Api::<ToolApproval>::namespaced(self.client.clone(), &ns)
            .create(&PostParams::default(), &approval)
            .await
            .map_err(internal)?;
        Ok(message(&call))
    }
}

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
        tool_view(&cluster.registry, &ns, &caller.principal, &req)
    }

    async fn propose(
        &self,
        caller: &Caller,
        req: pb::ProposeCallRequest,
    ) -> Result<pb::Call, ApiError> {
        let proposal = Proposal::validate(caller, &req)?;
        let ns = proposal.namespace.clone();
        self.in_scope(&ns)?;
        let tool = proposal.tool.clone();
        // Pin the version the call is decided against (invariant 1).
        let digest = match proposal.tool_digest.clone() {
            Some(d) => Some(d),
            None => Api::<ToolDescriptor>::namespaced(self.client.clone(), &ns)
                .get_opt(&tool)
                .await
                .map_err(internal)?
                .and_then(|t| t.status.and_then(|s| s.digest)),
        };
        let name = match &proposal.idempotency_key {
            // The same key from the same principal names the same object.
            Some(key) => {
                use sha2::{Digest, Sha256};
                let h = Sha256::digest(format!("{}/{key}", caller.name()).as_bytes());
                format!("call-{}", hex::encode(&h[..10]))
            }
            None => new_call_name(jiff::Timestamp::now()),
        };
        let spec = proposal.into_spec(caller, tool, digest);
        let api = Api::<ToolCall>::namespaced(self.client.clone(), &ns);
        match api
            .create(&PostParams::default(), &ToolCall::new(&name, spec.clone()))
            .await
        {
            Ok(created) => Ok(message(&created)),
            Err(kube::Error::Api(e)) if e.code == 409 && spec.idempotency_key.is_some() => {
                let existing = api.get(&name).await.map_err(internal)?;
                if existing.spec.tool_ref.name != spec.tool_ref.name
                    || existing.spec.args != spec.args
                    || existing.spec.dry_run != spec.dry_run
                {
                    return Err(ApiError::AlreadyExists {
                        code: "idempotency-key-reused",
                        message: format!(
                            "idempotency_key {:?} already names call {ns}/{name} with a different tool or args; use a new key",
                            spec.idempotency_key.as_deref().unwrap_or_default()
                        ),
                    });
                }
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
        let api = if req.namespace.is_empty() {
            self.scope.api::<ToolCall>(&self.client)
        } else {
            self.in_scope(&req.namespace)?;
            Api::<ToolCall>::namespaced(self.client.clone(), &req.namespace)
        };
        let calls = api.list(&ListParams::default()).await.map_err(internal)?;
        let mut readable: BTreeMap<String, bool> = BTreeMap::new();
        let mut out = Vec::new();
        let mut items = calls.items;
        items.sort_by_key(|c| (c.namespace(), c.name_any()));
        for c in items {
            let id = format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any());
            if !req.page_token.is_empty() && id <= req.page_token {
                continue;
            }
            let ns = c.namespace().unwrap_or_default();
            let mine = c.spec.principal == caller.name();
            if !mine {
                let allowed = match readable.get(&ns) {
                    Some(a) => *a,
                    None => {
                        let a = self.may(caller, "list", "toolcalls", &ns).await;
                        readable.insert(ns.clone(), a);
                        a
                    }
                };
                if !allowed {
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
        if call.spec.principal != caller.name()
            && !self.may(caller, "create", "toolapprovals", &ns).await
        {
            return Err(ApiError::NotFound {
                what: format!("call {:?}", req.id),
            });
        }
        if is_terminal(call.status.as_ref().and_then(|s| s.phase)) {
            return Err(ApiError::FailedPrecondition {
                code: "call-ended",
                message: format!("call {} already ended", req.id),
            });
        }
        let reason = if req.reason.is_empty() {
            "no reason given".to_string()
        } else {
            req.reason.clone()
        };
        let patch = serde_json::json!({"metadata": {"annotations": {CANCEL_ANNOTATION: format!("{}: {reason}", caller.name())}}});
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
        let decision = if req.for_session {
            ApprovalDecision::AllowForSession
        } else {
            ApprovalDecision::AllowOnce
        };
        self.approval(
            caller,
            &req.id,
            decision,
            Some((&req.args_digest, &req.tool_digest)),
            req.ttl_seconds,
            &req.comment,
        )
        .await
    }

    async fn deny(&self, caller: &Caller, req: pb::DenyCallRequest) -> Result<pb::Call, ApiError> {
        self.approval(
            caller,
            &req.id,
            ApprovalDecision::Deny,
            None,
            0,
            &req.comment,
        )
        .await
    }

    async fn explain(&self, caller: &Caller, id: &str) -> Result<pb::Explanation, ApiError> {
        let call = self.visible(caller, id).await?;
        let ns = call.namespace().unwrap_or_default();
        let status = call.status.clone().unwrap_or_default();
        let cluster = self.cache.namespace(&ns, &call.name_any());
        let principal = Principal::new(call.spec.principal.clone())
            .with_groups(call.spec.principal_groups.clone());
        let view = tool_view(
            &cluster.registry,
            &ns,
            &principal,
            &toolgate_api::convert::explanation_view_request(&ns, &call.spec),
        )?;
        let approval = status
            .authorization
            .as_ref()
            .and_then(|a| a.approval_ref.as_ref())
            .map(|r| r.name.clone())
            .unwrap_or_default();
        Ok(toolgate_api::convert::explanation(
            message(&call),
            &status,
            toolgate_api::convert::Trace {
                view: Some(view),
                events: events_of(id, &status),
                approver: cluster.approver_of(&approval),
                approval,
                sandbox_json: status
                    .runtime
                    .as_ref()
                    .and_then(|r| r.pod_name.clone())
                    .map(|p| serde_json::json!({"pod": p}).to_string())
                    .unwrap_or_default(),
            },
        ))
    }

    async fn artifact(
        &self,
        caller: &Caller,
        req: pb::GetArtifactRequest,
    ) -> Result<BoxStream<pb::ArtifactChunk>, ApiError> {
        use object_store::ObjectStoreExt;
        let call = self.visible(caller, &req.call_id).await?;
        let not_found = || ApiError::NotFound {
            what: format!("artifact {:?} of call {}", req.artifact_id, req.call_id),
        };
        let artifact = call
            .status
            .as_ref()
            .and_then(|s| s.result.as_ref())
            .and_then(|r| {
                r.artifacts
                    .iter()
                    .find(|a| a.artifact_id == req.artifact_id)
            })
            .cloned()
            .ok_or_else(not_found)?;
        let store =
            toolgate_executor::store::ArtifactStore::open(&self.artifacts).map_err(internal)?;
        let key = artifact
            .uri
            .strip_prefix(&format!("{}/", store.uri_prefix))
            .ok_or_else(|| {
                internal(format!(
                    "artifact {} is not in this operator's store",
                    artifact.uri
                ))
            })?
            .to_string();
        let bytes = store
            .store
            .get(&object_store::path::Path::from(key))
            .await
            .map_err(|_| not_found())?
            .bytes()
            .await
            .map_err(internal)?;
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
