//! What every controller of the operator does the same way, written once: the field manager its
//! writes carry, `DeserializeGuard` on every watch (one object that does not deserialize — an old
//! field, a hand-edited status — is logged and left until it changes, and never stalls the watch
//! the controller's other objects arrive on) and on every list ([`list_readable`]), per-object exponential backoff after a failure, a
//! category on every failure (its log field, metric label and Event reason), and status applied
//! only when it says something new.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Resource;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::Action;

/// Who owns the fields the operator writes (`kubectl get -o yaml --show-managed-fields` says so).
pub const FIELD_MANAGER: &str = "toolgate-operator";

/// Pause before retrying after `failures` consecutive failures: 2 s doubling to 5 min.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(2u64.saturating_mul(1u64 << failures.min(8)).min(300))
}

/// A controller's failure: what it says, and a bounded name for its kind (a log field, the
/// `toolgate_reconcile_errors_total` label, an Event reason).
pub trait Categorized: std::fmt::Display {
    /// The category, CamelCase (`KubeApiFailed`).
    fn category(&self) -> &'static str;
}

/// Consecutive failures per object (kind, namespace, name), for its own backoff: one object that
/// keeps failing waits longer and longer, the others are retried at once.
#[derive(Debug, Default)]
pub struct Failures(Mutex<HashMap<(String, String, String), u32>>);

impl Failures {
    fn key<K: Resource<DynamicType = ()>>(object: &K) -> (String, String, String) {
        let meta = object.meta();
        (
            K::kind(&()).into_owned(),
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    }

    /// One more failure of `object`: how many in a row, and how long to wait.
    pub fn failed<K: Resource<DynamicType = ()>>(&self, object: &K) -> (u32, Duration) {
        let n = match self.0.lock() {
            Ok(mut f) => {
                let n = f.entry(Self::key(object)).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        (n, backoff(n - 1))
    }

    /// `object` reconciled: its next failure waits the shortest time again.
    pub fn succeeded<K: Resource<DynamicType = ()>>(&self, object: &K) {
        if let Ok(mut f) = self.0.lock() {
            f.remove(&Self::key(object));
        }
    }
}

/// The error policy of every controller: the failure logged with its category, the object
/// retried after its own backoff.
pub fn retry<K: Resource<DynamicType = ()>>(
    failures: &Failures,
    object: &K,
    error: &impl Categorized,
) -> Action {
    let (n, delay) = failures.failed(object);
    tracing::warn!(
        kind = %K::kind(&()),
        name = object.meta().name.as_deref().unwrap_or_default(),
        namespace = object.meta().namespace.as_deref().unwrap_or_default(),
        %error,
        category = error.category(),
        failures = n,
        retry_in = ?delay,
        "reconcile failed"
    );
    Action::requeue(delay)
}

/// Every object of a namespace `params` selects that deserializes: one that does not is logged
/// and left out, where a plain list would fail whole and take every other object with it.
pub async fn list_readable<K>(
    client: &kube::Client,
    ns: &str,
    params: &ListParams,
) -> Result<Vec<K>, kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Ok(Api::<DeserializeGuard<K>>::namespaced(client.clone(), ns)
        .list(params)
        .await?
        .items
        .iter()
        .filter_map(|g| valid(g).map(Arc::unwrap_or_clone))
        .collect())
}

/// The object a guard holds, or `None` (logged) for one that did not deserialize.
pub fn valid<K: Resource<DynamicType = ()> + Clone>(guard: &DeserializeGuard<K>) -> Option<Arc<K>> {
    match &guard.0 {
        Ok(object) => Some(Arc::new(object.clone())),
        Err(invalid) => {
            tracing::warn!(
                kind = %K::kind(&()),
                name = invalid.metadata.name.as_deref().unwrap_or_default(),
                namespace = invalid.metadata.namespace.as_deref().unwrap_or_default(),
                error = %invalid.error,
                "an object does not deserialize; waiting for it to change"
            );
            None
        }
    }
}

/// What the kit needs of a controller's context: the object's failures in a row (its
/// backoff) and the metrics every reconcile is counted in.
pub trait Reconciles {
    /// Consecutive failures per object.
    fn failures(&self) -> &Failures;
    /// Where reconcile durations and errors are counted.
    fn metrics(&self) -> &crate::metrics::Metrics;
    /// Publishes the Warning Event a failed reconcile leaves on its object.
    fn recorder(&self) -> &kube::runtime::events::Recorder;
}

/// The operator's Event recorder (the reporting instance is the pod, when it runs in one).
pub fn recorder(client: &kube::Client) -> kube::runtime::events::Recorder {
    kube::runtime::events::Recorder::new(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    )
}

/// The Warning Event of a failed reconcile: its category as the reason (the same word as the
/// log field and the metric label), what failed as the note — through the redactor's token
/// shapes, since an error may quote what a server or a broker answered.
pub fn failure_event(error: &impl Categorized) -> kube::runtime::events::Event {
    let note = toolgate_core::redact::Redactor::default().redact_str(&error.to_string());
    kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Warning,
        reason: error.category().into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    }
}

/// Reconcile what a guard holds with `reconcile`: an object that does not deserialize waits for
/// a change (counted as `InvalidObject`); every reconcile is timed in
/// `toolgate_reconcile_duration_seconds` and every failure counted by category in
/// `toolgate_reconcile_errors_total`, the controller named by its kind (`tooldescriptor`), and
/// told on the object as a Warning Event whose reason is the category; a success clears the
/// object's failures.
pub async fn reconcile_guarded<K, C, E, F, Fut>(
    guard: Arc<DeserializeGuard<K>>,
    ctx: Arc<C>,
    reconcile: F,
) -> Result<Action, E>
where
    K: Resource<DynamicType = ()> + Clone,
    C: Reconciles,
    E: Categorized,
    F: FnOnce(Arc<K>, Arc<C>) -> Fut,
    Fut: std::future::Future<Output = Result<Action, E>>,
{
    let controller = K::kind(&()).to_lowercase();
    let Some(object) = valid(&guard) else {
        ctx.metrics().error(&controller, "InvalidObject");
        return Ok(Action::await_change());
    };
    let reference = object.object_ref(&());
    let began = std::time::Instant::now();
    let result = reconcile(object, ctx.clone()).await;
    ctx.metrics()
        .observe(&controller, result.is_ok(), began.elapsed());
    match &result {
        Ok(_) => ctx.failures().succeeded(&*guard),
        Err(e) => {
            ctx.metrics().error(&controller, e.category());
            // Another writer was first: read again, not a failure anyone needs to see.
            if e.category() != "Stale"
                && let Err(p) = ctx.recorder().publish(&failure_event(e), &reference).await
            {
                tracing::warn!(error = %p, "publishing a reconcile failure");
            }
        }
    }
    result
}

/// Apply `status` (server-side, as [`FIELD_MANAGER`]: the fields of it the operator owns).
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// [`apply_status`] of the whole of `status` when it differs from `current`; whether it wrote.
pub async fn apply_status_if_changed<K, S>(
    api: &Api<K>,
    name: &str,
    current: Option<&S>,
    status: &S,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize + PartialEq,
{
    if current == Some(status) {
        return Ok(false);
    }
    apply_status(
        api,
        name,
        serde_json::to_value(status).map_err(kube::Error::SerdeError)?,
    )
    .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("applying the call's pod: the API server said no")]
    struct Refused;

    impl super::Categorized for Refused {
        fn category(&self) -> &'static str {
            "KubeApiFailed"
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error(
        "reading the binding: Vault said: bad token ghp_0123456789abcdefghijABCDEFGHIJ0123456789"
    )]
    struct Quoting;

    impl super::Categorized for Quoting {
        fn category(&self) -> &'static str {
            "BrokerUnavailable"
        }
    }

    #[test]
    fn a_failure_event_carries_no_token_an_error_quotes() {
        let note = super::failure_event(&Quoting).note.unwrap_or_default();
        assert!(!note.contains("ghp_0123"), "{note}");
        assert!(
            note.starts_with("reading the binding: Vault said: bad token "),
            "{note}"
        );
    }

    #[test]
    fn a_failure_is_told_with_its_category_as_the_reason() {
        let e = super::failure_event(&Refused);
        assert_eq!(e.reason, "KubeApiFailed");
        assert_eq!(e.type_, kube::runtime::events::EventType::Warning);
        assert_eq!(
            e.note.as_deref(),
            Some("applying the call's pod: the API server said no")
        );
    }

    use super::*;
    use toolgate_crds::ToolGrant;

    #[test]
    fn backoff_doubles_up_to_five_minutes() {
        assert_eq!(backoff(0), Duration::from_secs(2));
        assert_eq!(backoff(1), Duration::from_secs(4));
        assert_eq!(backoff(5), Duration::from_secs(64));
        assert_eq!(backoff(8), Duration::from_secs(300));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
    }

    fn grant(ns: &str, name: &str) -> ToolGrant {
        let mut g: ToolGrant = serde_json::from_value(serde_json::json!({
            "apiVersion": "toolgate.dev/v1alpha1",
            "kind": "ToolGrant",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"subjects": [], "tools": {"names": []}, "scopes": [], "reason": "r"}
        }))
        .expect("a grant");
        g.metadata.name = Some(name.into());
        g
    }

    #[test]
    fn each_object_backs_off_on_its_own_and_starts_over_once_it_succeeds() {
        let failures = Failures::default();
        let (a, b) = (grant("team-a", "a"), grant("team-a", "b"));
        assert_eq!(failures.failed(&a), (1, Duration::from_secs(2)));
        assert_eq!(failures.failed(&a), (2, Duration::from_secs(4)));
        assert_eq!(failures.failed(&a), (3, Duration::from_secs(8)));
        // Another object's first failure waits the shortest time.
        assert_eq!(failures.failed(&b), (1, Duration::from_secs(2)));
        // The same name in another namespace is another object.
        assert_eq!(failures.failed(&grant("team-b", "a")).0, 1);
        failures.succeeded(&a);
        assert_eq!(failures.failed(&a), (1, Duration::from_secs(2)));
    }
}
