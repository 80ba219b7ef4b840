//! What the write quota costs a call: a sandbox that writes a file into its write root, run with
//! the filesystem that enforces the quota (`toolgate_sandbox::layer`) and without one (the plain
//! alternative: the write root bound as it is, no quota), in one run. Measured twice for the
//! layer: the whole sandbox (made, run, writes kept, removed) and the part on a call's path when
//! the sandbox was made ahead of demand, as the embedded runtime's warm sandboxes are (run, writes
//! kept). Then keeping writes of several sizes. Needs root (the layer is mounted).
//! Run: `cargo bench -p toolgate-sandbox --bench write_layer`.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use toolgate_sandbox::plan::{Bind, Limits, Network, SandboxPlan, WriteLimit};

fn plan(workspace: &Path, layers: &Path, writes: Option<WriteLimit>) -> SandboxPlan {
    SandboxPlan {
        read_only: vec![],
        writable: vec![Bind {
            host: workspace.to_path_buf(),
            inside: "/work".into(),
        }],
        hidden: vec![],
        runtime: vec![],
        cwd: "/work".into(),
        network: Network::None,
        limits: Limits {
            timeout: Duration::from_secs(10),
            memory_bytes: 256 << 20,
            cpu_seconds: None,
            processes: Some(64),
            file_bytes: None,
            tmp_bytes: 4 << 20,
            writes,
        },
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        etc: None,
        layers: Some(layers.to_path_buf()),
    }
}

/// p50 and p99 of `runs` runs of `f`, after a few unmeasured ones.
fn timed(runs: usize, mut f: impl FnMut() -> Duration) -> (Duration, Duration) {
    for _ in 0..3 {
        f();
    }
    let mut all: Vec<Duration> = (0..runs).map(|_| f()).collect();
    all.sort();
    (all[runs / 2], all[(runs * 99 / 100).min(runs - 1)])
}

fn main() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("write_layer: needs root (the layer is a mounted filesystem)");
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let ws = dir.path().join("ws");
    let layers = dir.path().join("layers");
    std::fs::create_dir_all(&ws).expect("ws");
    let quota = WriteLimit {
        bytes: 1024 << 20,
        files: 100_000,
        required: true,
    };
    let script: Vec<OsString> = vec!["-c".into(), "echo written > out.txt".into()];
    let run = |plan: &SandboxPlan| {
        let started = Instant::now();
        let mut p = toolgate_sandbox::prepare(plan, Path::new("/bin/sh"), &script, "bench")
            .expect("prepare");
        assert!(p.command.status().expect("bwrap").success());
        if let Some(mut layer) = p.take_write_layer() {
            layer.keep().expect("keep");
        }
        p.cleanup();
        started.elapsed()
    };
    let without = plan(&ws, &layers, None);
    let with = plan(&ws, &layers, Some(quota));
    let plain = timed(60, || run(&without));
    let whole = timed(60, || run(&with));
    // Made ahead: only the run and the keeping are timed.
    let ahead = timed(60, || {
        let mut p = toolgate_sandbox::prepare(&with, Path::new("/bin/sh"), &script, "bench")
            .expect("prepare");
        let started = Instant::now();
        assert!(p.command.status().expect("bwrap").success());
        let mut layer = p.take_write_layer().expect("layer");
        layer.keep().expect("keep");
        let elapsed = started.elapsed();
        drop(layer);
        p.cleanup();
        elapsed
    });
    let plain_run = timed(60, || {
        let mut p = toolgate_sandbox::prepare(&without, Path::new("/bin/sh"), &script, "bench")
            .expect("prepare");
        let started = Instant::now();
        assert!(p.command.status().expect("bwrap").success());
        let elapsed = started.elapsed();
        p.cleanup();
        elapsed
    });
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!("a sandbox writing one file into its write root, p50 / p99:");
    println!(
        "  no quota (write root bound as it is)    {:>9.2?} / {:>9.2?}",
        plain.0, plain.1
    );
    println!(
        "  with the quota's filesystem, whole      {:>9.2?} / {:>9.2?}   {:.2}x no quota",
        whole.0,
        whole.1,
        ratio(whole.0, plain.0)
    );
    println!(
        "  made ahead: run only, no quota          {:>9.2?} / {:>9.2?}",
        plain_run.0, plain_run.1
    );
    println!(
        "  made ahead: run and keep, with quota    {:>9.2?} / {:>9.2?}   {:.2}x no quota (the call's path)",
        ahead.0,
        ahead.1,
        ratio(ahead.0, plain_run.0)
    );

    // By the size of what a call writes: the whole run writing straight into the write root (no
    // quota) beside the run with the quota, its writes kept (copied file by file), and the keeping
    // alone.
    println!("a sandbox writing files, p50: no quota / with quota (run and keep) / keeping alone:");
    for (files, size) in [(10usize, 4096usize), (1000, 4096), (10, 8 << 20)] {
        let body: Vec<OsString> = vec![
            "-c".into(),
            format!(
                "mkdir -p gen && i=0; while [ $i -lt {files} ]; do head -c {size} /dev/zero > gen/$i; i=$((i+1)); done"
            )
            .into(),
        ];
        let mut kept = Vec::new();
        let measure = |plan: &SandboxPlan, kept: &mut Vec<Duration>| {
            let mut p = toolgate_sandbox::prepare(plan, Path::new("/bin/sh"), &body, "bench")
                .expect("prepare");
            let started = Instant::now();
            assert!(p.command.status().expect("bwrap").success());
            if let Some(mut layer) = p.take_write_layer() {
                let keeping = Instant::now();
                layer.keep().expect("keep");
                kept.push(keeping.elapsed());
            }
            let elapsed = started.elapsed();
            p.cleanup();
            let _ = std::fs::remove_dir_all(ws.join("gen"));
            elapsed
        };
        let direct = timed(10, || measure(&without, &mut Vec::new()));
        let layered = timed(10, || measure(&with, &mut kept));
        kept.sort();
        let keeping = kept[kept.len() / 2];
        let mib = (files * size) as f64 / f64::from(1 << 20);
        println!(
            "  {files:>5} files of {size:>8} bytes ({mib:>5.1} MiB)   {:>9.2?} / {:>9.2?} ({:.2}x) / {:>9.2?}",
            direct.0,
            layered.0,
            ratio(layered.0, direct.0),
            keeping
        );
    }
}
