//! The `toolgate.dev/v1alpha1` API.
//!
//! Spec and status types are plain serde + schemars types, so the pure core uses them without
//! any Kubernetes dependency. With the `kube` feature the nine kinds get their `CustomResource`
//! wrappers and [`all_crds`] generates the CustomResourceDefinitions the API server enforces.
#![allow(
    clippy::duplicated_attributes,
    reason = "each kube printcolumn(...) inside cfg_attr repeats `type_ = \"string\"`, which clippy mistakes for a duplicated attribute"
)]

pub mod approval;
pub mod call;
pub mod common;
pub mod conditions;
pub mod credential;
pub mod descriptor;
pub mod grant;
pub mod mcp;
pub mod policy;
pub mod sandbox;
pub mod skill;

pub use approval::*;
pub use call::*;
pub use common::*;
pub use credential::*;
pub use descriptor::*;
pub use grant::*;
pub use mcp::*;
pub use policy::*;
pub use sandbox::*;
pub use skill::*;

/// The API group.
pub const GROUP: &str = "toolgate.dev";
/// The API version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every toolgate object.
pub const API_VERSION: &str = "toolgate.dev/v1alpha1";

/// The nine kinds, in dependency order (what is referenced comes first).
pub const KINDS: [&str; 9] = [
    "SandboxPolicy",
    "CredentialBinding",
    "McpServer",
    "Skill",
    "ToolDescriptor",
    "ToolGrant",
    "ToolPolicy",
    "ToolCall",
    "ToolApproval",
];

#[cfg(feature = "kube")]
mod crdgen;
#[cfg(feature = "kube")]
pub use crdgen::*;
