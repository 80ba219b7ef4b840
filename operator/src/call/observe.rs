//! Following a running call's pod; when it ends, the executor's result from its termination
//! message, handed to the core.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use toolgate_core::lifecycle::{finished_steps, no_result};
use toolgate_crds::conditions::reason;
use toolgate_crds::{CallResult, ToolCall, ToolCallStatus};

use super::{Context, Error, kube_error};
use crate::build;

/// Follow the pod; when it ends, ingest the executor's result.
pub(super) async fn observe(
    call: &ToolCall,
    ctx: &Context,
    ns: &str,
    mut status: ToolCallStatus,
) -> Result<Action, Error> {
    let child = build::child_name(&call.name_any());
    // The watch's copy; one it has not seen yet (just created) is asked of the API server.
    let watched = ctx
        .pods
        .get(&kube::runtime::reflector::ObjectRef::new(&child).within(ns))
        .map(std::sync::Arc::unwrap_or_clone);
    let pod = match watched {
        Some(pod) => Some(pod),
        None => Api::<Pod>::namespaced(ctx.client.clone(), ns)
            .get_opt(&child)
            .await
            .map_err(kube_error("reading the call's pod"))?,
    };
    let Some(pod) = pod else {
        let steps = no_result(
            reason::POD_MISSING,
            format!("pod {child} disappeared before it reported a result"),
        );
        ctx.record(call, &mut status, &steps).await?;
        return Ok(Action::requeue(Duration::from_millis(100)));
    };
    let pod_status = pod.status.clone().unwrap_or_default();
    let phase = pod_status.phase.clone().unwrap_or_default();
    if phase != "Succeeded" && phase != "Failed" {
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    let terminated = build::executor_terminated(&pod);
    let message = terminated
        .as_ref()
        .and_then(|t| t.message.clone())
        .unwrap_or_default();
    let result = serde_json::from_str::<CallResult>(message.trim()).ok();
    // An executor the kubelet stopped (SIGTERM) says only that; the pod says why: its deadline
    // passed, it was evicted.
    let stopped_by_its_pod = pod_status.reason.is_some()
        && result
            .as_ref()
            .and_then(|r| r.error.as_ref())
            .is_some_and(|e| e.code == "terminated");
    // The call's egress proxy ends with its pod; what it recorded joins the result.
    let egress = ctx
        .config
        .egress
        .finish(call.metadata.uid.as_deref().unwrap_or_default());
    let steps = match result {
        Some(mut result) if !stopped_by_its_pod => {
            if let Some((records, dropped)) = &egress {
                toolgate_egress::fold(&mut result, records, *dropped);
            }
            if let Some(r) = status.runtime.as_mut() {
                let time = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
                    t.and_then(|t| kube_time(&t.0))
                };
                r.started_at = time(terminated.as_ref().and_then(|t| t.started_at.as_ref()));
                r.finished_at = time(terminated.as_ref().and_then(|t| t.finished_at.as_ref()));
            }
            finished_steps(&mut status, &result, None)
        }
        _ => {
            let why = match (pod_status.reason.as_deref(), terminated.as_ref()) {
                (Some(r), _) => format!(
                    "pod {child} ended: {r} ({})",
                    pod_status.message.clone().unwrap_or_default()
                ),
                (None, Some(t)) => format!("pod {child} exited {} without a result", t.exit_code),
                (None, None) => format!("pod {child} ended without a result"),
            };
            no_result(reason::EXECUTOR_FAILED, why)
        }
    };
    // The credential goes the moment the pod is done (the cleanup after the call counts on it
    // when the call has a finish time).
    super::cleanup::delete_if_present::<Secret>(&ctx.client, ns, &child).await?;
    ctx.record(call, &mut status, &steps).await?;
    Ok(Action::requeue(Duration::from_millis(100)))
}

/// k8s-openapi's time (another jiff release) as ours.
fn kube_time(t: &k8s_openapi::jiff::Timestamp) -> Option<toolgate_crds::Timestamp> {
    jiff::Timestamp::from_nanosecond(t.as_nanosecond())
        .ok()
        .map(toolgate_crds::Timestamp)
}
