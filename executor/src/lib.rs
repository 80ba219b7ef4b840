//! `toolgate-executor`: runs one tool call inside its sandbox (a pod, or the embedded runtime's
//! Linux sandbox). It has no Kubernetes client and writes to no API: its only outputs are the
//! artifacts it uploads and the small result it writes to its termination message.

pub mod builtin;
pub mod cli;
pub mod discover;
pub mod effects;
mod egress;
pub mod egress_gate;
pub mod http;
mod mcp;
pub mod outcome;
mod process;
pub mod render;
pub mod result;
pub mod run;
pub mod sink;
pub mod spec;
pub use toolgate_artifacts as store;

/// This build's version and the hash of the sources it was built from (`build.rs`), as
/// `toolgate-executor --version` prints it.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (build ",
    env!("TOOLGATE_EXECUTOR_BUILD_ID"),
    ")"
);

/// Whether the binary at `path` is a `toolgate-executor` of this very build (the same version
/// and sources): the embedded runtime runs no other in its sandboxes. Why not, otherwise.
pub fn same_build(path: &std::path::Path) -> Result<(), String> {
    let out = std::process::Command::new(path)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{}: cannot run it: {e}", path.display()))?;
    let said = String::from_utf8_lossy(&out.stdout);
    let said = said.trim();
    let expected = format!("toolgate-executor {VERSION}");
    if out.status.success() && said == expected {
        Ok(())
    } else {
        Err(format!(
            "{}: it says {said:?}, this build needs {expected:?}",
            path.display()
        ))
    }
}
