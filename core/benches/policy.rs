//! Decision latency and view compilation over 10k generated descriptors and 10k grants, the same
//! decision with 1,000 Cedar ToolPolicy rules, and canonical digests of a 64 KiB args object (the
//! args digest's own RFC 8785 writer beside the generic canonicalizer crate) —
//! each beside the plain alternative, with p50/p99 from a timed loop after criterion's figures.
//! Run: `cargo bench -p toolgate-core`.

#![allow(
    unsafe_code,
    reason = "a global allocator that counts allocations is unsafe to implement"
)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use serde_json::{Value, json};
use toolgate_core::decision::{CallUnderReview, decide, decide_in};
use toolgate_core::digest::{args_digest, json_digest, sha256};
use toolgate_core::manifest::Spec;
use toolgate_core::principal::Principal;
use toolgate_core::registry::GrantEntry;
use toolgate_core::view::{ViewRequest, compile_view};
use toolgate_crds::ActionType;

mod fixtures;
use fixtures::{
    CEDAR_POLICIES, GRANTS, NS, Scenario, TOOLS, decision_percentiles, percentiles, tool_policies,
};

/// Counts this thread's allocations, so the bench can print what a decision allocates (a
/// thread-local cell: about a nanosecond per allocation, no atomic).
struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; only a count is kept.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Allocations (and reallocations) `f` makes, averaged over `n` runs.
fn allocations_per_run(n: u64, mut f: impl FnMut()) -> f64 {
    let before = ALLOCATIONS.with(std::cell::Cell::get);
    for _ in 0..n {
        f();
    }
    (ALLOCATIONS.with(std::cell::Cell::get) - before) as f64 / n as f64
}

fn args_64k() -> Value {
    let mut m = serde_json::Map::new();
    for i in 0..512 {
        m.insert(
            format!("field-{i:04}"),
            json!({"k": i, "text": "x".repeat(100)}),
        );
    }
    Value::Object(m)
}

fn main() {
    let setup = Instant::now();
    let scenario = Scenario::new();
    println!(
        "setup: registered {TOOLS} descriptors and indexed {GRANTS} grants in {:.2?}",
        setup.elapsed()
    );
    let (r, principal, call, now, limits) = (
        &scenario.registry,
        &scenario.principal,
        &scenario.call,
        scenario.now,
        &scenario.limits,
    );
    let review = scenario.review();
    let tool_name = call.tool_ref.name.clone();
    let tool = r.tool(NS, &tool_name).expect("tool");
    assert_eq!(
        decide_in(r, &review, &[], now, limits).outcome,
        toolgate_crds::DecisionOutcome::Allow
    );
    let all_grants: Vec<&GrantEntry> = r.grants().collect();
    let failures = BTreeMap::new();
    let usage = Default::default();
    let view_req = ViewRequest {
        namespace: NS,
        principal,
        intent: "look up ledger entry 42 for the reconciliation",
        action_type: Some(ActionType::Read),
        domains: &[],
        max_tools: 8,
        recent_failures: &failures,
        explain: false,
        now,
        usage: &usage,
    };
    let selector_principal = Principal::new("system:serviceaccount:bench:agent-9"); // grant-9 has a selector
    let selector_req = ViewRequest {
        principal: &selector_principal,
        ..view_req.clone()
    };
    let args = args_64k();

    // The same registry with 1,000 Cedar rules, and the plain alternative: one policy set of all
    // of them, evaluated whole for every call.
    let setup = Instant::now();
    let rc = scenario.with_cedar_rules();
    println!(
        "setup: the same with {CEDAR_POLICIES} Cedar policies (schema of {TOOLS} actions, strict validation) in {:.2?}",
        setup.elapsed()
    );
    assert_eq!(
        decide_in(&rc, &review, &[], now, limits).outcome,
        toolgate_crds::DecisionOutcome::Allow
    );
    let mut secret = call.clone();
    secret.args = json!({"path": "secret/keys"});
    let secret_review = CallUnderReview {
        spec: &secret,
        ..review
    };
    assert_eq!(
        decide_in(&rc, &secret_review, &[], now, limits).outcome,
        toolgate_crds::DecisionOutcome::Deny
    );
    let (whole_set, cedar_request, cedar_entities) = plain_cedar(&tool_name);
    let authorizer = cedar_policy::Authorizer::new();

    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    c.bench_function("decision/indexed (10k tools, 10k grants)", |b| {
        b.iter(|| decide_in(black_box(r), &review, &[], now, limits))
    });
    c.bench_function("decision/plain linear scan of all grants", |b| {
        b.iter(|| {
            decide(
                black_box(&review),
                Some(tool),
                &all_grants,
                &[],
                now,
                limits,
            )
        })
    });
    c.bench_function("decision/with 1,000 Cedar policies, indexed", |b| {
        b.iter(|| decide_in(black_box(&rc), &review, &[], now, limits))
    });
    c.bench_function("cedar/plain: one set of all 1,000 policies per call", |b| {
        b.iter(|| authorizer.is_authorized(black_box(&cedar_request), &whole_set, &cedar_entities))
    });
    c.bench_function("view/by action type, named grants (10k)", |b| {
        b.iter(|| compile_view(black_box(r), &view_req))
    });
    c.bench_function("view/by action type, selector grant (10k)", |b| {
        b.iter(|| compile_view(black_box(r), &selector_req))
    });
    c.bench_function("digest/canonical sha256 of 64 KiB args", |b| {
        b.iter(|| args_digest(black_box(&args)))
    });
    c.bench_function("digest/canonicalizer crate + sha256 of 64 KiB args", |b| {
        b.iter(|| json_digest(black_box(&args)))
    });
    c.bench_function("digest/plain serde_json + sha256 of 64 KiB args", |b| {
        b.iter(|| sha256(&serde_json::to_vec(black_box(&args)).expect("json")))
    });
    c.final_summary();

    println!("\np50 / p99 over timed loops:");
    let rows: Vec<(&str, (Duration, Duration))> = vec![
        ("decision indexed", decision_percentiles(&scenario)),
        (
            "decision linear scan",
            percentiles(2_000, || {
                black_box(decide(&review, Some(tool), &all_grants, &[], now, limits));
            }),
        ),
        (
            "decision + 1,000 Cedar",
            percentiles(20_000, || {
                black_box(decide_in(&rc, &review, &[], now, limits));
            }),
        ),
        (
            "decision + Cedar, forbidden",
            percentiles(20_000, || {
                black_box(decide_in(&rc, &secret_review, &[], now, limits));
            }),
        ),
        (
            "cedar whole set (plain)",
            percentiles(2_000, || {
                black_box(authorizer.is_authorized(&cedar_request, &whole_set, &cedar_entities));
            }),
        ),
        (
            "view named grants",
            percentiles(5_000, || {
                black_box(compile_view(r, &view_req));
            }),
        ),
        (
            "view selector grant",
            percentiles(500, || {
                black_box(compile_view(r, &selector_req));
            }),
        ),
        (
            "digest 64 KiB canonical",
            percentiles(2_000, || {
                black_box(args_digest(&args).ok());
            }),
        ),
        (
            "digest 64 KiB, crate",
            percentiles(2_000, || {
                black_box(json_digest(&args).ok());
            }),
        ),
        (
            "digest 64 KiB plain",
            percentiles(2_000, || {
                black_box(sha256(&serde_json::to_vec(&args).unwrap_or_default()));
            }),
        ),
    ];
    for (name, (p50, p99)) in rows {
        println!("  {name:<26} p50 {p50:>10.2?}  p99 {p99:>10.2?}");
    }
    println!("\nallocations per run (the system allocator's calls, reallocations included):");
    let counted = [
        (
            "decision indexed",
            allocations_per_run(1_000, || {
                black_box(decide_in(r, &review, &[], now, limits));
            }),
        ),
        (
            "view named grants",
            allocations_per_run(100, || {
                black_box(compile_view(r, &view_req));
            }),
        ),
        (
            "args digest (call's args)",
            allocations_per_run(1_000, || {
                black_box(args_digest(&call.args).ok());
            }),
        ),
    ];
    for (name, n) in counted {
        println!("  {name:<26} {n:>8.1}");
    }
}

/// The plain way: every policy in one set, the request built the same way the core builds it.
fn plain_cedar(
    call_tool: &str,
) -> (
    cedar_policy::PolicySet,
    cedar_policy::Request,
    cedar_policy::Entities,
) {
    use std::str::FromStr;
    let text: Vec<String> = tool_policies(call_tool)
        .iter()
        .filter_map(|o| match &o.spec {
            Spec::ToolPolicy(p) => Some(p.policies.clone()),
            _ => None,
        })
        .collect();
    let set = cedar_policy::PolicySet::from_str(&text.join("\n")).expect("policies");
    let principal = cedar_policy::EntityUid::from_str(
        r#"ServiceAccount::"system:serviceaccount:bench:agent-42""#,
    )
    .expect("principal");
    let action =
        cedar_policy::EntityUid::from_str(&format!("Action::\"{call_tool}\"")).expect("action");
    let resource = cedar_policy::EntityUid::from_str(r#"Target::"""#).expect("resource");
    let context = cedar_policy::Context::from_json_value(
        json!({"args": {"path": "ledger/2026/11.csv"}, "riskTier": "L0", "actionType": "read",
               "dryRun": false, "namespace": NS}),
        None,
    )
    .expect("context");
    let request = cedar_policy::Request::new(principal.clone(), action, resource, context, None)
        .expect("request");
    let entities =
        cedar_policy::Entities::from_entities([cedar_policy::Entity::with_uid(principal)], None)
            .expect("entities");
    (set, request, entities)
}
