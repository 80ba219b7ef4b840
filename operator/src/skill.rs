//! The Skill controller: read a skill's files from its ConfigMap, register the scripts it
//! declares as ToolDescriptors (`<skill>.<tool>`, owned by the Skill, applied with server-side
//! apply) in lifecycle `discovered` until the digest a reviewer enabled in `spec.enabled`
//! matches, and say what it found in the status (the description a view matches, each tool's
//! digest, the scripts nothing declares) and in Events. What a skill's files mean is the core's
//! (`toolgate_core::skill::load`, as in `toolgate local`); the agent API reads the instructions
//! through [`read`] on request.
//!
//! A script's text travels in its descriptor: a call's pod never mounts the ConfigMap, so a
//! skill tool's sandbox holds its own script and nothing else of the skill.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use toolgate_crds::{DiscoveredTool, Skill};

use crate::kit;
use crate::readiness::{apply_status, ready};

/// The label naming the Skill a ToolDescriptor was declared by; on a ConfigMap, the Skill whose
/// files it holds (a labelled ConfigMap's changes are seen at once, any other's within
/// [`REREAD`]).
pub const SKILL_LABEL: &str = "toolgate.dev/skill";

/// How often a skill's ConfigMap is read again when no watched change says it changed.
const REREAD: Duration = Duration::from_secs(60);

/// Condition reasons of a Skill's `Ready`.
mod reason {
    /// The files were read and every declaration is valid.
    pub const LOADED: &str = "Loaded";
    /// The files are not a valid skill; the tools it had stay as they were.
    pub const INVALID: &str = "InvalidSkill";
    /// Its ConfigMap does not exist, or it names none.
    pub const REFERENCE_MISSING: &str = "ReferenceMissing";
}

/// Why a skill could not be read: the condition reason and words.
#[derive(Debug)]
pub struct Unread(pub &'static str, pub String);

/// Read a Skill's files from its ConfigMap and load them (what the controller registers and
/// what GetSkill returns).
pub async fn read(
    client: &Client,
    ns: &str,
    skill: &Skill,
) -> Result<toolgate_core::skill::LoadedSkill, Unread> {
    let name = skill.name_any();
    let Some(map) = &skill.spec.config_map_ref else {
        return Err(Unread(
            reason::REFERENCE_MISSING,
            "spec.configMapRef: on a cluster a skill's files are a ConfigMap (spec.path is a folder beside a manifest, for toolgate local)".into(),
        ));
    };
    let config_map = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&map.name)
        .await
        .map_err(|e| {
            Unread(
                reason::INVALID,
                format!("reading ConfigMap {}: {e}", map.name),
            )
        })?
        .ok_or_else(|| {
            Unread(
                reason::REFERENCE_MISSING,
                format!("spec.configMapRef: ConfigMap {} does not exist", map.name),
            )
        })?;
    let mut files = toolgate_core::skill::Files {
        flat: true,
        ..Default::default()
    };
    for (k, v) in config_map.data.unwrap_or_default() {
        files.files.insert(k, v.into_bytes());
    }
    for (k, v) in config_map.binary_data.unwrap_or_default() {
        files.files.insert(k, v.0);
    }
    toolgate_core::skill::load(ns, &name, &skill.spec, &files).map_err(|errors| {
        Unread(
            reason::INVALID,
            format!(
                "ConfigMap {}: {}",
                map.name,
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        )
    })
}

/// What a reconcile needs.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Publishes the Events.
    pub recorder: Recorder,
    /// Consecutive failures per skill, for its backoff.
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

async fn publish(ctx: &Context, skill: &Skill, type_: EventType, reason: &str, note: String) {
    crate::readiness::publish_event(&ctx.recorder, skill, "Load", type_, reason, note).await;
}

#[tracing::instrument(skip(skill, ctx), fields(skill = %skill.name_any(), namespace = skill.namespace().unwrap_or_default()))]
async fn reconcile(skill: Arc<Skill>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = skill.name_any();
    let ns = skill.namespace().ok_or_else(|| Error::NoNamespace {
        kind: "Skill",
        name: name.clone(),
    })?;
    let generation = skill.metadata.generation;
    let previous = skill.status.clone().unwrap_or_default();
    let skills = Api::<Skill>::namespaced(ctx.client.clone(), &ns);
    let loaded = match read(&ctx.client, &ns, &skill).await {
        Ok(l) => l,
        Err(Unread(why, message)) => {
            // The tools it had stay as they were: a broken edit enables nothing new.
            if let Some(condition) = crate::readiness::not_ready_now(
                &previous.conditions,
                previous.observed_generation,
                why,
                message.clone(),
                generation,
            ) {
                publish(&ctx, &skill, EventType::Warning, why, message).await;
                apply_status(
                    skills,
                    &name,
                    condition,
                    generation,
                    serde_json::Value::Null,
                )
                .await?;
            }
            return Ok(Action::requeue(REREAD));
        }
    };
    let owner = skill.controller_owner_ref(&());
    crate::descriptor::apply_owned(
        &ctx.client,
        &ns,
        owner,
        (SKILL_LABEL, &name),
        &loaded.manifests,
    )
    .await?;
    let fingerprints = |t: &[DiscoveredTool]| -> Vec<(String, String)> {
        t.iter()
            .map(|t| (t.tool.clone(), t.digest.clone()))
            .collect()
    };
    let changes = toolgate_core::mcp::what_changed(
        &fingerprints(&previous.tools),
        &fingerprints(&loaded.tools),
    );
    if previous.instructions_digest.is_some() && !changes.is_empty() {
        publish(
            &ctx,
            &skill,
            EventType::Warning,
            "ToolsChanged",
            format!(
                "{changes}; a changed script or declaration is discovered again (out of every view, its waiting calls ended) until its new digest is enabled"
            ),
        )
        .await;
    }
    if let Some(why) = &loaded.withheld
        && previous.instructions_withheld.as_ref() != Some(why)
    {
        publish(
            &ctx,
            &skill,
            EventType::Warning,
            "InstructionsWithheld",
            why.clone(),
        )
        .await;
    }
    let status = loaded.status();
    let mut message = format!(
        "{} tool(s) declared, {} enabled by reviewed digest",
        status.tool_count, status.enabled_count
    );
    if !status.unregistered_scripts.is_empty() {
        message.push_str(&format!(
            "; never run (no declaration): {}",
            status.unregistered_scripts.join(", ")
        ));
    }
    if let Some(why) = &loaded.withheld {
        message.push_str(&format!("; instructions withheld: {why}"));
    }
    let condition = ready(
        &previous.conditions,
        true,
        reason::LOADED,
        message,
        generation,
    );
    let mut fields = serde_json::to_value(&status).unwrap_or_default();
    if let Some(m) = fields.as_object_mut() {
        m.remove("conditions");
        m.remove("observedGeneration");
        // Absent fields would keep an old value under server-side apply: say null.
        m.entry("instructionsWithheld")
            .or_insert(serde_json::Value::Null);
        m.entry("unregisteredScripts")
            .or_insert(serde_json::json!([]));
        m.entry("tools").or_insert(serde_json::json!([]));
    }
    apply_status(skills, &name, condition, generation, fields).await?;
    Ok(Action::requeue(REREAD))
}

async fn guarded(guard: Arc<DeserializeGuard<Skill>>, ctx: Arc<Context>) -> Result<Action, Error> {
    kit::reconcile_guarded(guard, ctx, reconcile).await
}

fn error_policy(guard: Arc<DeserializeGuard<Skill>>, error: &Error, ctx: Arc<Context>) -> Action {
    kit::retry(&ctx.failures, &*guard, error)
}

/// Run the Skill controller until shutdown: a Skill is read when it changes, when a ConfigMap
/// labelled [`SKILL_LABEL`] changes, and every [`REREAD`].
pub async fn run(
    client: Client,
    scope: crate::scope::Scope,
    metrics: Arc<crate::metrics::Metrics>,
) {
    let ctx = Arc::new(Context {
        client: client.clone(),
        failures: Default::default(),
        metrics,
        recorder: kit::recorder(&client),
    });
    let controller = Controller::new(
        scope.api::<DeserializeGuard<Skill>>(&client),
        watcher::Config::default(),
    );
    let store = controller.store();
    controller
        .watches(
            scope.api::<ConfigMap>(&client),
            watcher::Config::default().labels(SKILL_LABEL),
            move |map: ConfigMap| {
                let ns = map.namespace().unwrap_or_default();
                let map_name = map.name_any();
                store
                    .state()
                    .iter()
                    .filter(|g| {
                        g.0.as_ref().is_ok_and(|s| {
                            s.namespace().as_deref() == Some(ns.as_str())
                                && s.spec.config_map_ref.as_ref().map(|r| r.name.as_str())
                                    == Some(map_name.as_str())
                        })
                    })
                    .map(|g| ObjectRef::from_obj(&**g))
                    .collect::<Vec<_>>()
            },
        )
        .shutdown_on_signal()
        .run(guarded, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}
