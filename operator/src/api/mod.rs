//! The agent API (`toolgate.v1`) served by the operator, backed by the Kubernetes objects:
//! callers are authenticated with TokenReview and authorized with SubjectAccessReview, proposals
//! become ToolCalls (created by the operator's identity for the authenticated principal, which the
//! admission policy allows only this identity to do), approvals become ToolApprovals, and
//! WatchCall follows the call's status conditions. The same service and checks as `toolgate local`.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use toolgate_api::convert::{call_message, chain_position};
use toolgate_api::request::new_call_name;
use toolgate_api::{ApiError, Authenticator, Caller, internal};
use toolgate_core::exec::ArtifactTarget;
use toolgate_core::lifecycle::{
    ApprovalRequest, approve, is_terminal, may_answer, may_see, phase_name,
};
use toolgate_core::principal::Principal;
use toolgate_crds::{ToolApproval, ToolCall, ToolCallStatus};
use toolgate_proto::v1 as pb;

use crate::policies::call_of;
use crate::scope::Scope;

/// Callers authenticated by the API server (service-account and user tokens alike), and the
/// subagents of live delegations by their tokens.
pub struct TokenReviewAuth {
    /// The operator's client.
    pub client: Client,
    /// The policy caches (a delegation's tool says whether it lives).
    pub cache: crate::cache::PolicyCache,
}

#[tonic::async_trait]
impl Authenticator for TokenReviewAuth {
    async fn authenticate(&self, token: &str) -> Option<Caller> {
        if token.starts_with(toolgate_core::delegation::TOKEN_PREFIX) {
            return crate::delegation::caller_of(&self.client, &self.cache, token).await;
        }
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
            reader_in: vec![],
            delegation: None,
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
pub(crate) fn split_id(id: &str) -> Result<(&str, &str), ApiError> {
    id.split_once('/')
        .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
        .ok_or_else(|| ApiError::field("id", format!("expected namespace/name, got {id:?}")))
}

pub(crate) fn message(call: &ToolCall) -> pb::Call {
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
    // The spec names the parent in the call's own namespace; the API says ids.
    if !m.parent_call.is_empty() {
        m.parent_call = format!("{ns}/{}", m.parent_call);
    }
    m
}

/// The status conditions of a call as events, in the order of the causal chain.
pub(crate) fn events_of(call_id: &str, status: &ToolCallStatus) -> Vec<pb::CallEvent> {
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
            call: None,
        })
        .collect()
}

impl KubeBackend {
    pub(crate) fn in_scope(&self, ns: &str) -> Result<(), ApiError> {
        match &self.scope.0 {
            Some(s) if s != ns => Err(ApiError::PermissionDenied {
                code: "namespace-not-served",
                message: format!("this toolgate serves namespace {s}, not {ns}"),
            }),
            _ => Ok(()),
        }
    }

    /// Whether the caller may `verb` `resource` in `ns`, according to the API server's RBAC.
    pub(crate) async fn may(&self, caller: &Caller, verb: &str, resource: &str, ns: &str) -> bool {
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
    pub(crate) async fn visible(&self, caller: &Caller, id: &str) -> Result<ToolCall, ApiError> {
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
        // Its proposer needs no SubjectAccessReview: the core says so without one.
        if may_see(caller.name(), &call.spec.principal, false)
            || may_see(
                caller.name(),
                &call.spec.principal,
                self.may(caller, "get", "toolcalls", ns).await,
            )
        {
            Ok(call)
        } else {
            Err(not_found())
        }
    }

    /// Whether `caller` may answer for `call` (approve, deny, cancel): the core decides from
    /// whether RBAC lets the caller create ToolApprovals in its namespace.
    pub(crate) async fn may_answer(
        &self,
        caller: &Caller,
        call: &ToolCall,
    ) -> Result<(), ApiError> {
        let ns = call.namespace().unwrap_or_default();
        let name = call.name_any();
        let status = call.status.clone().unwrap_or_default();
        let this = call_of(call, &name, &ns, &status);
        // Its proposer needs no SubjectAccessReview: the core says so without one.
        if may_answer(caller.name(), &this, false).is_ok() {
            return Ok(());
        }
        let approver = self.may(caller, "create", "toolapprovals", &ns).await;
        may_answer(caller.name(), &this, approver)?;
        Ok(())
    }

    /// Approve or deny a call: the core issues the contract bound to what the approver was
    /// shown, decided with it as the ToolCall controller will decide (and refused when it would
    /// change nothing); RBAC says whether the caller may approve in the namespace at all.
    pub(crate) async fn approval(
        &self,
        caller: &Caller,
        id: &str,
        request: ApprovalRequest<'_>,
    ) -> Result<pb::Call, ApiError> {
        let call = self.visible(caller, id).await?;
        self.may_answer(caller, &call).await?;
        let ns = call.namespace().unwrap_or_default();
        let name = call.name_any();
        let status = call.status.clone().unwrap_or_default();
        let this = call_of(&call, &name, &ns, &status);
        let cluster = self.cache.namespace(&ns, &name);
        let inputs = crate::call::CallInputs::read(
            &self.client,
            &self.cache,
            &ns,
            &call,
            &this,
            &cluster.policies,
        )
        .await
        .map_err(internal)?;
        let approval_name = format!(
            "{}-{}",
            name.chars().take(40).collect::<String>(),
            &new_call_name(jiff::Timestamp::now())[5..]
        );
        let spec = approve(&inputs.snapshot(&cluster), &this, &request, &approval_name)?;
        Api::<ToolApproval>::namespaced(self.client.clone(), &ns)
            .create(
                &PostParams::default(),
                &ToolApproval::new(&approval_name, spec),
            )
            .await
            .map_err(internal)?;
        Ok(message(&call))
    }
}

mod backend;
