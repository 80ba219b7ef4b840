//! The durable call store.
//!
//! Why redb: pure Rust (no C toolchain, nothing to install for the README's first command),
//! ACID transactions with a durable commit per write (a call accepted is on disk before the
//! caller hears about it), one file, and readers that never block the writer. SQLite would do as
//! well; we do not need SQL, and redb keeps the build lean.
//!
//! Each call's events are also appended to `calls/<namespace>/<id>/events.jsonl` beside the
//! store, the local audit log a person can `tail -f`.

use std::io::Write;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, TableDefinition};
use serde::{Deserialize, Serialize};
use toolgate_crds::{ToolApprovalSpec, ToolCallSpec, ToolCallStatus, ToolGrantStatus};

const CALLS: TableDefinition<&str, &[u8]> = TableDefinition::new("calls");
const EVENTS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("events");
const IDEMPOTENCY: TableDefinition<&str, &str> = TableDefinition::new("idempotency");
/// `namespace \0 session \0 call` → call, for the calls of a session holding an allowForSession
/// approval: deciding a call in a session reads these, not the whole store.
const SESSION_APPROVALS: TableDefinition<&str, &str> = TableDefinition::new("session-approvals");
/// `namespace/grant` → the grant's budget ledger (callsUsed, hourly, recentCharges of a
/// ToolGrant's status), written in the same transaction as the call that charges or refunds it.
const GRANT_LEDGERS: TableDefinition<&str, &[u8]> = TableDefinition::new("grant-ledgers");
/// `namespace \0 tool \0 call` → call, for the dry runs that succeeded: what confirms an L5
/// call whose tool asks for a dry run first.
const DRY_RUNS: TableDefinition<&str, &str> = TableDefinition::new("dry-runs");

/// The ledger key of a grant.
pub fn ledger_key(namespace: &str, grant: &str) -> String {
    format!("{namespace}/{grant}")
}

fn session_prefix(namespace: &str, session: &str) -> String {
    format!("{namespace}\0{session}\0")
}

fn dry_run_prefix(namespace: &str, tool: &str) -> String {
    format!("{namespace}\0{tool}\0")
}

/// `<root>/<namespace>/<id>`, for a namespace that is a DNS label and an id that is a DNS
/// subdomain only: neither can hold `/`, `..` or NUL, so the folder is always inside `root`.
pub fn call_folder(root: &Path, namespace: &str, id: &str) -> Result<PathBuf, StoreError> {
    use toolgate_core::names::{is_dns_label, is_dns_subdomain};
    if !is_dns_label(namespace) {
        return Err(StoreError::UnsafeName {
            what: "namespace",
            value: namespace.chars().take(80).collect(),
        });
    }
    if !is_dns_subdomain(id) {
        return Err(StoreError::UnsafeName {
            what: "call id",
            value: id.chars().take(80).collect(),
        });
    }
    Ok(root.join(namespace).join(id))
}

/// Whether redb refused the file for what is in it (not for a lock, a permission or a disk).
fn is_damage(e: &redb::DatabaseError) -> bool {
    use redb::{DatabaseError, StorageError};
    match e {
        DatabaseError::Storage(StorageError::Corrupted(_)) => true,
        DatabaseError::Storage(StorageError::Io(io)) => {
            io.kind() == std::io::ErrorKind::InvalidData
        }
        _ => false,
    }
}

/// One call as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRecord {
    /// Call id (its name).
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// The spec, as proposed (principal from authentication, digest pinned).
    pub spec: ToolCallSpec,
    /// The status, as on a ToolCall object.
    pub status: ToolCallStatus,
    /// When it was accepted.
    pub created_at: jiff::Timestamp,
    /// The principal's groups at proposal time (grants may name groups).
    #[serde(default)]
    pub groups: Vec<String>,
    /// The approvals given for it, in order (an L5 call may need two). A store written before
    /// there could be two holds `approval`, one or none.
    #[serde(default, alias = "approval", deserialize_with = "one_or_many")]
    pub approvals: Vec<ApprovalRecord>,
    /// How its sandbox was resolved (plan and enforcement), once prepared.
    #[serde(default)]
    pub sandbox: Option<serde_json::Value>,
    /// Events recorded so far.
    pub events: u64,
    /// Times execution started.
    #[serde(default)]
    pub attempts: u32,
    /// Leases the call holds and toolgate has yet to revoke (written with CredentialsBound, in
    /// the same transaction; removed with CredentialsRevoked). Never shown through the API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leases: Vec<crate::broker::Lease>,
    /// The W3C `traceparent` the agent proposed it under, if any: its spans join that trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// A delegation's token, as its SHA-256 (hex), once issued. Never shown through the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_token: Option<String>,
}

impl CallRecord {
    /// The call as its spans name it.
    pub fn traced(&self) -> toolgate_api::trace::TracedCall<'_> {
        toolgate_api::trace::TracedCall {
            uid: &self.id,
            name: &self.id,
            namespace: &self.namespace,
            tool: &self.spec.tool_ref.name,
            traceparent: self.traceparent.as_deref(),
            created: std::time::SystemTime::UNIX_EPOCH
                + std::time::Duration::from_nanos(
                    u64::try_from(self.created_at.as_nanosecond()).unwrap_or(0),
                ),
        }
    }
}

/// `null`, one approval or a list of them.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<ApprovalRecord>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        Many(Vec<ApprovalRecord>),
        One(Box<ApprovalRecord>),
    }
    Ok(match Option::<OneOrMany>::deserialize(d)? {
        None => Vec::new(),
        Some(OneOrMany::One(a)) => vec![*a],
        Some(OneOrMany::Many(v)) => v,
    })
}

/// An approval given through the API.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    /// Name of the approval.
    pub name: String,
    /// The contract.
    pub spec: ToolApprovalSpec,
    /// Whether an allowOnce approval was used by a run.
    #[serde(default)]
    pub consumed: bool,
}

/// One event of a call's chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRecord {
    /// Call id.
    pub call_id: String,
    /// Position from 1.
    pub sequence: u64,
    /// `<call>/<sequence>`; artifacts name the event that produced them.
    pub event_id: String,
    /// Condition type.
    #[serde(rename = "type")]
    pub kind: String,
    /// True, False, Unknown.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message (never a credential).
    pub message: String,
    /// RFC 3339.
    pub time: String,
    /// Phase after the event.
    pub phase: String,
    /// The call ended with it.
    pub terminal: bool,
}

/// Store errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed.
    #[error("call store {path}: {message}")]
    Db {
        /// The file.
        path: String,
        /// What failed.
        message: String,
    },
    /// The store file was changed outside toolgate (or by a failing disk).
    #[error(
        "the call store {path} is damaged ({message}); toolgate will not trust it. Move it aside (mv {path} {path}.damaged) to start with an empty store: the event logs under calls/ and the artifacts stay where they are"
    )]
    Damaged {
        /// The file.
        path: String,
        /// What redb found.
        message: String,
    },
    /// A record could not be (de)serialized.
    #[error("call store record {id}: {source}")]
    Record {
        /// The record.
        id: String,
        /// Why.
        source: serde_json::Error,
    },
    /// A namespace or call id that is not a Kubernetes name would become a path outside the
    /// data folder; the API refuses them first, this is the last line.
    #[error("refusing to use {what} {value:?} as a folder name: it is not a Kubernetes name")]
    UnsafeName {
        /// `namespace` or `call id`.
        what: &'static str,
        /// The value.
        value: String,
    },
    /// The event log could not be written.
    #[error("event log {path}: {source}")]
    Log {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// How long opening the store waits for a lock another runtime holds before refusing.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The store.
#[derive(Debug)]
pub struct Store {
    db: Database,
    path: PathBuf,
    logs: PathBuf,
}

impl Store {
    /// Open (or create) the store under a data folder.
    pub fn open(data: &Path) -> Result<Store, StoreError> {
        let path = data.join("toolgate.redb");
        let db_err = |message: String| StoreError::Db {
            path: path.display().to_string(),
            message,
        };
        std::fs::create_dir_all(data).map_err(|e| db_err(e.to_string()))?;
        // Every page is checked at open: a file changed outside toolgate is refused with a way
        // forward instead of trusted (redb may panic on a corrupted file it trusts). The
        // catch_unwind is the last line should a check miss something.
        let open = || {
            std::panic::catch_unwind(|| {
                Database::builder()
                    .set_check_integrity_on_open(true)
                    // The check runs through redb's repair at every open, clean stop or not: it
                    // is no news (it used to be logged as "repairing after an unclean stop").
                    .set_repair_callback(|session| {
                        if session.progress() == 0.0 {
                            tracing::debug!("checking every page of the call store");
                        }
                    })
                    .create(&path)
            })
        };
        // The store's lock says another runtime uses this data folder. One killed a moment ago
        // can still hold it through a process it was starting (a sandbox between its clone and
        // its exec keeps the runtime's descriptors until the exec): wait for it a little before
        // refusing.
        let waited = std::time::Instant::now();
        let mut opened = open();
        while matches!(opened, Ok(Err(redb::DatabaseError::DatabaseAlreadyOpen)))
            && waited.elapsed() < LOCK_WAIT
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
            opened = open();
        }
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(e)) if !is_damage(&e) => return Err(db_err(e.to_string())),
            Ok(Err(e)) => {
                return Err(StoreError::Damaged {
                    path: path.display().to_string(),
                    message: e.to_string(),
                });
            }
            Err(_) => {
                return Err(StoreError::Damaged {
                    path: path.display().to_string(),
                    message: "the store's pages are not what redb wrote".into(),
                });
            }
        };
        let tx = db.begin_write().map_err(|e| db_err(e.to_string()))?;
        {
            tx.open_table(CALLS).map_err(|e| db_err(e.to_string()))?;
            tx.open_table(EVENTS).map_err(|e| db_err(e.to_string()))?;
            tx.open_table(IDEMPOTENCY)
                .map_err(|e| db_err(e.to_string()))?;
            tx.open_table(SESSION_APPROVALS)
                .map_err(|e| db_err(e.to_string()))?;
            tx.open_table(GRANT_LEDGERS)
                .map_err(|e| db_err(e.to_string()))?;
            tx.open_table(DRY_RUNS).map_err(|e| db_err(e.to_string()))?;
        }
        tx.commit().map_err(|e| db_err(e.to_string()))?;
        Ok(Store {
            db,
            logs: data.join("calls"),
            path,
        })
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Db {
            path: self.path.display().to_string(),
            message: e.to_string(),
        }
    }

    /// Write a call and, in the same transaction, its new events, its idempotency key and the
    /// ledger of the grant it charged or refunded. Durable when this returns.
    pub fn save(
        &self,
        record: &CallRecord,
        events: &[EventRecord],
        idempotency: Option<&str>,
        ledger: Option<(&str, &ToolGrantStatus)>,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(record).map_err(|source| StoreError::Record {
            id: record.id.clone(),
            source,
        })?;
        let tx = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut calls = tx.open_table(CALLS).map_err(|e| self.err(e))?;
            calls
                .insert(record.id.as_str(), bytes.as_slice())
                .map_err(|e| self.err(e))?;
            let mut table = tx.open_table(EVENTS).map_err(|e| self.err(e))?;
            for ev in events {
                let b = serde_json::to_vec(ev).map_err(|source| StoreError::Record {
                    id: ev.event_id.clone(),
                    source,
                })?;
                table
                    .insert((ev.call_id.as_str(), ev.sequence), b.as_slice())
                    .map_err(|e| self.err(e))?;
            }
            if let Some(session) = &record.spec.session_id
                && record
                    .approvals
                    .iter()
                    .any(|a| a.spec.decision == toolgate_crds::ApprovalDecision::AllowForSession)
            {
                let mut sessions = tx.open_table(SESSION_APPROVALS).map_err(|e| self.err(e))?;
                let key = format!(
                    "{}{}",
                    session_prefix(&record.namespace, session),
                    record.id
                );
                sessions
                    .insert(key.as_str(), record.id.as_str())
                    .map_err(|e| self.err(e))?;
            }
            if record.spec.dry_run
                && record.status.phase == Some(toolgate_crds::CallPhase::Succeeded)
            {
                let mut dry_runs = tx.open_table(DRY_RUNS).map_err(|e| self.err(e))?;
                let key = format!(
                    "{}{}",
                    dry_run_prefix(&record.namespace, &record.spec.tool_ref.name),
                    record.id
                );
                dry_runs
                    .insert(key.as_str(), record.id.as_str())
                    .map_err(|e| self.err(e))?;
            }
            if let Some(key) = idempotency {
                let mut idem = tx.open_table(IDEMPOTENCY).map_err(|e| self.err(e))?;
                idem.insert(key, record.id.as_str())
                    .map_err(|e| self.err(e))?;
            }
            if let Some((key, l)) = ledger {
                let b = serde_json::to_vec(l).map_err(|source| StoreError::Record {
                    id: key.into(),
                    source,
                })?;
                let mut ledgers = tx.open_table(GRANT_LEDGERS).map_err(|e| self.err(e))?;
                ledgers.insert(key, b.as_slice()).map_err(|e| self.err(e))?;
            }
        }
        tx.commit().map_err(|e| self.err(e))?;
        self.append_log(record, events)
    }

    fn append_log(&self, record: &CallRecord, events: &[EventRecord]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let dir = call_folder(&self.logs, &record.namespace, &record.id)?;
        let path = dir.join("events.jsonl");
        let log_err = |source| StoreError::Log {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(log_err)?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(log_err)?;
        let mut buf = Vec::new();
        for ev in events {
            serde_json::to_writer(&mut buf, ev).map_err(|source| StoreError::Record {
                id: ev.event_id.clone(),
                source,
            })?;
            buf.push(b'\n');
        }
        f.write_all(&buf).map_err(log_err)
    }

    /// A call.
    pub fn get(&self, id: &str) -> Result<Option<CallRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let calls = tx.open_table(CALLS).map_err(|e| self.err(e))?;
        let Some(v) = calls.get(id).map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        serde_json::from_slice(v.value())
            .map(Some)
            .map_err(|source| StoreError::Record {
                id: id.into(),
                source,
            })
    }

    /// A grant's budget ledger (empty when it never charged).
    pub fn ledger(&self, key: &str) -> Result<ToolGrantStatus, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = tx.open_table(GRANT_LEDGERS).map_err(|e| self.err(e))?;
        match table.get(key).map_err(|e| self.err(e))? {
            None => Ok(ToolGrantStatus::default()),
            Some(v) => serde_json::from_slice(v.value()).map_err(|source| StoreError::Record {
                id: key.into(),
                source,
            }),
        }
    }

    /// Every ledger of a namespace, by grant name.
    pub fn ledgers_in(
        &self,
        namespace: &str,
    ) -> Result<Vec<(String, ToolGrantStatus)>, StoreError> {
        let prefix = format!("{namespace}/");
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = tx.open_table(GRANT_LEDGERS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for item in table.range(prefix.as_str()..).map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            let Some(name) = k.value().strip_prefix(&prefix) else {
                break;
            };
            let ledger =
                serde_json::from_slice(v.value()).map_err(|source| StoreError::Record {
                    id: k.value().into(),
                    source,
                })?;
            out.push((name.to_string(), ledger));
        }
        Ok(out)
    }

    /// The call an idempotency key names.
    pub fn by_idempotency_key(&self, key: &str) -> Result<Option<String>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let idem = tx.open_table(IDEMPOTENCY).map_err(|e| self.err(e))?;
        Ok(idem
            .get(key)
            .map_err(|e| self.err(e))?
            .map(|v| v.value().to_string()))
    }

    /// Calls after `after` (exclusive) in id order, those `keep` accepts, at most `limit`.
    pub fn scan(
        &self,
        after: Option<&str>,
        limit: usize,
        keep: impl Fn(&CallRecord) -> bool,
    ) -> Result<Vec<CallRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let calls = tx.open_table(CALLS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        let range = match after {
            Some(a) => {
                calls.range::<&str>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))
            }
            None => calls.range::<&str>(..),
        }
        .map_err(|e| self.err(e))?;
        for item in range {
            let (k, v) = item.map_err(|e| self.err(e))?;
            let record: CallRecord =
                serde_json::from_slice(v.value()).map_err(|source| StoreError::Record {
                    id: k.value().to_string(),
                    source,
                })?;
            if keep(&record) {
                out.push(record);
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// The calls of a session that hold an allowForSession approval.
    pub fn session_approved(
        &self,
        namespace: &str,
        session: &str,
    ) -> Result<Vec<CallRecord>, StoreError> {
        self.indexed(SESSION_APPROVALS, &session_prefix(namespace, session))
    }

    /// The dry runs of a tool in a namespace that succeeded.
    pub fn dry_runs(&self, namespace: &str, tool: &str) -> Result<Vec<CallRecord>, StoreError> {
        self.indexed(DRY_RUNS, &dry_run_prefix(namespace, tool))
    }

    /// The calls an index lists under a key prefix.
    fn indexed(
        &self,
        index: TableDefinition<&str, &str>,
        prefix: &str,
    ) -> Result<Vec<CallRecord>, StoreError> {
        let ids: Vec<String> = {
            let tx = self.db.begin_read().map_err(|e| self.err(e))?;
            let table = tx.open_table(index).map_err(|e| self.err(e))?;
            let mut ids = Vec::new();
            for item in table.range(prefix..).map_err(|e| self.err(e))? {
                let (k, v) = item.map_err(|e| self.err(e))?;
                if !k.value().starts_with(prefix) {
                    break;
                }
                ids.push(v.value().to_string());
            }
            ids
        };
        let mut out = Vec::new();
        for id in ids {
            if let Some(r) = self.get(&id)? {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// A call's events with sequence above `after`.
    pub fn events(&self, id: &str, after: u64) -> Result<Vec<EventRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = tx.open_table(EVENTS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for item in table
            .range((id, after.saturating_add(1))..=(id, u64::MAX))
            .map_err(|e| self.err(e))?
        {
            let (_, v) = item.map_err(|e| self.err(e))?;
            out.push(
                serde_json::from_slice(v.value()).map_err(|source| StoreError::Record {
                    id: id.into(),
                    source,
                })?,
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(approvals: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "id": "c-1", "namespace": "team-a", "createdAt": "2026-12-01T00:00:00Z", "events": 0,
            "spec": {"toolRef": {"name": "t"}, "principal": "p", "args": {},
                     "intent": {"userGoal": "g", "currentTask": "t", "actionType": "read", "rationaleSummary": "r"}},
            "status": {},
            "approval": approvals,
        })
    }

    #[test]
    fn a_record_written_with_one_approval_reads_as_a_list() {
        let approval = serde_json::json!({"name": "c-1-approval", "consumed": true, "spec": {
            "callRef": {"name": "c-1"}, "argsDigest": "a", "toolDigest": "t", "riskTier": "L4",
            "principal": "p", "approver": "alice", "decision": "allowOnce",
            "expiresAt": "2026-12-01T00:15:00Z"}});
        let one: CallRecord = serde_json::from_value(record(approval.clone())).expect("one");
        assert_eq!(one.approvals.len(), 1);
        assert!(one.approvals[0].consumed);
        let none: CallRecord =
            serde_json::from_value(record(serde_json::Value::Null)).expect("none");
        assert!(none.approvals.is_empty());
        let mut many = record(serde_json::Value::Null);
        many.as_object_mut().expect("object").remove("approval");
        many["approvals"] = serde_json::json!([approval.clone(), approval]);
        let many: CallRecord = serde_json::from_value(many).expect("many");
        assert_eq!(many.approvals.len(), 2);
        // Written back, it is the list.
        let written = serde_json::to_value(&one).expect("json");
        assert!(written.get("approval").is_none() && written["approvals"].is_array());
    }
}
