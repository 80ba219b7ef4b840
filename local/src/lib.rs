//! `toolgate local`: the embedded runtime. One process, no cluster: manifests from a folder,
//! calls in a durable store, each call run by the executor inside the local sandbox, the same
//! gRPC API the operator serves.

pub mod backend;
pub use toolgate_broker as broker;
pub mod manifests;
pub mod run;
pub mod runtime;
pub mod store;

pub use runtime::{Config, Runtime, StartError};
