//! The embedded runtime's Linux sandbox.
//!
//! Why bubblewrap: it sets up the mount, PID, IPC, UTS, network and user namespaces the way
//! Flatpak has hardened for years, works for root and unprivileged users alike, and is one Debian
//! package (`bubblewrap`). We add what it does not decide for us: the filesystem view resolved from
//! the SandboxPolicy ([`plan`]), a seccomp deny-list built with `seccompiler` ([`seccomp`]), and
//! resource limits as rlimits plus a cgroup for memory and processes when one is writable
//! ([`spawn`]; RLIMIT_NPROC does not bind uid 0, a pids cgroup does), and a write quota as a
//! filesystem of its size under the write roots ([`layer`]).
//!
//! Resolution is pure: [`plan::resolve`] turns a policy into a [`plan::SandboxPlan`] or refuses
//! with a reason before anything runs (invariant 10); [`bwrap::arguments`] turns a plan into
//! bubblewrap's command line. [`confine`] enforces the policy's filesystem rules with Landlock,
//! the one confinement that also works inside an unprivileged Kubernetes pod.

pub mod bwrap;
mod child;
pub mod confine;
pub mod etc;
mod label;
pub mod layer;
pub mod plan;
pub mod seccomp;
pub mod spawn;

pub use child::{Process, Started};
pub use plan::{Network, ResolveError, SandboxPlan, resolve};
pub use spawn::{SandboxedCommand, SpawnError, prepare, prepare_ahead};
