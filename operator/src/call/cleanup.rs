//! After a call: its children removed (a failed call's pod kept a while for debugging), and the
//! states of its approvals written where reviewers see them.

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Client, Resource, ResourceExt};
use toolgate_core::lifecycle::{Snapshot, approval_states};
use toolgate_crds::{CallPhase, ToolApproval, ToolCall, ToolCallStatus};

use super::{Context, Error, kube_error};
use crate::build;
use crate::kit::FIELD_MANAGER;
use crate::policies::call_of;

/// After the result is recorded: remove the children (a failed call's pod stays a while).
pub(super) async fn finish(
    call: &ToolCall,
    ctx: &Context,
    ns: &str,
    status: &ToolCallStatus,
) -> Result<Action, Error> {
    let name = call.name_any();
    // A call that ended without its pod's end observed (cancelled, timed out) still held a
    // proxy: released.
    let _ = ctx
        .config
        .egress
        .finish(call.metadata.uid.as_deref().unwrap_or_default());
    let failed = status.phase == Some(CallPhase::Failed);
    let keep_until = status
        .runtime
        .as_ref()
        .and_then(|r| r.finished_at)
        .map(|t| t.0)
        .and_then(|t| {
            t.checked_add(jiff::SignedDuration::try_from(ctx.config.keep_failed_pods).ok()?)
                .ok()
        });
    let keep_pod = failed && keep_until.is_some_and(|t| t > jiff::Timestamp::now());
    // Once: every later reconcile of the ended call (its own status writes, the pod's deletion)
    // would otherwise delete the same four children again.
    let removed = status
        .runtime
        .as_ref()
        .is_some_and(|r| r.children_removed_at.is_some());
    if !removed {
        // A call whose pod reported its end had its Secret deleted then (`observe`).
        let secret_gone = status
            .runtime
            .as_ref()
            .is_some_and(|r| r.finished_at.is_some());
        let child = build::child_name(&name);
        if !secret_gone {
            delete_if_present::<Secret>(&ctx.client, ns, &child).await?;
        }
        remove_children_but_the_secret(&ctx.client, ns, &name, !keep_pod).await?;
        if !keep_pod {
            children_removed(ctx, ns, &name).await?;
        }
    }
    if let Some(retry) = super::lease::revoke(call, ctx, ns, status, false).await? {
        return Ok(Action::requeue(retry));
    }
    Ok(if keep_pod {
        Action::requeue(ctx.config.keep_failed_pods)
    } else {
        Action::await_change()
    })
}

/// Say on the call that its children are gone (a merge patch of that one field: it needs no
/// version to write against, and takes nothing another write set).
async fn children_removed(ctx: &Context, ns: &str, name: &str) -> Result<(), Error> {
    let patch = serde_json::json!({
        "status": {"runtime": {"childrenRemovedAt": toolgate_crds::Timestamp(jiff::Timestamp::now())}},
    });
    Api::<ToolCall>::namespaced(ctx.client.clone(), ns)
        .patch_status(
            name,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .map_err(kube_error("recording that the call's children are gone"))?;
    Ok(())
}

/// Delete a call's children (the pod too when `with_pod`). Missing ones are fine.
pub(super) async fn remove_children(
    client: &Client,
    ns: &str,
    call: &str,
    with_pod: bool,
) -> Result<(), Error> {
    delete_if_present::<Secret>(client, ns, &build::child_name(call)).await?;
    remove_children_but_the_secret(client, ns, call, with_pod).await
}

/// Delete a call's ConfigMap and NetworkPolicy (the pod too when `with_pod`).
async fn remove_children_but_the_secret(
    client: &Client,
    ns: &str,
    call: &str,
    with_pod: bool,
) -> Result<(), Error> {
    let child = build::child_name(call);
    delete_if_present::<ConfigMap>(client, ns, &child).await?;
    delete_if_present::<NetworkPolicy>(client, ns, &child).await?;
    if with_pod {
        delete_if_present::<Pod>(client, ns, &child).await?;
    }
    Ok(())
}

/// Delete an object by name; one that is already gone is fine.
pub(super) async fn delete_if_present<K>(client: &Client, ns: &str, name: &str) -> Result<(), Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    <K as Resource>::DynamicType: Default,
{
    match Api::<K>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(kube_error("deleting a child of the call")(e)),
    }
}

/// Mark an allowOnce approval used up (the core says which, when the run starts).
pub(super) async fn consume_approval(ctx: &Context, ns: &str, name: &str) {
    let patch = serde_json::json!({
        "apiVersion": toolgate_crds::API_VERSION,
        "kind": "ToolApproval",
        "status": {"state": "Consumed"},
    });
    if let Err(e) = Api::<ToolApproval>::namespaced(ctx.client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        tracing::warn!(approval = %name, error = %e, "marking the approval consumed");
    }
}

/// Write on each of the call's approvals the state the core finds it in (bound, expired,
/// voided and why), where it changed.
pub(super) async fn mark_approvals(
    ctx: &Context,
    ns: &str,
    call: &ToolCall,
    status: &ToolCallStatus,
    snapshot: &Snapshot<'_>,
) {
    let name = call.name_any();
    let api = Api::<ToolApproval>::namespaced(ctx.client.clone(), ns);
    for (approval, state, void_reason) in
        approval_states(snapshot, &call_of(call, &name, ns, status))
    {
        let Ok(Some(current)) = api.get_opt(approval).await else {
            continue;
        };
        if current.status.as_ref().and_then(|s| s.state) == Some(state) {
            continue;
        }
        let patch = serde_json::json!({
            "apiVersion": toolgate_crds::API_VERSION,
            "kind": "ToolApproval",
            "status": {"state": state, "voidReason": void_reason, "observedGeneration": current.metadata.generation},
        });
        if let Err(e) = api
            .patch_status(
                approval,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            tracing::warn!(approval = %approval, error = %e, "writing the approval's state");
        }
    }
}
