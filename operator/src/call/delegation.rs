//! A delegation's steps on the cluster (a call of a subagent tool): opened without a pod by the
//! core's `start_delegation`, ended by its subagent's report (kept by the agent API in the
//! delegation's Secret), its cancellation (the controller's cancel path) or its time.

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use toolgate_core::delegation::{ending, expires_at};
use toolgate_core::lifecycle::DelegationStart;
use toolgate_crds::{SubagentSpec, ToolCall, ToolCallStatus};

use super::{Context, Error, kube_error};
use crate::delegation::{child_views, children, reported};

/// The longest a running delegation waits between two looks at itself (its report's annotation
/// wakes it sooner).
const LOOK_AGAIN: Duration = Duration::from_secs(30);

/// Open an authorized delegation the core started.
pub(super) async fn start(
    call: &ToolCall,
    ctx: &Context,
    ns: &str,
    started: DelegationStart<'_>,
    mut status: ToolCallStatus,
) -> Result<Action, Error> {
    for approval in &started.consumes {
        super::cleanup::consume_approval(ctx, ns, approval).await;
    }
    let timeout = Duration::from_millis(started.subagent.budget.timeout_ms);
    ctx.record(call, &mut status, &started.steps).await?;
    Ok(Action::requeue(timeout.min(LOOK_AGAIN)))
}

/// A running delegation: ended by its subagent's report, or by its time.
pub(super) async fn observe(
    call: &ToolCall,
    ctx: &Context,
    ns: &str,
    mut status: ToolCallStatus,
    subagent: &SubagentSpec,
) -> Result<Action, Error> {
    let name = call.name_any();
    let now = jiff::Timestamp::now();
    let report = reported(&ctx.client, ns, &name)
        .await
        .map_err(kube_error("reading the delegation's report"))?;
    let kids = children(&ctx.client, ns, &name)
        .await
        .map_err(kube_error("listing the delegation's calls"))?;
    let cluster = ctx.cache.namespace(ns, &name);
    let tool = cluster
        .policies
        .registry
        .tool(ns, &call.spec.tool_ref.name)
        .map(|t| &*t.spec);
    let views = child_views(&kids);
    let ended = match ending(tool, subagent, &mut status, report, &views, now) {
        // Checked when it was taken: the tool changed since. The time still ends it.
        Err(e) => {
            tracing::warn!(call = %name, error = %e, "a delegation's report no longer fits its tool");
            ending(tool, subagent, &mut status, None, &views, now)
        }
        ended => ended,
    };
    match ended {
        Ok(Some(steps)) => {
            ctx.record(call, &mut status, &steps).await?;
            Ok(Action::requeue(Duration::from_millis(100)))
        }
        Ok(None) => {
            let left = expires_at(&status, subagent)
                .and_then(|at| Duration::try_from(at.duration_since(now)).ok())
                .unwrap_or(LOOK_AGAIN);
            Ok(Action::requeue(left.min(LOOK_AGAIN)))
        }
        Err(_) => Ok(Action::requeue(LOOK_AGAIN)),
    }
}
