//! Placing a call on this machine: its sandbox plan from the policy, its own folder with the
//! executor's spec and the brokered credential. Placement only: what runs, with which policy and
//! credential, was decided by the core.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use toolgate_core::exec::{ArtifactTarget, CallIdentity, ExecInput, FsRules, exec_spec};
use toolgate_core::lifecycle::{Credential, RunTarget, Step, cannot_run};
use toolgate_crds::conditions::{SANDBOX_PREPARED, reason};
use toolgate_sandbox::plan::{Context, Network};

use crate::runtime::Config;
use crate::slot::{ArtifactsAt, Slot, store_of};
use crate::store::CallRecord;

/// A placed call: its sandbox, started and waiting, with the call's spec and credential in it.
pub(crate) struct Placed {
    pub(crate) slot: crate::slot::Slot,
    pub(crate) secret: Option<crate::broker::Secret>,
    /// What SandboxPrepared says.
    pub(crate) described: String,
    /// How the credential went.
    pub(crate) credential: Credential,
    /// The call's egress proxy, serving until the call ends (`egress: allowlist`).
    pub(crate) egress: Option<toolgate_egress::Served>,
}

/// The sandbox a call's target runs in on this machine, and the Landlock rules of its policy;
/// or why this runtime cannot honour the policy. Pure apart from reading the environment, so it
/// is asked at proposal time too, before anyone approves the call.
pub(crate) fn sandbox_plan(
    config: &Config,
    hidden: &[PathBuf],
    target: &RunTarget<'_>,
) -> Result<(toolgate_sandbox::SandboxPlan, FsRules), toolgate_sandbox::ResolveError> {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let private: Vec<PathBuf> = std::iter::once(config.data.clone())
        .chain(hidden.iter().cloned())
        .collect();
    let mut plan = toolgate_sandbox::resolve(
        target.policy,
        &Context {
            workspace: &config.workspace,
            env: &env,
            private: &private,
            timeout_ms: Some(u64::from(target.tool.spec.execution.timeout_ms)),
            executor_is_the_only_client: toolgate_core::exec::executor_reaches_the_network(
                &target.tool.spec.execution,
                target.binding,
            ),
        },
    )?;
    plan.layers = Some(crate::slot::layers_folder(&config.data));
    if let Some(why) =
        toolgate_core::exec::proxied_credential_refused(target.policy, target.binding)
    {
        return Err(toolgate_sandbox::ResolveError::ProxiedCredential(why));
    }
    Ok((plan, toolgate_sandbox::plan::confinement(target.policy)?))
}

/// Give the call a sandbox (`slot`, started for the plan expected before the transaction, or a
/// new one when the plan is not that one any more), write the executor's spec into it and
/// deliver the credential the broker issued (`issued`, asked before the transaction: the broker
/// is asynchronous). On failure, the steps that end the call.
pub(crate) fn place(
    rec: &CallRecord,
    target: &RunTarget<'_>,
    config: &Config,
    spares: &std::sync::Arc<crate::slot::Spares>,
    hidden: &[PathBuf],
    slot: Option<Slot>,
    issued: Option<Issue>,
) -> Result<Placed, Vec<Step>> {
    let policy_name = target.policy_name;
    let (plan, confinement) = sandbox_plan(config, hidden, target).map_err(|e| {
        cannot_run(
            SANDBOX_PREPARED,
            reason::SANDBOX_REFUSED,
            format!("SandboxPolicy {policy_name}: {e}"),
        )
    })?;
    let io = |what: &str, e: &dyn std::fmt::Display| {
        cannot_run(
            SANDBOX_PREPARED,
            reason::SANDBOX_SETUP_FAILED,
            format!("{what}: {e}"),
        )
    };
    // The call's artifacts are kept under the store by namespace and id: both must be names.
    crate::store::call_folder(&store_of(config), &rec.namespace, &rec.id)
        .map_err(|e| io("the call's artifact folder", &e))?;
    let slot = match slot {
        Some(s) if s.base() == &plan => s,
        // The manifests changed since the slot was asked for (or none could be made then).
        _ => Slot::start(
            config,
            spares,
            &plan,
            ArtifactsAt::Store(store_of(config)),
            "call",
            toolgate_sandbox::prepare,
        )
        .map_err(|e| io("starting the sandbox", &e))?,
    };
    let described = describe(&plan);
    let mut spec = executor_spec(rec, target, &plan, confinement, &store_of(config));
    if plan.network == Network::Proxied {
        spec.egress_proxy = Some(slot.egress_socket().1.display().to_string());
    }
    // A proxy-delivered credential: the sandbox gets a placeholder, and trusts this call's CA
    // for the binding's hosts, whose TLS the proxy intercepts to swap it for the value.
    let proxied = match target.binding {
        Some(_) if toolgate_core::exec::proxy_delivered(target.binding) => {
            let interception = intercept(config, &slot)
                .map_err(|e| io("the call's egress certificate authority", &e))?;
            spec.egress_ca = Some(slot.egress_ca().1.display().to_string());
            Some(toolgate_egress::Pending::new(interception))
        }
        _ => None,
    };
    let json = serde_json::to_vec_pretty(&spec).map_err(|e| io("writing the call spec", &e))?;
    std::fs::write(slot.spec_path(), json).map_err(|e| io("writing the call spec", &e))?;
    slot.make_namespace_folder(&rec.namespace);
    let placeholder = proxied.as_ref().map(toolgate_egress::Pending::placeholder);
    let (secret, credential) = deliver(target, &spec, &slot.credentials(), issued, placeholder)?;
    // Served before the executor reads its spec (at its go), knowing the credential it keeps
    // out of its records (and, for a proxy-delivered one, swaps in).
    let injection = proxied.and_then(|pending| {
        pending.into_injection(
            secret.as_ref().map(|s| s.expose()),
            target.binding.and_then(|(_, b)| b.delivery.proxy.as_ref()),
        )
    });
    let egress = match plan.network {
        Network::Proxied => Some(
            serve_egress(config, target.policy, &slot, secret.as_ref(), injection)
                .map_err(|e| io("the call's egress proxy", &e))?,
        ),
        Network::None | Network::Host => None,
    };
    Ok(Placed {
        slot,
        secret,
        described,
        credential,
        egress,
    })
}

/// Serve the call's egress proxy on a socket in its run folder, deciding by its policy's
/// `network`: the sandbox has loopback only, and its executor relays the tool's proxied
/// connections here.
fn serve_egress(
    config: &Config,
    policy: &toolgate_crds::SandboxPolicySpec,
    slot: &Slot,
    secret: Option<&crate::broker::Secret>,
    injection: Option<(toolgate_egress::Injection, toolgate_egress::Interception)>,
) -> Result<toolgate_egress::Served, String> {
    let rules = toolgate_contract::egress::EgressRules::from_policy(&policy.network)
        .map_err(|e| e.to_string())?;
    let resolver =
        toolgate_egress::Resolver::new(&config.egress_nameservers).map_err(|e| e.to_string())?;
    let (host, _) = slot.egress_socket();
    let listener = std::os::unix::net::UnixListener::bind(&host)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(tokio::net::UnixListener::from_std)
        .map_err(|e| format!("{}: {e}", host.display()))?;
    let redactor = toolgate_core::redact::Redactor::new(secret.map(|s| s.expose().as_bytes()));
    let mut proxy = toolgate_egress::Proxy::new(rules, resolver, redactor);
    if let Some((injection, interception)) = injection {
        proxy = proxy.with_injection(injection, interception);
    }
    Ok(proxy.serve_unix(listener))
}

/// A CA for this call alone, written in its run folder for its sandbox to trust.
fn intercept(config: &Config, slot: &Slot) -> Result<toolgate_egress::Interception, String> {
    let upstream =
        toolgate_egress::upstream_tls(&config.egress_upstream_ca).map_err(|e| e.to_string())?;
    let interception = toolgate_egress::Interception::new(upstream).map_err(|e| e.to_string())?;
    let (host, _) = slot.egress_ca();
    std::fs::write(&host, interception.ca_pem()).map_err(|e| format!("{}: {e}", host.display()))?;
    Ok(interception)
}

/// The executor's input for the call, as it sees the sandbox.
fn executor_spec(
    rec: &CallRecord,
    target: &RunTarget<'_>,
    plan: &toolgate_sandbox::SandboxPlan,
    confinement: FsRules,
    artifacts_root: &Path,
) -> toolgate_core::exec::ExecSpec {
    let tool = target.tool;
    let mut spec = exec_spec(ExecInput {
        call: CallIdentity {
            namespace: rec.namespace.clone(),
            name: rec.id.clone(),
            // SandboxPrepared, CredentialsBound, then Started: the event that starts it.
            event_id: format!("{}/{}", rec.id, rec.events + 3),
        },
        tool: &tool.spec,
        policy: target.policy,
        args: rec.spec.args.clone(),
        dry_run: rec.spec.dry_run,
        artifacts: ArtifactTarget::Local {
            dir: artifacts_root.display().to_string(),
        },
        credential: target.binding,
        traceparent: Some(toolgate_api::trace::call_traceparent(&rec.traced())),
        working_dir: Some(match &tool.spec.execution.working_dir {
            Some(w) => Path::new(toolgate_sandbox::plan::WORKSPACE_INSIDE)
                .join(w)
                .display()
                .to_string(),
            None => plan.cwd.display().to_string(),
        }),
        write_roots: plan
            .writable
            .iter()
            .take(target.policy.filesystem.write_roots.len())
            .map(|b| b.inside.display().to_string())
            .collect(),
        // Landlock inside bubblewrap, when the kernel has it: the tool keeps to the policy's
        // roots and loses the executor's own files. Blocked paths stay bubblewrap's: covered by
        // an empty file or folder, so `git` (a blocked .git/config) and `grep -r` (a blocked
        // .env) still work; in a pod, where nothing can cover them, Landlock refuses them.
        confinement: toolgate_sandbox::confine::available().then_some(FsRules {
            blocked: Vec::new(),
            ..confinement
        }),
    });
    // Every sandbox here is bubblewrap's, which installs the seccomp filters on the executor
    // (`toolgate_sandbox::prepare`): the tool inherits them.
    spec.seccomp_inherited = true;
    spec
}

/// What the broker answered for a call's binding (by name).
pub(crate) type Issue = (
    String,
    Result<crate::broker::Issued, crate::broker::BrokerError>,
);

/// The binding a call's run will use and its credential's deadline (s), owned: the broker is
/// asked for it before the transaction that places the call.
pub(crate) type Wanted = (String, toolgate_crds::CredentialBindingSpec, u64);

/// What the run of `target` will ask the broker for.
pub(crate) fn wanted(target: &RunTarget<'_>) -> Option<Wanted> {
    let (name, binding) = target.binding?;
    Some((
        name.to_string(),
        binding.clone(),
        target.credential_deadline_seconds(),
    ))
}

/// Ask the broker for a call's credential; it lives no longer than the tool's timeout.
pub(crate) async fn issue(config: &Config, namespace: &str, wanted: Wanted) -> Issue {
    let (name, binding, deadline) = wanted;
    let request = crate::broker::Request {
        namespace,
        name: &name,
        binding: &binding,
        deadline_seconds: Some(deadline),
    };
    let answer = config.broker.issue(request).await;
    (name, answer)
}

/// Deliver the issued credential into the call's folder (mode 400), or say it needs none.
fn deliver(
    target: &RunTarget<'_>,
    spec: &toolgate_core::exec::ExecSpec,
    creds_dir: &Path,
    issued: Option<Issue>,
    placeholder: Option<&str>,
) -> Result<(Option<crate::broker::Secret>, Credential), Vec<Step>> {
    let Some((name, _)) = target.binding else {
        return Ok((None, Credential::NotRequired));
    };
    let issued = match issued {
        Some((n, Ok(i))) if n == name => i,
        Some((n, Err(e))) if n == name => {
            return Ok((
                None,
                Credential::Failed {
                    binding: name.to_string(),
                    reason: e.reason(),
                    error: e.to_string(),
                },
            ));
        }
        // The binding changed between asking the broker and placing the call (a reload).
        _ => {
            return Ok((
                None,
                Credential::Failed {
                    binding: name.to_string(),
                    reason: toolgate_crds::conditions::reason::BROKER_FAILED,
                    error: "the call's binding changed while its credential was issued".into(),
                },
            ));
        }
    };
    let file = spec
        .credentials
        .first()
        .map_or_else(|| name.to_string(), |c| c.file_name.clone());
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(creds_dir.join(&file))
        .and_then(|mut f| {
            let delivered = placeholder.unwrap_or(issued.value.expose());
            std::io::Write::write_all(&mut f, delivered.as_bytes())
        })
        .map_err(|e| {
            cannot_run(
                SANDBOX_PREPARED,
                reason::SANDBOX_SETUP_FAILED,
                format!("writing the credential file: {e}"),
            )
        })?;
    Ok((
        Some(issued.value),
        Credential::Issued {
            binding: name.to_string(),
            delivered: match placeholder {
                Some(_) => format!(
                    "as a placeholder in file {file}; the call's egress proxy sends the value"
                ),
                None => format!("as file {file}"),
            },
            ttl_seconds: u64::from(issued.ttl_seconds),
            leased: issued.lease.is_some(),
        },
    ))
}

/// What SandboxPrepared says of a local sandbox.
fn describe(plan: &toolgate_sandbox::SandboxPlan) -> String {
    let list = |b: &[toolgate_sandbox::plan::Bind]| {
        b.iter()
            .map(|b| b.inside.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "read-only [{}], writable [{}], hidden {}, network {}, timeout {} ms, memory {} MiB, processes {}",
        list(&plan.read_only),
        list(&plan.writable),
        plan.hidden.len(),
        match plan.network {
            Network::None => "none (loopback only)",
            Network::Host => "host",
            Network::Proxied =>
                "allowlist, through the call's egress proxy (loopback only otherwise)",
        },
        plan.limits.timeout.as_millis(),
        plan.limits.memory_bytes >> 20,
        plan.limits
            .processes
            .map_or("unlimited".into(), |p| p.to_string()),
    )
}
