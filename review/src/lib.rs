//! toolgate's review tooling: what a platform team runs over manifests and recorded calls before
//! a change lands (tool-selection eval, policy diff and replay, policy tests) and the MCP import
//! that writes descriptors for review. Only the command line links it; the runtimes decide calls
//! with `toolgate-core` alone.

pub mod eval;
pub mod import;
pub mod policy_diff;
pub mod policy_test;
