//! The policy objects every decision reads — descriptors, grants, sandbox policies, credential
//! bindings, approvals — kept in reflector caches shared by the ToolCall controller and the agent
//! API, so a reconcile or a tool view costs no API request.
//!
//! Freshness: approvals and descriptors reach the controller through the same reflected streams
//! that fill the caches (`watches_shared_stream`), so a reconcile they trigger already sees them.
//! Another object may be newer than the cache; a cached view that would end a call (a deny, or a
//! missing tool, policy or binding) is therefore confirmed against the API server first
//! (by the ToolCall controller), which is the only case that still lists.
//!
//! Poison: every cache watches through `DeserializeGuard`, so one object an older operator or a
//! hand edit left unreadable does not fail the list every other object arrives in. It is logged
//! and held as unreadable; a decision treats it as absent (a grant that cannot be read grants
//! nothing, an approval that cannot be read approves nothing) until it changes.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::Client;
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::reflector::{self, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, watcher};
use toolgate_crds::{
    CredentialBinding, SandboxPolicy, Skill, ToolApproval, ToolDescriptor, ToolGrant, ToolPolicy,
};

use crate::policies::Namespace;
use crate::scope::Scope;

/// Events a subscriber may lag behind before the cache waits for it.
const SUBSCRIBER_BUFFER: usize = 1024;

/// A shared reflector store gave no subscription: the kube-runtime in use changed how shared
/// stores work.
#[derive(Debug, thiserror::Error)]
#[error("kube-runtime gave no subscription to a shared reflector store")]
pub struct NoSubscription;

/// Readers of the shared caches.
#[derive(Clone)]
pub struct PolicyCache {
    descriptors: Store<DeserializeGuard<ToolDescriptor>>,
    grants: Store<DeserializeGuard<ToolGrant>>,
    tool_policies: Store<DeserializeGuard<ToolPolicy>>,
    policies: Store<DeserializeGuard<SandboxPolicy>>,
    bindings: Store<DeserializeGuard<CredentialBinding>>,
    approvals: Store<DeserializeGuard<ToolApproval>>,
    /// Skills, for views (their status says what a view needs; GetSkill reads the files).
    skills: Store<DeserializeGuard<Skill>>,
}

/// Changes to descriptors and approvals, delivered after the cache applied them (an unreadable
/// one included: the subscriber skips it).
pub struct Subscriptions {
    /// Every applied ToolDescriptor.
    pub descriptors: ReflectHandle<DeserializeGuard<ToolDescriptor>>,
    /// Every applied ToolApproval.
    pub approvals: ReflectHandle<DeserializeGuard<ToolApproval>>,
}

/// Keep a cache filled from a watch until the process ends (watch errors are retried with
/// backoff and logged, and so is each object that does not deserialize).
fn fill<K>(
    stream: impl Stream<Item = Result<watcher::Event<DeserializeGuard<K>>, watcher::Error>>
    + Send
    + 'static,
    writer: reflector::store::Writer<DeserializeGuard<K>>,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let kind = K::kind(&()).into_owned();
    tokio::spawn(
        reflector::reflector(writer, stream.default_backoff()).for_each(move |event| {
            match event {
                Err(e) => tracing::warn!(%kind, error = %e, "watching for the policy cache"),
                Ok(watcher::Event::Apply(guard) | watcher::Event::InitApply(guard)) => {
                    if let Err(invalid) = &guard.0 {
                        tracing::warn!(
                            %kind,
                            name = invalid.metadata.name.as_deref().unwrap_or_default(),
                            namespace = invalid.metadata.namespace.as_deref().unwrap_or_default(),
                            error = %invalid.error,
                            "an object does not deserialize; decisions treat it as absent until it changes"
                        );
                    }
                }
                Ok(_) => {}
            }
            futures::future::ready(())
        }),
    );
}

/// The readable objects of a guarded store in `ns`.
fn readable<K>(store: &Store<DeserializeGuard<K>>, ns: &str) -> Vec<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .filter_map(|g| g.0.as_ref().ok())
        .filter(|o| o.meta().namespace.as_deref() == Some(ns))
        .cloned()
        .collect()
}

impl PolicyCache {
    /// Start the watches (within `scope`) that fill the caches.
    pub fn start(client: &Client, scope: &Scope) -> Result<(Self, Subscriptions), NoSubscription> {
        let cfg = watcher::Config::default;
        let (descriptors, d_writer) = reflector::store_shared(SUBSCRIBER_BUFFER);
        let (approvals, a_writer) = reflector::store_shared(SUBSCRIBER_BUFFER);
        let subscriptions = Subscriptions {
            descriptors: d_writer.subscribe().ok_or(NoSubscription)?,
            approvals: a_writer.subscribe().ok_or(NoSubscription)?,
        };
        fill(
            watcher(scope.api::<DeserializeGuard<ToolDescriptor>>(client), cfg()),
            d_writer,
        );
        fill(
            watcher(scope.api::<DeserializeGuard<ToolApproval>>(client), cfg()),
            a_writer,
        );
        let (grants, g_writer) = reflector::store();
        fill(
            watcher(scope.api::<DeserializeGuard<ToolGrant>>(client), cfg()),
            g_writer,
        );
        let (tool_policies, t_writer) = reflector::store();
        fill(
            watcher(scope.api::<DeserializeGuard<ToolPolicy>>(client), cfg()),
            t_writer,
        );
        let (policies, p_writer) = reflector::store();
        fill(
            watcher(scope.api::<DeserializeGuard<SandboxPolicy>>(client), cfg()),
            p_writer,
        );
        let (bindings, b_writer) = reflector::store();
        fill(
            watcher(
                scope.api::<DeserializeGuard<CredentialBinding>>(client),
                cfg(),
            ),
            b_writer,
        );
        let (skills, s_writer) = reflector::store();
        fill(
            watcher(scope.api::<DeserializeGuard<Skill>>(client), cfg()),
            s_writer,
        );
        Ok((
            Self {
                descriptors,
                grants,
                tool_policies,
                policies,
                bindings,
                approvals,
                skills,
            },
            subscriptions,
        ))
    }

    /// Wait until every cache has listed once.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.descriptors.wait_until_ready().await?;
        self.grants.wait_until_ready().await?;
        self.tool_policies.wait_until_ready().await?;
        self.policies.wait_until_ready().await?;
        self.bindings.wait_until_ready().await?;
        self.skills.wait_until_ready().await?;
        self.approvals.wait_until_ready().await
    }

    /// The namespace's objects as the core sees them, with the approvals of `call` (and session
    /// approvals).
    pub(crate) fn namespace(&self, ns: &str, call: &str) -> Namespace {
        let mut namespace = Namespace::assemble(
            readable(&self.descriptors, ns),
            readable(&self.grants, ns),
            readable(&self.tool_policies, ns),
            readable(&self.policies, ns),
            readable(&self.bindings, ns),
            readable(&self.approvals, ns),
            call,
        );
        namespace.policies.skills = readable(&self.skills, ns)
            .iter()
            .filter_map(|s| {
                toolgate_core::skill::SkillEntry::from_status(
                    ns,
                    s.metadata.name.as_deref()?,
                    s.status.as_ref()?,
                )
            })
            .collect();
        namespace
    }

    /// A grant as the cache holds it (its status is the budget ledger a charge starts from).
    pub(crate) fn grant(&self, ns: &str, name: &str) -> Option<Arc<ToolGrant>> {
        let guard = self
            .grants
            .get(&reflector::ObjectRef::new(name).within(ns))?;
        guard.0.as_ref().ok().cloned().map(Arc::new)
    }

    /// A cache from objects already at hand (reconciler tests).
    #[cfg(test)]
    pub(crate) fn of(
        descriptors: Vec<ToolDescriptor>,
        grants: Vec<ToolGrant>,
        policies: Vec<SandboxPolicy>,
        bindings: Vec<CredentialBinding>,
        approvals: Vec<ToolApproval>,
    ) -> Self {
        fn filled<K>(objects: Vec<K>) -> Store<DeserializeGuard<K>>
        where
            K: kube::Resource<DynamicType = ()> + Clone + 'static,
        {
            let (reader, mut writer) = reflector::store();
            writer.apply_watcher_event(&watcher::Event::Init);
            for o in objects {
                writer.apply_watcher_event(&watcher::Event::InitApply(DeserializeGuard(Ok(o))));
            }
            writer.apply_watcher_event(&watcher::Event::InitDone);
            reader
        }
        Self {
            descriptors: filled(descriptors),
            grants: filled(grants),
            tool_policies: filled(Vec::new()),
            policies: filled(policies),
            bindings: filled(bindings),
            approvals: filled(approvals),
            skills: filled(Vec::new()),
        }
    }
}
