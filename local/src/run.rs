//! Running one authorized call: the core plans it (decided again, its target found), the
//! runtime places it ([`crate::place`]), records the steps up to Started before the process
//! starts, runs the executor inside the sandbox, and records what the core makes of the result.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use jiff::Timestamp;
use tokio::io::AsyncReadExt;
use toolgate_api::ApiError;
use toolgate_core::lifecycle::{Step, cancelled, finished_steps, no_result, plan_run, start_steps};
use toolgate_core::redact::Redactor;
use toolgate_crds::conditions::reason;
use toolgate_crds::{CallPhase, CallResult};

use crate::cancel::kill_group;
use crate::place::{Placed, place};
use crate::runtime::{Runtime, call_of, lock};
use crate::store::CallRecord;

/// Bytes of the executor's stderr kept for a failure message.
const STDERR_KEPT: usize = 4096;
/// Grace after the sandbox's own timeout before the runtime kills it.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// Run a call in the background.
pub(crate) fn spawn(rt: &Runtime, id: String) {
    let rt = rt.clone();
    tokio::spawn(async move {
        if let Err(e) = run_call(&rt, &id).await {
            tracing::error!(call = %id, error = %e, "running the call");
        }
    });
}

/// Run an authorized call to its end.
pub async fn run_call(rt: &Runtime, id: &str) -> Result<(), ApiError> {
    if !toolgate_core::names::is_dns_subdomain(id) {
        return Err(ApiError::Internal(format!(
            "refusing to run call {:?}: its id is not a Kubernetes name",
            id.chars().take(80).collect::<String>()
        )));
    }
    let run_dir = rt.inner.config.data.join("run").join(id);
    // The broker is asked outside the store's transaction (it may be slow, or down); the run is
    // decided again inside it.
    let before = rt.stored(id)?;
    let wanted = if before.status.phase == Some(CallPhase::Authorized) {
        with_snapshot(rt, &before, |snap, status| {
            plan_run(snap, &call_of(&before), status)
                .ok()
                .and_then(|run| crate::place::wanted(&run.target))
        })?
    } else {
        None
    };
    let issued = match wanted {
        Some(w) => Some(crate::place::issue(&rt.inner.config, &before.namespace, w).await),
        None => None,
    };
    let mut placed: Option<Placed> = None;
    let rec = rt
        .transition(id, |rec| start(rt, rec, &run_dir, issued, &mut placed))
        .await?;
    let Some(p) = placed else {
        // An open delegation ends by its subagent's report, its cancellation or its time.
        if rec.status.phase == Some(CallPhase::Running)
            && let Some(subagent) = rt.subagent_of(&rt.loaded(), &rec)
            && let Some(at) = toolgate_core::delegation::expires_at(&rec.status, &subagent)
        {
            rt.expire_later(rec.id.clone(), subagent, at);
            return Ok(());
        }
        let _ = std::fs::remove_dir_all(&run_dir);
        // A credential issued for a run that did not start is revoked at once.
        crate::lease::revoke_held(rt, &rec);
        return Ok(());
    };
    let outcome = execute(rt, &rec, &p).await;
    // The credential is gone the moment the sandbox is.
    let _ = std::fs::remove_dir_all(&p.creds_dir);
    let cancelled_by = lock(&rt.inner.cancelled).remove(id);
    let redactor = Redactor::new(p.secret.iter().map(|s| s.expose().as_bytes()));
    let ended = rt
        .transition(id, |rec| {
            if let Some(r) = rec.status.runtime.as_mut() {
                r.finished_at = Some(toolgate_crds::Timestamp(Timestamp::now()));
            }
            Ok(match (&cancelled_by, &outcome) {
                (Some(who), _) => cancelled(who),
                (None, Err(message)) => {
                    no_result(reason::EXECUTOR_FAILED, redactor.redact_str(message))
                }
                (None, Ok((result, elapsed))) => {
                    finished_steps(&mut rec.status, result, Some(*elapsed))
                }
            })
        })
        .await?;
    let _ = std::fs::remove_dir_all(&run_dir);
    crate::lease::revoke_held(rt, &ended);
    // A dry run that succeeded may be what an approved L5 call of the same args waits for (the
    // re-check reads every waiting call: only then is it worth it).
    if ended.spec.dry_run
        && ended.status.phase == Some(CallPhase::Succeeded)
        && let Err(e) = rt.review_waiting(&rt.loaded()).await
    {
        tracing::error!(error = %e, "re-checking pending calls after a dry run");
    }
    Ok(())
}

/// The steps up to Started, decided by the core around this runtime's placement; `placed` is
/// set when the executor is to start.
fn start(
    rt: &Runtime,
    rec: &mut CallRecord,
    run_dir: &Path,
    mut issued: Option<crate::place::Issue>,
    placed: &mut Option<Placed>,
) -> Result<Vec<Step>, ApiError> {
    // Whatever happens, a lease issued for this run is in the record before anything else:
    // revoked when the run ends, or at once if it does not start.
    if let Some((_, Ok(i))) = issued.as_mut()
        && let Some(lease) = i.lease.clone()
    {
        rec.leases.push(lease);
    }
    if rec.status.phase != Some(CallPhase::Authorized) {
        return Ok(vec![]);
    }
    let loaded = rt.loaded();
    let session = rt.session_approvals(rec)?;
    let own = rec.approvals.clone();
    let dry_runs = rt.dry_runs_for(&loaded, rec)?;
    let snap = rt.snapshot(&loaded, rec, &own, &session, &dry_runs)?;
    let mut status = rec.status.clone();
    // A delegation runs nowhere: it opens, and its subagent acts with its token.
    if rt.subagent_of(&loaded, rec).is_some() {
        let started =
            match toolgate_core::lifecycle::start_delegation(&snap, &call_of(rec), &mut status) {
                Ok(s) => s,
                Err(steps) => {
                    rec.status = status;
                    return Ok(steps);
                }
            };
        rec.status = status;
        rec.attempts += 1;
        for a in rec
            .approvals
            .iter_mut()
            .filter(|a| started.consumes.contains(&a.name.as_str()))
        {
            a.consumed = true;
        }
        return Ok(started.steps);
    }
    // Decided again inside the transaction: what the broker was asked for may be stale.
    let run = match plan_run(&snap, &call_of(rec), &mut status) {
        Ok(run) => run,
        Err(steps) => {
            rec.status = status;
            return Ok(steps);
        }
    };
    let p = match place(
        rec,
        &run.target,
        &rt.inner.config,
        &loaded.hidden,
        run_dir,
        issued,
    ) {
        Ok(p) => p,
        Err(steps) => return Ok(steps),
    };
    let attempt = rec.attempts + 1;
    let steps = start_steps(
        &run.target,
        &mut status,
        p.described.clone(),
        p.credential.clone(),
        format!("attempt {attempt} in the local sandbox"),
    );
    rec.status = status;
    if steps.last().and_then(|s| s.phase) == Some(CallPhase::Running) {
        rec.attempts = attempt;
        // An allowOnce approval is used up when the run starts, on both runtimes.
        for a in rec
            .approvals
            .iter_mut()
            .filter(|a| run.consumes.contains(&a.name.as_str()))
        {
            a.consumed = true;
        }
        let runtime = rec.status.runtime.get_or_insert_with(Default::default);
        runtime.started_at = Some(toolgate_crds::Timestamp(Timestamp::now()));
        rec.sandbox = serde_json::to_value(&p.plan).ok();
        *placed = Some(p);
    }
    Ok(steps)
}

/// `f` over the snapshot a call is decided against now, and a copy of its status.
fn with_snapshot<T>(
    rt: &Runtime,
    rec: &CallRecord,
    f: impl FnOnce(&toolgate_core::lifecycle::Snapshot<'_>, &mut toolgate_crds::ToolCallStatus) -> T,
) -> Result<T, ApiError> {
    let loaded = rt.loaded();
    let session = rt.session_approvals(rec)?;
    let dry_runs = rt.dry_runs_for(&loaded, rec)?;
    let snap = rt.snapshot(&loaded, rec, &rec.approvals, &session, &dry_runs)?;
    let mut status = rec.status.clone();
    Ok(f(&snap, &mut status))
}

/// Run the executor in the sandbox; the result it wrote, or why there is none.
async fn execute(
    rt: &Runtime,
    rec: &CallRecord,
    p: &Placed,
) -> Result<(CallResult, Duration), String> {
    let files = ExecutorFiles {
        spec: &p.spec_path,
        credentials: &p.creds_dir,
        result: &p.result_path,
    };
    run_executor(&rt.inner.config, &p.plan, &files, &rec.id, |pgid| {
        match pgid {
            // Known while it runs, so a cancel can kill its process group.
            Some(pg) => {
                lock(&rt.inner.running).insert(rec.id.clone(), pg);
            }
            None => {
                lock(&rt.inner.running).remove(&rec.id);
            }
        }
    })
    .await
}

/// The files an executor run reads and writes.
pub(crate) struct ExecutorFiles<'a> {
    /// Its spec.
    pub(crate) spec: &'a Path,
    /// The folder of its credentials.
    pub(crate) credentials: &'a Path,
    /// Where it writes its result.
    pub(crate) result: &'a Path,
}

/// Run the executor inside `plan`'s sandbox on `files` (a call, or a discovery): killed past
/// the plan's timeout and a grace; `tracked` is told its process group once started and `None`
/// once gone. Its result, and how long the sandbox ran.
pub(crate) async fn run_executor(
    config: &crate::runtime::Config,
    plan: &toolgate_sandbox::SandboxPlan,
    files: &ExecutorFiles<'_>,
    label: &str,
    mut tracked: impl FnMut(Option<i32>),
) -> Result<(CallResult, Duration), String> {
    let Some((program, lead)) = config.executor.split_first() else {
        return Err("no executor configured".into());
    };
    let mut args: Vec<OsString> = lead.to_vec();
    args.extend([
        "--spec".into(),
        files.spec.into(),
        "--credentials".into(),
        files.credentials.into(),
        "--result".into(),
        files.result.into(),
    ]);
    let mut sandboxed = toolgate_sandbox::prepare(plan, Path::new(program), &args, label)
        .map_err(|e| e.to_string())?;
    let started = std::time::Instant::now();
    let mut command = tokio::process::Command::from(std::mem::replace(
        &mut sandboxed.command,
        std::process::Command::new("true"),
    ));
    command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|e| format!("starting bubblewrap: {e}"))?;
    let pgid = child.id().and_then(|p| i32::try_from(p).ok());
    if pgid.is_some() {
        tracked(pgid);
    }
    let reader = tokio::spawn(read_stderr(child.stderr.take()));
    let limit = plan.limits.timeout + KILL_GRACE;
    let status = match tokio::time::timeout(limit, child.wait()).await {
        Ok(s) => s.map_err(|e| format!("waiting for the sandbox: {e}")),
        Err(_) => {
            if let Some(pg) = pgid {
                kill_group(pg);
            }
            let _ = child.wait().await;
            Err(format!(
                "the sandbox outlived its time limit ({} ms) and was killed",
                limit.as_millis()
            ))
        }
    };
    tracked(None);
    sandboxed.cleanup();
    let elapsed = started.elapsed();
    let stderr = reader.await.unwrap_or_default();
    let status = status?;
    match std::fs::read(files.result) {
        Ok(bytes) => serde_json::from_slice::<CallResult>(&bytes)
            .map(|r| (r, elapsed))
            .map_err(|e| format!("the executor's result is not valid: {e}")),
        Err(_) => Err(format!(
            "the executor wrote no result ({status}); stderr: {}",
            String::from_utf8_lossy(&stderr).trim()
        )),
    }
}

/// The first bytes of the executor's stderr; the rest is drained.
async fn read_stderr(mut stderr: Option<tokio::process::ChildStderr>) -> Vec<u8> {
    let mut kept = Vec::new();
    if let Some(s) = stderr.as_mut() {
        let mut buf = [0u8; 8192];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if kept.len() < STDERR_KEPT {
                kept.extend_from_slice(&buf[..n.min(STDERR_KEPT - kept.len())]);
            }
        }
    }
    kept
}
