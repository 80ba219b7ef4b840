//! Revoking the lease a call's credential holds, once the call ended or is deleted (the core
//! says when: [`lease_to_revoke`]). The lease id waits in its own Secret (never mounted) until the
//! broker confirms; a failure is recorded as `CredentialsRevoked=False` with its reason and
//! retried with backoff, never dropped.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use toolgate_core::lifecycle::{lease_to_revoke, revocation, revocation_failed};
use toolgate_crds::{ToolCall, ToolCallStatus};

use super::cleanup::delete_if_present;
use super::{Context, Error, kube_error};
use crate::build;

/// Revoke the call's lease, if it holds one and the core says it is time (`deleting`: its
/// ToolCall is being deleted). `None` when nothing is held any more; otherwise when to try again.
pub(super) async fn revoke(
    call: &ToolCall,
    ctx: &Context,
    ns: &str,
    status: &ToolCallStatus,
    deleting: bool,
) -> Result<Option<Duration>, Error> {
    if !deleting && !lease_to_revoke(status, false) {
        return Ok(None);
    }
    let name = build::lease_name(&call.name_any());
    let Some(secret) = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(&name)
        .await
        .map_err(kube_error("reading the call's lease"))?
    else {
        return Ok(None);
    };
    let field = |k: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .unwrap_or_default()
    };
    let lease = toolgate_broker::Lease {
        id: field("leaseId"),
        binding: field("binding"),
    };
    let mut status = status.clone();
    if lease.id.is_empty() {
        delete_if_present::<Secret>(&ctx.client, ns, &name).await?;
        return Ok(None);
    }
    match ctx.config.broker.revoke(&lease).await {
        Ok(()) => {
            ctx.record(call, &mut status, &revocation(&lease.binding, Ok(())))
                .await?;
            delete_if_present::<Secret>(&ctx.client, ns, &name).await?;
            Ok(None)
        }
        Err(e) => {
            let why = e.to_string();
            tracing::warn!(call = %call.name_any(), binding = %lease.binding, error = %why, "revoking a lease failed; retrying");
            let (steps, delay) = revocation_failed(
                &status,
                &lease.binding,
                e.reason(),
                why,
                jiff::Timestamp::now(),
            );
            if !steps.is_empty() {
                ctx.record(call, &mut status, &steps).await?;
            }
            Ok(Some(delay))
        }
    }
}
