//! Every controller watches through `DeserializeGuard`: one object that does not deserialize
//! (an old field, a hand-edited status) is logged and left until it changes, and never stalls the
//! watch the controller's other objects arrive on.

use std::sync::Arc;

use kube::core::error_boundary::DeserializeGuard;

/// The object a guard holds, or `None` (logged) for one that did not deserialize.
pub(crate) fn valid<K: Clone>(guard: &DeserializeGuard<K>, kind: &str) -> Option<Arc<K>> {
    match &guard.0 {
        Ok(object) => Some(Arc::new(object.clone())),
        Err(invalid) => {
            tracing::warn!(
                kind,
                name = invalid.metadata.name.as_deref().unwrap_or_default(),
                namespace = invalid.metadata.namespace.as_deref().unwrap_or_default(),
                error = %invalid.error,
                "an object does not deserialize; waiting for it to change"
            );
            None
        }
    }
}

/// A guard's name, valid or not (for logs).
pub(crate) fn name_of<K: kube::Resource>(guard: &DeserializeGuard<K>) -> String {
    kube::Resource::meta(guard).name.clone().unwrap_or_default()
}
