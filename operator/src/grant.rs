//! The ToolGrant controller: state (Pending, Active, Expired, Revoked, Exhausted) in status,
//! requeued exactly when the grant starts or expires.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use toolgate_core::decision::grant_state;
use toolgate_crds::conditions::{ACTIVE, condition, reason, set_condition};
use toolgate_crds::{ConditionStatus, GrantState, Timestamp, ToolGrant, ToolGrantStatus};

use crate::kit::{self, FIELD_MANAGER};

/// What a reconcile needs.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Consecutive failures per grant, for its backoff.
    pub failures: kit::Failures,
    /// Where reconciles are counted.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Publishes the Events of failed reconciles.
    pub recorder: kube::runtime::events::Recorder,
}

impl kit::Reconciles for Context {
    fn failures(&self) -> &kit::Failures {
        &self.failures
    }
    fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }
    fn recorder(&self) -> &kube::runtime::events::Recorder {
        &self.recorder
    }
}

/// The status a grant should have at `now`, and when to look again.
pub fn desired_status(
    g: &ToolGrant,
    now: jiff::Timestamp,
) -> (ToolGrantStatus, Option<jiff::Timestamp>) {
    let previous = g.status.clone().unwrap_or_default();
    let usage = toolgate_core::budget::usage(&previous, now);
    let (state, next) = grant_state(&g.spec, &usage, now);
    let active = state == GrantState::Active;
    let status = if active {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let (reason, message) = match state {
        GrantState::Active => (
            reason::ACTIVE,
            g.spec
                .expires_at
                .map_or("active, no expiry".to_string(), |e| {
                    format!("active until {e}")
                }),
        ),
        GrantState::Pending => (
            reason::NOT_YET_VALID,
            g.spec
                .not_before
                .map_or(String::new(), |n| format!("valid from {n}")),
        ),
        GrantState::Expired => (
            reason::EXPIRED,
            g.spec
                .expires_at
                .map_or(String::new(), |e| format!("expired at {e}")),
        ),
        GrantState::Revoked => (
            reason::REVOKED,
            g.spec.reason.clone().unwrap_or_else(|| "revoked".into()),
        ),
        GrantState::Exhausted => (
            reason::BUDGET_EXHAUSTED,
            g.spec
                .budget
                .as_ref()
                .and_then(|b| toolgate_core::budget::exhausted(&g.name_any(), b, &usage))
                .map_or_else(
                    || format!("{} calls used", previous.calls_used),
                    |e| e.to_string(),
                ),
        ),
    };
    let generation = g.metadata.generation;
    let mut conditions = previous.conditions.clone();
    set_condition(
        &mut conditions,
        condition(ACTIVE, status, reason, message, Timestamp(now), generation),
    );
    conditions.retain(|c| c.type_ == ACTIVE);
    // The budget ledger is the call controller's (it charges and refunds under optimistic
    // concurrency); this controller keeps it as it is and never writes it.
    let s = ToolGrantStatus {
        state: Some(state),
        observed_generation: generation,
        conditions,
        ..previous
    };
    (s, next)
}

/// Why a ToolGrant reconcile failed; retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A ToolGrant without a namespace (the CRD is namespaced: a bug if seen).
    #[error("ToolGrant {0} has no namespace")]
    NoNamespace(String),
}

impl kit::Categorized for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubeApiFailed",
            Error::NoNamespace(_) => "NoNamespace",
        }
    }
}

#[tracing::instrument(skip(g, ctx), fields(grant = %g.name_any(), namespace = g.namespace().unwrap_or_default()))]
async fn reconcile(g: Arc<ToolGrant>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = g
        .namespace()
        .ok_or_else(|| Error::NoNamespace(g.name_any()))?;
    let now = jiff::Timestamp::now();
    let (status, next) = desired_status(&g, now);
    if g.status.as_ref() != Some(&status) {
        let patch = serde_json::json!({"apiVersion": toolgate_crds::API_VERSION, "kind": "ToolGrant", "status": {
            "state": status.state,
            "observedGeneration": status.observed_generation,
            "conditions": status.conditions,
        }});
        Api::<ToolGrant>::namespaced(ctx.client.clone(), &ns)
            .patch_status(
                &g.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        tracing::info!(grant = %g.name_any(), namespace = %ns, state = ?status.state, "grant state");
    }
    Ok(match next {
        // Wake up exactly at the transition (a little after, so `now` is past it).
        Some(at) => {
            let wait = at.duration_since(now).as_secs_f64().max(0.0) + 0.2;
            Action::requeue(Duration::from_secs_f64(wait))
        }
        None => Action::await_change(),
    })
}

async fn reconcile_guarded(
    guard: Arc<DeserializeGuard<ToolGrant>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    kit::reconcile_guarded(guard, ctx, reconcile).await
}

fn error_policy(g: Arc<DeserializeGuard<ToolGrant>>, error: &Error, ctx: Arc<Context>) -> Action {
    kit::retry(&ctx.failures, &*g, error)
}

/// Run the controller until shutdown.
pub async fn run(
    client: Client,
    scope: crate::scope::Scope,
    metrics: Arc<crate::metrics::Metrics>,
) {
    Controller::new(
        scope.api::<DeserializeGuard<ToolGrant>>(&client),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(
        reconcile_guarded,
        error_policy,
        Arc::new(Context {
            recorder: kit::recorder(&client),
            client,
            failures: Default::default(),
            metrics,
        }),
    )
    .for_each(|_| futures::future::ready(()))
    .await;
}
