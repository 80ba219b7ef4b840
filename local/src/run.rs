//! Running one authorized call: decide again (the approval must still bind, the tool must not
//! have changed), resolve the sandbox before anything runs (invariant 10), broker the credential
//! into the call's own folder, run the executor inside the sandbox, and record what it reports.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use jiff::Timestamp;
use tokio::io::AsyncReadExt;
use toolgate_api::ApiError;
use toolgate_core::call_state::{
    RunTarget, Step, cannot_run, finished_steps, recheck_steps, run_target,
};
use toolgate_core::exec::{ArtifactTarget, CallIdentity, ExecInput, FsRules, exec_spec};
use toolgate_core::redact::Redactor;
use toolgate_crds::conditions::{
    CREDENTIALS_BOUND, FINISHED, SANDBOX_PREPARED, STARTED, STATE_UPDATED,
};
use toolgate_crds::{CallPhase, CallResult, CallRuntime, LocalObjectRef};
use toolgate_sandbox::plan::{Context, Network};

use crate::manifests::Loaded;
use crate::runtime::{CANCELLED, Runtime, decide_record, lock};
use crate::store::CallRecord;

/// Bytes of the executor's stderr kept for a failure message.
const STDERR_KEPT: usize = 4096;
/// Grace after the sandbox's own timeout before the runtime kills it.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// What the run prepared, for the steps that follow.
struct Prepared {
    spec_path: PathBuf,
    creds_dir: PathBuf,
    result_path: PathBuf,
    plan: toolgate_sandbox::SandboxPlan,
    secret: Option<crate::broker::Secret>,
}

/// Run an authorized call to its end.
pub async fn run_call(rt: &Runtime, id: &str) -> Result<(), ApiError> {
    let loaded = rt.loaded();
    let data = rt.inner.config.data.clone();
    if !toolgate_core::names::is_dns_subdomain(id) {
        return Err(ApiError::Internal(format!(
            "refusing to run call {:?}: its id is not a Kubernetes name",
            id.chars().take(80).collect::<String>()
        )));
    }
    let run_dir = data.join("run").join(id);
    let mut prepared: Option<Prepared> = None;
    let session = match rt.inner.store.get(id) {
        Ok(Some(rec)) => rt.session_approvals(&rec)?,
        _ => vec![],
    };
    // Steps up to Started, under the write lock, durable before the process starts.
    let rec = rt
        .transition(id, |rec| {
            if rec.status.phase != Some(CallPhase::Authorized) {
                return Ok(vec![]);
            }
            match prepare(rec, &loaded, &session, &rt.inner.config, &run_dir) {
                Err(steps) => Ok(steps),
                Ok((p, mut steps)) => {
                    rec.attempts += 1;
                    if let Some(a) = rec.approval.as_mut() {
                        a.consumed = true;
                    }
                    let runtime = rec.status.runtime.get_or_insert_with(Default::default);
                    runtime.started_at = Some(toolgate_crds::Timestamp(Timestamp::now()));
                    steps.push(
                        Step::ok(
                            STARTED,
                            "ExecutorStarted",
                            format!("attempt {} in the local sandbox", rec.attempts),
                        )
                        .then(CallPhase::Running),
                    );
                    prepared = Some(p);
                    Ok(steps)
                }
            }
        })
        .await?;
    let Some(p) = prepared else {
        let _ = std::fs::remove_dir_all(&run_dir);
        return Ok(());
    };
    let outcome = execute(rt, &rec, &p).await;
    // The credential is gone the moment the sandbox is.
    let _ = std::fs::remove_dir_all(&p.creds_dir);
    let cancelled = lock(&rt.inner.cancelled).remove(id);
    let redactor = Redactor::new(p.secret.iter().map(|s| s.expose().as_bytes()));
    let steps_for = |rec: &mut CallRecord| -> Vec<Step> {
        if let Some(r) = rec.status.runtime.as_mut() {
            r.finished_at = Some(toolgate_crds::Timestamp(Timestamp::now()));
        }
        if cancelled {
            return vec![
                Step::ok(
                    CANCELLED,
                    "CancelledByUser",
                    "the sandbox was killed on request",
                )
                .then(CallPhase::Cancelled),
            ];
        }
        match &outcome {
            Err(message) => vec![
                Step::failed(FINISHED, "ExecutorFailed", redactor.redact_str(message)),
                Step::failed(STATE_UPDATED, "Failed", "the call failed; see Finished")
                    .then(CallPhase::Failed),
            ],
            Ok((result, elapsed)) => finished_steps(&mut rec.status, result, Some(*elapsed)),
        }
    };
    rt.transition(id, |rec| Ok(steps_for(rec))).await?;
    let _ = std::fs::remove_dir_all(&run_dir);
    Ok(())
}

/// Resolve everything before anything runs. On failure, the steps that end the call.
fn prepare(
    rec: &mut CallRecord,
    loaded: &Loaded,
    session: &[crate::store::ApprovalRecord],
    config: &crate::runtime::Config,
    run_dir: &Path,
) -> Result<(Prepared, Vec<Step>), Vec<Step>> {
    let fail = |kind, reason: &str, message: String| cannot_run(kind, reason, message);
    // Decide again: the manifests may have changed, the approval expired.
    let decision = decide_record(loaded, rec, session);
    if let Some(steps) = recheck_steps(&decision) {
        rec.status.authorization = decision.authorization(Timestamp::now());
        return Err(steps);
    }
    let target = run_target(
        &loaded.registry,
        &loaded.objects,
        &rec.namespace,
        &rec.spec.tool_ref.name,
    )?;
    let RunTarget {
        tool,
        policy_name,
        policy,
        binding,
    } = target;
    let (mut plan, confinement) = sandbox_plan(config, &target).map_err(|e| {
        fail(
            SANDBOX_PREPARED,
            "SandboxRefused",
            format!("SandboxPolicy {policy_name}: {e}"),
        )
    })?;
    let io = |what: &str, e: std::io::Error| {
        fail(
            SANDBOX_PREPARED,
            "SandboxSetupFailed",
            format!("{what}: {e}"),
        )
    };
    let creds_dir = run_dir.join("credentials");
    let out_dir = run_dir.join("out");
    let artifacts_root = config.data.join("artifacts");
    let call_artifacts = crate::store::call_folder(&artifacts_root, &rec.namespace, &rec.id)
        .map_err(|e| {
            fail(
                SANDBOX_PREPARED,
                "SandboxSetupFailed",
                format!("the call's artifact folder: {e}"),
            )
        })?;
    for d in [run_dir, &creds_dir, &out_dir, &call_artifacts] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(d)
            .map_err(|e| io("creating the call's folders", e))?;
    }
    let described = describe(policy_name, &plan);
    // The executor inside sees: its program, the spec and credentials (read-only), its output
    // folder and this call's artifact folder (writable). Nothing else of the data folder.
    if let Some(program) = config.executor.first() {
        plan.expose_read_only(PathBuf::from(program));
    }
    plan.expose_read_only(run_dir.join("spec.json"));
    plan.expose_read_only(&creds_dir);
    plan.expose_writable(&out_dir);
    plan.expose_writable(&call_artifacts);

    let event_id = format!("{}/{}", rec.id, rec.events + 3);
    let spec = exec_spec(ExecInput {
        call: CallIdentity {
            namespace: rec.namespace.clone(),
            name: rec.id.clone(),
            event_id,
        },
        tool: &tool.spec,
        policy,
        args: rec.spec.args.clone(),
        dry_run: rec.spec.dry_run,
        artifacts: ArtifactTarget::Local {
            dir: artifacts_root.display().to_string(),
        },
        credential: binding,
        working_dir: Some(match &tool.spec.execution.working_dir {
            Some(w) => Path::new(toolgate_sandbox::plan::WORKSPACE_INSIDE)
                .join(w)
                .display()
                .to_string(),
            None => plan.cwd.display().to_string(),
        }),
        write_roots: plan
            .writable
            .iter()
            .take(policy.filesystem.write_roots.len())
            .map(|b| b.inside.display().to_string())
            .collect(),
        // Landlock inside bubblewrap, when the kernel has it: the tool keeps to the policy's
        // roots and loses the executor's own files. Blocked paths stay bubblewrap's: covered by
        // an empty file or folder, so `git` (a blocked .git/config) and `grep -r` (a blocked
        // .env) still work; in a pod, where nothing can cover them, Landlock refuses them.
        confinement: toolgate_sandbox::confine::available().then_some(FsRules {
            blocked: Vec::new(),
            ..confinement
        }),
    });
    let spec_path = run_dir.join("spec.json");
    let json =
        serde_json::to_vec_pretty(&spec).map_err(|e| io("writing the call spec", e.into()))?;
    std::fs::write(&spec_path, json).map_err(|e| io("writing the call spec", e))?;

    let mut steps = vec![Step::ok(SANDBOX_PREPARED, "Resolved", described)];
    rec.sandbox = serde_json::to_value(&plan).ok();
    let runtime = rec.status.runtime.get_or_insert_with(CallRuntime::default);
    runtime.adapter = Some(format!("{:?}", tool.spec.execution.adapter).to_lowercase());
    runtime.sandbox_policy_ref = Some(LocalObjectRef {
        name: policy_name.to_string(),
    });
    let mut secret = None;
    match &binding {
        None => steps.push(Step::ok(
            CREDENTIALS_BOUND,
            "NotRequired",
            "the tool uses no credential",
        )),
        Some((name, b)) => match config.broker.issue(&rec.namespace, name, b) {
            Err(e) => {
                return Err(fail(
                    CREDENTIALS_BOUND,
                    "BrokerFailed",
                    format!("CredentialBinding {name}: {e}"),
                ));
            }
            Ok(issued) => {
                let file = spec
                    .credentials
                    .first()
                    .map_or_else(|| name.to_string(), |c| c.file_name.clone());
                let path = creds_dir.join(&file);
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o400)
                    .open(&path)
                    .and_then(|mut f| {
                        std::io::Write::write_all(&mut f, issued.value.expose().as_bytes())
                    })
                    .map_err(|e| io("writing the credential file", e))?;
                runtime.credential_binding_ref = Some(LocalObjectRef {
                    name: name.to_string(),
                });
                steps.push(Step::ok(
                    CREDENTIALS_BOUND,
                    "Brokered",
                    format!(
                        "CredentialBinding {name} ({:?} {}/{}) delivered as file {file}, TTL {} s",
                        b.vault.engine, b.vault.mount, b.vault.path, issued.ttl_seconds
                    ),
                ));
                secret = Some(issued.value);
            }
        },
    }
    Ok((
        Prepared {
            spec_path,
            creds_dir,
            result_path: out_dir.join("result.json"),
            plan,
            secret,
        },
        steps,
    ))
}

/// The sandbox a call's target runs in on this machine, and the Landlock rules of its policy;
/// or why this runtime cannot honour the policy. Pure apart from reading the environment, so
/// it is asked at proposal time too, before anyone approves the call.
pub(crate) fn sandbox_plan(
    config: &crate::runtime::Config,
    target: &RunTarget<'_>,
) -> Result<(toolgate_sandbox::SandboxPlan, FsRules), toolgate_sandbox::ResolveError> {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let plan = toolgate_sandbox::resolve(
        target.policy,
        &Context {
            workspace: &config.workspace,
            env: &env,
            private: std::slice::from_ref(&config.data),
            timeout_ms: Some(u64::from(target.tool.spec.execution.timeout_ms)),
            executor_is_the_only_client: target.tool.spec.execution.adapter
                == toolgate_crds::ExecutionAdapter::Http,
        },
    )?;
    Ok((plan, toolgate_sandbox::plan::confinement(target.policy)?))
}

fn describe(policy: &str, plan: &toolgate_sandbox::SandboxPlan) -> String {
    let list = |b: &[toolgate_sandbox::plan::Bind]| {
        b.iter()
            .map(|b| b.inside.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "SandboxPolicy {policy}: read-only [{}], writable [{}], hidden {}, network {}, timeout {} ms, memory {} MiB, processes {}",
        list(&plan.read_only),
        list(&plan.writable),
        plan.hidden.len(),
        if plan.network == Network::None {
            "none (loopback only)"
        } else {
            "host"
        },
        plan.limits.timeout.as_millis(),
        plan.limits.memory_bytes >> 20,
        plan.limits
            .processes
            .map_or("unlimited".into(), |p| p.to_string()),
    )
}

/// Run the executor in the sandbox; the result it wrote, or why there is none.
async fn execute(
    rt: &Runtime,
    rec: &CallRecord,
    p: &Prepared,
) -> Result<(CallResult, Duration), String> {
    let config = &rt.inner.config;
    let Some((program, lead)) = config.executor.split_first() else {
        return Err("no executor configured".into());
    };
    let mut args: Vec<OsString> = lead.to_vec();
    args.extend([
        "--spec".into(),
        p.spec_path.clone().into(),
        "--credentials".into(),
        p.creds_dir.clone().into(),
        "--result".into(),
        p.result_path.clone().into(),
    ]);
    let mut sandboxed = toolgate_sandbox::prepare(&p.plan, Path::new(program), &args, &rec.id)
        .map_err(|e| e.to_string())?;
    let enforcement = sandboxed.enforcement.clone();
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
    if let Some(pg) = pgid {
        lock(&rt.inner.running).insert(rec.id.clone(), pg);
    }
    let mut stderr = child.stderr.take();
    let reader = tokio::spawn(async move {
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
    });
    let limit = p.plan.limits.timeout + KILL_GRACE;
    let status = match tokio::time::timeout(limit, child.wait()).await {
        Ok(s) => s.map_err(|e| format!("waiting for the sandbox: {e}")),
        Err(_) => {
            if let Some(pg) = pgid {
                // SAFETY: kill(2) on the sandbox's own process group.
                unsafe { libc::kill(-pg, libc::SIGKILL) };
            }
            let _ = child.wait().await;
            Err(format!(
                "the sandbox outlived its time limit ({} ms) and was killed",
                limit.as_millis()
            ))
        }
    };
    lock(&rt.inner.running).remove(&rec.id);
    sandboxed.cleanup();
    let elapsed = started.elapsed();
    let stderr = reader.await.unwrap_or_default();
    let status = status?;
    let _ = enforcement;
    match std::fs::read(&p.result_path) {
        Ok(bytes) => serde_json::from_slice::<CallResult>(&bytes)
            .map(|r| (r, elapsed))
            .map_err(|e| format!("the executor's result is not valid: {e}")),
        Err(_) => Err(format!(
            "the executor wrote no result ({status}); stderr: {}",
            String::from_utf8_lossy(&stderr).trim()
        )),
    }
}
