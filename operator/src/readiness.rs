//! Readiness of SandboxPolicies and CredentialBindings: a `Ready` condition that says whether a
//! call could use the object now (its RuntimeClass and workspace claim exist; its credential can
//! be brokered), so a platform team sees a broken policy before an agent's call fails on it.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::Api;
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use toolgate_broker::CredentialBroker;
use toolgate_crds::conditions::{READY, condition, reason, set_condition};
use toolgate_crds::{Condition, ConditionStatus, CredentialBinding, SandboxPolicy, Timestamp};

use crate::kit;

/// What the readiness controllers need.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The broker credentials come from.
    pub broker: Arc<dyn CredentialBroker>,
    /// Consecutive failures per object, for its backoff.
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

/// The Ready condition, keeping the transition time when the status did not change.
pub(crate) fn ready(
    previous: &[Condition],
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> Condition {
    let status = if ok {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let mut conditions: Vec<Condition> = previous
        .iter()
        .filter(|c| c.type_ == READY)
        .take(1)
        .cloned()
        .collect();
    let new = condition(
        READY,
        status,
        reason,
        message,
        Timestamp(jiff::Timestamp::now()),
        generation,
    );
    set_condition(&mut conditions, new.clone());
    conditions.pop().unwrap_or(new)
}

/// Why a SandboxPolicy or CredentialBinding readiness reconcile failed; retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object without a namespace (the CRDs are namespaced: a bug if seen).
    #[error("{kind} {name} has no namespace")]
    NoNamespace {
        /// SandboxPolicy or CredentialBinding.
        kind: &'static str,
        /// Its name.
        name: String,
    },
}

impl kit::Categorized for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubeApiFailed",
            Error::NoNamespace { .. } => "NoNamespace",
        }
    }
}

/// The `Ready=False` condition to write for a parent that failed (`why`, `message`), when it
/// says something new (another reason or message, or a newer generation); `None` when the
/// status already says it.
pub(crate) fn not_ready_now(
    previous: &[Condition],
    observed: Option<i64>,
    why: &str,
    message: String,
    generation: Option<i64>,
) -> Option<Condition> {
    let condition = ready(previous, false, why, message, generation);
    let same = previous.first().map(|c| (&c.reason, &c.message))
        == Some((&condition.reason, &condition.message));
    (!same || observed != generation).then_some(condition)
}

/// Apply the Ready condition (and `extra` status fields) with the controllers' field manager.
pub(crate) async fn apply_status<K>(
    api: Api<K>,
    name: &str,
    condition: Condition,
    generation: Option<i64>,
    extra: serde_json::Value,
) -> Result<(), Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut status =
        serde_json::json!({"observedGeneration": generation, "conditions": [condition]});
    if let (Some(s), serde_json::Value::Object(more)) = (status.as_object_mut(), extra) {
        s.extend(more);
    }
    kit::apply_status(&api, name, status).await?;
    Ok(())
}

#[tracing::instrument(skip(p, ctx), fields(policy = %p.name_any(), namespace = p.namespace().unwrap_or_default()))]
async fn reconcile_policy(p: Arc<SandboxPolicy>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = p.namespace().ok_or_else(|| Error::NoNamespace {
        kind: "SandboxPolicy",
        name: p.name_any(),
    })?;
    let previous = p
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let generation = p.metadata.generation;
    let (ok, reason, message) = match &p.spec.runtime_class_name {
        Some(class) => match Api::<RuntimeClass>::all(ctx.client.clone())
            .get_opt(class)
            .await?
        {
            Some(_) => (
                true,
                reason::VALID,
                format!(
                    "RuntimeClass {class} exists; egress {:?}",
                    p.spec.network.egress
                ),
            ),
            None => (
                false,
                reason::RUNTIME_CLASS_MISSING,
                format!(
                    "runtimeClassName: RuntimeClass {class} does not exist; calls using this policy cannot start"
                ),
            ),
        },
        None => (
            true,
            reason::VALID,
            format!(
                "egress {:?}, memory {} MiB, timeout {} ms",
                p.spec.network.egress, p.spec.process.max_memory_mb, p.spec.process.timeout_ms
            ),
        ),
    };
    // The workspace claim must exist, or every call under this policy fails before its pod.
    let (ok, reason, message) = match &p.spec.filesystem.workspace_claim_name {
        Some(claim)
            if ok
                && Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns)
                    .get_opt(claim)
                    .await?
                    .is_none() =>
        {
            (
                false,
                reason::WORKSPACE_CLAIM_MISSING,
                format!(
                    "filesystem.workspaceClaimName: PersistentVolumeClaim {claim} does not exist in {ns}; calls using this policy cannot start"
                ),
            )
        }
        _ => (ok, reason, message),
    };
    let condition = ready(&previous, ok, reason, message, generation);
    if previous.first().map(|c| (&c.reason, &c.message, c.status))
        != Some((&condition.reason, &condition.message, condition.status))
    {
        apply_status(
            Api::<SandboxPolicy>::namespaced(ctx.client.clone(), &ns),
            &p.name_any(),
            condition,
            generation,
            serde_json::Value::Null,
        )
        .await?;
    }
    // RuntimeClasses and claims are not watched; look again now and then (soon while missing).
    Ok(Action::requeue(Duration::from_secs(if ok {
        300
    } else {
        30
    })))
}

#[tracing::instrument(skip(b, ctx), fields(binding = %b.name_any(), namespace = b.namespace().unwrap_or_default()))]
async fn reconcile_binding(b: Arc<CredentialBinding>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = b.namespace().ok_or_else(|| Error::NoNamespace {
        kind: "CredentialBinding",
        name: b.name_any(),
    })?;
    let previous = b
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let generation = b.metadata.generation;
    // Asked without issuing anything (Vault: `sys/capabilities-self` for the binding's path).
    let name = b.name_any();
    let (ok, reason, message) = match ctx.broker.check(&ns, &name, &b.spec).await {
        Ok(how) => (true, reason::BROKERABLE, how),
        Err(e) => (false, e.reason(), e.to_string()),
    };
    let condition = ready(&previous, ok, reason, message, generation);
    if previous.first().map(|c| (&c.reason, &c.message, c.status))
        != Some((&condition.reason, &condition.message, condition.status))
    {
        apply_status(
            Api::<CredentialBinding>::namespaced(ctx.client.clone(), &ns),
            &b.name_any(),
            condition,
            generation,
            serde_json::Value::Null,
        )
        .await?;
    }
    // A broken binding is looked at again soon: Vault may come back, a policy may be fixed.
    Ok(Action::requeue(Duration::from_secs(if ok {
        300
    } else {
        15
    })))
}

async fn policy_guarded(
    guard: Arc<DeserializeGuard<SandboxPolicy>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    kit::reconcile_guarded(guard, ctx, reconcile_policy).await
}

async fn binding_guarded(
    guard: Arc<DeserializeGuard<CredentialBinding>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    kit::reconcile_guarded(guard, ctx, reconcile_binding).await
}

fn error_policy<K: kube::Resource<DynamicType = ()>>(
    object: Arc<K>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    kit::retry(&ctx.failures, &*object, error)
}

/// Run both readiness controllers until shutdown.
pub async fn run(
    client: Client,
    broker: Arc<dyn CredentialBroker>,
    scope: crate::scope::Scope,
    metrics: Arc<crate::metrics::Metrics>,
) {
    let ctx = Arc::new(Context {
        client: client.clone(),
        broker,
        failures: Default::default(),
        metrics,
        recorder: kit::recorder(&client),
    });
    let policies = Controller::new(
        scope.api::<DeserializeGuard<SandboxPolicy>>(&client),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(policy_guarded, error_policy, ctx.clone())
    .for_each(|_| futures::future::ready(()));
    let bindings = Controller::new(
        scope.api::<DeserializeGuard<CredentialBinding>>(&client),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(binding_guarded, error_policy, ctx)
    .for_each(|_| futures::future::ready(()));
    tokio::join!(policies, bindings);
}

/// Publish an Event about `obj` (`action`: what the controller was doing), its note cut to
/// 1000 characters; a failure to publish is logged, never fatal.
pub(crate) async fn publish_event<K>(
    recorder: &kube::runtime::events::Recorder,
    obj: &K,
    action: &str,
    type_: kube::runtime::events::EventType,
    reason: &str,
    note: String,
) where
    K: kube::Resource<DynamicType = ()>,
{
    let event = kube::runtime::events::Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::warn!(object = ?obj.meta().name, error = %e, "publishing an event");
    }
}
