//! Starting an authorized call on the cluster: the core plans the run; this step checks what
//! only the cluster knows (the workspace claim), brokers the credential, applies the children
//! with server-side apply, and records the steps up to Started.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use toolgate_core::lifecycle::{Credential, Run, RunTarget, Step, cannot_run, start_steps};
use toolgate_crds::conditions::{SANDBOX_PREPARED, reason};
use toolgate_crds::{CallPhase, ToolCall, ToolCallStatus};

use super::plan::{self, Children};
use super::{Context, Error, kube_error};
use crate::build::{self, Owner};
use crate::kit::FIELD_MANAGER;

/// Start an authorized call the core planned: its pod, NetworkPolicy, spec and credential.
pub(super) async fn start(
    call: &ToolCall,
    ctx: &Context,
    ns: &str,
    run: Run<'_>,
    mut status: ToolCallStatus,
) -> Result<Action, Error> {
    let name = call.name_any();
    let uid = call.metadata.uid.clone().unwrap_or_default();
    let owner = Owner {
        kind: "ToolCall",
        name: &name,
        namespace: ns,
        uid: &uid,
    };
    // A process tool under a domain allowlist reaches the network through its own proxy: a
    // port held now, named by the NetworkPolicy, served once the credential is known.
    let proxy = if plan::needs_proxy(&run.target) && ctx.config.egress.configured() {
        match ctx.config.egress.reserve(&uid) {
            Ok(addr) => Some(addr),
            Err(e) => return setup_failed(ctx, call, status, &e).await,
        }
    } else {
        None
    };
    let mut sandbox = match prepare(ctx, call, &owner, &run.target, proxy).await? {
        Ok(s) => s,
        Err(steps) => {
            ctx.record(call, &mut status, &steps).await?;
            return Ok(Action::await_change());
        }
    };
    // A proxy-delivered credential: the pod gets a placeholder and trusts a CA of this call,
    // with which its proxy intercepts TLS to the binding's hosts to swap in the value.
    let interception = match (
        toolgate_core::exec::proxy_delivered(run.target.binding),
        proxy,
    ) {
        (true, Some(_)) => match ctx.config.egress.interception() {
            Ok(i) => Some(toolgate_egress::Pending::new(i)),
            Err(e) => return setup_failed(ctx, call, status, &e).await,
        },
        _ => None,
    };
    if interception.is_some() {
        sandbox.spec.egress_ca = Some(format!("{}/{}", build::SPEC_DIR, build::CA_FILE));
    }
    let described = plan::described(call, &run.target, &sandbox.spec);
    let placeholder = interception.as_ref().map(|p| p.placeholder().to_string());
    let (credential, issued) =
        broker(ctx, ns, &run.target, &sandbox.spec, placeholder.is_some()).await;
    let ca = interception.as_ref().map(toolgate_egress::Pending::ca_pem);
    if proxy.is_some() {
        let secret: Vec<&[u8]> = issued
            .iter()
            .map(|(_, v, _)| v.expose().as_bytes())
            .collect();
        let injection = interception.and_then(|pending| {
            pending.into_injection(
                issued.as_ref().map(|(_, v, _)| v.expose()),
                run.target
                    .binding
                    .and_then(|(_, b)| b.delivery.proxy.as_ref()),
            )
        });
        if let Err(e) = ctx
            .config
            .egress
            .serve(&uid, run.target.policy, &secret, injection)
        {
            return setup_failed(ctx, call, status, &e).await;
        }
    }
    // What the pod's Secret holds: the placeholder of a proxy-delivered credential, else the
    // value.
    let children = plan::children(
        &owner,
        &run.target,
        sandbox,
        issued
            .as_ref()
            .map(|(f, v, _)| (f.as_str(), placeholder.as_deref().unwrap_or(v.expose()))),
        &ctx.config,
        ca.as_deref(),
    )
    .map_err(|source| Error::Json {
        what: "the call's ConfigMap",
        source,
    })?;
    let child = build::child_name(&name);
    let steps = start_steps(
        &run.target,
        &mut status,
        described,
        credential,
        format!("pod {child} created; the executor starts in it"),
    );
    let lease = issued.and_then(|(_, _, lease)| lease);
    if let Some(lease) = &lease {
        // Kept before anything else: whatever happens next, the lease is revoked.
        Api::<Secret>::namespaced(ctx.client.clone(), ns)
            .patch(
                &build::lease_name(&name),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&build::lease_secret(&owner, lease)),
            )
            .await
            .map_err(kube_error("keeping the call's lease"))?;
    }
    if steps.last().and_then(|s| s.phase) == Some(CallPhase::Running) {
        apply_children(&ctx.client, ns, &child, children).await?;
        status.runtime.get_or_insert_with(Default::default).pod_name = Some(child);
    }
    ctx.record(call, &mut status, &steps).await?;
    // An allowOnce approval is used up when the run starts, on both runtimes.
    if status.phase == Some(CallPhase::Running) {
        for approval in &run.consumes {
            super::cleanup::consume_approval(ctx, ns, approval).await;
        }
    }
    Ok(Action::requeue(Duration::from_secs(30)))
}

/// End a call whose sandbox could not be set up (its egress proxy: a port, a CA).
async fn setup_failed(
    ctx: &Context,
    call: &ToolCall,
    mut status: ToolCallStatus,
    e: &crate::egress::EgressError,
) -> Result<Action, Error> {
    let steps = cannot_run(
        SANDBOX_PREPARED,
        reason::SANDBOX_SETUP_FAILED,
        e.to_string(),
    );
    ctx.record(call, &mut status, &steps).await?;
    Ok(Action::await_change())
}

/// The call's sandbox, after what only the cluster can say: a pod whose workspace claim does not
/// exist would stay Pending, and the call Running, forever.
async fn prepare(
    ctx: &Context,
    call: &ToolCall,
    owner: &Owner<'_>,
    target: &RunTarget<'_>,
    proxy: Option<std::net::SocketAddr>,
) -> Result<Result<plan::Sandbox, Vec<Step>>, Error> {
    let sandbox = match plan::sandbox(
        owner,
        &call.spec,
        toolgate_api::trace::call_traceparent(&super::traced(call)),
        target,
        &ctx.config,
        proxy,
    ) {
        Ok(s) => s,
        Err(steps) => return Ok(Err(steps)),
    };
    if let Some(claim) = &target.policy.filesystem.workspace_claim_name
        && Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), owner.namespace)
            .get_opt(claim)
            .await
            .map_err(kube_error("reading the workspace claim"))?
            .is_none()
    {
        return Ok(Err(cannot_run(
            SANDBOX_PREPARED,
            reason::WORKSPACE_CLAIM_MISSING,
            format!(
                "SandboxPolicy {}: its workspace PersistentVolumeClaim {claim} does not exist in {}",
                target.policy_name, owner.namespace
            ),
        )));
    }
    Ok(Ok(sandbox))
}

/// What the broker issued: the file name, the value for the call's Secret, and its lease.
type Issued = (
    String,
    toolgate_broker::Secret,
    Option<toolgate_broker::Lease>,
);

/// Issue the call's credential, if it has one (it lives no longer than the tool's timeout): how
/// it went (for CredentialsBound), and what to put in its Secrets.
async fn broker(
    ctx: &Context,
    ns: &str,
    target: &RunTarget<'_>,
    spec: &toolgate_core::exec::ExecSpec,
    proxied: bool,
) -> (Credential, Option<Issued>) {
    let Some((binding, b)) = target.binding else {
        return (Credential::NotRequired, None);
    };
    // Without its proxy, a proxy-delivered value would sit in the sandbox its binding keeps it
    // out of: refused before anything is issued.
    if b.delivery.mode == toolgate_crds::DeliveryMode::Proxy && !proxied {
        return (
            Credential::Failed {
                binding: binding.into(),
                reason: toolgate_crds::conditions::reason::DELIVERY_UNSUPPORTED,
                error: format!(
                    "CredentialBinding {binding} has delivery.mode: proxy, which needs the call's egress proxy: this operator serves none (--egress-proxy-address); the value would enter the sandbox, so nothing was issued"
                ),
            },
            None,
        );
    }
    let request = toolgate_broker::Request {
        namespace: ns,
        name: binding,
        binding: b,
        deadline_seconds: Some(target.credential_deadline_seconds()),
    };
    match ctx.config.broker.issue(request).await {
        Err(e) => (
            Credential::Failed {
                binding: binding.into(),
                reason: e.reason(),
                error: e.to_string(),
            },
            None,
        ),
        Ok(issued) => {
            let file = spec
                .credentials
                .first()
                .map_or_else(|| binding.to_string(), |c| c.file_name.clone());
            (
                Credential::Issued {
                    binding: binding.into(),
                    delivered: if proxied {
                        format!(
                            "as a placeholder in file {file} in Secret {}; the call's egress proxy sends the value",
                            build::child_name(&spec.call.name)
                        )
                    } else {
                        format!(
                            "as file {file} in Secret {}",
                            build::child_name(&spec.call.name)
                        )
                    },
                    ttl_seconds: u64::from(issued.ttl_seconds),
                    leased: issued.lease.is_some(),
                },
                Some((file, issued.value, issued.lease)),
            )
        }
    }
}

/// Apply every child, the pod last (its NetworkPolicy, spec and credential exist before it).
async fn apply_children(
    client: &Client,
    ns: &str,
    child: &str,
    children: Children,
) -> Result<(), Error> {
    let Children {
        network_policy,
        config_map,
        secret,
        pod,
    } = children;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    Api::<NetworkPolicy>::namespaced(client.clone(), ns)
        .patch(child, &pp, &Patch::Apply(&network_policy))
        .await
        .map_err(kube_error("applying the call's NetworkPolicy"))?;
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(child, &pp, &Patch::Apply(&config_map))
        .await
        .map_err(kube_error("applying the call's ConfigMap"))?;
    if let Some(secret) = secret {
        Api::<Secret>::namespaced(client.clone(), ns)
            .patch(child, &pp, &Patch::Apply(&secret))
            .await
            .map_err(kube_error("applying the call's credential Secret"))?;
    }
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch(child, &pp, &Patch::Apply(&pod))
        .await
        .map_err(kube_error("applying the call's pod"))?;
    Ok(())
}
