//! `toolgate-executor`: runs one tool call inside its sandbox (a pod, or the embedded runtime's
//! Linux sandbox). It has no Kubernetes client and writes to no API: its only outputs are the
//! artifacts it uploads and the small result it writes to its termination message.
#![forbid(unsafe_code)]

pub mod builtin;
pub mod cli;
pub mod discover;
pub mod effects;
pub mod egress_gate;
pub mod http;
mod mcp;
pub mod outcome;
pub mod render;
pub mod result;
pub mod run;
pub mod sink;
pub mod spec;
pub use toolgate_artifacts as store;
