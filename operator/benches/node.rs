//! A governed call on the test cluster's real node, end to end: the time from a ToolCall's
//! creation to its `Succeeded` (one pod per call, scheduled, run by the kubelet in a container
//! of the executor image, output uploaded to a real S3 bucket), and the API server requests each
//! call costs, from the API server's own `apiserver_request_total` (every client: the operator,
//! the scheduler, the kubelet, this bench's one watch per call).
//!
//!   tests/bench.sh --profile dev -p toolgate-operator --bench node
//!
//! Not a test: it prints figures and asserts nothing about time. Without the test cluster it
//! says so and exits.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use toolgate_core::lifecycle::is_terminal;
use toolgate_crds::{CallPhase, ToolCall};
use toolgate_testkit::fixtures::{self, Tool};
use toolgate_testkit::moto::Moto;

const CALLS: usize = 20;

/// `apiserver_request_total` summed by (resource, verb).
fn requests() -> BTreeMap<(String, String), f64> {
    let text = support::ok(&["get", "--raw", "/metrics"], None);
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let Some((labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(&format!("{name}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or_default()
                .to_string()
        };
        *out.entry((label("resource"), label("verb"))).or_default() +=
            value.parse::<f64>().unwrap_or(0.0);
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    if std::env::var_os("TOOLGATE_NODE_CONTAINERD").is_none()
        || std::env::var_os("TOOLGATE_KUBECONFIG").is_none()
    {
        println!(
            "node bench: skipped (needs the test cluster: tests/bench.sh --profile dev -p toolgate-operator --bench node)"
        );
        return;
    }
    let host = support::node::host_ip();
    let store = Moto::start(&host);
    store.create_bucket("bench");
    let image = support::node::executor_image();
    // Two namespaces, one operator each: the egress gate on (the default) and off, measured one
    // after the other in the same run, so the gate's cost is read off one run.
    let setup = |gate_ms: &str| {
        let ns = support::prepare("tg-bench-node");
        support::node::install_runtime_class();
        let policy = support::node::sandbox_policy(&ns, "on-node");
        let tool = Tool::test("bench.true")
            .argv("[\"true\"]")
            .policy("on-node")
            .summary("Does nothing, to measure what governance costs on a node.")
            .yaml(&ns);
        let grant = fixtures::grant(&ns, "bench", &["bench.true"]);
        support::ok(
            &["apply", "-f", "-"],
            Some(&[policy, tool, grant].join("\n---\n")),
        );
        let operator = support::start_operator_s3(
            &ns,
            (&host, store.port),
            "bench",
            &["--executor-image", &image, "--egress-gate-ms", gate_ms],
        );
        (ns, operator)
    };
    let (gated, _gated_operator) = setup("10000");
    let (ungated, _ungated_operator) = setup("0");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = rt.block_on(support::admin_client());
    let run = |ns: &str, name: String| -> Duration {
        let calls: Api<ToolCall> = Api::namespaced(client.clone(), ns);
        let call: ToolCall =
            serde_norway::from_str(&fixtures::call(ns, &name, "bench.true", "{}", "team-a"))
                .expect("a ToolCall");
        rt.block_on(async {
            let started = Instant::now();
            calls
                .create(&PostParams::default(), &call)
                .await
                .expect("create");
            let done = await_condition(calls.clone(), &name, |c: Option<&ToolCall>| {
                is_terminal(c.and_then(|c| c.status.as_ref()).and_then(|s| s.phase))
            });
            let ended = tokio::time::timeout(Duration::from_secs(120), done)
                .await
                .expect("the call ends within 2 min")
                .expect("watch");
            let phase = ended.and_then(|c| c.status).and_then(|s| s.phase);
            assert_eq!(phase, Some(CallPhase::Succeeded), "call {name}");
            started.elapsed()
        })
    };
    // The image imported, the operators leading, the first pods' cold paths taken.
    for i in 0..2 {
        run(&gated, format!("warm-{i}"));
        run(&ungated, format!("warm-{i}"));
    }
    let before = requests();
    let mut times: Vec<Duration> = (0..CALLS)
        .map(|i| run(&gated, format!("call-{i}")))
        .collect();
    let after = requests();
    let mut ungated_times: Vec<Duration> = (0..CALLS)
        .map(|i| run(&ungated, format!("call-{i}")))
        .collect();
    times.sort();
    ungated_times.sort();
    let mut per_call: Vec<(f64, String)> = after
        .iter()
        .map(|(k, v)| (v - before.get(k).copied().unwrap_or(0.0), k))
        .filter(|(d, _)| *d > 0.0)
        .map(|(d, (resource, verb))| (d / CALLS as f64, format!("{verb} {resource}")))
        .collect();
    per_call.sort_by(|a, b| b.0.total_cmp(&a.0));
    let total: f64 = per_call.iter().map(|(d, _)| d).sum();
    for (what, times) in [
        ("egress gate on (default)", &times),
        ("egress gate off", &ungated_times),
    ] {
        println!(
            "node: ToolCall created -> Succeeded, {CALLS} sequential calls of `true` in a pod each, {what}: p50 {:.0} ms, p99 {:.0} ms, min {:.0} ms, max {:.0} ms",
            percentile(times, 0.5).as_secs_f64() * 1e3,
            percentile(times, 0.99).as_secs_f64() * 1e3,
            times[0].as_secs_f64() * 1e3,
            times[times.len() - 1].as_secs_f64() * 1e3,
        );
    }
    println!(
        "node: the gate's cost at the median: {:.0} ms ({:.2}x)",
        (percentile(&times, 0.5).as_secs_f64() - percentile(&ungated_times, 0.5).as_secs_f64())
            * 1e3,
        percentile(&times, 0.5).as_secs_f64() / percentile(&ungated_times, 0.5).as_secs_f64()
    );
    let writes: f64 = per_call
        .iter()
        .filter(|(_, what)| {
            [
                "POST", "PUT", "PATCH", "APPLY", "DELETE", "CREATE", "UPDATE",
            ]
            .iter()
            .any(|verb| what.starts_with(verb))
        })
        .map(|(d, _)| d)
        .sum();
    // Leader election and the node's heartbeat renew leases on a clock, not per call.
    let timed: f64 = per_call
        .iter()
        .filter(|(_, what)| what.ends_with(" leases"))
        .map(|(d, _)| d)
        .sum();
    println!(
        "node: API server requests per call, every client: {total:.1} ({writes:.1} writes); without the leases renewed on a clock: {:.1}",
        total - timed
    );
    for (d, what) in &per_call {
        println!("  {d:5.1}  {what}");
    }
}
