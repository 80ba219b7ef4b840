//! What the operator watches: the whole cluster, or one namespace (a namespace-scoped install,
//! and how test suites run several operators side by side without stepping on each other).

use kube::{Api, Client, Resource};

/// The namespace to watch, or all.
#[derive(Debug, Clone, Default)]
pub struct Scope(pub Option<String>);

impl Scope {
    /// An API for a namespaced kind within the scope.
    pub fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        match &self.0 {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
}
