//! `toolgate local`: the embedded runtime. One process, no cluster: manifests from a folder,
//! calls in a durable store, each call run by the executor inside the local sandbox, the same
//! gRPC API the operator serves.
//!
//! What a call goes through is decided by `toolgate_core::lifecycle`; this crate only places
//! calls on this machine ([`place`], [`run`]) and persists them ([`store`]).
//!
//! **The context** every step works on is [`Runtime`] (`runtime.rs`): the configuration, the
//! manifests as last loaded (the registry the core decides with), the durable store, the calls
//! running and the sandboxes made ahead of demand, and the one way a call's status changes,
//! [`Runtime::transition`] — a write under the store's lock that applies what the core decided
//! and tells WatchCall. **The steps**, a file each, like the operator's `call/` folder:
//!
//! | step | file | what the core decides | what the runtime does |
//! | --- | --- | --- | --- |
//! | ProposeCall | `propose.rs` | the proposal's decision, once per write | records it; starts the run in the same write when a sandbox waits |
//! | ApproveCall, DenyCall | `approve.rs` | who may answer, the approval's contract, whether it binds | keeps it with the call, decides again |
//! | CancelCall | `cancel.rs` | who may answer, whether the call can still be cancelled | kills a running sandbox |
//! | an authorized call starts | `run.rs` | delegation or run, the plan, the result's steps | places it, runs the executor in its sandbox |
//! | placement | `place.rs` | (decided before) | the sandbox plan, the call's folder, its credential |
//! | a delegation | `delegate.rs` | the subagent's scope, its report's result | the token's digest, the children, the end |
//! | leases | `lease.rs` | when a lease is revoked, how retries back off | revokes it at the broker |
//! | discovery | `discover.rs` | which discovered tools enter the registry | starts and lists MCP servers |
//! | the process starts | `start.rs` | (nothing) | loads manifests, opens the store, resumes calls |
//!
//! The gRPC API is [`backend`]; the sandboxes made ahead of demand are `slot.rs`; the locks the
//! steps share are `sync.rs`.

mod approve;
pub mod backend;
mod cancel;
mod config;
pub mod delegate;
mod discover;
mod lease;
pub mod manifests;
mod place;
mod propose;
pub mod run;
pub mod runtime;
mod slot;
mod start;
pub mod store;
mod sync;

pub use runtime::{Config, Runtime, StartError};
pub use slot::{default_run_folder, run_folder_in};
pub use toolgate_broker as broker;
