//! The embedded runtime: the call state machine over the durable store, decisions by the core,
//! approvals bound to what the approver saw, and execution handed to [`crate::run`].

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::broadcast;
use toolgate_api::{ApiError, Caller};
use toolgate_core::args::ArgsLimits;
use toolgate_core::call_state::{
    Step, apply, decision_steps, is_terminal, phase_name, unplaceable,
};
use toolgate_core::decision::{ApprovalEntry, CallUnderReview, Decision, decide_in};
use toolgate_core::lint::Linter;
use toolgate_core::principal::Principal;
use toolgate_crds::conditions::{APPROVAL_GRANTED, APPROVAL_REQUESTED, FINISHED, STARTED};
use toolgate_crds::{
    ApprovalDecision, CallPhase, ConditionStatus, DecisionOutcome, LocalObjectRef, ToolApprovalSpec,
};

use crate::broker::CredentialBroker;
use crate::manifests::{Loaded, load_folder};
use crate::store::{ApprovalRecord, CallRecord, EventRecord, Store, StoreError};

/// Condition type of a cancellation.
pub const CANCELLED: &str = "Cancelled";

/// How the embedded runtime is set up.
pub struct Config {
    /// Folder of manifests (tools, grants, sandbox policies, credential bindings).
    pub manifests: PathBuf,
    /// Data folder: the store, event logs, artifacts, per-call run folders.
    pub data: PathBuf,
    /// The workspace the sandbox policies' roots refer to.
    pub workspace: PathBuf,
    /// The executor command (program and leading arguments), run inside the sandbox.
    pub executor: Vec<OsString>,
    /// Where credentials come from.
    pub broker: Arc<dyn CredentialBroker>,
    /// How often the manifests folder is checked for changes.
    pub reload_interval: Duration,
}

/// Why the runtime did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The manifests do not lint.
    #[error("the manifests in {dir} have {} error(s):\n{}", .errors.len(), .errors.join("\n"))]
    Manifests {
        /// The folder.
        dir: String,
        /// One line per error.
        errors: Vec<String>,
    },
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) store: Store,
    linter: Linter,
    pub(crate) loaded: RwLock<Arc<Loaded>>,
    write: tokio::sync::Mutex<()>,
    pub(crate) events: broadcast::Sender<EventRecord>,
    /// Process groups of running sandboxes, by call.
    pub(crate) running: Mutex<HashMap<String, i32>>,
    pub(crate) cancelled: Mutex<HashSet<String>>,
}

/// The embedded runtime. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(e.to_string())
}

impl Runtime {
    /// Load the manifests (refusing to start on any error), open the store, recover calls a
    /// previous process left, and watch the manifests folder.
    pub async fn start(config: Config) -> Result<Runtime, StartError> {
        let linter = crate::manifests::linter().map_err(|e| StartError::Other(e.to_string()))?;
        let loaded =
            load_folder(&linter, &config.manifests, Timestamp::now()).map_err(|errors| {
                StartError::Manifests {
                    dir: config.manifests.display().to_string(),
                    errors,
                }
            })?;
        for w in &loaded.warnings {
            tracing::warn!(warning = %w, "manifest warning");
        }
        let store = Store::open(&config.data)?;
        let (events, _) = broadcast::channel(1024);
        let rt = Runtime {
            inner: Arc::new(Inner {
                config,
                store,
                linter,
                loaded: RwLock::new(Arc::new(loaded)),
                write: tokio::sync::Mutex::new(()),
                events,
                running: Mutex::new(HashMap::new()),
                cancelled: Mutex::new(HashSet::new()),
            }),
        };
        rt.recover()
            .await
            .map_err(|e| StartError::Other(e.to_string()))?;
        let watcher = rt.clone();
        tokio::spawn(async move { watcher.watch_manifests().await });
        Ok(rt)
    }

    /// The manifests as last loaded.
    pub fn loaded(&self) -> Arc<Loaded> {
        match self.inner.loaded.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Subscribe to every event of every call.
    pub fn subscribe(&self) -> broadcast::Receiver<EventRecord> {
        self.inner.events.subscribe()
    }

    /// Record steps on a call under the write lock: `mutate` sees the record first; every step
    /// becomes a condition and an event; the whole change is durable before this returns.
    pub(crate) async fn transition(
        &self,
        id: &str,
        mutate: impl FnOnce(&mut CallRecord) -> Result<Vec<Step>, ApiError>,
    ) -> Result<CallRecord, ApiError> {
        let _guard = self.inner.write.lock().await;
        let mut rec = self.stored(id)?;
        let steps = mutate(&mut rec)?;
        let events = record_steps(&mut rec, &steps);
        self.inner
            .store
            .save(&rec, &events, None)
            .map_err(internal)?;
        for e in events {
            let _ = self.inner.events.send(e);
        }
        Ok(rec)
    }

    /// Propose a call as `caller`.
    pub async fn propose(
        &self,
        caller: &Caller,
        req: toolgate_proto::v1::ProposeCallRequest,
    ) -> Result<CallRecord, ApiError> {
        let proposal = toolgate_api::request::Proposal::validate(caller, &req)?;
        let namespace = proposal.namespace.clone();
        let loaded = self.loaded();
        let tool_name = resolve_tool_name(&loaded, &namespace, &proposal.tool);
        let current = loaded.registry.tool(&namespace, &tool_name);
        // Pin the version decided against, so the record names it (invariant 1).
        let digest = proposal
            .tool_digest
            .clone()
            .or_else(|| current.map(|t| t.digest.clone()));
        let spec = proposal.into_spec(caller, tool_name, digest);
        let guard = self.inner.write.lock().await;
        let idem_key = spec
            .idempotency_key
            .as_ref()
            .map(|k| format!("{namespace}/{}/{k}", caller.name()));
        if let Some(key) = &idem_key
            && let Some(existing) = self.inner.store.by_idempotency_key(key).map_err(internal)?
            && let Some(rec) = self.inner.store.get(&existing).map_err(internal)?
        {
            if rec.spec.tool_ref.name != spec.tool_ref.name
                || rec.spec.args != spec.args
                || rec.spec.dry_run != spec.dry_run
            {
                return Err(ApiError::AlreadyExists {
                    code: "idempotency-key-reused",
                    message: format!(
                        "idempotency_key {:?} already names call {} with a different tool or args; use a new key",
                        spec.idempotency_key.as_deref().unwrap_or_default(),
                        rec.id
                    ),
                });
            }
            return Ok(rec);
        }
        let now = Timestamp::now();
        let mut rec = CallRecord {
            id: toolgate_api::request::new_call_name(now),
            namespace: namespace.clone(),
            spec,
            status: Default::default(),
            created_at: now,
            groups: caller.principal.groups.clone(),
            approval: None,
            sandbox: None,
            events: 0,
            attempts: 0,
        };
        let mut steps = vec![toolgate_core::call_state::requested(&rec.spec)];
        let session = self.session_approvals(&rec)?;
        let decision = decide_record(&loaded, &rec, &session);
        let scopes = loaded
            .registry
            .tool(&rec.namespace, &rec.spec.tool_ref.name)
            .map(|t| t.spec.permissions.required_scopes.clone())
            .unwrap_or_default();
        let config = &self.inner.config;
        steps.extend(decision_steps(
            &mut rec.status,
            &rec.spec,
            &decision,
            &scopes,
            Timestamp::now(),
            || {
                unplaceable(
                    &loaded.registry,
                    &loaded.objects,
                    &rec.namespace,
                    &rec.spec.tool_ref.name,
                    |target| {
                        crate::run::sandbox_plan(config, target)
                            .map(drop)
                            .map_err(|e| e.to_string())
                    },
                )
            },
        ));
        let events = record_steps(&mut rec, &steps);
        self.inner
            .store
            .save(&rec, &events, idem_key.as_deref())
            .map_err(internal)?;
        drop(guard);
        for e in events {
            let _ = self.inner.events.send(e);
        }
        if rec.status.phase == Some(CallPhase::Authorized) {
            self.spawn_run(rec.id.clone());
        }
        Ok(rec)
    }

    /// A stored call, whoever asks.
    fn stored(&self, id: &str) -> Result<CallRecord, ApiError> {
        self.inner
            .store
            .get(id)
            .map_err(internal)?
            .ok_or_else(|| ApiError::NotFound {
                what: format!("call {id:?}"),
            })
    }

    /// The allowForSession approvals of other calls in the same namespace and session (none
    /// without a session).
    pub(crate) fn session_approvals(
        &self,
        rec: &CallRecord,
    ) -> Result<Vec<ApprovalRecord>, ApiError> {
        let Some(session) = rec.spec.session_id.as_deref() else {
            return Ok(vec![]);
        };
        Ok(self
            .inner
            .store
            .session_approved(&rec.namespace, session)
            .map_err(internal)?
            .into_iter()
            .filter(|r| r.id != rec.id)
            .filter_map(|r| r.approval)
            .collect())
    }

    /// A call the caller may see.
    pub fn get(&self, caller: &Caller, id: &str) -> Result<CallRecord, ApiError> {
        let rec = self.stored(id)?;
        if rec.spec.principal != caller.name() && !caller.approves_in(&rec.namespace) {
            // Not found rather than forbidden: ids of others' calls are not disclosed.
            return Err(ApiError::NotFound {
                what: format!("call {id:?}"),
            });
        }
        Ok(rec)
    }

    /// Approve (or deny) a call as `caller`, bound to the digests the approver was shown.
    pub async fn decide_approval(
        &self,
        caller: &Caller,
        id: &str,
        approve: Option<(&str, &str, bool, u32)>,
        comment: &str,
    ) -> Result<CallRecord, ApiError> {
        let rec = self.get(caller, id)?;
        if caller.name() == rec.spec.principal {
            return Err(ApiError::PermissionDenied {
                code: "approval-self",
                message: format!(
                    "{} proposed call {id}; an approver must be someone else",
                    caller.name()
                ),
            });
        }
        if !caller.approves_in(&rec.namespace) {
            return Err(ApiError::PermissionDenied {
                code: "not-an-approver",
                message: format!(
                    "{} may not approve or deny calls in namespace {}",
                    caller.name(),
                    rec.namespace
                ),
            });
        }
        if let Some((args_digest, tool_digest, _, ttl)) = approve {
            if args_digest.is_empty() || tool_digest.is_empty() {
                return Err(ApiError::field(
                    if args_digest.is_empty() {
                        "args_digest"
                    } else {
                        "tool_digest"
                    },
                    "expected the digest the approver was shown (GetCall returns it)",
                ));
            }
            if ttl > 86_400 {
                return Err(ApiError::field(
                    "ttl_seconds",
                    format!("expected at most 86400, got {ttl}"),
                ));
            }
        }
        let loaded = self.loaded();
        let caller_name = caller.name().to_string();
        let comment = (!comment.is_empty()).then(|| comment.to_string());
        let rec = self
            .transition(id, |rec| {
                if rec.status.phase != Some(CallPhase::AwaitingApproval) {
                    return Err(ApiError::FailedPrecondition {
                        code: "not-awaiting-approval",
                        message: format!(
                            "call {} is {}, not AwaitingApproval",
                            rec.id,
                            phase_name(rec.status.phase)
                        ),
                    });
                }
                let Some((args_digest, tool_digest, for_session, ttl)) = approve else {
                    return Ok(vec![Step::failed(
                        APPROVAL_GRANTED,
                        "DeniedByApprover",
                        format!(
                            "{caller_name} denied the call{}",
                            comment.as_deref().map(|c| format!(": {c}")).unwrap_or_default()
                        ),
                    )
                    .then(CallPhase::Denied)]);
                };
                let now_args = rec.status.args_digest.clone().unwrap_or_default();
                let now_tool = rec.status.tool_digest.clone().unwrap_or_default();
                if args_digest != now_args {
                    return Err(ApiError::FailedPrecondition {
                        code: "approval-args-changed",
                        message: format!(
                            "the approver was shown args {args_digest}, the call's are {now_args}"
                        ),
                    });
                }
                if tool_digest != now_tool {
                    return Err(ApiError::FailedPrecondition {
                        code: "approval-tool-changed",
                        message: format!(
                            "the approver was shown tool version {tool_digest}, the call's is {now_tool}"
                        ),
                    });
                }
                let tool = loaded.registry.tool(&rec.namespace, &rec.spec.tool_ref.name);
                let Some(auth) = rec.status.authorization.clone() else {
                    return Err(internal("call without a decision awaits approval"));
                };
                let ttl = if ttl == 0 { 900 } else { ttl };
                let now = Timestamp::now();
                let spec = ToolApprovalSpec {
                    call_ref: LocalObjectRef {
                        name: rec.id.clone(),
                    },
                    args_digest: args_digest.to_string(),
                    tool_digest: tool_digest.to_string(),
                    risk_tier: auth.risk_tier,
                    scopes: tool
                        .map(|t| t.spec.permissions.required_scopes.clone())
                        .unwrap_or_default(),
                    principal: rec.spec.principal.clone(),
                    approver: caller_name.clone(),
                    decision: if for_session {
                        ApprovalDecision::AllowForSession
                    } else {
                        ApprovalDecision::AllowOnce
                    },
                    session_id: rec.spec.session_id.clone(),
                    expires_at: toolgate_crds::Timestamp(
                        now.checked_add(jiff::SignedDuration::from_secs(i64::from(ttl)))
                            .map_err(internal)?,
                    ),
                    comment: comment.clone(),
                };
                if for_session && spec.session_id.is_none() {
                    return Err(ApiError::field(
                        "for_session",
                        "the call has no session_id; approve it once instead",
                    ));
                }
                rec.approval = Some(ApprovalRecord {
                    name: format!("{}-approval", rec.id),
                    spec,
                    consumed: false,
                });
                let decision = decide_record(&loaded, rec, &[]);
                if decision.outcome != DecisionOutcome::Allow {
                    let why = decision
                        .reasons
                        .last()
                        .map(|r| r.message.clone())
                        .unwrap_or_default();
                    rec.approval = None;
                    return Err(ApiError::FailedPrecondition {
                        code: "approval-not-binding",
                        message: format!("the approval does not authorize the call: {why}"),
                    });
                }
                rec.status.authorization = decision.authorization(now);
                Ok(vec![Step::ok(
                    APPROVAL_GRANTED,
                    "Approved",
                    format!(
                        "{caller_name} approved {} bound to args {args_digest} and tool {tool_digest}, valid {ttl} s",
                        if for_session { "the session" } else { "this call once" }
                    ),
                )
                .then(CallPhase::Authorized)])
            })
            .await?;
        if rec.status.phase == Some(CallPhase::Authorized) {
            self.spawn_run(rec.id.clone());
        }
        Ok(rec)
    }

    /// Cancel a call: its principal or an approver of its namespace.
    pub async fn cancel(
        &self,
        caller: &Caller,
        id: &str,
        reason: &str,
    ) -> Result<CallRecord, ApiError> {
        let rec = self.get(caller, id)?;
        let who = caller.name().to_string();
        let reason = if reason.is_empty() {
            "no reason given".to_string()
        } else {
            reason.to_string()
        };
        let running = rec.status.phase == Some(CallPhase::Running);
        if running {
            lock(&self.inner.cancelled).insert(id.to_string());
            if let Some(pgid) = lock(&self.inner.running).get(id).copied() {
                // SAFETY: kill(2) on the sandbox's own process group.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
            }
            // The run records the cancellation when the sandbox is gone.
            return self.get(caller, id);
        }
        self.transition(id, |rec| {
            if is_terminal(rec.status.phase) {
                return Err(ApiError::FailedPrecondition {
                    code: "call-ended",
                    message: format!(
                        "call {} already ended ({})",
                        rec.id,
                        phase_name(rec.status.phase)
                    ),
                });
            }
            Ok(vec![
                Step::ok(
                    CANCELLED,
                    "CancelledByUser",
                    format!("{who} cancelled the call: {reason}"),
                )
                .then(CallPhase::Cancelled),
            ])
        })
        .await
    }

    async fn recover(&self) -> Result<(), ApiError> {
        let loaded = self.loaded();
        let open = self
            .inner
            .store
            .scan(None, usize::MAX, |r| {
                matches!(
                    r.status.phase,
                    Some(CallPhase::Running | CallPhase::Authorized)
                )
            })
            .map_err(internal)?;
        for rec in open {
            if rec.status.phase == Some(CallPhase::Running) {
                let idempotent = loaded
                    .registry
                    .tool(&rec.namespace, &rec.spec.tool_ref.name)
                    .is_some_and(|t| t.spec.effects.idempotent);
                let rec = self
                    .transition(&rec.id, |_| {
                        Ok(vec![if idempotent {
                            Step::failed(
                                STARTED,
                                "Interrupted",
                                "toolgate stopped while the call ran; the tool is idempotent, so it runs again",
                            )
                            .then(CallPhase::Authorized)
                        } else {
                            Step::failed(
                                FINISHED,
                                "Interrupted",
                                "toolgate stopped while the call ran; the tool is not idempotent, so it is not run again (it may or may not have taken effect)",
                            )
                            .then(CallPhase::Failed)
                        }])
                    })
                    .await?;
                if rec.status.phase == Some(CallPhase::Authorized) {
                    self.spawn_run(rec.id);
                }
            } else {
                self.spawn_run(rec.id);
            }
        }
        Ok(())
    }

    async fn watch_manifests(&self) {
        let mut last = self.loaded().fingerprint.clone();
        loop {
            tokio::time::sleep(self.inner.config.reload_interval).await;
            let dir = self.inner.config.manifests.clone();
            let now = crate::manifests::fingerprint(&dir);
            if now == last {
                continue;
            }
            last = now;
            match load_folder(&self.inner.linter, &dir, Timestamp::now()) {
                Err(errors) => {
                    tracing::error!(
                        errors = errors.len(),
                        "the changed manifests do not lint; keeping the previous ones:\n{}",
                        errors.join("\n")
                    );
                }
                Ok(loaded) => {
                    tracing::info!(dir = %dir.display(), "manifests reloaded");
                    let loaded = Arc::new(loaded);
                    match self.inner.loaded.write() {
                        Ok(mut g) => *g = loaded.clone(),
                        Err(p) => *p.into_inner() = loaded.clone(),
                    }
                    if let Err(e) = self.void_changed(&loaded).await {
                        tracing::error!(error = %e, "re-checking pending calls after a reload");
                    }
                }
            }
        }
    }

    /// Calls waiting for approval whose tool changed: what an approver would see is not what
    /// the proposer saw, so the call ends (invariant 6).
    async fn void_changed(&self, loaded: &Loaded) -> Result<(), ApiError> {
        let pending = self
            .inner
            .store
            .scan(None, usize::MAX, |r| {
                r.status.phase == Some(CallPhase::AwaitingApproval)
            })
            .map_err(internal)?;
        for rec in pending {
            let now = loaded
                .registry
                .tool(&rec.namespace, &rec.spec.tool_ref.name)
                .map(|t| t.digest.clone());
            if now.as_deref() == rec.status.tool_digest.as_deref() {
                continue;
            }
            let was = rec.status.tool_digest.clone().unwrap_or_default();
            self.transition(&rec.id, |r| {
                if r.status.phase != Some(CallPhase::AwaitingApproval) {
                    return Ok(vec![]);
                }
                Ok(vec![Step::failed(
                    APPROVAL_REQUESTED,
                    "ToolChanged",
                    format!(
                        "the tool's descriptor changed while the call waited (was {was}, now {}); propose the call again",
                        now.as_deref().unwrap_or("removed")
                    ),
                )
                .then(CallPhase::Denied)])
            })
            .await?;
        }
        Ok(())
    }

    pub(crate) fn spawn_run(&self, id: String) {
        let rt = self.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::run::run_call(&rt, &id).await {
                tracing::error!(call = %id, error = %e, "running the call");
            }
        });
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Apply steps to a record, returning their events.
pub(crate) fn record_steps(rec: &mut CallRecord, steps: &[Step]) -> Vec<EventRecord> {
    let mut events = Vec::new();
    for step in steps {
        let now = Timestamp::now();
        apply(&mut rec.status, step, now, 1);
        rec.events += 1;
        events.push(EventRecord {
            call_id: rec.id.clone(),
            sequence: rec.events,
            event_id: format!("{}/{}", rec.id, rec.events),
            kind: step.kind.to_string(),
            status: match step.status {
                ConditionStatus::True => "True",
                ConditionStatus::False => "False",
                ConditionStatus::Unknown => "Unknown",
            }
            .to_string(),
            reason: step.reason.clone(),
            message: step.message.clone(),
            time: now.to_string(),
            phase: phase_name(rec.status.phase).to_string(),
            terminal: is_terminal(rec.status.phase),
        });
    }
    events
}

/// Decide a record against the loaded manifests, with its approval if any.
/// `session` holds the allowForSession approvals given to other calls of the call's session.
pub(crate) fn decide_record(
    loaded: &Loaded,
    rec: &CallRecord,
    session: &[ApprovalRecord],
) -> Decision {
    let principal = Principal::new(rec.spec.principal.clone()).with_groups(rec.groups.clone());
    let approvals: Vec<ApprovalEntry<'_>> = rec
        .approval
        .iter()
        .chain(session)
        .map(|a| ApprovalEntry {
            name: &a.name,
            spec: &a.spec,
            consumed: a.consumed,
        })
        .collect();
    decide_in(
        &loaded.registry,
        &CallUnderReview {
            namespace: &rec.namespace,
            name: &rec.id,
            spec: &rec.spec,
            principal: &principal,
        },
        &approvals,
        Timestamp::now(),
        &ArgsLimits::default(),
    )
}

/// The descriptor a request names: its object name, canonical name, or provider name.
fn resolve_tool_name(loaded: &Loaded, namespace: &str, tool: &str) -> String {
    if loaded.registry.tool(namespace, tool).is_some() {
        return tool.to_string();
    }
    loaded
        .registry
        .tools_in(namespace)
        .find(|t| {
            t.spec.canonical_name == tool
                || toolgate_core::view::provider_name(
                    &t.spec.canonical_name,
                    &mut Default::default(),
                ) == tool
        })
        .map_or_else(|| tool.to_string(), |t| t.name.clone())
}
