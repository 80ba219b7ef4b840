//! Readiness of ToolPolicies: whether every Cedar policy parses, only forbids and type-checks
//! against the namespace's tools — the same check as `toolgate lint`, with the same line and
//! column — and how many policies it holds. Looked at again when a descriptor of the namespace
//! changes (a policy may name an arg a tool no longer has).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ListParams};
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use toolgate_core::manifest::{ObjectSet, Spec};
use toolgate_core::registry::Registry;
use toolgate_crds::conditions::reason;
use toolgate_crds::{ToolDescriptor, ToolPolicy};

use crate::descriptor::{meta_of, object};
use crate::kit;
use crate::readiness::{Error, apply_status, ready};

struct Context {
    client: Client,
    failures: kit::Failures,
    /// Where reconciles are counted.
    metrics: Arc<crate::metrics::Metrics>,
    /// Publishes the Events of failed reconciles.
    recorder: kube::runtime::events::Recorder,
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

/// The problems of one ToolPolicy against the namespace's descriptors, and its policy count.
fn check(policy: &ToolPolicy, descriptors: &[ToolDescriptor]) -> (Vec<String>, usize) {
    let name = policy.name_any();
    let mut objects: Vec<_> = descriptors
        .iter()
        .map(|d| object(meta_of(d), Spec::ToolDescriptor(Box::new(d.spec.clone()))))
        .collect();
    objects.push(object(
        meta_of(policy),
        Spec::ToolPolicy(Box::new(policy.spec.clone())),
    ));
    let registry = Registry::from_objects(&ObjectSet::new(objects));
    let ns = policy.namespace().unwrap_or_default();
    let problems = registry
        .policy_problems()
        .iter()
        .filter(|(_, p)| p.tool_policy == name)
        .map(|(_, p)| format!("{}: {p}", p.code))
        .collect();
    let count = registry.tool_policies(&ns).map_or(0, |p| p.len());
    (problems, count)
}

#[tracing::instrument(skip(p, ctx), fields(tool_policy = %p.name_any(), namespace = p.namespace().unwrap_or_default()))]
async fn reconcile(p: Arc<ToolPolicy>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = p.namespace().ok_or_else(|| Error::NoNamespace {
        kind: "ToolPolicy",
        name: p.name_any(),
    })?;
    let descriptors: Vec<ToolDescriptor> =
        crate::kit::list_readable(&ctx.client, &ns, &ListParams::default()).await?;
    let (problems, count) = check(&p, &descriptors);
    let previous = p
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let generation = p.metadata.generation;
    let (ok, why, message) = if problems.is_empty() {
        (
            true,
            reason::COMPILED,
            format!(
                "{count} polic{} checked against the {} tools of {ns} ({})",
                if count == 1 { "y" } else { "ies" },
                descriptors.len(),
                p.spec.mode.as_str()
            ),
        )
    } else {
        (false, reason::POLICY_INVALID, problems.join("; "))
    };
    let condition = ready(&previous, ok, why, message, generation);
    let unchanged = p.status.as_ref().is_some_and(|s| {
        s.policies == Some(u32::try_from(count).unwrap_or(u32::MAX))
            && s.conditions
                .first()
                .map(|c| (&c.reason, &c.message, c.status))
                == Some((&condition.reason, &condition.message, condition.status))
    });
    if !unchanged {
        apply_status(
            Api::<ToolPolicy>::namespaced(ctx.client.clone(), &ns),
            &p.name_any(),
            condition,
            generation,
            serde_json::json!({"policies": count}),
        )
        .await?;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

async fn guarded(
    guard: Arc<DeserializeGuard<ToolPolicy>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    kit::reconcile_guarded(guard, ctx, reconcile).await
}

fn error_policy(p: Arc<DeserializeGuard<ToolPolicy>>, error: &Error, ctx: Arc<Context>) -> Action {
    kit::retry(&ctx.failures, &*p, error)
}

/// Run the ToolPolicy controller until shutdown.
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
        scope.api::<DeserializeGuard<ToolPolicy>>(&client),
        watcher::Config::default(),
    );
    let store = controller.store();
    controller
        .watches(
            scope.api::<ToolDescriptor>(&client),
            watcher::Config::default(),
            move |d: ToolDescriptor| {
                let ns = d.namespace();
                store
                    .state()
                    .into_iter()
                    .filter(|p| p.namespace() == ns)
                    .map(|p| ObjectRef::from_obj(&*p))
                    .collect::<Vec<_>>()
            },
        )
        .shutdown_on_signal()
        .run(guarded, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor() -> ToolDescriptor {
        let yaml = toolgate_testkit::fixtures::Tool::test("test.echo").yaml("team-a");
        serde_norway::from_str(&yaml).expect("descriptor")
    }

    fn policy(text: &str) -> ToolPolicy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "toolgate.dev/v1alpha1", "kind": "ToolPolicy",
            "metadata": {"name": "p", "namespace": "team-a"},
            "spec": {"policies": text},
        }))
        .expect("policy")
    }

    #[test]
    fn a_policy_is_checked_against_the_namespace_tools_with_its_position() {
        let ok = policy(
            "forbid (principal, action == Action::\"test.echo\", resource) when { context.args has msg && context.args.msg like \"*secret*\" };",
        );
        assert_eq!(check(&ok, &[descriptor()]), (vec![], 1));
        let typo = policy(
            "forbid (principal, action == Action::\"test.echo\", resource)\n  when { context.args.mgs == \"x\" };",
        );
        let (problems, _) = check(&typo, &[descriptor()]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("cedar-type: line 2, column "),
            "{problems:?}"
        );
    }
}
