//! The executor's command line, shared by `toolgate-executor` and `toolgate executor` (the embedded
//! runtime runs the latter inside its sandbox, so one binary is all a new user builds).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use toolgate_contract::exec::{ArtifactTarget, ExecSpec};
use toolgate_crds::{CallError, CallResult, ResultStatus};

use crate::run::{ExecError, execute, load_credentials, load_spec};

/// Run one tool call and write its result (at most 4 KiB of JSON).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The call specification (JSON, apiVersion toolgate.dev/exec/v1).
    #[arg(long)]
    pub spec: PathBuf,
    /// Folder holding the credential files the spec names (default: the spec's folder).
    #[arg(long)]
    pub credentials: Option<PathBuf>,
    /// Where to write the result (in a pod: /dev/termination-log). Always printed to stdout too,
    /// last: with `--wait-for-go` the line on stdout tells the runtime the call has ended.
    #[arg(long)]
    pub result: Option<PathBuf>,
    /// Start, then wait for a line on stdin before reading the spec: the embedded runtime starts
    /// sandboxes ahead of demand and writes the spec and credentials only once a call is given
    /// to one. End of input without a line ends the executor, having run nothing. As the sandbox's
    /// pid 1 it ends every other process of the sandbox before it writes the result.
    #[arg(long)]
    pub wait_for_go: bool,
}

/// Block until the runtime says go (a line on stdin); false when it closed stdin instead.
fn wait_for_go() -> bool {
    let mut line = String::new();
    matches!(std::io::stdin().read_line(&mut line), Ok(n) if n > 0)
}

/// End every other process of the sandbox before its result is told: the embedded runtime
/// records a call's end as soon as the executor prints the result (`--wait-for-go`), without
/// waiting for bubblewrap to tear the namespaces down, so nothing the tool started may still run
/// then — not even a process that left the tool's group (`setsid`). As the namespace's pid 1
/// (bubblewrap's `--as-pid-1`) the executor sees every such process: orphans are its children.
/// SIGKILL to all of them (kill(-1) spares the caller), then reap until none is left. Outside a
/// pid namespace of its own this does nothing: kill(-1) there would reach the user's processes.
fn end_the_others() {
    use nix::sys::signal::{Signal, kill};
    use nix::sys::wait::waitpid;
    use nix::unistd::{Pid, getpid};
    if getpid() != Pid::from_raw(1) {
        return;
    }
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    // Blocks until each is gone; ECHILD once none is left (SIGKILL cannot be caught).
    while let Ok(_) | Err(nix::errno::Errno::EINTR) = waitpid(Pid::from_raw(-1), None) {}
}

fn write_result(args: &Args, result: &CallResult) {
    if args.wait_for_go {
        end_the_others();
    }
    let json = serde_json::to_string(result).unwrap_or_else(|e| format!("{{\"status\":\"error\",\"error\":{{\"code\":\"internal\",\"message\":\"{e}\",\"retryable\":false}}}}"));
    if let Some(path) = &args.result
        && let Err(e) = std::fs::write(path, &json)
    {
        eprintln!(
            "toolgate-executor: cannot write the result to {}: {e}",
            path.display()
        );
    }
    // Last: the embedded runtime reads the result file once this line arrives. Not `println!`,
    // which panics when nobody reads any more.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{json}").and_then(|()| out.flush());
}

/// Run the call described by `args`; the exit code says how it ended (`spec::EXIT_CODES`).
/// Confine this process (and so the tool) to the spec's filesystem rules plus what the executor
/// itself reads and writes: the spec, the credentials, the result file, a local artifact folder.
/// Before any thread starts, so every thread is confined.
fn confine_self(spec: &ExecSpec, args: &Args, credentials_dir: &Path) -> Result<(), ExecError> {
    let Some(rules) = &spec.confinement else {
        return Ok(());
    };
    // A write root that does not exist yet (`coverage/`) is made, as the embedded runtime makes
    // it before binding; never one inside a blocked path.
    for root in &rules.write {
        if !rules.blocked.iter().any(|b| root.starts_with(b)) {
            let _ = std::fs::create_dir_all(root);
        }
    }
    let mut rules = toolgate_sandbox::confine::with_system(rules.clone());
    rules.read.push(args.spec.clone());
    rules.read.push(credentials_dir.to_path_buf());
    if let Some(result) = &args.result {
        // Landlock grants only what exists: a result file not made yet would be left out, and
        // writing it refused (unless it happened to lie under a folder granted anyway, like the
        // sandbox's /tmp). Made empty now, so the grant is the file itself and nothing beside it.
        if let Err(e) = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(result)
        {
            return Err(ExecError::Unrunnable(format!(
                "cannot create the result file {}: {e}",
                result.display()
            )));
        }
        rules.write.push(result.clone());
    }
    if let ArtifactTarget::Local { dir } = &spec.artifacts {
        let _ = std::fs::create_dir_all(dir);
        rules.write.push(PathBuf::from(dir));
    }
    toolgate_sandbox::confine::Confinement::prepare(&rules)?.restrict_self()?;
    Ok(())
}

/// How long the executor may go on after the tool's own timeout (streaming the rest of its
/// output, storing artifacts, writing the result) before it ends itself
/// (`TOOLGATE_EXECUTOR_GRACE_MS` changes it).
const AFTER_THE_TOOL: Duration = Duration::from_secs(60);

/// How long the executor may live: the tool's timeout and the grace after it. It must not
/// outlive its call: its runtime kills it when the sandbox's time is up, but a runtime that died
/// cannot; and an artifact store that fails in a loop (object_store's local store retries forever
/// when the folder under it was deleted) would otherwise spin on, out of reach. A timer of the
/// executor's own runtime, not a thread: a sandbox's process limit counts threads.
fn lifetime(spec: &ExecSpec) -> Duration {
    let grace = std::env::var("TOOLGATE_EXECUTOR_GRACE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(AFTER_THE_TOOL, Duration::from_millis);
    Duration::from_millis(spec.time_bound_ms()) + grace
}

/// The kernel ends the executor (SIGALRM, whose default action terminates) a little after its
/// lifetime, whatever it is doing: the runtime's own timer cannot fire while its one thread is
/// stuck in a blocking loop (object_store's local store runs its I/O inline on a current-thread
/// runtime, and retries forever when the folder under it is deleted: such executors were found
/// spinning for an hour after their runtime and test were gone). No thread: a sandbox's process
/// limit counts threads.
fn hard_stop_after(limit: Duration) {
    let seconds = limit.as_secs().saturating_add(5);
    let _ = nix::unistd::alarm::set(u32::try_from(seconds).unwrap_or(u32::MAX));
}

pub fn main(args: &Args) -> ExitCode {
    // Not dumpable: the tool runs as the same user, and could otherwise read this process's
    // environment (the artifact store's keys in a pod) and memory through /proc.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("toolgate-executor: cannot make the process non-dumpable: {e}");
        return ExitCode::from(crate::spec::Exit::RUNTIME.code);
    }
    if args.wait_for_go {
        // What does not depend on the call is done before it comes.
        toolgate_contract::redact::Redactor::prepare();
        if !wait_for_go() {
            return ExitCode::SUCCESS;
        }
    }
    let credentials_dir = args
        .credentials
        .clone()
        .unwrap_or_else(|| args.spec.parent().map(PathBuf::from).unwrap_or_default());
    let spec = load_spec(&args.spec)
        .and_then(|spec| confine_self(&spec, args, &credentials_dir).map(|()| spec));

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolgate-executor: cannot start the runtime: {e}");
            return ExitCode::from(crate::spec::Exit::RUNTIME.code);
        }
    };
    // The artifact store finishes each artifact on a blocking thread: one made now, while the
    // tool starts, is there when the tool has ended instead of being made then (with its own
    // allocator arena). Made after `confine_self`, it is confined as this thread is.
    drop(runtime.spawn_blocking(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(64)))));
    let outcome: Result<CallResult, ExecError> = runtime.block_on(async {
        let spec = spec?;
        let limit = lifetime(&spec);
        hard_stop_after(limit);
        // In a pod the executor is the container's first process, which the kernel spares from
        // SIGTERM's default action: without this the kubelet would wait out the whole grace
        // period of a deleted call's pod while its tool ran on.
        let mut stop = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| ExecError::Unrunnable(format!("cannot watch for SIGTERM: {e}")))?;
        let work = async {
            let credentials = load_credentials(&spec, &credentials_dir)?;
            execute(&spec, &credentials, &credentials_dir).await
        };
        tokio::select! {
            outcome = work => outcome,
            // Dropping the work kills the tool (its process is killed on drop); the pid
            // namespace ends the rest of its group with this process.
            _ = stop.recv() => Err(ExecError::Terminated),
            () = tokio::time::sleep(limit) => {
                eprintln!(
                    "toolgate-executor: still running {} ms after start (the tool's timeout and the grace after it): ending",
                    limit.as_millis()
                );
                // Not a return: dropping the runtime would wait for the stuck blocking task.
                std::process::exit(crate::spec::Exit::RUNTIME.code.into());
            }
        }
    });
    match outcome {
        Ok(result) => {
            write_result(args, &result);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toolgate-executor: {e}");
            let result = CallResult {
                status: ResultStatus::Error,
                exit_code: None,
                output_preview: None,
                structured_output: None,
                artifacts: vec![],
                effects_observed: None,
                verifier: None,
                error: Some(CallError {
                    code: e.code().into(),
                    message: crate::result::cut(&e.to_string(), 1024),
                    retryable: false,
                    safe_to_show_user: false,
                }),
                usage: None,
            };
            write_result(args, &result);
            ExitCode::from(e.exit_code())
        }
    }
}
