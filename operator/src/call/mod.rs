//! The ToolCall controller: the causal chain on a cluster.
//!
//! Each reconcile takes one step, in files named after them: [`dereference`] (what the call is
//! decided against: the shared caches, or the API server when they would end the call) → the
//! core's lifecycle decides (propose, awaiting, plan the run) → [`plan`] builds the children
//! (pure: NetworkPolicy, ConfigMap, Secret, Pod) → [`apply`] applies them with server-side
//! apply → [`observe`] follows the pod and takes the executor's result from its termination
//! message → [`cleanup`] removes the children. Every step is recorded as a status condition and
//! an Event ([`record`]). A denied call never creates a pod; names are deterministic, so a
//! restarted operator applies the same pod instead of a second one; a finalizer removes the
//! credential and the children even when the call is deleted mid-flight.

mod apply;
mod cleanup;
mod delegation;
mod dereference;
mod inputs;
mod lease;
mod observe;
mod plan;
mod record;

pub(crate) use inputs::CallInputs;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use toolgate_broker::CredentialBroker;
use toolgate_core::exec::ArtifactTarget;
use toolgate_core::lifecycle::{Start, awaiting, cancelled, is_terminal, propose, start};
use toolgate_crds::{CallPhase, ToolCall};

use crate::build;
use crate::cache::{PolicyCache, Subscriptions};
use crate::kit::Categorized as _;
use crate::policies::call_of;

/// The finalizer that guarantees cleanup.
pub const FINALIZER: &str = "toolgate.dev/cleanup";

/// Annotation CancelCall sets (`who: why`); the controller stops the call when it sees it.
pub const CANCEL_ANNOTATION: &str = "toolgate.dev/cancel-requested";

/// How the operator runs calls.
pub struct CallConfig {
    /// Executor image when the descriptor names none.
    pub executor_image: String,
    /// Where executors store artifacts.
    pub artifacts: ArtifactTarget,
    /// A Secret (in the call's namespace) whose keys become the executor's environment: the
    /// artifact store's credentials.
    pub artifact_secret: Option<String>,
    /// Where credentials come from.
    pub broker: Arc<dyn CredentialBroker>,
    /// The artifact store's addresses and port, opened in every call's NetworkPolicy for the
    /// executor.
    pub artifact_egress: crate::build::ArtifactEgress,
    /// What the executor probes, before the tool starts, to prove the pod's NetworkPolicy is in
    /// force.
    pub egress_gate: crate::build::EgressGateConfig,
    /// How long a failed call's pod is kept for debugging.
    pub keep_failed_pods: Duration,
    /// The calls' egress proxies (process tools under a domain allowlist).
    pub egress: Arc<crate::egress::EgressProxies>,
    /// Where call spans go (nowhere by default).
    pub tracer: toolgate_api::trace::CallTracer,
}

/// The call as its spans name it: its uid, and the agent's `traceparent` from its annotation.
pub(crate) fn traced(call: &ToolCall) -> toolgate_api::trace::TracedCall<'_> {
    let meta = &call.metadata;
    toolgate_api::trace::TracedCall {
        uid: meta.uid.as_deref().unwrap_or_default(),
        name: meta.name.as_deref().unwrap_or_default(),
        namespace: meta.namespace.as_deref().unwrap_or_default(),
        tool: &call.spec.tool_ref.name,
        traceparent: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(toolgate_api::trace::TRACEPARENT_ANNOTATION))
            .map(String::as_str),
        created: meta
            .creation_timestamp
            .as_ref()
            .map(|t| std::time::SystemTime::from(t.0))
            .unwrap_or_else(std::time::SystemTime::now),
    }
}

/// What every reconcile of a ToolCall needs, shared by all of them.
pub struct Context {
    /// The operator's client (its own service account: least-privilege RBAC in the chart).
    pub client: Client,
    /// Publishes one Event per transition, on the call.
    pub recorder: Recorder,
    /// How calls run: executor image, artifact store, broker, egress, retention.
    pub config: CallConfig,
    /// Phase transitions, decisions, reconcile durations and errors (bounded labels).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Consecutive failures per call, for its backoff.
    pub failures: crate::kit::Failures,
    /// The namespaces' policy objects, shared with the agent API.
    pub cache: PolicyCache,
    /// The calls' pods as the controller's watch last saw them (a reconcile a pod's change
    /// triggers sees that change): following a running call costs no request.
    pub pods: kube::runtime::reflector::Store<Pod>,
}

/// Why a reconcile failed; transient, retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("{action}: {source}")]
    Kube {
        /// What the controller was doing.
        action: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// A child could not be serialized (a bug).
    #[error("serializing {what}: {source}")]
    Json {
        /// What.
        what: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A ToolCall without a namespace (the CRD is namespaced: a bug if seen).
    #[error("ToolCall {0} has no namespace")]
    NoNamespace(String),
    /// The call changed since this reconcile read it; it is reconciled again at once.
    #[error("ToolCall {0} changed since it was read; deciding again from what is there")]
    Stale(String),
    /// The call's lease could not be revoked yet (its condition says why); retried.
    #[error("ToolCall {0}: its credential's lease is not revoked yet; retrying")]
    LeaseHeld(String),
    /// Every attempt to write a grant's budget lost to a concurrent write (retried later).
    #[error("grant {0}: every write of its budget conflicted with another; trying again later")]
    BudgetContended(String),
    /// Adding or removing the finalizer, or the step inside it.
    #[error(transparent)]
    Finalizer(Box<kube::runtime::finalizer::Error<Error>>),
}

impl crate::kit::Categorized for Error {
    /// The reason of the Warning Event and the `category` label of
    /// `toolgate_reconcile_errors_total`.
    fn category(&self) -> &'static str {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Kube { .. } => "KubeApiFailed",
            Error::Json { .. } => "SerializationFailed",
            Error::NoNamespace(_) => "NoNamespace",
            Error::LeaseHeld(_) => "LeaseHeld",
            Error::Stale(_) => "Stale",
            Error::BudgetContended(_) => "BudgetContended",
            Error::Finalizer(inner) => match &**inner {
                F::ApplyFailed(e) | F::CleanupFailed(e) => e.category(),
                F::AddFinalizer(_) | F::RemoveFinalizer(_) => "FinalizerFailed",
                F::UnnamedObject | F::InvalidFinalizer => "InvalidObject",
            },
        }
    }
}

/// `map_err` for a kube request: what was being done, and the client's error kept.
pub(crate) fn kube_error(action: &'static str) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Kube { action, source }
}

/// One reconcile of a call that deserialized. The finalizer wraps the step so cleanup runs even
/// when the call is deleted mid-flight.
#[tracing::instrument(skip(call, ctx), fields(call = %call.name_any(), namespace = call.namespace().unwrap_or_default()))]
pub(crate) async fn reconcile(call: Arc<ToolCall>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = call
        .namespace()
        .ok_or_else(|| Error::NoNamespace(call.name_any()))?;
    let api = Api::<ToolCall>::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, call, |event| async {
        match event {
            Finalizer::Apply(call) => advance(&call, &ctx, &ns).await,
            Finalizer::Cleanup(call) => {
                cleanup::remove_children(&ctx.client, &ns, &call.name_any(), true).await?;
                // The finalizer stays until the lease is revoked: a deleted call leaks nothing.
                let status = call.status.clone().unwrap_or_default();
                if lease::revoke(&call, &ctx, &ns, &status, true)
                    .await?
                    .is_some()
                {
                    return Err(Error::LeaseHeld(call.name_any()));
                }
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// A watched object that does not deserialize never wedges the controller: it is logged and
/// left until it changes.
async fn reconcile_guarded(
    guard: Arc<DeserializeGuard<ToolCall>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    crate::kit::reconcile_guarded(guard, ctx, reconcile).await
}

impl crate::kit::Reconciles for Context {
    fn failures(&self) -> &crate::kit::Failures {
        &self.failures
    }
    fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }
    fn recorder(&self) -> &kube::runtime::events::Recorder {
        &self.recorder
    }
}

/// How often a call waiting for a dry run looks for one.
const DRY_RUN_POLL: Duration = Duration::from_secs(5);

/// The dry-run evidence the core reads from succeeded dry-run calls.
/// Move a call one step along its chain.
async fn advance(call: &ToolCall, ctx: &Context, ns: &str) -> Result<Action, Error> {
    let name = call.name_any();
    let mut status = call.status.clone().unwrap_or_default();
    if is_terminal(status.phase) {
        // An approval that arrives after the end is marked void, where reviewers look.
        let cached = ctx.cache.namespace(ns, &name);
        cleanup::mark_approvals(ctx, ns, call, &status, &cached.snapshot()).await;
        return cleanup::finish(call, ctx, ns, &status).await;
    }
    if let Some(who) = call.annotations().get(CANCEL_ANNOTATION) {
        // Stop whatever runs, then record it: the pod, its credential and the rest go now.
        cleanup::remove_children(&ctx.client, ns, &name, true).await?;
        ctx.record(call, &mut status, &cancelled(who)).await?;
        return Ok(Action::await_change());
    }
    // The shared caches, unless they would end the call: then the API server confirms it. The
    // snapshot kept is the one the transition decides with, so a call is decided once.
    let cached = ctx.cache.namespace(ns, &name);
    let fresh;
    let this = call_of(call, &name, ns, &status);
    // The dry runs that may confirm an L5 call and a subagent's delegation, as the API reads them.
    let inputs =
        inputs::CallInputs::read(&ctx.client, &ctx.cache, ns, call, &this, &cached.policies)
            .await
            .map_err(kube_error("reading the call's dry runs and delegation"))?;
    let mut snap = inputs.snapshot(&cached);
    if dereference::would_end(&snap, &this) {
        fresh = crate::policies::dereference(&ctx.client, ns, &name)
            .await
            .map_err(kube_error("listing the namespace's policy objects"))?;
        snap = inputs.snapshot(&fresh);
    }
    let subagent = snap
        .tool(&this)
        .and_then(|t| toolgate_core::delegation::subagent_of(&t.spec).cloned());
    match status.phase {
        None | Some(CallPhase::Pending) => {
            let current = status.clone();
            let uid = call.metadata.uid.clone().unwrap_or_default();
            let owner = build::Owner {
                kind: "ToolCall",
                name: &name,
                namespace: ns,
                uid: &uid,
            };
            let steps = propose(
                &snap,
                &call_of(call, &name, ns, &current),
                &mut status,
                |t| plan::placeable(&owner, t, &ctx.config),
            );
            ctx.record(call, &mut status, &steps).await?;
            Ok(Action::requeue(Duration::from_millis(100)))
        }
        Some(CallPhase::AwaitingApproval) => {
            // Only a call approved once and waiting for its dry run polls (each poll is a LIST);
            // before its approval, the approval's watch event wakes it.
            let dry_runs_wanted =
                cached.policies.wants_dry_runs(&this) && snap.decide(&this).approval.is_some();
            cleanup::mark_approvals(ctx, ns, call, &status, &snap).await;
            let current = status.clone();
            let steps = awaiting(&snap, &call_of(call, &name, ns, &current), &mut status);
            if steps.is_empty() {
                // Still waiting; approvals that do not bind say why in the decision's reasons.
                // One waiting for a dry run looks again: the dry run is another object.
                return Ok(if dry_runs_wanted {
                    Action::requeue(DRY_RUN_POLL)
                } else {
                    Action::await_change()
                });
            }
            ctx.record(call, &mut status, &steps).await?;
            Ok(Action::requeue(Duration::from_millis(100)))
        }
        Some(CallPhase::Authorized) => {
            let current = status.clone();
            match start(&snap, &call_of(call, &name, ns, &current), &mut status) {
                Ok(Start::Delegation(started)) => {
                    delegation::start(call, ctx, ns, started, status).await
                }
                Ok(Start::Run(run)) => apply::start(call, ctx, ns, run, status).await,
                Err(steps) => {
                    ctx.record(call, &mut status, &steps).await?;
                    Ok(Action::await_change())
                }
            }
        }
        Some(CallPhase::Running) => match &subagent {
            Some(s) => delegation::observe(call, ctx, ns, status, s).await,
            None => observe::observe(call, ctx, ns, status).await,
        },
        _ => Ok(Action::await_change()),
    }
}

fn error_policy(
    guard: Arc<DeserializeGuard<ToolCall>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let name = guard
        .0
        .as_ref()
        .map(|c| c.name_any())
        .unwrap_or_else(|i| i.metadata.name.clone().unwrap_or_default());
    // Another writer was first: not a failure, read it again soon.
    if error.category() == "Stale" {
        tracing::debug!(call = %name, "the call changed under the reconcile; again");
        return Action::requeue(std::time::Duration::from_millis(100));
    }
    crate::kit::retry(&ctx.failures, &*guard, error)
}

/// Run the controller until shutdown.
pub async fn run(
    client: Client,
    config: CallConfig,
    scope: crate::scope::Scope,
    metrics: Arc<crate::metrics::Metrics>,
    health: Arc<crate::ops::Health>,
    (cache, subscriptions): (PolicyCache, Subscriptions),
) {
    let calls = scope.api::<DeserializeGuard<ToolCall>>(&client);
    let controller = Controller::new(calls, watcher::Config::default());
    let store = controller.store();
    let by_descriptor = store.clone();
    crate::ops::ready_when_synced(health, store.clone(), cache.clone());
    let running = store.clone();
    metrics.count_running_with(move || {
        running
            .state()
            .iter()
            .filter(|c| {
                c.0.as_ref()
                    .ok()
                    .and_then(|t| t.status.as_ref())
                    .and_then(|s| s.phase)
                    == Some(toolgate_crds::CallPhase::Running)
            })
            .count()
    });
    let recorder = crate::kit::recorder(&client);
    // The calls' pods, kept in a store the reconciles read: each change is applied to the store
    // before it triggers the call's reconcile, so the reconcile sees it.
    let (pods, pod_writer) = kube::runtime::reflector::store();
    let pod_changes = watcher(
        scope.api::<Pod>(&client),
        watcher::Config::default().labels(build::CALL_LABEL),
    )
    .default_backoff()
    .reflect(pod_writer)
    .touched_objects();
    controller
        .owns_stream(pod_changes)
        // Through the shared caches' streams: a reconcile they trigger sees the change.
        .watches_shared_stream(subscriptions.approvals, |guard| {
            let a = guard.0.as_ref().ok()?;
            a.namespace().map(|ns| {
                ObjectRef::<DeserializeGuard<ToolCall>>::new(&a.spec.call_ref.name).within(&ns)
            })
        })
        .watches_shared_stream(subscriptions.descriptors, move |guard| {
            let Ok(td) = guard.0.as_ref() else {
                return Vec::new();
            };
            by_descriptor
                .state()
                .into_iter()
                .filter_map(|guard| {
                    let c = guard.0.as_ref().ok()?;
                    (c.namespace() == td.namespace()
                        && Some(c.spec.tool_ref.name.as_str()) == td.metadata.name.as_deref()
                        && !is_terminal(c.status.as_ref().and_then(|s| s.phase)))
                    .then(|| ObjectRef::from_obj(&*guard))
                })
                .collect::<Vec<_>>()
        })
        .shutdown_on_signal()
        .run(
            reconcile_guarded,
            error_policy,
            Arc::new(Context {
                client,
                recorder,
                config,
                metrics,
                failures: Default::default(),
                cache,
                pods,
            }),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}
