//! Executor overhead over running the same command directly, in one run:
//! `true` spawned plainly, `true` through the executor library (artifacts to a local
//! directory), and through the `toolgate-executor` binary. Run: `cargo bench -p toolgate-executor`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::Criterion;
use serde_json::json;
use toolgate_contract::exec::ExecSpec;
use toolgate_executor::run::execute;

fn spec(dir: &Path) -> ExecSpec {
    serde_json::from_value(json!({
        "apiVersion": "toolgate.dev/exec/v1",
        "call": {"namespace": "bench", "name": "true", "eventId": "e"},
        "execution": {"adapter": "cli", "argv": ["true"], "timeoutMs": 5000},
        "args": {},
        "limits": {"timeoutMs": 5000, "maxStdoutBytes": 1048576, "maxStderrBytes": 65536},
        "context": {"exposeOutputToModel": "preview", "maxOutputPreviewTokens": 100},
        "artifacts": {"type": "local", "dir": dir.join("artifacts").display().to_string()},
        "env": {"inherit": ["PATH"]}
    }))
    .expect("spec")
}

fn mean(n: u32, mut f: impl FnMut()) -> Duration {
    f();
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed() / n
}

fn main() {
    let dir = tempfile::tempdir().expect("tmp");
    let spec = spec(dir.path());
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, serde_json::to_vec(&spec).expect("json")).expect("write");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let exe = env!("CARGO_BIN_EXE_toolgate-executor");

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    c.bench_function("exec/plain spawn of true", |b| {
        b.iter(|| Command::new("true").status().expect("true"))
    });
    c.bench_function("exec/executor library running true", |b| {
        b.iter(|| {
            rt.block_on(execute(&spec, &[], dir.path()))
                .expect("execute")
        })
    });
    c.bench_function("exec/executor binary running true", |b| {
        b.iter(|| {
            Command::new(exe)
                .arg("--spec")
                .arg(&spec_path)
                .output()
                .expect("executor")
        })
    });
    c.final_summary();

    let plain = mean(200, || {
        Command::new("true").status().expect("true");
    });
    let library = mean(200, || {
        rt.block_on(execute(&spec, &[], dir.path()))
            .expect("execute");
    });
    let binary = mean(100, || {
        Command::new(exe)
            .arg("--spec")
            .arg(&spec_path)
            .output()
            .expect("executor");
    });
    println!(
        "\nmean per call: plain {plain:.2?}, executor library {library:.2?} ({:.1}x), executor binary {binary:.2?} ({:.1}x)",
        library.as_secs_f64() / plain.as_secs_f64(),
        binary.as_secs_f64() / plain.as_secs_f64()
    );
}
