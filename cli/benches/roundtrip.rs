//! The governed round trip of a `true` tool through `toolgate local` (ProposeCall → WatchCall
//! until the result is recorded: decision, sandbox, executor, artifacts, durable store), next to
//! a bare sandbox spawn of `true` and a plain fork+exec of `true`, in one run, as ratios.
//! Run: `cargo bench -p toolgate --bench roundtrip`. To compare builds, copy each build's
//! `toolgate`, `toolgate-full` and `toolgate-executor` into a folder of its own and run it with
//! `ROUNDTRIP_COMPARE=old/toolgate,new/toolgate` (see [`compare`]).

use std::ffi::OsString;
use std::io::BufRead;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use toolgate_proto::v1 as pb;
use toolgate_proto::v1::toolgate_client::ToolgateClient;

// The decision benches' generated registry, so this one run prints the decision beside the round trip.
#[path = "../../core/benches/fixtures/mod.rs"]
mod fixtures;

const TOKEN: &str = "bench-token-0123456789abcdef";

const MANIFESTS: &str = r#"apiVersion: toolgate.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: bench, namespace: bench}
spec:
  mode: read_only
  filesystem: {cwd: workspace, readRoots: [workspace], writeRoots: []}
  network: {egress: none}
  environment: {inheritedEnv: [PATH]}
  process: {timeoutMs: 5000, maxMemoryMb: 256, maxProcesses: 16, maxStdoutBytes: 65536, maxStderrBytes: 65536}
  audit: {}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolDescriptor
metadata: {name: bench.true, namespace: bench}
spec:
  canonicalName: bench.true
  version: "1.0.0"
  source: {type: cli, packageName: coreutils}
  description:
    summary: Do nothing, successfully.
    useWhen: ["measuring toolgate"]
    doNotUseWhen: ["anything else"]
  intent: {actionTypes: [execute], domains: [bench]}
  schemas:
    inputSchema: {type: object, additionalProperties: false, properties: {}}
  effects: {reads: [], writes: [], externalCalls: false, sendsUserData: false,
            mutatesState: false, idempotent: true, reversible: true, dryRunSupported: false}
  risk: {level: low, destructive: false, openWorld: false}
  permissions: {approvalPolicy: never, requiredScopes: []}
  sandboxPolicyRef: {name: bench}
  contextPolicy: {exposeToModel: true, exposeOutputToModel: full, maxOutputPreviewTokens: 100}
  execution: {adapter: cli, argv: ["true"], timeoutMs: 5000}
  provenance: {trustLevel: first_party}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolGrant
metadata: {name: bench, namespace: bench}
spec:
  subjects: [{kind: ServiceAccount, name: bench, namespace: bench}]
  tools: {names: [bench.true]}
  scopes: []
  reason: benchmark
"#;

/// ProposeCall of `bench.true` as the bench's agent.
fn proposal() -> tonic::Request<pb::ProposeCallRequest> {
    authorized(pb::ProposeCallRequest {
        tool: "bench.true".into(),
        args_json: "{}".into(),
        intent: Some(pb::Intent {
            user_goal: "measure".into(),
            current_task: "run true".into(),
            action_type: "execute".into(),
            rationale_summary: "benchmark".into(),
            evidence_refs: vec![],
        }),
        ..Default::default()
    })
}

/// `message` as the bench's agent (its bearer token).
fn authorized<T>(message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {TOKEN}").parse().expect("h"),
    );
    r
}

fn main() {
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path();
    std::fs::create_dir_all(root.join("manifests")).expect("m");
    std::fs::create_dir_all(root.join("workspace")).expect("w");
    std::fs::write(root.join("manifests/bench.yaml"), MANIFESTS).expect("manifests");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(root.join("tokens.yaml"))
        .expect("tokens");
    std::io::Write::write_all(
        &mut f,
        format!("- {{token: {TOKEN}, principal: \"system:serviceaccount:bench:bench\"}}\n")
            .as_bytes(),
    )
    .expect("write");

    let ws = root.join("workspace");
    if let Ok(builds) = std::env::var("ROUNDTRIP_COMPARE") {
        compare(root, &ws, &builds);
        return;
    }

    // The built-in decision at 10k tools and 10k grants, the same loop as `cargo bench -p
    // toolgate-core --bench policy`, first: after the runtimes below, the kernel spends seconds
    // tearing down their sandboxes' namespaces on the same two cores.
    let scenario = fixtures::Scenario::new();
    let decision = fixtures::decision_percentiles(&scenario);
    // Beside it, the same decision with 1,000 Cedar ToolPolicy rules in the registry.
    let with_cedar = scenario.with_cedar_rules();
    let review = scenario.review();
    let decision_cedar = fixtures::percentiles(20_000, || {
        std::hint::black_box(toolgate_core::decision::decide_in(
            &with_cedar,
            &review,
            &[],
            scenario.now,
            &scenario.limits,
        ));
    });

    // Plain fork+exec.
    let plain = fixtures::timed(300, 3, || {
        Command::new("true").status().expect("true");
    });

    // A bare sandbox spawn: the same policy's plan, bubblewrap + seccomp + limits, `true`.
    let first: serde_json::Value =
        serde_norway::from_str(MANIFESTS.split("\n---\n").next().expect("doc")).expect("yaml");
    let policy: toolgate_crds::SandboxPolicySpec =
        serde_json::from_value(first["spec"].clone()).expect("policy parses");
    let plan = toolgate_sandbox::resolve(
        &policy,
        &toolgate_sandbox::plan::Context {
            workspace: &ws,
            env: &[("PATH".into(), "/usr/bin:/bin".into())],
            private: &[],
            timeout_ms: None,
            executor_is_the_only_client: false,
        },
    )
    .expect("plan");
    let sandboxed = fixtures::timed(100, 3, || {
        let args: Vec<OsString> = vec![];
        let mut p = toolgate_sandbox::prepare(&plan, Path::new("/bin/true"), &args, "bench")
            .expect("prepare");
        let status = p.command.status().expect("bwrap");
        assert!(status.success());
        p.cleanup();
    });

    // The issue's reference: bubblewrap with every namespace and nothing else (no cgroups, no
    // seccomp, no limits).
    let bare_bwrap = fixtures::timed(100, 3, || {
        let status = Command::new("bwrap")
            .args([
                "--unshare-all",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
            ])
            .arg("true")
            .status()
            .expect("bwrap");
        assert!(status.success());
    });

    // The governed round trip through the server, with sandboxes started ahead of demand (the
    // default) and with every sandbox made when its call needs it, in the same run; with the
    // small `toolgate-executor` beside `toolgate` in the sandboxes (the default when it is
    // there) and with `toolgate executor`.
    let small = build_the_executor();
    let warm = Governed::measure(root, &ws, &[]);
    let builtin = Governed::measure(root, &ws, &["--executor", "builtin"]);
    let cold = Governed::measure(root, &ws, &["--warm-sandboxes", "0"]);

    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!("`true`, p50 / p99 over one run:");
    println!(
        "  plain fork+exec                    {:>9.2?} / {:>9.2?}",
        plain.0, plain.1
    );
    println!(
        "  bwrap --unshare-all … true         {:>9.2?} / {:>9.2?}   {:.1}x plain",
        bare_bwrap.0,
        bare_bwrap.1,
        ratio(bare_bwrap.0, plain.0)
    );
    println!(
        "  bare sandbox spawn (+cgroups, seccomp, limits) {:>9.2?} / {:>9.2?}   {:.1}x plain",
        sandboxed.0,
        sandboxed.1,
        ratio(sandboxed.0, plain.0)
    );
    println!("sandboxes run {}", small.display());
    for (name, g) in [
        ("warm sandboxes, toolgate-executor (the defaults)", &warm),
        (
            "warm sandboxes, --executor builtin (toolgate executor)",
            &builtin,
        ),
        ("--warm-sandboxes 0, toolgate-executor", &cold),
    ] {
        println!("{name}:");
        println!(
            "  unary GetCall, open channel        {:>9.2?} / {:>9.2?}",
            g.unary.0, g.unary.1
        );
        println!(
            "  governed round trip                {:>9.2?} / {:>9.2?}   {:.1}x bwrap --unshare-all",
            g.round_trip.0,
            g.round_trip.1,
            ratio(g.round_trip.0, bare_bwrap.0)
        );
        println!(
            "  `toolgate call … --watch`          {:>9.2?} / {:>9.2?}   {:.1}x bwrap --unshare-all (the whole CLI process)",
            g.cli.0,
            g.cli.1,
            ratio(g.cli.0, bare_bwrap.0)
        );
        if let Some(full) = g.cli_full {
            println!(
                "  `toolgate-full call … --watch`     {:>9.2?} / {:>9.2?}   {:.1}x bwrap --unshare-all (the binary with the runtime)",
                full.0,
                full.1,
                ratio(full.0, bare_bwrap.0)
            );
        }
        println!("  where a governed round trip's time goes (median gap between its conditions):");
        for (step, gap) in &g.breakdown {
            println!("    {step:<44} {gap:>9.2?}");
        }
        println!("  throughput, agents proposing and watching `true` in a loop:");
        for (agents, per_second, p50, p99, cpu) in &g.throughput {
            println!(
                "    {agents:>2} agents   {per_second:>6.1} calls/s   latency p50 {p50:>9.2?} / p99 {p99:>9.2?}   CPU per call {cpu:>8.2?}"
            );
        }
        println!(
            "  CPU per call, one after another (the runtime, its sandboxes, executors and tools): {:.2?}",
            g.cpu_per_call
        );
    }
    println!(
        "built-in decision, {} tools and {} grants: p50 {:.2?} / p99 {:.2?}; with {} Cedar ToolPolicy rules beside them: p50 {:.2?} / p99 {:.2?}",
        fixtures::TOOLS,
        fixtures::GRANTS,
        decision.0,
        decision.1,
        fixtures::CEDAR_POLICIES,
        decision_cedar.0,
        decision_cedar.1
    );

    // The embedded runtime's performance targets, from this one run (the defaults: warm
    // sandboxes, toolgate-executor).
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    println!("the embedded runtime's targets, this run:");
    let cli_ratio = ratio(warm.cli.0, bare_bwrap.0);
    println!(
        "  whole `toolgate call … --watch` p50 ≤ 15 ms, p99 ≤ 25 ms, ≤ 3.5x bare bwrap: {:.2?} / {:.2?}, {cli_ratio:.1}x   {}",
        warm.cli.0,
        warm.cli.1,
        verdict(
            warm.cli.0 <= Duration::from_millis(15)
                && warm.cli.1 <= Duration::from_millis(25)
                && cli_ratio <= 3.5
        )
    );
    let p99_limit = Duration::from_millis(100);
    let best = warm
        .throughput
        .iter()
        .filter(|t| t.3 <= p99_limit)
        .max_by(|a, b| a.1.total_cmp(&b.1));
    match best {
        Some((agents, per_second, _, p99, _)) => println!(
            "  ≥ 100 calls/s at p99 ≤ 100 ms: {per_second:.1} calls/s at p99 {p99:.2?} ({agents} agents)   {}",
            verdict(*per_second >= 100.0)
        ),
        None => {
            println!("  ≥ 100 calls/s at p99 ≤ 100 ms: no agent count kept p99 ≤ 100 ms   MISSED")
        }
    }
    println!(
        "  built-in decision p99 ≤ 1 µs at 10k / 10k: {:.2?}   {}",
        decision.1,
        verdict(decision.1 <= Duration::from_micros(1))
    );
}

/// Build the `toolgate-executor` binary beside this bench's `toolgate` (cargo builds only the
/// benched package's binaries), so `toolgate local` runs it in its sandboxes; its path.
fn build_the_executor() -> std::path::PathBuf {
    let toolgate = Path::new(env!("CARGO_BIN_EXE_toolgate"));
    let profile_dir = toolgate.parent().expect("profile folder");
    let target_dir = profile_dir.parent().expect("target folder");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "--quiet", "-p", "toolgate-executor"])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .expect("cargo build -p toolgate-executor");
    assert!(status.success(), "cargo build -p toolgate-executor failed");
    let small = toolgate.with_file_name("toolgate-executor");
    toolgate_executor::same_build(&small).expect("the executor beside toolgate is of this build");
    small
}

/// What one `toolgate local` measured: p50/p99 of a unary RPC, the governed round trip and the
/// whole CLI process; the median gap between a call's conditions; throughput at 8 and 32 agents.
struct Governed {
    unary: (Duration, Duration),
    round_trip: (Duration, Duration),
    cli: (Duration, Duration),
    /// The same command run by `toolgate-full` (the binary with the runtime), when measured.
    cli_full: Option<(Duration, Duration)>,
    breakdown: Vec<(String, Duration)>,
    /// Agents, calls/s, latency p50 and p99, CPU per call.
    throughput: Vec<(usize, f64, Duration, Duration, Duration)>,
    /// CPU time per call of the calls made one after another.
    cpu_per_call: Duration,
}

/// CPU time (user and system) the process `pid` and every child it has reaped have used: for
/// `toolgate local`, the runtime, its sandboxes (bubblewrap, reaped after each call), their
/// executors and tools. Clients are not counted. Fields 14-17 of /proc/<pid>/stat.
fn cpu_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after_name = stat.rsplit_once(')').expect("stat's command").1;
    let ticks: u64 = after_name
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|v| v.parse::<u64>().expect("clock ticks"))
        .sum();
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100);
    Duration::from_secs_f64(ticks as f64 / per_second as f64)
}

impl Governed {
    /// Start `toolgate local` on the bench's manifests with `extra` arguments and a data folder
    /// of its own, measure, stop it.
    fn measure(root: &Path, ws: &Path, extra: &[&str]) -> Governed {
        let data = root.join(format!("data{}", extra.concat()));
        let toolgate = Path::new(env!("CARGO_BIN_EXE_toolgate"));
        let (mut server, addr) = start_local(toolgate, root, ws, &data, extra);
        let figures = Governed::of(&addr, server.id(), extra.is_empty());
        let _ = server.kill();
        let _ = server.wait();
        figures
    }

    /// The figures of the server `pid` on `addr`; with `full_cli`, also the CLI call run by
    /// `toolgate-full`.
    fn of(addr: &str, pid: u32, full_cli: bool) -> Governed {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        let mut client = rt
            .block_on(async { ToolgateClient::connect(format!("http://{addr}")).await })
            .expect("connect");
        let mut round_trip = || rt.block_on(governed_call(&mut client));
        let mut last_call = String::new();
        let mut governed_ids = Vec::new();
        // Calls one after another, each proposed the moment the last one ended.
        let cpu_before = cpu_of(pid);
        let governed = fixtures::timed(60, 3, || {
            last_call = round_trip();
            governed_ids.push(last_call.clone());
        });
        // Every call counts, the warm-up ones too: all of them spent CPU.
        let made = u32::try_from(governed_ids.len()).expect("calls");
        let cpu_per_call = (cpu_of(pid) - cpu_before) / made;
        let breakdown = rt.block_on(async {
            let mut gaps: std::collections::BTreeMap<(usize, String), Vec<Duration>> =
                Default::default();
            for id in &governed_ids {
                let r = authorized(pb::GetCallRequest { id: id.clone() });
                let call = client.get_call(r).await.expect("get").into_inner();
                let mut at: Vec<(jiff::Timestamp, String)> = call
                    .conditions
                    .iter()
                    .filter_map(|c| Some((c.last_transition_time.parse().ok()?, c.r#type.clone())))
                    .collect();
                at.sort();
                // The run itself: from Started to the last condition (the sandbox, the
                // executor, the result recorded).
                if let (Some(started), Some(last)) =
                    (at.iter().find(|(_, k)| k == "Started"), at.last())
                {
                    let run =
                        Duration::try_from(last.0.duration_since(started.0)).unwrap_or_default();
                    gaps.entry((
                        usize::MAX,
                        "Started → the end (sandbox, executor, result)".into(),
                    ))
                    .or_default()
                    .push(run);
                }
                for (i, w) in at.windows(2).enumerate() {
                    let gap = Duration::try_from(w[1].0.duration_since(w[0].0)).unwrap_or_default();
                    gaps.entry((i, format!("{} → {}", w[0].1, w[1].1)))
                        .or_default()
                        .push(gap);
                }
            }
            gaps.into_iter()
                .map(|((_, step), v)| (step, fixtures::p50_p99(v).0))
                .collect::<Vec<_>>()
        });
        // One unary RPC on an open channel: what every GetCall, ApproveCall and ProposeCall
        // pays on top of its work.
        let unary = fixtures::timed(200, 3, || {
            rt.block_on(async {
                let r = authorized(pb::GetCallRequest {
                    id: last_call.clone(),
                });
                client.get_call(r).await.expect("get");
            })
        });
        // The whole `toolgate call … --watch` process an agent's shell would run: client
        // start, connect, propose, watch to the end.
        // 200 runs: the p99 of fewer is their slowest.
        let cli_call = |binary: &str| {
            let out = Command::new(binary)
                .args(["--server", &format!("http://{addr}"), "--token", TOKEN])
                .args(["call", "bench.true", "--args", "{}", "--action", "execute"])
                .args(["--task", "bench", "--watch"])
                .output()
                .expect("toolgate call");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        // With `full_cli`, the same command in the binary that also holds the runtime, the two
        // taking turns call by call: what the small client binary saves, under the same load.
        let binaries: &[&str] = if full_cli {
            &[
                env!("CARGO_BIN_EXE_toolgate"),
                env!("CARGO_BIN_EXE_toolgate-full"),
            ]
        } else {
            &[env!("CARGO_BIN_EXE_toolgate")]
        };
        let mut times = vec![Vec::with_capacity(200); binaries.len()];
        for round in 0..203 {
            for (binary, times) in binaries.iter().zip(&mut times) {
                let started = Instant::now();
                cli_call(binary);
                if round >= 3 {
                    times.push(started.elapsed());
                }
            }
        }
        let mut times = times.into_iter().map(fixtures::p50_p99);
        let cli = times.next().expect("the client binary's times");
        let cli_full = times.next();
        // Throughput: N agents, each on its own channel, proposing and watching in a loop. With
        // more agents than the cores can serve at once, calls queue and latency grows with them.
        let throughput = [4usize, 8, 32]
            .iter()
            .map(|&agents| {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .expect("rt");
                let each = 512 / agents;
                let before = cpu_of(pid);
                let (agents, per_second, p50, p99) = rt.block_on(concurrent(addr, agents, each));
                let calls = u32::try_from(agents * each).expect("calls");
                (agents, per_second, p50, p99, (cpu_of(pid) - before) / calls)
            })
            .collect();
        Governed {
            unary,
            round_trip: governed,
            cli,
            cli_full,
            breakdown,
            throughput,
            cpu_per_call,
        }
    }
}

/// Start `toolgate` (`local`, on the bench's manifests, `data` its own) with `extra` arguments;
/// the process and the address it serves on.
fn start_local(
    toolgate: &Path,
    root: &Path,
    ws: &Path,
    data: &Path,
    extra: &[&str],
) -> (std::process::Child, String) {
    let mut command = Command::new(toolgate);
    command
        .arg("local")
        .arg("--manifests")
        .arg(root.join("manifests"))
        .arg("--data")
        .arg(data)
        .arg("--workspace")
        .arg(ws)
        .arg("--tokens")
        .arg(root.join("tokens.yaml"))
        .args(["--listen", "127.0.0.1:0"]);
    command.args(extra);
    let mut server = command
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("toolgate local");
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("line");
    let addr = line
        .split("serving toolgate.v1 on ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .expect("addr")
        .to_string();
    (server, addr)
}

/// `ROUNDTRIP_COMPARE=<toolgate>,<toolgate>,…`: only the throughput of each build (8 agents,
/// 100 calls each, warm sandboxes; each binary runs the `toolgate-executor` beside it, which must
/// be of its build), the builds taking turns `ROUNDTRIP_ROUNDS` times (default 4): an A/B of two
/// builds on one machine in one run, where a single run of each moves with the machine.
fn compare(root: &Path, ws: &Path, builds: &str) {
    let rounds: usize = std::env::var("ROUNDTRIP_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(4);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("rt");
    println!("8 agents × 100 calls, warm sandboxes: calls/s, latency p50 / p99, CPU per call");
    for round in 1..=rounds {
        for (i, toolgate) in builds.split(',').enumerate() {
            let data = root.join(format!("compare-{round}-{i}"));
            // Named, so a build whose executor is missing or stale refuses to start instead of
            // falling back to `toolgate executor` quietly (an A/B of the fallback, not the build).
            let executor = Path::new(toolgate).with_file_name("toolgate-executor");
            let executor = executor.to_str().expect("a UTF-8 path");
            let (mut server, addr) = start_local(
                Path::new(toolgate),
                root,
                ws,
                &data,
                &["--executor", executor],
            );
            let before = cpu_of(server.id());
            let (_, per_second, p50, p99) = rt.block_on(concurrent(&addr, 8, 100));
            let cpu = (cpu_of(server.id()) - before) / 800;
            let _ = server.kill();
            let _ = server.wait();
            println!(
                "  round {round}  {toolgate}  {per_second:>6.1} calls/s  {p50:>9.2?} / {p99:>9.2?}  {cpu:>8.2?}"
            );
        }
    }
}

/// One governed round trip of `bench.true`: ProposeCall, then WatchCall to the end; its id.
async fn governed_call(client: &mut ToolgateClient<tonic::transport::Channel>) -> String {
    let call = client
        .propose_call(proposal())
        .await
        .expect("propose")
        .into_inner();
    let mut s = client
        .watch_call(authorized(pb::WatchCallRequest {
            id: call.id.clone(),
        }))
        .await
        .expect("watch")
        .into_inner();
    let mut last = None;
    while let Some(e) = s.next().await {
        last = Some(e.expect("event"));
    }
    assert_eq!(last.map(|e| e.phase).as_deref(), Some("Succeeded"));
    call.id
}

/// `agents` clients on their own channels, each making `each` governed round trips at once:
/// calls per second over the whole run, and the latency of each call (p50, p99).
async fn concurrent(addr: &str, agents: usize, each: usize) -> (usize, f64, Duration, Duration) {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..agents {
        let url = format!("http://{addr}");
        tasks.push(tokio::spawn(async move {
            let mut client = ToolgateClient::connect(url).await.expect("connect");
            let mut took = Vec::new();
            for _ in 0..each {
                let t = Instant::now();
                governed_call(&mut client).await;
                took.push(t.elapsed());
            }
            took
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("agent"));
    }
    let per_second = all.len() as f64 / started.elapsed().as_secs_f64();
    let (p50, p99) = fixtures::p50_p99(all);
    (agents, per_second, p50, p99)
}
