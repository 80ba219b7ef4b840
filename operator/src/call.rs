//! The ToolCall controller: the causal chain on a cluster.
//!
//! dereference (descriptor, grants, approvals, sandbox policy, credential binding) → validate and
//! decide (the core) → wait for a bound approval → build the children (pure, `build`) → apply them
//! with server-side apply → watch the pod → ingest the executor's result from its termination
//! message → record → clean up. Every step is a status condition and an Event. A denied or
//! invalid call never creates a pod; names are deterministic, so a restarted operator applies the
//! same pod instead of a second one; a finalizer removes the credential and the children even
//! when the call is deleted mid-flight.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use toolgate_broker::CredentialBroker;
use toolgate_core::args::ArgsLimits;
use toolgate_core::call_state::{
    RunTarget, Step, apply, camel, cannot_run, decision_steps, finished_steps, is_terminal,
    reasons_text, recheck_steps, run_target,
};
use toolgate_core::decision::{ApprovalEntry, CallUnderReview, decide_in};
use toolgate_core::exec::{ArtifactTarget, CallIdentity, ExecInput, exec_spec};
use toolgate_core::manifest::{ObjectSet, Spec};
use toolgate_core::principal::Principal;
use toolgate_core::registry::Registry;
use toolgate_crds::conditions::{
    APPROVAL_GRANTED, CREDENTIALS_BOUND, FINISHED, SANDBOX_PREPARED, STARTED, STATE_UPDATED,
};
use toolgate_crds::{
    ApprovalState, CallPhase, CallResult, CallRuntime, CredentialBinding, DecisionOutcome,
    LocalObjectRef, SandboxPolicy, ToolApproval, ToolCall, ToolCallStatus, ToolDescriptor,
    ToolGrant,
};

use crate::build::{self, Owner, PodInput};
use crate::cache::{PolicyCache, Subscriptions};
use crate::descriptor::{FIELD_MANAGER, meta_of, object};

/// Condition type of a cancellation (as in the embedded runtime).
pub const CANCELLED: &str = "Cancelled";

/// The finalizer that guarantees cleanup.
pub const FINALIZER: &str = "toolgate.dev/cleanup";

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
    /// CIDRs of the artifact store, opened in every call's NetworkPolicy for the executor.
    pub artifact_egress: Vec<String>,
    /// How long a failed call's pod is kept for debugging.
    pub keep_failed_pods: Duration,
}

/// What a reconcile needs.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Events.
    pub recorder: Recorder,
    /// Configuration.
    pub config: CallConfig,
    /// Metrics.
    pub metrics: Arc<crate::ops::Metrics>,
    /// Consecutive failures per call, for backoff.
    pub failures: std::sync::Mutex<std::collections::HashMap<ObjectRef<ToolCall>, u32>>,
    /// The namespace's policy objects, shared with the agent API.
    pub cache: PolicyCache,
}

impl Context {
    /// What the call is decided against: the shared caches, unless they would end the call — a
    /// deny, or no tool, policy or binding to run with — which may only mean that a new object
    /// has not reached them yet; then the API server's view.
    async fn namespace(&self, call: &ToolCall, ns: &str) -> Result<Namespace, Error> {
        let name = call.name_any();
        let cached = self.cache.namespace(ns, &name);
        let ends = decide(&cached, call, ns).outcome == DecisionOutcome::Deny
            || run_target(
                &cached.registry,
                &cached.objects,
                ns,
                &call.spec.tool_ref.name,
            )
            .is_err();
        if ends {
            dereference(&self.client, ns, &name).await
        } else {
            Ok(cached)
        }
    }
}

/// Why a reconcile failed; transient, retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Serialization of a child (a bug).
    #[error("serializing: {0}")]
    Json(#[from] serde_json::Error),
    /// No namespace on a namespaced object (a bug).
    #[error("ToolCall {0} has no namespace")]
    NoNamespace(String),
    /// The finalizer machinery.
    #[error("finalizer: {0}")]
    Finalizer(String),
}

/// The namespace's policy objects, as the core sees them.
pub(crate) struct Namespace {
    pub(crate) objects: ObjectSet,
    pub(crate) registry: Registry,
    pub(crate) approvals: Vec<ToolApproval>,
}

/// Every object of a kind in the namespace, from the API server.
async fn list_all<K>(client: &Client, ns: &str) -> Result<Vec<K>, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Ok(Api::<K>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items)
}

/// The namespace's policy objects read fresh from the API server (the caches' fallback).
pub(crate) async fn dereference(client: &Client, ns: &str, call: &str) -> Result<Namespace, Error> {
    Ok(Namespace::assemble(
        list_all(client, ns).await?,
        list_all(client, ns).await?,
        list_all(client, ns).await?,
        list_all(client, ns).await?,
        list_all(client, ns).await?,
        call,
    ))
}

impl Namespace {
    /// The objects as the core sees them; of the approvals, those of `call` and the session ones.
    pub(crate) fn assemble(
        descriptors: Vec<ToolDescriptor>,
        grants: Vec<ToolGrant>,
        policies: Vec<SandboxPolicy>,
        bindings: Vec<CredentialBinding>,
        approvals: Vec<ToolApproval>,
        call: &str,
    ) -> Self {
        let mut objects = Vec::new();
        objects.extend(
            descriptors
                .iter()
                .map(|t| object(meta_of(t), Spec::ToolDescriptor(Box::new(t.spec.clone())))),
        );
        objects.extend(
            grants
                .iter()
                .map(|g| object(meta_of(g), Spec::ToolGrant(Box::new(g.spec.clone())))),
        );
        objects.extend(
            policies
                .iter()
                .map(|s| object(meta_of(s), Spec::SandboxPolicy(Box::new(s.spec.clone())))),
        );
        objects.extend(bindings.iter().map(|c| {
            object(
                meta_of(c),
                Spec::CredentialBinding(Box::new(c.spec.clone())),
            )
        }));
        let objects = ObjectSet::new(objects);
        let registry = Registry::from_objects(&objects);
        Namespace {
            objects,
            registry,
            approvals: approvals
                .into_iter()
                .filter(|a| a.spec.call_ref.name == call || a.spec.session_id.is_some())
                .collect(),
        }
    }

    /// Who gave the named approval (empty when it is not there).
    pub(crate) fn approver_of(&self, approval: &str) -> String {
        self.approvals
            .iter()
            .find(|a| a.metadata.name.as_deref() == Some(approval))
            .map(|a| a.spec.approver.clone())
            .unwrap_or_default()
    }
}

fn decide(ns: &Namespace, call: &ToolCall, namespace: &str) -> toolgate_core::decision::Decision {
    let principal =
        Principal::new(call.spec.principal.clone()).with_groups(call.spec.principal_groups.clone());
    let entries: Vec<ApprovalEntry<'_>> = ns
        .approvals
        .iter()
        .map(|a| ApprovalEntry {
            name: a.metadata.name.as_deref().unwrap_or_default(),
            spec: &a.spec,
            consumed: a.status.as_ref().and_then(|s| s.state) == Some(ApprovalState::Consumed),
        })
        .collect();
    decide_in(
        &ns.registry,
        &CallUnderReview {
            namespace,
            name: &call.name_any(),
            spec: &call.spec,
            principal: &principal,
        },
        &entries,
        jiff::Timestamp::now(),
        &ArgsLimits::default(),
    )
}

impl Context {
    /// Record steps on the call's status (server-side apply) and publish one Event per step.
    async fn record(
        &self,
        call: &ToolCall,
        status: &mut ToolCallStatus,
        steps: &[Step],
    ) -> Result<(), Error> {
        if steps.is_empty() {
            return Ok(());
        }
        let generation = call.metadata.generation.unwrap_or(1);
        for s in steps {
            apply(status, s, jiff::Timestamp::now(), generation);
        }
        let ns = call
            .namespace()
            .ok_or_else(|| Error::NoNamespace(call.name_any()))?;
        let patch = serde_json::json!({
            "apiVersion": toolgate_crds::API_VERSION,
            "kind": "ToolCall",
            "status": status,
        });
        Api::<ToolCall>::namespaced(self.client.clone(), &ns)
            .patch_status(
                &call.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        for s in steps {
            if let Some(phase) = s.phase {
                self.metrics
                    .call_phases
                    .get_or_create(&crate::ops::PhaseLabels {
                        phase: toolgate_core::call_state::phase_name(Some(phase)).into(),
                    })
                    .inc();
            }
            if s.kind == toolgate_crds::conditions::POLICY_CHECKED
                && let Some(a) = &status.authorization
            {
                self.metrics
                    .decisions
                    .get_or_create(&crate::ops::DecisionLabels {
                        decision: serde_json::to_value(a.decision)
                            .ok()
                            .and_then(|v| v.as_str().map(String::from))
                            .unwrap_or_default(),
                        tier: a.risk_tier.to_string(),
                    })
                    .inc();
            }
        }
        let reference = call.object_ref(&());
        for s in steps {
            let event = Event {
                type_: if s.status == toolgate_crds::ConditionStatus::False {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: s.reason.chars().take(128).collect(),
                note: Some(s.message.chars().take(1000).collect()),
                action: s.kind.to_string(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&event, &reference).await {
                tracing::warn!(call = %call.name_any(), error = %e, "publishing an event");
            }
        }
        tracing::info!(call = %call.name_any(), namespace = %ns, steps = ?steps.iter().map(|s| s.kind).collect::<Vec<_>>(), phase = ?status.phase, "recorded");
        Ok(())
    }
}

async fn reconcile(call: Arc<ToolCall>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = call
        .namespace()
        .ok_or_else(|| Error::NoNamespace(call.name_any()))?;
    let key = ObjectRef::from_obj(&*call);
    let began = std::time::Instant::now();
    let api = Api::<ToolCall>::namespaced(ctx.client.clone(), &ns);
    let result = finalizer(&api, FINALIZER, call, |event| async {
        match event {
            Finalizer::Apply(call) => advance(&call, &ctx, &ns).await,
            Finalizer::Cleanup(call) => {
                remove_children(&ctx.client, &ns, &call.name_any(), true).await?;
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(e.to_string()));
    ctx.metrics
        .observe("toolcall", result.is_ok(), began.elapsed());
    if result.is_ok()
        && let Ok(mut f) = ctx.failures.lock()
    {
        f.remove(&key);
    }
    result
}

/// Move a call one step along its chain.
async fn advance(call: &ToolCall, ctx: &Context, ns: &str) -> Result<Action, Error> {
    let name = call.name_any();
    let mut status = call.status.clone().unwrap_or_default();
    if is_terminal(status.phase) {
        return finish_cleanup(call, ctx, ns, &status).await;
    }
    if let Some(who) = call.annotations().get(crate::api::CANCEL_ANNOTATION) {
        // Stop whatever runs, then record it: the pod, its credential and the rest go now.
        remove_children(&ctx.client, ns, &name, true).await?;
        let steps = [
            Step::ok(CANCELLED, "CancelledByUser", format!("cancelled by {who}"))
                .then(CallPhase::Cancelled),
        ];
        ctx.record(call, &mut status, &steps).await?;
        return Ok(Action::await_change());
    }
    let cluster = ctx.namespace(call, ns).await?;
    match status.phase {
        None | Some(CallPhase::Pending) => {
            let decision = decide(&cluster, call, ns);
            let scopes = cluster
                .registry
                .tool(ns, &call.spec.tool_ref.name)
                .map(|t| t.spec.permissions.required_scopes.clone())
                .unwrap_or_default();
            let mut steps = vec![toolgate_core::call_state::requested(&call.spec)];
            let uid = call.metadata.uid.clone().unwrap_or_default();
            let owner = Owner {
                name: &name,
                namespace: ns,
                uid: &uid,
            };
            steps.extend(decision_steps(
                &mut status,
                &call.spec,
                &decision,
                &scopes,
                jiff::Timestamp::now(),
                || {
                    toolgate_core::call_state::unplaceable(
                        &cluster.registry,
                        &cluster.objects,
                        ns,
                        &call.spec.tool_ref.name,
                        |t| placeable(&owner, t, &ctx.config.artifact_egress),
                    )
                },
            ));
            ctx.record(call, &mut status, &steps).await?;
            Ok(Action::requeue(Duration::from_millis(100)))
        }
        Some(CallPhase::AwaitingApproval) => {
            mark_approvals(ctx, ns, call, &status, &cluster).await;
            let decision = decide(&cluster, call, ns);
            if decision.outcome == DecisionOutcome::Allow {
                status.authorization = decision.authorization(jiff::Timestamp::now());
                let approval = decision.approval.clone().unwrap_or_default();
                let approver = cluster.approver_of(&approval);
                let steps = [Step::ok(
                    APPROVAL_GRANTED,
                    "Approved",
                    format!(
                        "ToolApproval {approval} by {approver} binds args {} and tool {}",
                        status.args_digest.as_deref().unwrap_or_default(),
                        status.tool_digest.as_deref().unwrap_or_default()
                    ),
                )
                .then(CallPhase::Authorized)];
                ctx.record(call, &mut status, &steps).await?;
                return Ok(Action::requeue(Duration::from_millis(100)));
            }
            if decision.outcome == DecisionOutcome::Deny {
                let steps = [
                    Step::failed(
                        APPROVAL_GRANTED,
                        camel(decision.reasons.last().map_or("denied", |r| r.code)),
                        reasons_text(&decision),
                    ),
                    Step::failed(STATE_UPDATED, "Denied", "the call ended without running")
                        .then(CallPhase::Denied),
                ];
                ctx.record(call, &mut status, &steps).await?;
                return Ok(Action::await_change());
            }
            // Still waiting; approvals that do not bind say why in the decision's reasons.
            Ok(Action::await_change())
        }
        Some(CallPhase::Authorized) => start(call, ctx, ns, &cluster, status).await,
        Some(CallPhase::Running) => observe(call, ctx, ns, status).await,
        _ => Ok(Action::await_change()),
    }
}

/// Write each approval's state for this call: Bound, Voided (with the reason), Expired or
/// Consumed, so `kubectl get toolapprovals` shows why an approval does or does not apply.
async fn mark_approvals(
    ctx: &Context,
    ns: &str,
    call: &ToolCall,
    status: &ToolCallStatus,
    cluster: &Namespace,
) {
    use toolgate_core::approval::{ApprovalSubject, VoidReason, check_approval};
    let Some(tool) = cluster.registry.tool(ns, &call.spec.tool_ref.name) else {
        return;
    };
    let name = call.name_any();
    let subject = ApprovalSubject {
        call_name: &name,
        session_id: call.spec.session_id.as_deref(),
        args_digest: status.args_digest.as_deref().unwrap_or_default(),
        tool_digest: &tool.digest,
        tier: tool.tier,
        scopes: &tool.spec.permissions.required_scopes,
        principal: &call.spec.principal,
    };
    for a in cluster
        .approvals
        .iter()
        .filter(|a| a.spec.call_ref.name == name)
    {
        let previous = a.status.as_ref().and_then(|s| s.state);
        if previous == Some(ApprovalState::Consumed) {
            continue;
        }
        let (state, void_reason) =
            match check_approval(&a.spec, false, &subject, jiff::Timestamp::now()) {
                Ok(()) => (ApprovalState::Bound, None),
                Err(VoidReason::Expired(_)) => (ApprovalState::Expired, None),
                Err(e) => (ApprovalState::Voided, Some(format!("{}: {e}", e.code()))),
            };
        if previous == Some(state) {
            continue;
        }
        let patch = serde_json::json!({
            "apiVersion": toolgate_crds::API_VERSION,
            "kind": "ToolApproval",
            "status": {"state": state, "voidReason": void_reason, "observedGeneration": a.metadata.generation},
        });
        if let Err(e) = Api::<ToolApproval>::namespaced(ctx.client.clone(), ns)
            .patch_status(
                &a.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            tracing::warn!(approval = %a.name_any(), error = %e, "writing the approval's state");
        }
    }
}

/// Build and apply the children of an authorized call.
/// Whether a call's pod could be built: its NetworkPolicy and its Landlock confinement. Asked
/// before anyone approves the call, and again (with the workspace claim) when it starts.
fn placeable(
    owner: &Owner<'_>,
    target: &RunTarget<'_>,
    artifact_egress: &[String],
) -> Result<(), String> {
    build::network_policy(
        owner,
        target.policy,
        target.tool.spec.execution.adapter,
        artifact_egress,
    )
    .map_err(|e| e.to_string())?;
    toolgate_sandbox::plan::confinement(target.policy).map_err(|e| e.to_string())?;
    Ok(())
}

async fn start(
    call: &ToolCall,
    ctx: &Context,
    ns: &str,
    cluster: &Namespace,
    mut status: ToolCallStatus,
) -> Result<Action, Error> {
    let name = call.name_any();
    let fail = |kind, reason: &str, message: String| cannot_run(kind, reason, message);
    // Decide again: the approval must still bind, the tool must not have changed.
    if let Some(steps) = recheck_steps(&decide(cluster, call, ns)) {
        ctx.record(call, &mut status, &steps).await?;
        return Ok(Action::await_change());
    }
    let target = match run_target(
        &cluster.registry,
        &cluster.objects,
        ns,
        &call.spec.tool_ref.name,
    ) {
        Ok(t) => t,
        Err(steps) => {
            ctx.record(call, &mut status, &steps).await?;
            return Ok(Action::await_change());
        }
    };
    let RunTarget {
        tool,
        policy_name,
        policy,
        binding,
    } = target;
    let uid = call.metadata.uid.clone().unwrap_or_default();
    let owner = Owner {
        name: &name,
        namespace: ns,
        uid: &uid,
    };
    let netpol = match build::network_policy(
        &owner,
        policy,
        tool.spec.execution.adapter,
        &ctx.config.artifact_egress,
    ) {
        Ok(n) => n,
        Err(e) => {
            ctx.record(
                call,
                &mut status,
                &fail(
                    SANDBOX_PREPARED,
                    "SandboxRefused",
                    format!("SandboxPolicy {policy_name}: {e}"),
                ),
            )
            .await?;
            return Ok(Action::await_change());
        }
    };
    // The policy's roots and blocked paths, enforced by the executor with Landlock: the pod has
    // no other way to hide `.env` inside a mounted workspace.
    let confinement = match toolgate_sandbox::plan::confinement(policy) {
        Ok(c) => c,
        Err(e) => {
            ctx.record(
                call,
                &mut status,
                &fail(
                    SANDBOX_PREPARED,
                    "SandboxRefused",
                    format!("SandboxPolicy {policy_name}: {e}"),
                ),
            )
            .await?;
            return Ok(Action::await_change());
        }
    };
    // A pod whose claim does not exist would stay Pending, and the call Running, forever.
    if let Some(claim) = &policy.filesystem.workspace_claim_name
        && Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), ns)
            .get_opt(claim)
            .await?
            .is_none()
    {
        ctx.record(
            call,
            &mut status,
            &fail(
                SANDBOX_PREPARED,
                "WorkspaceClaimMissing",
                format!(
                    "SandboxPolicy {policy_name}: its workspace PersistentVolumeClaim {claim} does not exist in {ns}"
                ),
            ),
        )
        .await?;
        return Ok(Action::await_change());
    }
    let spec = exec_spec(ExecInput {
        call: CallIdentity {
            namespace: ns.into(),
            name: name.clone(),
            event_id: format!("{name}/{}", STARTED),
        },
        tool: &tool.spec,
        policy,
        args: call.spec.args.clone(),
        dry_run: call.spec.dry_run,
        artifacts: ctx.config.artifacts.clone(),
        credential: binding,
        working_dir: Some(build::WORKSPACE_DIR.into()),
        write_roots: confinement
            .write
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        confinement: Some(confinement.clone()),
    });
    let image = tool
        .spec
        .execution
        .image
        .clone()
        .unwrap_or_else(|| ctx.config.executor_image.clone());
    let mut steps = vec![Step::ok(
        SANDBOX_PREPARED,
        "Resolved",
        format!(
            "SandboxPolicy {policy_name}: pod {} with NetworkPolicy egress {:?}, memory {} MiB, deadline from timeout {} ms",
            build::child_name(&name),
            policy.network.egress,
            policy.process.max_memory_mb,
            spec.limits.timeout_ms
        ),
    )];
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let child = build::child_name(&name);
    Api::<NetworkPolicy>::namespaced(ctx.client.clone(), ns)
        .patch(&child, &pp, &Patch::Apply(&netpol))
        .await?;
    Api::<ConfigMap>::namespaced(ctx.client.clone(), ns)
        .patch(
            &child,
            &pp,
            &Patch::Apply(&build::config_map(&owner, &spec)?),
        )
        .await?;
    let runtime = status.runtime.get_or_insert_with(CallRuntime::default);
    runtime.adapter = Some(format!("{:?}", tool.spec.execution.adapter).to_lowercase());
    runtime.sandbox_policy_ref = Some(LocalObjectRef {
        name: policy_name.to_string(),
    });
    runtime.pod_name = Some(child.clone());
    match &binding {
        None => steps.push(Step::ok(
            CREDENTIALS_BOUND,
            "NotRequired",
            "the tool uses no credential",
        )),
        Some((bname, b)) => match ctx.config.broker.issue(ns, bname, b) {
            Err(e) => {
                remove_children(&ctx.client, ns, &name, true).await?;
                ctx.record(
                    call,
                    &mut status,
                    &fail(
                        CREDENTIALS_BOUND,
                        "BrokerFailed",
                        format!("CredentialBinding {bname}: {e}"),
                    ),
                )
                .await?;
                return Ok(Action::await_change());
            }
            Ok(issued) => {
                let file = spec
                    .credentials
                    .first()
                    .map_or_else(|| bname.to_string(), |c| c.file_name.clone());
                Api::<Secret>::namespaced(ctx.client.clone(), ns)
                    .patch(
                        &child,
                        &pp,
                        &Patch::Apply(&build::secret(&owner, &file, issued.value.expose())),
                    )
                    .await?;
                status
                    .runtime
                    .get_or_insert_with(CallRuntime::default)
                    .credential_binding_ref = Some(LocalObjectRef {
                    name: bname.to_string(),
                });
                steps.push(Step::ok(CREDENTIALS_BOUND, "Brokered", format!("CredentialBinding {bname} delivered as file {file} in Secret {child}, TTL {} s", issued.ttl_seconds)));
            }
        },
    }
    let pod = build::pod(
        &owner,
        &PodInput {
            image: &image,
            policy,
            timeout_ms: spec.limits.timeout_ms,
            with_credential: binding.is_some(),
            artifact_secret: ctx.config.artifact_secret.as_deref(),
            workspace_writable: confinement
                .write
                .iter()
                .any(|p| p.starts_with(build::WORKSPACE_DIR)),
        },
    );
    Api::<Pod>::namespaced(ctx.client.clone(), ns)
        .patch(&child, &pp, &Patch::Apply(&pod))
        .await?;
    steps.push(
        Step::ok(STARTED, "PodCreated", format!("pod {child} created")).then(CallPhase::Running),
    );
    ctx.record(call, &mut status, &steps).await?;
    Ok(Action::requeue(Duration::from_secs(30)))
}

/// Follow the pod; when it ends, ingest the executor's result.
async fn observe(
    call: &ToolCall,
    ctx: &Context,
    ns: &str,
    mut status: ToolCallStatus,
) -> Result<Action, Error> {
    let name = call.name_any();
    let child = build::child_name(&name);
    let Some(pod) = Api::<Pod>::namespaced(ctx.client.clone(), ns)
        .get_opt(&child)
        .await?
    else {
        let steps = [
            Step::failed(
                FINISHED,
                "PodMissing",
                format!("pod {child} disappeared before it reported a result"),
            ),
            Step::failed(STATE_UPDATED, "Failed", "the call failed; see Finished")
                .then(CallPhase::Failed),
        ];
        ctx.record(call, &mut status, &steps).await?;
        return Ok(Action::requeue(Duration::from_millis(100)));
    };
    let pod_status = pod.status.clone().unwrap_or_default();
    let phase = pod_status.phase.clone().unwrap_or_default();
    if phase != "Succeeded" && phase != "Failed" {
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    let terminated = pod_status
        .container_statuses
        .as_ref()
        .and_then(|cs| cs.iter().find(|c| c.name == "executor"))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone());
    let message = terminated
        .as_ref()
        .and_then(|t| t.message.clone())
        .unwrap_or_default();
    let steps = match serde_json::from_str::<CallResult>(message.trim()) {
        Ok(result) => {
            if let Some(r) = status.runtime.as_mut() {
                r.started_at = terminated
                    .as_ref()
                    .and_then(|t| t.started_at.as_ref())
                    .and_then(|t| kube_time(&t.0));
                r.finished_at = terminated
                    .as_ref()
                    .and_then(|t| t.finished_at.as_ref())
                    .and_then(|t| kube_time(&t.0));
            }
            finished_steps(&mut status, &result, None)
        }
        Err(_) => {
            let why = match (pod_status.reason.as_deref(), terminated.as_ref()) {
                (Some(r), _) => format!(
                    "pod {child} ended: {r} ({})",
                    pod_status.message.clone().unwrap_or_default()
                ),
                (None, Some(t)) => format!("pod {child} exited {} without a result", t.exit_code),
                (None, None) => format!("pod {child} ended without a result"),
            };
            vec![
                Step::failed(
                    FINISHED,
                    camel(pod_status.reason.as_deref().unwrap_or("no-result")),
                    why,
                ),
                Step::failed(STATE_UPDATED, "Failed", "the call failed; see Finished")
                    .then(CallPhase::Failed),
            ]
        }
    };
    // The credential goes the moment the pod is done.
    let _ = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .delete(&child, &DeleteParams::default())
        .await;
    ctx.record(call, &mut status, &steps).await?;
    consume_approval(ctx, ns, &status).await;
    Ok(Action::requeue(Duration::from_millis(100)))
}

/// k8s-openapi's time (another jiff release) as ours.
fn kube_time(t: &k8s_openapi::jiff::Timestamp) -> Option<toolgate_crds::Timestamp> {
    jiff::Timestamp::from_nanosecond(t.as_nanosecond())
        .ok()
        .map(toolgate_crds::Timestamp)
}

async fn consume_approval(ctx: &Context, ns: &str, status: &ToolCallStatus) {
    let Some(name) = status
        .authorization
        .as_ref()
        .and_then(|a| a.approval_ref.as_ref())
        .map(|r| r.name.clone())
    else {
        return;
    };
    let api = Api::<ToolApproval>::namespaced(ctx.client.clone(), ns);
    // A session approval covers later calls of its session: it is not used up.
    match api.get_opt(&name).await {
        Ok(Some(a)) if a.spec.decision == toolgate_crds::ApprovalDecision::AllowOnce => {}
        _ => return,
    }
    let patch = serde_json::json!({
        "apiVersion": toolgate_crds::API_VERSION,
        "kind": "ToolApproval",
        "status": {"state": "Consumed"},
    });
    if let Err(e) = api
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        tracing::warn!(approval = %name, error = %e, "marking the approval consumed");
    }
}

/// After the result is recorded: remove the children (a failed call's pod stays a while).
async fn finish_cleanup(
    call: &ToolCall,
    ctx: &Context,
    ns: &str,
    status: &ToolCallStatus,
) -> Result<Action, Error> {
    let name = call.name_any();
    let failed = status.phase == Some(CallPhase::Failed);
    let keep_until = status
        .runtime
        .as_ref()
        .and_then(|r| r.finished_at)
        .map(|t| t.0)
        .and_then(|t| {
            t.checked_add(jiff::SignedDuration::try_from(ctx.config.keep_failed_pods).ok()?)
                .ok()
        });
    let keep_pod = failed && keep_until.is_some_and(|t| t > jiff::Timestamp::now());
    remove_children(&ctx.client, ns, &name, !keep_pod).await?;
    Ok(if keep_pod {
        Action::requeue(ctx.config.keep_failed_pods)
    } else {
        Action::await_change()
    })
}

/// Delete a call's children (the pod too when `with_pod`). Missing ones are fine.
async fn remove_children(
    client: &Client,
    ns: &str,
    call: &str,
    with_pod: bool,
) -> Result<(), Error> {
    let child = build::child_name(call);
    delete_if_present::<Secret>(client, ns, &child).await?;
    delete_if_present::<ConfigMap>(client, ns, &child).await?;
    delete_if_present::<NetworkPolicy>(client, ns, &child).await?;
    if with_pod {
        delete_if_present::<Pod>(client, ns, &child).await?;
    }
    Ok(())
}

/// Delete an object by name; one that is already gone is fine.
async fn delete_if_present<K>(client: &Client, ns: &str, name: &str) -> Result<(), Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    <K as Resource>::DynamicType: Default,
{
    match Api::<K>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::Kube(e)),
    }
}

fn error_policy(call: Arc<ToolCall>, error: &Error, ctx: Arc<Context>) -> Action {
    let n = match ctx.failures.lock() {
        Ok(mut f) => {
            let n = f.entry(ObjectRef::from_obj(&*call)).or_insert(0);
            *n = n.saturating_add(1);
            *n
        }
        Err(_) => 1,
    };
    let delay = crate::descriptor::backoff(n - 1);
    tracing::warn!(call = %call.name_any(), %error, failures = n, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Run the controller until shutdown.
pub async fn run(
    client: Client,
    config: CallConfig,
    scope: crate::scope::Scope,
    metrics: Arc<crate::ops::Metrics>,
    health: Arc<crate::ops::Health>,
    (cache, subscriptions): (PolicyCache, Subscriptions),
) {
    let calls = scope.api::<ToolCall>(&client);
    let controller = Controller::new(calls, watcher::Config::default());
    let store = controller.store();
    let by_descriptor = store.clone();
    // Ready once the calls' cache and the policy caches have synced (and, before this runs, the
    // lease is held).
    let synced = store.clone();
    let policies = cache.clone();
    tokio::spawn(async move {
        // Polled again and again: a store's readiness signal wakes only its latest waiter, and
        // the controller waits on the calls' store too.
        loop {
            let both = async {
                synced.wait_until_ready().await?;
                policies.wait_until_ready().await
            };
            match tokio::time::timeout(Duration::from_millis(250), both).await {
                Ok(Ok(())) => {
                    health
                        .ready
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                    tracing::info!("ToolCall and policy caches synced; ready");
                    return;
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "the caches never synced");
                    return;
                }
                Err(_) => {}
            }
        }
    });
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "toolgate-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    controller
        .owns(
            scope.api::<Pod>(&client),
            watcher::Config::default().labels(build::CALL_LABEL),
        )
        // Through the shared caches' streams: a reconcile they trigger sees the change.
        .watches_shared_stream(subscriptions.approvals, |a| {
            a.namespace()
                .map(|ns| ObjectRef::<ToolCall>::new(&a.spec.call_ref.name).within(&ns))
        })
        .watches_shared_stream(subscriptions.descriptors, move |td| {
            by_descriptor
                .state()
                .into_iter()
                .filter(|c| {
                    c.namespace() == td.namespace()
                        && Some(c.spec.tool_ref.name.as_str()) == td.metadata.name.as_deref()
                        && !is_terminal(c.status.as_ref().and_then(|s| s.phase))
                })
                .map(|c| ObjectRef::from_obj(&*c))
                .collect::<Vec<_>>()
        })
        .shutdown_on_signal()
        .run(
            reconcile,
            error_policy,
            Arc::new(Context {
                client,
                recorder,
                config,
                metrics,
                failures: Default::default(),
                cache,
            }),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// Reconciler scenarios against a mocked API server (tower-test): which requests a reconcile
/// makes, and, above all, which it never makes.
#[cfg(test)]
mod scenarios {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;
    use std::sync::Mutex;

    /// Every request the reconciler made: method, path, body.
    type Log = Arc<Mutex<Vec<(String, String, serde_json::Value)>>>;

    const NS: &str = "team-a";

    fn tool() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "toolgate.dev/v1alpha1", "kind": "ToolDescriptor",
            "metadata": {"name": "test.echo", "namespace": NS},
            "spec": {
                "canonicalName": "test.echo", "version": "1.0.0", "source": {"type": "cli", "packageName": "coreutils"},
                "description": {"summary": "Echo a message.", "useWhen": ["testing"], "doNotUseWhen": ["anything else"]},
                "intent": {"actionTypes": ["execute"], "domains": ["test"]},
                "schemas": {"inputSchema": {"type": "object", "additionalProperties": false, "properties": {"msg": {"type": "string"}}}},
                "effects": {"reads": [], "writes": [], "externalCalls": false, "sendsUserData": false, "mutatesState": false,
                            "idempotent": true, "reversible": true, "dryRunSupported": false},
                "risk": {"level": "low", "destructive": false, "openWorld": false},
                "permissions": {"approvalPolicy": "never", "requiredScopes": []},
                "sandboxPolicyRef": {"name": "none"},
                "contextPolicy": {"exposeToModel": true, "exposeOutputToModel": "full", "maxOutputPreviewTokens": 100},
                "execution": {"adapter": "cli", "argv": ["echo", "{{msg}}"], "timeoutMs": 5000},
                "provenance": {"trustLevel": "first_party"}
            }
        })
    }

    fn grant() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "toolgate.dev/v1alpha1", "kind": "ToolGrant",
            "metadata": {"name": "g", "namespace": NS},
            "spec": {"subjects": [{"kind": "ServiceAccount", "name": "fixer", "namespace": NS}], "tools": {"names": ["test.echo"]}, "scopes": []}
        })
    }

    fn policy() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "toolgate.dev/v1alpha1", "kind": "SandboxPolicy",
            "metadata": {"name": "none", "namespace": NS},
            "spec": {"mode": "read_only", "filesystem": {"readRoots": [], "writeRoots": []}, "network": {"egress": "none"},
                     "environment": {}, "process": {"timeoutMs": 5000, "maxMemoryMb": 64, "maxStdoutBytes": 1000, "maxStderrBytes": 1000},
                     "audit": {}}
        })
    }

    fn call(principal: &str, status: Option<serde_json::Value>) -> ToolCall {
        let mut v = serde_json::json!({
            "apiVersion": "toolgate.dev/v1alpha1", "kind": "ToolCall",
            "metadata": {"name": "c1", "namespace": NS, "uid": "uid-1", "generation": 1, "finalizers": [FINALIZER]},
            "spec": {"toolRef": {"name": "test.echo"}, "principal": principal, "args": {"msg": "hi"},
                     "intent": {"userGoal": "g", "currentTask": "t", "actionType": "execute", "rationaleSummary": "r"}}
        });
        if let Some(s) = status {
            v["status"] = s;
        }
        serde_json::from_value(v).expect("call")
    }

    /// A fake API server: lists answer with `objects` of the kind, writes echo their body.
    fn context(
        objects: Vec<serde_json::Value>,
    ) -> (Arc<Context>, Log, tokio::task::JoinHandle<()>) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let cached = objects.clone();
        let log: Log = Arc::default();
        let seen = log.clone();
        let server = tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let method = request.method().to_string();
                let path = request.uri().path().to_string();
                let bytes = request
                    .into_body()
                    .collect_bytes()
                    .await
                    .unwrap_or_default();
                let body: serde_json::Value =
                    serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
                seen.lock()
                    .expect("log")
                    .push((method.clone(), path.clone(), body.clone()));
                let reply = if method == "GET" {
                    let kind = path.rsplit('/').next().unwrap_or_default().to_string();
                    let items: Vec<_> = objects
                        .iter()
                        .filter(|o| {
                            let k = o["kind"].as_str().unwrap_or_default().to_lowercase();
                            let plural = k
                                .strip_suffix('y')
                                .map_or_else(|| format!("{k}s"), |stem| format!("{stem}ies"));
                            plural == kind
                        })
                        .cloned()
                        .collect();
                    serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items})
                } else if path.ends_with("/toolcalls/c1/status") {
                    let mut c =
                        serde_json::to_value(call("system:serviceaccount:team-a:fixer", None))
                            .expect("call");
                    c["status"] = body["status"].clone();
                    c
                } else if body.is_object() {
                    let mut b = body.clone();
                    if b.get("metadata").is_none() {
                        b["metadata"] = serde_json::json!({"name": "c1", "namespace": NS});
                    }
                    b
                } else {
                    serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Success"})
                };
                send.send_response(
                    Response::builder()
                        .body(Body::from(serde_json::to_vec(&reply).expect("json")))
                        .expect("response"),
                );
            }
        });
        let client = Client::new(service, NS);
        fn of_kind<K: serde::de::DeserializeOwned>(
            objects: &[serde_json::Value],
            kind: &str,
        ) -> Vec<K> {
            objects
                .iter()
                .filter(|o| o["kind"] == kind)
                .map(|o| serde_json::from_value(o.clone()).expect(kind))
                .collect()
        }
        let cache = PolicyCache::of(
            of_kind(&cached, "ToolDescriptor"),
            of_kind(&cached, "ToolGrant"),
            of_kind(&cached, "SandboxPolicy"),
            of_kind(&cached, "CredentialBinding"),
            of_kind(&cached, "ToolApproval"),
        );
        let ctx = Arc::new(Context {
            cache,
            recorder: Recorder::new(
                client.clone(),
                Reporter {
                    controller: "test".into(),
                    instance: None,
                },
            ),
            client,
            config: CallConfig {
                executor_image: "executor:test".into(),
                artifacts: ArtifactTarget::Local {
                    dir: "/tmp/artifacts".into(),
                },
                artifact_secret: None,
                broker: Arc::new(toolgate_broker::NoBroker),
                artifact_egress: vec![],
                keep_failed_pods: Duration::from_secs(0),
            },
            metrics: Arc::default(),
            failures: Default::default(),
        });
        (ctx, log, server)
    }

    fn status_patches(log: &Log) -> Vec<serde_json::Value> {
        log.lock()
            .expect("log")
            .iter()
            .filter(|(m, p, _)| m == "PATCH" && p.ends_with("/toolcalls/c1/status"))
            .map(|(_, _, b)| b["status"].clone())
            .collect()
    }

    fn touched(log: &Log, kind: &str) -> Vec<String> {
        log.lock()
            .expect("log")
            .iter()
            .filter(|(m, p, _)| m != "GET" && p.contains(&format!("/{kind}")))
            .map(|(m, p, _)| format!("{m} {p}"))
            .collect()
    }

    #[tokio::test]
    async fn a_call_without_a_grant_is_denied_and_creates_nothing() {
        let (ctx, log, _server) = context(vec![tool(), policy()]);
        let action = reconcile(
            Arc::new(call("system:serviceaccount:team-a:fixer", None)),
            ctx,
        )
        .await
        .expect("reconciled");
        let _ = action;
        let statuses = status_patches(&log);
        let last = statuses.last().expect("a status");
        assert_eq!(last["phase"], "Denied");
        assert!(
            log.lock()
                .expect("log")
                .iter()
                .any(|(m, p, _)| m == "GET" && p.ends_with("/toolgrants")),
            "a deny from the caches is confirmed against the API server"
        );
        for kind in ["pods", "secrets", "configmaps", "networkpolicies"] {
            assert!(
                touched(&log, kind).is_empty(),
                "a denied call touched {kind}: {:?}",
                touched(&log, kind)
            );
        }
        // One Event per step.
        assert!(
            log.lock()
                .expect("log")
                .iter()
                .any(|(m, p, _)| m == "POST" && p.contains("/events"))
        );
    }

    #[tokio::test]
    async fn an_allowed_call_applies_its_children_then_the_pod() {
        let (ctx, log, _server) = context(vec![tool(), grant(), policy()]);
        let principal = "system:serviceaccount:team-a:fixer";
        reconcile(Arc::new(call(principal, None)), ctx.clone())
            .await
            .expect("decided");
        assert!(
            !log.lock().expect("log").iter().any(|(m, _, _)| m == "GET"),
            "an allowed call is decided from the caches, without a request"
        );
        let decided = status_patches(&log).last().cloned().expect("status");
        assert_eq!(decided["phase"], "Authorized", "{decided}");
        log.lock().expect("log").clear();
        reconcile(Arc::new(call(principal, Some(decided))), ctx)
            .await
            .expect("started");
        let writes: Vec<String> = log
            .lock()
            .expect("log")
            .iter()
            .filter(|(m, p, _)| m == "PATCH" && !p.contains("toolcalls"))
            .map(|(_, p, _)| p.rsplit('/').nth(1).unwrap_or_default().to_string())
            .collect();
        assert_eq!(
            writes,
            ["networkpolicies", "configmaps", "pods"],
            "order: policy and spec before the pod"
        );
        let pod = log
            .lock()
            .expect("log")
            .iter()
            .find(|(m, p, _)| m == "PATCH" && p.contains("/pods/"))
            .map(|(_, _, b)| b.clone())
            .expect("pod");
        assert_eq!(pod["metadata"]["name"], "tg-c1");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
        assert!(
            touched(&log, "secrets").is_empty(),
            "no credential, no Secret"
        );
        assert_eq!(
            status_patches(&log).last().expect("status")["phase"],
            "Running"
        );
    }
}
