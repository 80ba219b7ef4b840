//! The embedded runtime's plumbing: its configuration, the manifests as last loaded, the
//! durable store and the one way a call's status changes ([`Runtime::transition`]). What a
//! transition records is decided by `toolgate_core::lifecycle`; this crate persists and places it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use jiff::Timestamp;
use tokio::sync::broadcast;
pub(crate) use toolgate_api::internal;
use toolgate_api::{ApiError, Caller};
use toolgate_core::approval::DryRunEntry;
use toolgate_core::budget;
use toolgate_core::decision::ApprovalEntry;
use toolgate_core::lifecycle::{
    Call, Snapshot, Step, apply, budget_move, is_terminal, may_see, phase_name, settle,
};
use toolgate_core::lint::Linter;
use toolgate_core::registry::GrantUsages;
use toolgate_crds::ToolGrantStatus;

pub use crate::config::Config;
use crate::manifests::Loaded;
use crate::store::{ApprovalRecord, CallRecord, EventRecord, Store, StoreError, ledger_key};
pub(crate) use crate::sync::lock;

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
    /// The linter could not be built from the generated schemas (a bug).
    #[error("{0}")]
    Linter(String),
    /// Calls a previous process left could not be picked up.
    #[error("recovering the calls a previous run left: {0}")]
    Recover(ApiError),
    /// Clearing a dead runtime's sandbox folders stopped before it was done (a bug): the
    /// runtime does not start over folders in an unknown state.
    #[error("clearing the sandbox folders of a previous run stopped: {0}")]
    SandboxFolders(String),
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) store: Store,
    pub(crate) linter: Linter,
    pub(crate) loaded: RwLock<Arc<Loaded>>,
    write: tokio::sync::Mutex<()>,
    pub(crate) events: broadcast::Sender<EventRecord>,
    /// Process groups of running sandboxes, by call.
    pub(crate) running: Mutex<HashMap<String, i32>>,
    /// Who cancelled a running call and why, until its sandbox is gone.
    pub(crate) cancelled: Mutex<HashMap<String, String>>,
    /// What each McpServer last listed, and when it was last asked.
    pub(crate) discovered: Mutex<crate::manifests::Discovered>,
    pub(crate) discovered_at: Mutex<HashMap<(String, String), std::time::Instant>>,
    /// Sandboxes started ahead of demand.
    pub(crate) pool: crate::slot::Pool,
    /// The calls' counters (the operator's names) and the registry `/metrics` encodes.
    metrics: toolgate_api::metrics::CallMetrics,
    registry: prometheus_client::registry::Registry,
}

/// The embedded runtime. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

impl Runtime {
    /// A runtime over an opened store and loaded manifests; nothing runs yet.
    pub(crate) fn new(config: Config, store: Store, linter: Linter, loaded: Loaded) -> Runtime {
        let (events, _) = broadcast::channel(1024);
        let metrics = toolgate_api::metrics::CallMetrics::default();
        let mut registry = prometheus_client::registry::Registry::with_prefix("toolgate");
        metrics.register(&mut registry, "local");
        let pool = crate::slot::Pool::new(
            config.warm_sandboxes,
            &crate::slot::staging_folder(&config.data),
        );
        Runtime {
            inner: Arc::new(Inner {
                pool,
                config,
                store,
                linter,
                loaded: RwLock::new(Arc::new(loaded)),
                write: tokio::sync::Mutex::new(()),
                events,
                running: Mutex::new(HashMap::new()),
                cancelled: Mutex::new(HashMap::new()),
                discovered: Mutex::new(Default::default()),
                discovered_at: Mutex::new(HashMap::new()),
                metrics,
                registry,
            }),
        }
    }

    /// The `/metrics` exposition ([`toolgate_api::metrics`]), the calls in flight counted now.
    pub fn metrics_text(&self) -> String {
        let running = lock(&self.inner.running).len();
        self.inner
            .metrics
            .in_flight
            .set(i64::try_from(running).unwrap_or(i64::MAX));
        toolgate_api::metrics::encode(&self.inner.registry)
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
        self.persist(rec, &steps, None)
    }

    /// Write a record with its new steps (and an idempotency key), then tell the watchers.
    /// Callers hold the write lock.
    pub(crate) fn persist(
        &self,
        mut rec: CallRecord,
        steps: &[Step],
        idempotency_key: Option<&str>,
    ) -> Result<CallRecord, ApiError> {
        let mut recorded = Recorded::default();
        self.record(&mut rec, steps, &mut recorded)?;
        self.commit(rec, recorded, idempotency_key)
    }

    /// Record steps on a call in memory (the grant's budget charged or refunded with them),
    /// adding them to what [`Runtime::commit`] writes next. Callers hold the write lock.
    pub(crate) fn record(
        &self,
        rec: &mut CallRecord,
        steps: &[Step],
        into: &mut Recorded,
    ) -> Result<(), ApiError> {
        let mut steps = steps.to_vec();
        if let Some(ledger) = self.budget(rec, &mut steps, into.ledger.take())? {
            into.ledger = Some(ledger);
        }
        into.events.extend(record_steps(rec, &steps));
        into.steps.extend(steps);
        Ok(())
    }

    /// Write a record with what was recorded on it (and an idempotency key) in one durable
    /// transaction, then tell the watchers. Callers hold the write lock.
    pub(crate) fn commit(
        &self,
        rec: CallRecord,
        recorded: Recorded,
        idempotency_key: Option<&str>,
    ) -> Result<CallRecord, ApiError> {
        let Recorded {
            began,
            steps,
            events,
            ledger,
        } = recorded;
        self.inner
            .store
            .save(
                &rec,
                &events,
                idempotency_key,
                ledger.as_ref().map(|(k, l)| (k.as_str(), l)),
            )
            .map_err(internal)?;
        self.inner
            .metrics
            .record(&rec.namespace, &rec.spec.tool_ref.name, &rec.status, &steps);
        self.inner
            .config
            .tracer
            .record(&rec.traced(), &rec.status, &steps, began);
        for e in events {
            let _ = self.inner.events.send(e);
        }
        Ok(rec)
    }

    /// The write lock, for a change that reads the store before it writes (idempotency).
    pub(crate) async fn write_lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.inner.write.lock().await
    }

    /// A stored call, whoever asks.
    pub(crate) fn stored(&self, id: &str) -> Result<CallRecord, ApiError> {
        self.inner
            .store
            .get(id)
            .map_err(internal)?
            .ok_or_else(|| ApiError::NotFound {
                what: format!("call {id:?}"),
            })
    }

    /// A call the caller may see.
    pub fn get(&self, caller: &Caller, id: &str) -> Result<CallRecord, ApiError> {
        let rec = self.stored(id)?;
        if !may_see(
            caller.name(),
            &rec.spec.principal,
            caller.reads_in(&rec.namespace),
        ) {
            // Not found rather than forbidden: ids of others' calls are not disclosed.
            return Err(ApiError::NotFound {
                what: format!("call {id:?}"),
            });
        }
        Ok(rec)
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
            .flat_map(|r| r.approvals)
            .filter(|a| a.spec.decision == toolgate_crds::ApprovalDecision::AllowForSession)
            .collect())
    }
}

/// The call a record holds, as the lifecycle sees it.
pub(crate) fn call_of(rec: &CallRecord) -> Call<'_> {
    Call {
        namespace: &rec.namespace,
        name: &rec.id,
        spec: &rec.spec,
        status: &rec.status,
    }
}

impl Runtime {
    /// What a record in `namespace` is decided against: the manifests, its own approvals and
    /// its session's, the dry runs that may confirm it, and what the namespace's grants used of
    /// their budgets.
    pub(crate) fn snapshot<'a>(
        &self,
        loaded: &'a Loaded,
        rec: &CallRecord,
        own: &'a [ApprovalRecord],
        session: &'a [ApprovalRecord],
        dry_runs: &'a [CallRecord],
    ) -> Result<Snapshot<'a>, ApiError> {
        let approvals = own
            .iter()
            .chain(session)
            .map(|a| ApprovalEntry {
                name: &a.name,
                spec: &a.spec,
                consumed: a.consumed,
            })
            .collect();
        let dry_runs = dry_runs
            .iter()
            .filter_map(|r| DryRunEntry::of(&r.id, &r.spec, &r.status))
            .collect();
        let now = Timestamp::now();
        Ok(Snapshot::new(&loaded.policies, approvals, now)
            .with_dry_runs(dry_runs)
            .with_usage(self.usage(&rec.namespace, now)?)
            .with_delegation(self.delegation_scope(loaded, rec)?))
    }

    /// The succeeded dry runs that may confirm `rec`: none unless it is an L5 call whose tool
    /// asks for a dry run ([`toolgate_core::lifecycle::Policies::wants_dry_runs`]).
    pub(crate) fn dry_runs_for(
        &self,
        loaded: &Loaded,
        rec: &CallRecord,
    ) -> Result<Vec<CallRecord>, ApiError> {
        if !loaded.policies.wants_dry_runs(&call_of(rec)) {
            return Ok(Vec::new());
        }
        self.inner
            .store
            .dry_runs(&rec.namespace, &rec.spec.tool_ref.name)
            .map_err(internal)
    }

    /// What the grants of `namespace` used of their budgets at `now`, from their ledgers.
    pub(crate) fn usage(&self, namespace: &str, now: Timestamp) -> Result<GrantUsages, ApiError> {
        Ok(self
            .inner
            .store
            .ledgers_in(namespace)
            .map_err(internal)?
            .into_iter()
            .map(|(grant, l)| ((namespace.to_string(), grant), budget::usage(&l, now)))
            .collect())
    }

    /// The budget a transition charges or gives back, applied to the grant's ledger (and, for
    /// an exhausted budget, to the steps): the ledger to write with the call.
    fn budget(
        &self,
        rec: &mut CallRecord,
        steps: &mut Vec<Step>,
        pending: Option<(String, ToolGrantStatus)>,
    ) -> Result<Option<(String, ToolGrantStatus)>, ApiError> {
        let movement = budget_move(&rec.status, steps);
        let Some(grant) = movement.grant().map(str::to_string) else {
            return Ok(pending);
        };
        let key = ledger_key(&rec.namespace, &grant);
        // A ledger changed earlier in the same transaction is the one to change again.
        let mut ledger = match pending {
            Some((k, l)) if k == key => l,
            Some((k, _)) => {
                return Err(ApiError::Internal(format!(
                    "call {}: one write would move two grants' budgets ({k} and {key})",
                    rec.id
                )));
            }
            None => self.inner.store.ledger(&key).map_err(internal)?,
        };
        let loaded = self.loaded();
        let budget = loaded
            .policies
            .registry
            .grants()
            .find(|g| g.namespace == rec.namespace && g.name == grant)
            .and_then(|g| g.spec.budget.clone());
        let (spec, current) = (rec.spec.clone(), rec.status.clone());
        let call = Call {
            namespace: &rec.namespace,
            name: &rec.id,
            spec: &spec,
            status: &current,
        };
        settle(
            &movement,
            &call,
            steps,
            &mut rec.status,
            budget.as_ref(),
            &mut ledger,
            Timestamp::now(),
        );
        Ok(Some((key, ledger)))
    }
}

/// Steps recorded on a call and not yet written: its events, the grant ledger they changed, and
/// when the first was recorded (a trace's span starts there).
pub(crate) struct Recorded {
    began: std::time::SystemTime,
    steps: Vec<Step>,
    events: Vec<EventRecord>,
    ledger: Option<(String, ToolGrantStatus)>,
}

impl Default for Recorded {
    fn default() -> Recorded {
        Recorded {
            began: std::time::SystemTime::now(),
            steps: Vec::new(),
            events: Vec::new(),
            ledger: None,
        }
    }
}

/// Apply steps to a record, returning their events.
pub(crate) fn record_steps(rec: &mut CallRecord, steps: &[Step]) -> Vec<EventRecord> {
    let mut events = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let now = Timestamp::now();
        apply(&mut rec.status, step, now, 1);
        rec.events += 1;
        events.push(EventRecord {
            call_id: rec.id.clone(),
            sequence: rec.events,
            event_id: format!("{}/{}", rec.id, rec.events),
            kind: step.kind.to_string(),
            status: step.status.as_str().to_string(),
            reason: step.reason.clone(),
            message: step.message.clone(),
            time: now.to_string(),
            phase: phase_name(rec.status.phase).to_string(),
            // The last step of the transition that ends the call, as on a cluster.
            terminal: i + 1 == steps.len() && is_terminal(rec.status.phase),
        });
    }
    events
}
