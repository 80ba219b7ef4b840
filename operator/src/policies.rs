//! A namespace's policy objects as the core's lifecycle reads them, from the shared caches
//! (the cache module) or fresh from the API server.

use kube::api::ListParams;
use kube::{Client, ResourceExt};
use toolgate_core::budget;
use toolgate_core::decision::ApprovalEntry;
use toolgate_core::lifecycle::{Call, Policies, Snapshot};
use toolgate_core::manifest::{ObjectSet, Spec};
use toolgate_core::registry::GrantUsages;
use toolgate_crds::{
    ApprovalState, CredentialBinding, SandboxPolicy, ToolApproval, ToolCall, ToolDescriptor,
    ToolGrant, ToolPolicy,
};

use crate::descriptor::{meta_of, object};

/// The namespace's policy objects and the approvals of one call (its own and its session's).
pub(crate) struct Namespace {
    pub(crate) policies: Policies,
    pub(crate) approvals: Vec<ToolApproval>,
    /// What each grant used of its budget, from its status (the ledger the calls charge).
    pub(crate) usage: GrantUsages,
}

/// Every object of a kind in the namespace, from the API server.
async fn list_all<K>(client: &Client, ns: &str) -> Result<Vec<K>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    crate::kit::list_readable(client, ns, &ListParams::default()).await
}

/// The succeeded dry runs of a tool in a namespace, by field selector (the ToolCall CRD makes
/// `spec.toolRef.name`, `spec.dryRun` and `status.phase` selectable).
pub(crate) async fn dry_runs(
    client: &Client,
    ns: &str,
    tool: &str,
) -> Result<Vec<ToolCall>, kube::Error> {
    let selector = format!("spec.toolRef.name={tool},spec.dryRun=true,status.phase=Succeeded");
    crate::kit::list_readable(client, ns, &ListParams::default().fields(&selector)).await
}

/// The namespace's policy objects read fresh from the API server (the caches' fallback).
pub(crate) async fn dereference(
    client: &Client,
    ns: &str,
    call: &str,
) -> Result<Namespace, kube::Error> {
    Ok(Namespace::assemble(
        list_all(client, ns).await?,
        list_all(client, ns).await?,
        list_all(client, ns).await?,
        list_all(client, ns).await?,
        list_all(client, ns).await?,
        list_all(client, ns).await?,
        call,
    ))
}

impl Namespace {
    /// The objects as the core sees them; of the approvals, those of `call` and the session ones.
    pub(crate) fn assemble(
        descriptors: Vec<ToolDescriptor>,
        grants: Vec<ToolGrant>,
        tool_policies: Vec<ToolPolicy>,
        policies: Vec<SandboxPolicy>,
        bindings: Vec<CredentialBinding>,
        approvals: Vec<ToolApproval>,
        call: &str,
    ) -> Self {
        let now = jiff::Timestamp::now();
        let usage = grants
            .iter()
            .filter_map(|g| {
                let status = g.status.as_ref()?;
                Some((
                    (g.namespace().unwrap_or_default(), g.name_any()),
                    budget::usage(status, now),
                ))
            })
            .collect();
        let mut objects = Vec::new();
        objects.extend(
            descriptors
                .iter()
                .map(|t| object(meta_of(t), Spec::ToolDescriptor(Box::new(t.spec.clone())))),
        );
        objects.extend(
            grants
                .iter()
                .map(|g| object(meta_of(g), Spec::ToolGrant(Box::new(g.spec.clone())))),
        );
        objects.extend(
            tool_policies
                .iter()
                .map(|p| object(meta_of(p), Spec::ToolPolicy(Box::new(p.spec.clone())))),
        );
        objects.extend(
            policies
                .iter()
                .map(|s| object(meta_of(s), Spec::SandboxPolicy(Box::new(s.spec.clone())))),
        );
        objects.extend(bindings.iter().map(|c| {
            object(
                meta_of(c),
                Spec::CredentialBinding(Box::new(c.spec.clone())),
            )
        }));
        Namespace {
            policies: Policies::new(ObjectSet::new(objects)),
            approvals: {
                // In the order they were given (what ExplainCall lists).
                let mut own: Vec<ToolApproval> = approvals
                    .into_iter()
                    .filter(|a| a.spec.call_ref.name == call || a.spec.session_id.is_some())
                    .collect();
                own.sort_by(|a, b| {
                    (
                        a.metadata.creation_timestamp.as_ref().map(|t| t.0),
                        a.name_any(),
                    )
                        .cmp(&(
                            b.metadata.creation_timestamp.as_ref().map(|t| t.0),
                            b.name_any(),
                        ))
                });
                own
            },
            usage,
        }
    }

    /// What the call is decided against, now.
    pub(crate) fn snapshot(&self) -> Snapshot<'_> {
        let entries = self
            .approvals
            .iter()
            .map(|a| ApprovalEntry {
                name: a.metadata.name.as_deref().unwrap_or_default(),
                spec: &a.spec,
                consumed: a.status.as_ref().and_then(|s| s.state) == Some(ApprovalState::Consumed),
            })
            .collect();
        Snapshot::new(&self.policies, entries, jiff::Timestamp::now())
            .with_usage(self.usage.clone())
    }
}

/// A ToolCall as the lifecycle sees it.
pub(crate) fn call_of<'a>(
    call: &'a ToolCall,
    name: &'a str,
    ns: &'a str,
    status: &'a toolgate_crds::ToolCallStatus,
) -> Call<'a> {
    Call {
        namespace: ns,
        name,
        spec: &call.spec,
        status,
    }
}
