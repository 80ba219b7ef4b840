//! `toolgate local`: the embedded runtime. One process, no cluster: manifests from a folder,
//! calls in a durable store, each call run by the executor inside the local sandbox, the same
//! gRPC API the operator serves.
//!
//! What a call goes through is decided by `toolgate_core::lifecycle`; this crate only places
//! calls on this machine ([`place`], [`run`]) and persists them ([`store`]).

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
