//! What a call runs with, looked up before anything runs (invariant 10): the tool, its sandbox
//! policy, its credential binding; and the steps that end a call when one of them is missing.

mod support;

use support::{examples, objects};
use toolgate_core::lifecycle::run_target;
use toolgate_core::manifest::ObjectSet;
use toolgate_core::registry::Registry;
use toolgate_crds::ConditionStatus;

const NS: &str = "team-a";

fn without(kind: &str, name: &str) -> (Registry, ObjectSet) {
    let kept = objects(examples())
        .iter()
        .filter(|o| !(o.spec.kind() == kind && o.meta.name == name))
        .cloned()
        .collect();
    let set = ObjectSet::new(kept);
    (Registry::from_objects(&set), set)
}

#[test]
fn the_examples_resolve_with_policy_and_binding() {
    let set = objects(examples());
    let registry = Registry::from_objects(&set);
    let t = run_target(&registry, &set, NS, "github.create-issue").expect("resolves");
    assert_eq!(t.policy_name, "github-api");
    assert_eq!(t.binding.map(|(n, _)| n), Some("github-issues-bot"));
    let t = run_target(&registry, &set, NS, "file.read").expect("resolves");
    assert!(t.binding.is_none());
}

#[test]
fn each_missing_piece_ends_the_call_with_its_own_reason() {
    let set = objects(examples());
    let registry = Registry::from_objects(&set);
    let cases = [
        (
            run_target(&registry, &set, NS, "no.such.tool"),
            "SandboxPrepared",
            "ToolMissing",
        ),
        (
            run_target(&registry, &set, "team-b", "file.read"),
            "SandboxPrepared",
            "ToolMissing",
        ),
    ];
    for (result, kind, reason) in cases {
        let steps = result.expect_err("cannot run");
        assert_eq!((steps[0].kind, steps[0].reason.as_str()), (kind, reason));
        assert_eq!(steps[0].status, ConditionStatus::False);
        assert_eq!(steps[1].kind, "StateUpdated");
    }
    // The lookups read the object set as it is now, so an object removed since registration is
    // caught here, before anything runs.
    let (_, without_policy) = without("SandboxPolicy", "read-only");
    let steps = run_target(&registry, &without_policy, NS, "file.read").expect_err("no policy");
    assert_eq!(
        (steps[0].kind, steps[0].reason.as_str()),
        ("SandboxPrepared", "SandboxPolicyMissing")
    );
    assert!(
        steps[0]
            .message
            .contains("SandboxPolicy read-only does not exist in team-a")
    );
    let (_, without_binding) = without("CredentialBinding", "github-issues-bot");
    let steps =
        run_target(&registry, &without_binding, NS, "github.create-issue").expect_err("no binding");
    assert_eq!(
        (steps[0].kind, steps[0].reason.as_str()),
        ("CredentialsBound", "BindingMissing")
    );
}
