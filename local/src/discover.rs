//! Discovery of the manifests' McpServers: each stdio server started inside the sandbox of its
//! SandboxPolicy (bubblewrap, as a call's executor), an HTTP server reached under that policy's
//! egress rules with its brokered credential; `initialize` and `tools/list` (every page, rmcp),
//! then stopped (the credential's lease revoked). At start and every `rediscoverSeconds`: when a server's tools
//! changed, the manifests are loaded again with the new descriptors, a changed tool is
//! `discovered` again until its new digest is enabled, and calls waiting for approval are looked
//! at again (a tool changed under them ends them, `ToolChanged`).

use std::time::{Duration, Instant};

use toolgate_core::manifest::Spec;
use toolgate_crds::{CredentialBindingSpec, McpServerSpec, SandboxPolicySpec};
use toolgate_sandbox::plan::Context;

use crate::manifests::{Loaded, ServerTools};
use crate::runtime::{Config, Runtime};

/// The servers of the loaded manifests: (namespace, name, spec, its sandbox policy).
fn servers(loaded: &Loaded) -> Vec<(String, String, McpServerSpec, Option<SandboxPolicySpec>)> {
    let objects = &loaded.policies.objects;
    objects
        .iter()
        .filter_map(|o| match &o.spec {
            Spec::McpServer(s) => {
                let ns = o.meta.namespace().to_string();
                let policy = match objects
                    .find("SandboxPolicy", &ns, &s.sandbox_policy_ref.name)
                    .map(|p| &p.spec)
                {
                    Some(Spec::SandboxPolicy(p)) => Some((**p).clone()),
                    _ => None,
                };
                Some((ns, o.meta.name.clone(), (**s).clone(), policy))
            }
            _ => None,
        })
        .collect()
}

/// The CredentialBinding an HTTP server's bearer comes from, if it names one that exists.
fn binding_of(
    loaded: &Loaded,
    namespace: &str,
    spec: &McpServerSpec,
) -> Result<Option<(String, CredentialBindingSpec)>, String> {
    let Some(r) = &spec.credential_binding_ref else {
        return Ok(None);
    };
    match loaded
        .policies
        .objects
        .find("CredentialBinding", namespace, &r.name)
        .map(|o| &o.spec)
    {
        Some(Spec::CredentialBinding(b)) => Ok(Some((r.name.clone(), (**b).clone()))),
        _ => Err(format!("its CredentialBinding {} does not exist", r.name)),
    }
}

/// List an HTTP server's tools from here, under `policy`'s egress rules, with the binding's
/// credential as bearer (its lease revoked once listed).
async fn list_tools_http(
    config: &Config,
    namespace: &str,
    url: &str,
    spec: &McpServerSpec,
    policy: &SandboxPolicySpec,
    binding: Option<(String, CredentialBindingSpec)>,
) -> Result<ServerTools, String> {
    let deadline = Duration::from_secs(u64::from(spec.discovery_timeout_seconds));
    let list = |bearer: Option<String>| async move {
        toolgate_executor::discover::list_http(
            toolgate_executor::discover::HttpTarget {
                url,
                network: &policy.network,
                bearer: bearer.as_deref(),
            },
            deadline,
        )
        .await
    };
    match &binding {
        None => list(None).await,
        Some((name, b)) => {
            let request = toolgate_broker::Request {
                namespace,
                name,
                binding: b,
                deadline_seconds: Some(deadline.as_secs()),
            };
            toolgate_broker::lend(config.broker.as_ref(), request, |v| list(Some(v)))
                .await
                .map_err(|e| format!("its credential (CredentialBinding {name}): {e}"))?
        }
    }
}

/// List a server's tools: a stdio server sandboxed by `policy`, an HTTP one under its egress.
pub(crate) async fn list_tools(
    config: &Config,
    spares: &std::sync::Arc<crate::slot::Spares>,
    label: &str,
    namespace: &str,
    spec: &McpServerSpec,
    policy: &SandboxPolicySpec,
    binding: Option<(String, CredentialBindingSpec)>,
) -> Result<ServerTools, String> {
    if let Some(url) = &spec.url {
        return list_tools_http(config, namespace, url, spec, policy, binding).await;
    }
    let deadline = Duration::from_secs(u64::from(spec.discovery_timeout_seconds));
    let env: Vec<(String, String)> = std::env::vars().collect();
    let plan = toolgate_sandbox::resolve(
        policy,
        &Context {
            workspace: &config.workspace,
            env: &env,
            private: std::slice::from_ref(&config.data),
            timeout_ms: Some(u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX)),
            executor_is_the_only_client: false,
        },
    )
    .map_err(|e| format!("its SandboxPolicy cannot be honoured here: {e}"))?;
    if spec.command.is_empty() {
        return Err("spec.command is empty".into());
    }
    // The executor lists the tools in its `discover` mode, inside the sandbox, as it would call
    // one: the policy's environment, seccomp and Landlock apply to the server from its start.
    let mut slot = crate::slot::Slot::start(
        config,
        spares,
        &plan,
        crate::slot::ArtifactsAt::Own,
        &format!("discovery-{label}"),
        toolgate_sandbox::prepare,
    )?;
    let artifacts = toolgate_core::exec::ArtifactTarget::Local {
        dir: slot.artifacts().display().to_string(),
    };
    let confinement = toolgate_sandbox::plan::confinement(policy)
        .map_err(|e| format!("its SandboxPolicy cannot be honoured here: {e}"))?;
    let exec_spec = toolgate_core::exec::discovery_spec(
        namespace,
        label,
        spec,
        policy,
        artifacts.clone(),
        Some(confinement),
        Some(plan.cwd.display().to_string()),
    );
    let json = serde_json::to_vec(&exec_spec).map_err(|e| format!("its spec: {e}"))?;
    std::fs::write(slot.spec_path(), json).map_err(|e| format!("its spec: {e}"))?;
    // The executor holds the discovery deadline itself (the plan's timeout is the backstop).
    let (result, _) = slot.run().await?;
    let store = toolgate_artifacts::ArtifactStore::open(&artifacts)
        .map_err(|e| format!("its artifacts: {e}"))?;
    let listed = toolgate_executor::discover::read_listed(&result, &store).await;
    slot.exited().await;
    listed
}

impl Runtime {
    /// Discover the servers that are due (all of them when `all`); true when any server's tools
    /// changed since it was last listed.
    pub(crate) async fn discover(&self, all: bool) -> bool {
        let loaded = self.loaded();
        let mut changed = false;
        for (ns, name, spec, policy) in servers(&loaded) {
            let key = (ns.clone(), name.clone());
            let due = {
                let last = crate::runtime::lock(&self.inner.discovered_at);
                all || last.get(&key).is_none_or(|t: &Instant| {
                    t.elapsed() >= Duration::from_secs(u64::from(spec.rediscover_seconds))
                })
            };
            if !due {
                continue;
            }
            crate::runtime::lock(&self.inner.discovered_at).insert(key.clone(), Instant::now());
            let Some(policy) = policy else {
                tracing::error!(server = %format!("{ns}/{name}"), "McpServer: its SandboxPolicy {} does not exist", spec.sandbox_policy_ref.name);
                continue;
            };
            let listed = match binding_of(&loaded, &ns, &spec) {
                Ok(binding) => {
                    list_tools(
                        &self.inner.config,
                        self.inner.pool.spares(),
                        &format!("mcp-{ns}-{name}"),
                        &ns,
                        &spec,
                        &policy,
                        binding,
                    )
                    .await
                }
                Err(e) => Err(e),
            };
            match listed {
                Err(e) => {
                    // The tools it had stay as they were: a server that is down hides nothing
                    // new and enables nothing new.
                    tracing::error!(server = %format!("{ns}/{name}"), error = %e, "McpServer discovery failed");
                }
                Ok(found) => {
                    tracing::debug!(server = %format!("{ns}/{name}"), tools = %serde_json::Value::Array(found.tools.clone()), version = ?found.version, "McpServer listed");
                    let mut known = crate::runtime::lock(&self.inner.discovered);
                    let before = known.get(&key).cloned();
                    if before.as_ref() != Some(&found) {
                        if let Some(before) = &before {
                            tracing::warn!(
                                server = %format!("{ns}/{name}"),
                                changed = %what_changed(&before.tools, &found.tools),
                                "McpServer: its tools changed; a changed tool is discovered again until its new digest is enabled"
                            );
                        } else {
                            tracing::info!(server = %format!("{ns}/{name}"), tools = found.tools.len(), "McpServer discovered");
                        }
                        known.insert(key, found);
                        changed = true;
                    }
                }
            }
        }
        changed
    }
}

/// The tools added, removed and changed between two lists, by name.
fn what_changed(before: &[serde_json::Value], after: &[serde_json::Value]) -> String {
    let keyed = |l: &[serde_json::Value]| -> Vec<(String, String)> {
        l.iter()
            .map(|t| (t["name"].as_str().unwrap_or("?").to_string(), t.to_string()))
            .collect()
    };
    toolgate_core::mcp::what_changed(&keyed(before), &keyed(after))
}
