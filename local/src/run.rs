//! Running one authorized call: the core plans it (decided again, its target found), the
//! runtime places it ([`crate::place`]), records the steps up to Started before the process
//! starts, runs the executor inside the sandbox, and records what the core makes of the result.

use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;
use toolgate_api::ApiError;
use toolgate_core::lifecycle::{
    Snapshot, Start, Step, cancelled, finished_steps, no_result, start_steps,
};
use toolgate_core::redact::Redactor;
use toolgate_crds::conditions::reason;
use toolgate_crds::{CallPhase, CallResult};

use crate::place::{Placed, place};
use crate::runtime::{Runtime, call_of, lock};
use crate::slot::store_of;
use crate::store::CallRecord;

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
    // The broker is asked outside the store's transaction (it may be slow, or down), and the
    // sandbox taken (or started); the run is decided again inside it.
    let before = rt.stored(id)?;
    let Prepared { wanted, base } = prepare(rt, &before)?;
    let issued = match wanted {
        Some(w) => Some(crate::place::issue(&rt.inner.config, &before.namespace, w).await),
        None => None,
    };
    let slot = base.and_then(|b| rt.inner.pool.take(&rt.inner.config, &b).ok());
    let mut placed: Option<Placed> = None;
    let rec = rt
        .transition(id, |rec| start(rt, rec, slot, issued, &mut placed))
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
        // A credential issued for a run that did not start is revoked at once.
        crate::lease::revoke_held(rt, &rec);
        return Ok(());
    };
    run_placed(rt, rec, p).await
}

/// What an authorized call needs before its start is decided in the store's transaction: the
/// credential to ask the broker for, and the sandbox plan to take a slot for (none for a
/// delegation, which runs nowhere, or when the call will not start).
pub(crate) struct Prepared {
    pub(crate) wanted: Option<crate::place::Wanted>,
    pub(crate) base: Option<toolgate_sandbox::SandboxPlan>,
}

/// Plan an authorized call's run (decided again at its start) for what it will need.
pub(crate) fn prepare(rt: &Runtime, rec: &CallRecord) -> Result<Prepared, ApiError> {
    if rec.status.phase != Some(CallPhase::Authorized) {
        return Ok(Prepared {
            wanted: None,
            base: None,
        });
    }
    with_snapshot(rt, rec, |snap, status| prepare_with(rt, rec, snap, status))
}

/// [`prepare`] with the snapshot the call is decided with.
fn prepare_with(
    rt: &Runtime,
    rec: &CallRecord,
    snap: &Snapshot<'_>,
    status: &mut toolgate_crds::ToolCallStatus,
) -> Prepared {
    match toolgate_core::lifecycle::start(snap, &call_of(rec), status) {
        Ok(Start::Run(run)) => Prepared {
            wanted: crate::place::wanted(&run.target),
            base: crate::place::sandbox_plan(&rt.inner.config, &rt.loaded().hidden, &run.target)
                .ok()
                .map(|(plan, _)| plan),
        },
        // A delegation runs nowhere; a call that will not start needs nothing.
        Ok(Start::Delegation(_)) | Err(_) => Prepared {
            wanted: None,
            base: None,
        },
    }
}

/// Start a call the proposal authorized in the proposal's own write, when nothing has to be
/// asked first: no credential to broker, and a sandbox for its plan already waiting. One durable
/// write instead of two before the executor's go. Called under the write lock, after the
/// proposal's steps are recorded on `rec`; the steps up to Started, and the placed call to run
/// once they are durable ([`run_placed`]), or nothing when the call is not for this path.
pub(crate) fn start_with_proposal(
    rt: &Runtime,
    rec: &mut CallRecord,
    proposed: &Snapshot<'_>,
) -> Result<Option<StartedAtOnce>, ApiError> {
    if rec.status.phase != Some(CallPhase::Authorized) {
        return Ok(None);
    }
    let Prepared { wanted, base } = prepare_with(rt, rec, proposed, &mut rec.status.clone());
    if wanted.is_some() {
        return Ok(None);
    }
    let Some(slot) = base.and_then(|b| rt.inner.pool.take_waiting(&b)) else {
        return Ok(None);
    };
    let mut placed = None;
    let steps = start_with(rt, rec, proposed, Some(slot), None, &mut placed)?;
    Ok(Some(StartedAtOnce { steps, placed }))
}

/// A call started in its proposal's write: the steps to record with the proposal's, and the
/// placed call to run once they are durable (none when its start failed: the steps end it).
pub(crate) struct StartedAtOnce {
    pub(crate) steps: Vec<Step>,
    pub(crate) placed: Option<Placed>,
}

/// Run a placed call (its steps up to Started durable) in the background.
pub(crate) fn spawn_placed(rt: &Runtime, rec: CallRecord, placed: Placed) {
    let rt = rt.clone();
    tokio::spawn(async move {
        let id = rec.id.clone();
        if let Err(e) = run_placed(&rt, rec, placed).await {
            tracing::error!(call = %id, error = %e, "running the call");
        }
    });
}

/// Run a placed call in its sandbox and record its end.
async fn run_placed(rt: &Runtime, rec: CallRecord, mut p: Placed) -> Result<(), ApiError> {
    let id = rec.id.as_str();
    let outcome = execute(rt, &rec, &mut p.slot).await;
    let outcome = with_egress_observed(outcome, p.egress.take());
    let outcome = with_writes_kept(outcome, p.slot.keep_writes().await);
    let base = p.slot.base().clone();
    let outcome = outcome.and_then(|ran| {
        let relative = Path::new(&rec.namespace).join(&rec.id);
        let store = crate::store::call_folder(&store_of(&rt.inner.config), &rec.namespace, &rec.id)
            .map_err(|e| e.to_string())?;
        p.slot
            .keep_artifacts(&relative, &store)
            .map_err(|e| format!("keeping the call's artifacts: {e}"))?;
        Ok(ran)
    });
    // The executor has told its end (every other process of the sandbox gone) and the credential
    // is removed; the sandbox's exit is waited for, and its cgroups and folder removed, once the
    // end is recorded (below).
    let mut slot = p.slot;
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
    // Another sandbox for the next call of this plan, once this one's end is recorded and its
    // sandbox is gone: starting one takes the cores for milliseconds, and the caller is waiting
    // for this call's result.
    let owner = rt.clone();
    tokio::spawn(async move {
        slot.exited().await;
        let _ = tokio::task::spawn_blocking(move || drop(slot)).await;
        let refill = owner.clone();
        owner
            .inner
            .pool
            .in_background(move || refill.inner.pool.refill(&refill.inner.config, &base));
    });
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

/// A run's outcome with its egress proxy's records folded in (the proxy stopped): what the call
/// reached and what was refused, and for a failed call, why.
fn with_egress_observed(
    outcome: Result<(CallResult, Duration), String>,
    egress: Option<toolgate_egress::Served>,
) -> Result<(CallResult, Duration), String> {
    let Some(served) = egress else {
        return outcome;
    };
    let (records, dropped) = served.records();
    drop(served);
    match outcome {
        Ok((mut result, elapsed)) => {
            toolgate_egress::fold(&mut result, &records, dropped);
            Ok((result, elapsed))
        }
        Err(message) => match toolgate_egress::refusals(&records, dropped) {
            Some(note) => Err(format!("{message}; {note}")),
            None => Err(message),
        },
    }
}

/// A run's outcome once its writes are in the workspace: a failure says when the write quota was
/// used up (`No space left on device` is all the tool saw), and writes that could not be brought
/// back fail a call that had succeeded.
fn with_writes_kept(
    outcome: Result<(CallResult, Duration), String>,
    used_up: Result<Option<toolgate_sandbox::plan::WriteLimit>, String>,
) -> Result<(CallResult, Duration), String> {
    let limit = match used_up {
        Err(e) => return outcome.and(Err(e)),
        Ok(None) => return outcome,
        Ok(Some(limit)) => limit,
    };
    let quota = format!(
        "the call used up its write quota ({} MiB, {} files: filesystem.writeQuota of its SandboxPolicy)",
        limit.bytes / (1024 * 1024),
        limit.files
    );
    match outcome {
        Ok((mut result, elapsed)) => {
            toolgate_contract::exec::note_failure(&mut result, &quota);
            Ok((result, elapsed))
        }
        Err(message) => Err(format!("{message}; {quota}")),
    }
}

/// The steps up to Started, decided by the core around this runtime's placement; `placed` is
/// set when the executor is to start.
fn start(
    rt: &Runtime,
    rec: &mut CallRecord,
    slot: Option<crate::slot::Slot>,
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
    start_with(rt, rec, &snap, slot, issued, placed)
}

/// [`start`] with the snapshot the call is decided with (the proposal's, when it starts in the
/// proposal's write: decided once).
fn start_with(
    rt: &Runtime,
    rec: &mut CallRecord,
    snap: &Snapshot<'_>,
    slot: Option<crate::slot::Slot>,
    issued: Option<crate::place::Issue>,
    placed: &mut Option<Placed>,
) -> Result<Vec<Step>, ApiError> {
    let mut status = rec.status.clone();
    // Decided again inside the transaction: what the broker was asked for may be stale. A
    // delegation runs nowhere: it opens, and its subagent acts with its token.
    let run = match toolgate_core::lifecycle::start(snap, &call_of(rec), &mut status) {
        Ok(Start::Run(run)) => run,
        Ok(Start::Delegation(started)) => {
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
        Err(steps) => {
            rec.status = status;
            return Ok(steps);
        }
    };
    let p = match place(
        rec,
        &run.target,
        &rt.inner.config,
        rt.inner.pool.spares(),
        &rt.loaded().hidden,
        slot,
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
        // The plan, and how this machine enforces its limits (the call's explanation shows both).
        rec.sandbox = serde_json::to_value(p.slot.plan()).ok().map(|mut plan| {
            if let Some(fields) = plan.as_object_mut() {
                fields.insert(
                    "enforcement".into(),
                    serde_json::json!(p.slot.enforcement()),
                );
            }
            plan
        });
        *placed = Some(p);
    }
    Ok(steps)
}

/// `f` over the snapshot a call is decided against now, and a copy of its status.
fn with_snapshot<T>(
    rt: &Runtime,
    rec: &CallRecord,
    f: impl FnOnce(&Snapshot<'_>, &mut toolgate_crds::ToolCallStatus) -> T,
) -> Result<T, ApiError> {
    let loaded = rt.loaded();
    let session = rt.session_approvals(rec)?;
    let dry_runs = rt.dry_runs_for(&loaded, rec)?;
    let snap = rt.snapshot(&loaded, rec, &rec.approvals, &session, &dry_runs)?;
    let mut status = rec.status.clone();
    Ok(f(&snap, &mut status))
}

/// Run the executor in the call's sandbox; the result it wrote, or why there is none.
async fn execute(
    rt: &Runtime,
    rec: &CallRecord,
    slot: &mut crate::slot::Slot,
) -> Result<(CallResult, Duration), String> {
    // Known while it runs, so a cancel can kill its process group.
    lock(&rt.inner.running).insert(rec.id.clone(), slot.process_group());
    let ran = slot.run().await;
    lock(&rt.inner.running).remove(&rec.id);
    ran
}
