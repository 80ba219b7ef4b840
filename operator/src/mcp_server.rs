//! The McpServer controller: discover the server's tools, register them as ToolDescriptors
//! (`<server>.<tool>`, owned by the McpServer, applied with server-side apply) in lifecycle
//! `discovered` until the digest a reviewer enabled in `spec.enabled` matches, and say what it
//! found in the status (each tool's descriptor and digest: what a reviewer enables) and in
//! Events (a changed tool — a rug pull — is a Warning naming it). Normalization is the core's
//! (`toolgate_core::mcp::server_manifests`, as in `toolgate local`); listing is the executor
//! library's (`toolgate_executor::discover`).
//!
//! An HTTP server is listed from the operator under the SandboxPolicy's egress rules, with the
//! CredentialBinding's brokered value as its bearer (the lease revoked once listed). A stdio
//! server is listed inside a pod of its own, built like a call's (the executor image, the
//! policy's hardened pod and NetworkPolicy, `toolgate_core::exec::discovery_spec`): the
//! executor starts the command, lists its tools into the `tools` artifact, and the operator
//! reads it from the artifact store, then deletes the pod. One discovery per
//! `rediscoverSeconds`, or when the spec changes.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use toolgate_broker::CredentialBroker;
use toolgate_crds::{
    CredentialBinding, DiscoveredTool, Lifecycle, McpServer, McpServerSpec, SandboxPolicy,
    Timestamp,
};

use crate::kit::{self, FIELD_MANAGER};
use crate::readiness::{apply_status, ready};

/// The label naming the McpServer a ToolDescriptor was discovered on.
pub const SERVER_LABEL: &str = "toolgate.dev/mcp-server";

/// Condition reasons of an McpServer's `Ready`.
mod reason {
    /// The last discovery answered.
    pub const DISCOVERED: &str = "Discovered";
    /// The last discovery failed; the tools it had stay as they were.
    pub const DISCOVERY_FAILED: &str = "DiscoveryFailed";
    /// Its SandboxPolicy or CredentialBinding does not exist.
    pub const REFERENCE_MISSING: &str = "ReferenceMissing";
}

/// How discovery pods run: what calls' pods use.
#[derive(Clone)]
pub struct Pods {
    /// The executor image.
    pub executor_image: String,
    /// Where the executor writes the list.
    pub artifacts: toolgate_core::exec::ArtifactTarget,
    /// The artifact store's credentials, as for calls.
    pub artifact_secret: Option<String>,
    /// CIDRs of the artifact store, opened in the discovery pod's NetworkPolicy.
    pub artifact_egress: crate::build::ArtifactEgress,
    /// What the executor probes before the server starts, as for calls.
    pub egress_gate: crate::build::EgressGateConfig,
}

/// What a reconcile needs.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Where an HTTP server's bearer comes from.
    pub broker: Arc<dyn CredentialBroker>,
    /// Publishes the Events.
    pub recorder: Recorder,
    /// How discovery pods run.
    pub pods: Pods,
    /// Consecutive failures per server, for its backoff.
    pub failures: kit::Failures,
    /// Where reconciles are counted.
    pub metrics: Arc<crate::metrics::Metrics>,
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

/// Why a reconcile failed (the readiness controllers' failures); retried with backoff.
pub use crate::readiness::Error;

/// Why no list came back: the condition reason and words.
struct Unlisted(&'static str, String);

async fn sandbox_policy(
    ctx: &Context,
    ns: &str,
    spec: &McpServerSpec,
) -> Result<SandboxPolicy, Unlisted> {
    Api::<SandboxPolicy>::namespaced(ctx.client.clone(), ns)
        .get_opt(&spec.sandbox_policy_ref.name)
        .await
        .map_err(|e| Unlisted(reason::DISCOVERY_FAILED, e.to_string()))?
        .ok_or_else(|| {
            Unlisted(
                reason::REFERENCE_MISSING,
                format!(
                    "spec.sandboxPolicyRef: SandboxPolicy {} does not exist",
                    spec.sandbox_policy_ref.name
                ),
            )
        })
}

/// List a stdio server's tools in a pod of its own: `Ok(None)` while the pod runs.
async fn list_in_pod(
    ctx: &Context,
    server: &McpServer,
    ns: &str,
    pod: Option<k8s_openapi::api::core::v1::Pod>,
) -> Result<Option<toolgate_executor::discover::Listed>, Unlisted> {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let failed = |e: String| Unlisted(reason::DISCOVERY_FAILED, e);
    let name = server.name_any();
    let uid = server.metadata.uid.clone().unwrap_or_default();
    let owner = crate::build::Owner {
        kind: "McpServer",
        name: &name,
        namespace: ns,
        uid: &uid,
    };
    let child = crate::build::child_name(&owner.subject());
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), ns);
    let maps = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns);
    let policies = Api::<NetworkPolicy>::namespaced(ctx.client.clone(), ns);
    let Some(pod) = pod else {
        let policy = sandbox_policy(ctx, ns, &server.spec).await?;
        let confinement = toolgate_core::exec::confinement(&policy.spec)
            .map_err(|e| failed(format!("SandboxPolicy {}: {e}", policy.name_any())))?;
        let network_policy =
            crate::build::network_policy(&owner, &policy.spec, None, &ctx.pods.artifact_egress)
                .map_err(|e| failed(format!("SandboxPolicy {}: {e}", policy.name_any())))?;
        let mut spec = toolgate_core::exec::discovery_spec(
            ns,
            &name,
            &server.spec,
            &policy.spec,
            ctx.pods.artifacts.clone(),
            Some(confinement),
            Some(crate::build::WORKSPACE_DIR.into()),
        );
        spec.egress_gate = ctx.pods.egress_gate.for_policy(&network_policy);
        let config_map =
            crate::build::config_map(&owner, &spec, None).map_err(|e| failed(e.to_string()))?;
        let pod = crate::build::pod(
            &owner,
            &crate::build::PodInput {
                image: server
                    .spec
                    .image
                    .as_deref()
                    .unwrap_or(&ctx.pods.executor_image),
                policy: &policy.spec,
                timeout_ms: spec.time_bound_ms(),
                with_credential: false,
                artifact_secret: ctx.pods.artifact_secret.as_deref(),
                workspace_writable: false,
            },
        );
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        policies
            .patch(&child, &pp, &Patch::Apply(&network_policy))
            .await
            .map_err(|e| failed(e.to_string()))?;
        maps.patch(&child, &pp, &Patch::Apply(&config_map))
            .await
            .map_err(|e| failed(e.to_string()))?;
        pods.patch(&child, &pp, &Patch::Apply(&pod))
            .await
            .map_err(|e| failed(e.to_string()))?;
        tracing::info!(server = %name, pod = %child, "discovering in a pod");
        return Ok(None);
    };
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.clone().unwrap_or_default();
    if phase != "Succeeded" && phase != "Failed" {
        return Ok(None);
    }
    let message = crate::build::executor_terminated(&pod)
        .and_then(|t| t.message)
        .unwrap_or_default();
    // One discovery, one pod: whatever it said, its children go.
    let dp = DeleteParams::default();
    let _ = pods.delete(&child, &dp).await;
    let _ = maps.delete(&child, &dp).await;
    let _ = policies.delete(&child, &dp).await;
    let result: toolgate_crds::CallResult = serde_json::from_str(message.trim()).map_err(|_| {
        failed(format!(
            "discovery pod {child} ended ({phase}{}) without a result",
            status.reason.map(|r| format!(", {r}")).unwrap_or_default()
        ))
    })?;
    let store = toolgate_artifacts::ArtifactStore::open(&ctx.pods.artifacts)
        .map_err(|e| failed(format!("the artifact store: {e}")))?;
    toolgate_executor::discover::read_listed(&result, &store)
        .await
        .map(Some)
        .map_err(failed)
}

/// List an HTTP server's tools from here.
async fn list(
    ctx: &Context,
    ns: &str,
    spec: &McpServerSpec,
) -> Result<toolgate_executor::discover::Listed, Unlisted> {
    let Some(url) = &spec.url else {
        return Err(Unlisted(
            reason::DISCOVERY_FAILED,
            "spec.url is empty: an HTTP server has one".into(),
        ));
    };
    let policy = sandbox_policy(ctx, ns, spec).await?;
    let deadline = Duration::from_secs(u64::from(spec.discovery_timeout_seconds));
    let list = |bearer: Option<String>| async move {
        toolgate_executor::discover::list_http(
            toolgate_executor::discover::HttpTarget {
                url,
                network: &policy.spec.network,
                bearer: bearer.as_deref(),
            },
            deadline,
        )
        .await
    };
    let listed = match &spec.credential_binding_ref {
        None => list(None).await,
        Some(r) => {
            let binding = Api::<CredentialBinding>::namespaced(ctx.client.clone(), ns)
                .get_opt(&r.name)
                .await
                .map_err(|e| Unlisted(reason::DISCOVERY_FAILED, e.to_string()))?
                .ok_or_else(|| {
                    Unlisted(
                        reason::REFERENCE_MISSING,
                        format!(
                            "spec.credentialBindingRef: CredentialBinding {} does not exist",
                            r.name
                        ),
                    )
                })?;
            let request = toolgate_broker::Request {
                namespace: ns,
                name: &r.name,
                binding: &binding.spec,
                deadline_seconds: Some(deadline.as_secs()),
            };
            toolgate_broker::lend(ctx.broker.as_ref(), request, |b| list(Some(b)))
                .await
                .map_err(|e| {
                    Unlisted(
                        reason::DISCOVERY_FAILED,
                        format!("its credential (CredentialBinding {}): {e}", r.name),
                    )
                })?
        }
    };
    listed.map_err(|e| Unlisted(reason::DISCOVERY_FAILED, e))
}

async fn publish(ctx: &Context, server: &McpServer, type_: EventType, reason: &str, note: String) {
    crate::readiness::publish_event(&ctx.recorder, server, "Discover", type_, reason, note).await;
}

#[tracing::instrument(skip(server, ctx), fields(server = %server.name_any(), namespace = server.namespace().unwrap_or_default()))]
async fn reconcile(server: Arc<McpServer>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = server.name_any();
    let ns = server.namespace().ok_or_else(|| Error::NoNamespace {
        kind: "McpServer",
        name: name.clone(),
    })?;
    let spec = &server.spec;
    let generation = server.metadata.generation;
    let previous = server.status.clone().unwrap_or_default();
    let every = Duration::from_secs(u64::from(spec.rediscover_seconds));
    let again = Action::requeue(every);
    // Our own status write wakes the controller: discover again only when due or changed.
    let elapsed = previous.last_discovery.map(|t| {
        let since = jiff::Timestamp::now().duration_since(t.0);
        Duration::try_from(since).unwrap_or_default()
    });
    // A stdio server's discovery pod, read once: one under way is followed whatever the time.
    let pod = match spec.url {
        Some(_) => None,
        None => {
            Api::<k8s_openapi::api::core::v1::Pod>::namespaced(ctx.client.clone(), &ns)
                .get_opt(&crate::build::child_name(&crate::build::subject(
                    "McpServer",
                    &name,
                )))
                .await?
        }
    };
    if pod.is_none()
        && previous.observed_generation == generation
        && let Some(e) = elapsed
        && e < every
    {
        return Ok(Action::requeue(every - e));
    }
    let servers = Api::<McpServer>::namespaced(ctx.client.clone(), &ns);
    let listed = if spec.url.is_some() {
        list(&ctx, &ns, spec).await
    } else {
        match list_in_pod(&ctx, &server, &ns, pod).await {
            Ok(Some(l)) => Ok(l),
            Ok(None) => return Ok(Action::requeue(Duration::from_secs(1))),
            Err(e) => Err(e),
        }
    };
    let listed = match listed {
        Ok(l) => l,
        Err(Unlisted(why, message)) => {
            // The tools it had stay as they were: a server that is down hides nothing new and
            // enables nothing new.
            if let Some(condition) = crate::readiness::not_ready_now(
                &previous.conditions,
                previous.observed_generation,
                why,
                message.clone(),
                generation,
            ) {
                publish(&ctx, &server, EventType::Warning, why, message).await;
                apply_status(
                    servers,
                    &name,
                    condition,
                    generation,
                    serde_json::Value::Null,
                )
                .await?;
            }
            return Ok(again);
        }
    };
    registered(&ctx, &server, &ns, &listed, &previous).await?;
    Ok(again)
}

/// What a server listed, registered: its tools as descriptors it owns (none replacing a
/// descriptor it does not), an Event for each change and each refused tool, and its status.
async fn registered(
    ctx: &Context,
    server: &McpServer,
    ns: &str,
    listed: &toolgate_executor::discover::Listed,
    previous: &toolgate_crds::McpServerStatus,
) -> Result<(), Error> {
    let name = server.name_any();
    let spec = &server.spec;
    let generation = server.metadata.generation;
    let servers = Api::<McpServer>::namespaced(ctx.client.clone(), ns);
    // The namespace's descriptors this server does not own: none is replaced by one of its tools.
    let taken: std::collections::BTreeSet<String> =
        Api::<toolgate_crds::ToolDescriptor>::namespaced(ctx.client.clone(), ns)
            .list_metadata(&ListParams::default())
            .await?
            .into_iter()
            .filter(|d| d.metadata.labels.as_ref().and_then(|l| l.get(SERVER_LABEL)) != Some(&name))
            .map(|d| d.name_any())
            .collect();
    let (manifests, tools, refused) = toolgate_core::mcp::server_manifests(
        ns,
        &name,
        spec,
        &listed.tools,
        listed.version.as_deref(),
        &|tool| taken.contains(tool),
    );
    // Each descriptor, owned by the server (deleting the server deletes its tools); the tools
    // it no longer lists are gone.
    crate::descriptor::apply_owned(
        &ctx.client,
        ns,
        server.controller_owner_ref(&()),
        (SERVER_LABEL, &name),
        &manifests,
    )
    .await?;
    let fingerprints = |t: &[DiscoveredTool]| -> Vec<(String, String)> {
        t.iter()
            .map(|t| (t.tool.clone(), t.digest.clone()))
            .collect()
    };
    let changes =
        toolgate_core::mcp::what_changed(&fingerprints(&previous.tools), &fingerprints(&tools));
    if previous.last_discovery.is_some() && !changes.is_empty() {
        publish(
            ctx,
            server,
            EventType::Warning,
            "ToolsChanged",
            format!(
                "{changes}; a changed tool is discovered again (out of every view, its waiting calls ended) until its new digest is enabled"
            ),
        )
        .await;
    }
    for r in &refused {
        publish(
            ctx,
            server,
            EventType::Warning,
            "ToolRefused",
            r.to_string(),
        )
        .await;
    }
    let enabled = tools
        .iter()
        .filter(|t| t.lifecycle == Lifecycle::Enabled)
        .count();
    let mut message = format!(
        "{} tool(s) listed, {enabled} enabled by reviewed digest",
        tools.len()
    );
    if !refused.is_empty() {
        message.push_str(&format!(
            "; {} refused: {}",
            refused.len(),
            refused
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let condition = ready(
        &previous.conditions,
        true,
        reason::DISCOVERED,
        message,
        generation,
    );
    apply_status(
        servers,
        &name,
        condition,
        generation,
        serde_json::json!({
            "lastDiscovery": Timestamp(jiff::Timestamp::now()),
            "toolCount": tools.len(),
            "enabledCount": enabled,
            "tools": tools,
        }),
    )
    .await?;
    Ok(())
}

async fn guarded(
    guard: Arc<DeserializeGuard<McpServer>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    kit::reconcile_guarded(guard, ctx, reconcile).await
}

fn error_policy(
    guard: Arc<DeserializeGuard<McpServer>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    kit::retry(&ctx.failures, &*guard, error)
}

/// Run the McpServer controller until shutdown.
pub async fn run(
    client: Client,
    broker: Arc<dyn CredentialBroker>,
    scope: crate::scope::Scope,
    pods: Pods,
    metrics: Arc<crate::metrics::Metrics>,
) {
    let ctx = Arc::new(Context {
        client: client.clone(),
        broker,
        pods,
        failures: Default::default(),
        metrics,
        recorder: kit::recorder(&client),
    });
    Controller::new(
        scope.api::<DeserializeGuard<McpServer>>(&client),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(guarded, error_policy, ctx)
    .for_each(|_| futures::future::ready(()))
    .await;
}
