//! The ToolDescriptor controller: registration (lint → lifecycle, digest, findings) written to
//! status with server-side apply. Dereference (the namespace's sandbox policies and credential
//! bindings) → register (pure, in the core) → apply status.

use std::sync::Arc;

use crate::kit::{self, FIELD_MANAGER};
use futures::StreamExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use toolgate_core::manifest::{Meta, Object, ObjectSet, Origin, Spec};
use toolgate_core::registry::register;
use toolgate_crds::{
    ConditionStatus, CredentialBinding, Lifecycle, SandboxPolicy, Timestamp, ToolDescriptor,
    ToolDescriptorStatus,
};

/// What a reconcile needs.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Consecutive failures per descriptor, for its backoff.
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

/// Apply descriptors a parent object generated (an McpServer's discovered tools, a Skill's
/// scripts) with server-side apply, each owned by the parent and labelled `label`, and delete
/// the ones carrying that label that are no longer among them.
pub async fn apply_owned(
    client: &Client,
    ns: &str,
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    label: (&str, &str),
    manifests: &[toolgate_core::manifest::RawManifest],
) -> Result<(), kube::Error> {
    let descriptors = Api::<ToolDescriptor>::namespaced(client.clone(), ns);
    let owners = owner.map(|o| vec![o]);
    let mut names = Vec::new();
    for m in manifests {
        let mut doc = m.value.clone();
        let Some(name) = doc["metadata"]["name"].as_str().map(str::to_string) else {
            continue;
        };
        doc["metadata"]["labels"] = serde_json::json!({ label.0: label.1 });
        doc["metadata"]["ownerReferences"] = serde_json::to_value(&owners).unwrap_or_default();
        descriptors
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&doc),
            )
            .await?;
        names.push(name);
    }
    // Names only: one descriptor that does not deserialize is still removed when it is stale.
    for d in descriptors
        .list_metadata(&ListParams::default().labels(&format!("{}={}", label.0, label.1)))
        .await?
    {
        if !names.contains(&d.name_any()) {
            descriptors
                .delete(&d.name_any(), &kube::api::DeleteParams::default())
                .await?;
        }
    }
    Ok(())
}

/// Why a ToolDescriptor reconcile failed; retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A ToolDescriptor without a namespace (the CRD is namespaced: a bug if seen).
    #[error("ToolDescriptor {0} has no namespace")]
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

/// The metadata the core reads from a Kubernetes object.
pub(crate) fn meta_of<K: Resource>(k: &K) -> Meta {
    let m = k.meta();
    Meta {
        name: m.name.clone().unwrap_or_default(),
        namespace: m.namespace.clone(),
        labels: m.labels.clone().unwrap_or_default().into_iter().collect(),
        annotations: m
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
    }
}

/// A Kubernetes object as one of the core's manifest objects.
pub(crate) fn object(meta: Meta, spec: Spec) -> Object {
    Object {
        origin: Origin {
            source: "cluster".into(),
            document: 0,
        },
        meta,
        spec,
    }
}

/// The condition reason for a lifecycle (`PermissionLintFailed`).
fn reason(l: Lifecycle) -> String {
    let s = serde_json::to_value(l)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

/// The status a descriptor should have; times are kept from `previous` when nothing changed, so
/// reconciles do not churn.
pub fn desired_status(
    td: &ToolDescriptor,
    sandboxes: &[SandboxPolicy],
    bindings: &[CredentialBinding],
    now: jiff::Timestamp,
) -> ToolDescriptorStatus {
    let me = object(meta_of(td), Spec::ToolDescriptor(Box::new(td.spec.clone())));
    let mut objects = vec![me.clone()];
    objects.extend(
        sandboxes
            .iter()
            .map(|s| object(meta_of(s), Spec::SandboxPolicy(Box::new(s.spec.clone())))),
    );
    objects.extend(bindings.iter().map(|b| {
        object(
            meta_of(b),
            Spec::CredentialBinding(Box::new(b.spec.clone())),
        )
    }));
    let set = ObjectSet::new(objects);
    let registered = register(&me, &td.spec, &set);
    let previous = td.status.clone().unwrap_or_default();
    let ready =
        registered.lifecycle == Lifecycle::Enabled || registered.lifecycle == Lifecycle::Deprecated;
    let message = registered
        .findings
        .first()
        .map(|f| format!("{}: {} ({})", f.path, f.message, f.code))
        .unwrap_or_else(|| format!("registered at {}", registered.digest));
    let status = if ready {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let reason = reason(registered.lifecycle);
    let generation = td.metadata.generation;
    let mut conditions = previous.conditions.clone();
    toolgate_crds::conditions::set_condition(
        &mut conditions,
        toolgate_crds::conditions::condition(
            toolgate_crds::conditions::READY,
            status,
            &reason,
            message,
            Timestamp(now),
            generation,
        ),
    );
    conditions.retain(|c| c.type_ == toolgate_crds::conditions::READY);
    ToolDescriptorStatus {
        lifecycle: Some(registered.lifecycle),
        registered_at: match (&previous.digest, previous.registered_at) {
            (Some(d), Some(at)) if *d == registered.digest => Some(at),
            _ => Some(Timestamp(now)),
        },
        digest: Some(registered.digest),
        findings: registered.findings,
        observed_generation: generation,
        conditions,
    }
}

#[tracing::instrument(skip(td, ctx), fields(descriptor = %td.name_any(), namespace = td.namespace().unwrap_or_default()))]
async fn reconcile(td: Arc<ToolDescriptor>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = td
        .namespace()
        .ok_or_else(|| Error::NoNamespace(td.name_any()))?;
    let sandboxes: Vec<SandboxPolicy> =
        crate::kit::list_readable(&ctx.client, &ns, &ListParams::default()).await?;
    let bindings: Vec<CredentialBinding> =
        crate::kit::list_readable(&ctx.client, &ns, &ListParams::default()).await?;
    let status = desired_status(&td, &sandboxes, &bindings, jiff::Timestamp::now());
    let api = Api::<ToolDescriptor>::namespaced(ctx.client.clone(), &ns);
    if kit::apply_status_if_changed(&api, &td.name_any(), td.status.as_ref(), &status).await? {
        tracing::info!(descriptor = %td.name_any(), namespace = %ns, lifecycle = ?status.lifecycle, "registered");
    }
    Ok(Action::await_change())
}

async fn reconcile_guarded(
    guard: Arc<DeserializeGuard<ToolDescriptor>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    kit::reconcile_guarded(guard, ctx, reconcile).await
}

fn error_policy(
    guard: Arc<DeserializeGuard<ToolDescriptor>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    kit::retry(&ctx.failures, &*guard, error)
}

/// Run the controller until the stream ends (shutdown).
pub async fn run(
    client: Client,
    scope: crate::scope::Scope,
    metrics: Arc<crate::metrics::Metrics>,
) {
    let descriptors = scope.api::<DeserializeGuard<ToolDescriptor>>(&client);
    let controller = Controller::new(descriptors, watcher::Config::default());
    let store = controller.store();
    let by_sandbox = store.clone();
    controller
        .watches(
            scope.api::<SandboxPolicy>(&client),
            watcher::Config::default(),
            move |sp| {
                referencing(&by_sandbox, sp.namespace(), |td| {
                    td.spec
                        .sandbox_policy_ref
                        .as_ref()
                        .is_some_and(|r| Some(r.name.as_str()) == sp.metadata.name.as_deref())
                })
            },
        )
        .watches(
            scope.api::<CredentialBinding>(&client),
            watcher::Config::default(),
            move |cb| {
                referencing(&store, cb.namespace(), |td| {
                    td.spec
                        .credential_binding_ref
                        .as_ref()
                        .is_some_and(|r| Some(r.name.as_str()) == cb.metadata.name.as_deref())
                })
            },
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

fn referencing(
    store: &kube::runtime::reflector::Store<DeserializeGuard<ToolDescriptor>>,
    namespace: Option<String>,
    refers: impl Fn(&ToolDescriptor) -> bool,
) -> Vec<ObjectRef<DeserializeGuard<ToolDescriptor>>> {
    store
        .state()
        .into_iter()
        .filter(|g| {
            g.0.as_ref()
                .is_ok_and(|td| td.namespace() == namespace && refers(td))
        })
        .map(|g| ObjectRef::from_obj(&*g))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_camel_case() {
        assert_eq!(
            reason(Lifecycle::PermissionLintFailed),
            "PermissionLintFailed"
        );
        assert_eq!(reason(Lifecycle::Enabled), "Enabled");
    }
}
