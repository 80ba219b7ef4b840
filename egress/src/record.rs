//! Audit records: one per connection a tool asked the proxy for.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

/// What the proxy did with a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Reached and relayed.
    Allowed,
    /// Refused by the call's rules.
    Refused,
    /// Allowed, but the upstream could not be reached.
    Failed,
}

/// One connection a tool asked for. Holds names, addresses, a path without its query and byte
/// counts: nothing a request carried in its headers or body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Milliseconds since the proxy started (the call's start).
    pub at_ms: u64,
    /// `CONNECT` for a tunnel, the request's method for plain HTTP.
    pub method: String,
    /// The host the tool asked for, as a name or an address.
    pub host: String,
    /// The port it asked for.
    pub port: u16,
    /// The request's path, without its query (plain HTTP only: a tunnel's requests are not seen).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The address connected to, or the one refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    /// What the proxy did.
    pub decision: Decision,
    /// Why it refused or failed, as a kind (`domain-not-allowed`, `private-address`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Why it refused or failed, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Bytes from the tool to the upstream.
    pub bytes_sent: u64,
    /// Bytes from the upstream to the tool.
    pub bytes_received: u64,
    /// Whether the call's credential was swapped into the request.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub injected: bool,
}

/// The records of one proxy, shared by its connections. Bounded: past [`Records::CAP`] records
/// only the count of those dropped grows, so a tool opening connections in a loop cannot grow
/// the runtime's memory.
#[derive(Debug, Clone)]
pub struct Records {
    inner: Arc<Mutex<Kept>>,
    started: Instant,
}

#[derive(Debug, Default)]
struct Kept {
    records: Vec<Record>,
    dropped: u64,
}

impl Default for Records {
    fn default() -> Self {
        Records {
            inner: Arc::default(),
            started: Instant::now(),
        }
    }
}

impl Records {
    /// How many records are kept.
    pub const CAP: usize = 10_000;

    /// Milliseconds since the records began.
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn push(&self, record: Record) {
        tracing::info!(
            target: "toolgate.egress",
            method = %record.method,
            host = %record.host,
            port = record.port,
            decision = ?record.decision,
            kind = record.kind.as_deref().unwrap_or(""),
            bytes_sent = record.bytes_sent,
            bytes_received = record.bytes_received,
            "egress"
        );
        let Ok(mut kept) = self.inner.lock() else {
            return;
        };
        if kept.records.len() < Self::CAP {
            kept.records.push(record);
        } else {
            kept.dropped += 1;
        }
    }

    /// The records so far, in the order their connections were decided, and how many were
    /// dropped past the cap.
    pub fn snapshot(&self) -> (Vec<Record>, u64) {
        match self.inner.lock() {
            Ok(kept) => (kept.records.clone(), kept.dropped),
            Err(_) => (Vec::new(), 0),
        }
    }
}

/// The most entries a result lists of the connections its call made, and of those refused.
const LISTED: usize = 8;

/// Fold a call's egress records into its result: the connections made join
/// `effectsObserved.externalCalls` (`CONNECT host:port`, `GET host:port/path`), the refused ones
/// `effectsObserved.refusedCalls` with their kind.
pub fn observe(result: &mut toolgate_crds::CallResult, records: &[Record]) {
    if records.is_empty() {
        return;
    }
    let observed = result.effects_observed.get_or_insert_with(Default::default);
    let mut unlisted = [0usize; 2];
    for r in records {
        let target = match &r.path {
            Some(p) => format!("{} {}:{}{p}", r.method, r.host, r.port),
            None => format!("{} {}:{}", r.method, r.host, r.port),
        };
        let (which, list, entry) = match r.decision {
            Decision::Allowed => (0, &mut observed.external_calls, target),
            Decision::Refused | Decision::Failed => {
                let kind = r.kind.as_deref().unwrap_or("refused");
                (1, &mut observed.refused_calls, format!("{target} ({kind})"))
            }
        };
        if !list.contains(&entry) {
            if list.len() < LISTED {
                list.push(entry);
            } else {
                unlisted[which] += 1;
            }
        }
    }
    for (list, more) in [
        (&mut observed.external_calls, unlisted[0]),
        (&mut observed.refused_calls, unlisted[1]),
    ] {
        if more > 0 {
            list.push(format!("… and {more} more"));
        }
    }
}

/// A sentence naming what the proxy refused and why, for a failed call's error (a tool whose
/// tunnel was refused only saw `403`); none when nothing was.
pub fn refusals(records: &[Record], dropped: u64) -> Option<String> {
    let mut reasons: Vec<&str> = Vec::new();
    let mut count = 0;
    for r in records.iter().filter(|r| r.decision != Decision::Allowed) {
        count += 1;
        if let Some(reason) = r.reason.as_deref()
            && reasons.len() < 3
            && !reasons.contains(&reason)
        {
            reasons.push(reason);
        }
    }
    (count > 0).then(|| {
        let more = if dropped > 0 {
            format!(" ({dropped} more connections not recorded)")
        } else {
            String::new()
        };
        format!(
            "the call's egress proxy refused {count} connection{}{more}: {}",
            if count == 1 { "" } else { "s" },
            reasons.join("; ")
        )
    })
}

/// Fold a finished call's records into its result ([`observe`]) and, when it failed, say in its
/// error what the proxy refused ([`refusals`]).
pub fn fold(result: &mut toolgate_crds::CallResult, records: &[Record], dropped: u64) {
    observe(result, records);
    if let Some(note) = refusals(records, dropped) {
        toolgate_contract::exec::note_failure(result, &note);
    }
}
