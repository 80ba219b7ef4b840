//! toolgate's pure core: manifest lint, args validation, risk, digests. No Kubernetes client,
//! no async runtime, no I/O: every function here is a plain value-in, value-out function that the
//! operator, the embedded runtime and the command line share.

pub use toolgate_contract::{redact, secrets, template, text};

pub mod approval;
pub mod args;
pub mod budget;
pub mod cedar;
pub mod decision;
pub mod delegation;
pub mod digest;
pub mod exec;
pub mod findings;
pub mod lifecycle;
pub mod lint;
pub mod manifest;
pub mod mcp;
pub mod names;
pub mod principal;
pub mod rank;
pub mod registered;
pub mod registry;
pub mod risk;
pub mod skill;
pub mod subagent;
pub mod view;
