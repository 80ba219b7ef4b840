//! The tool's process, as every adapter that starts one needs it: started with only what the
//! spec gives it in a process group of its own, its pipes pumped into the call's sinks, killed as
//! a group.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use toolgate_contract::exec::ExecSpec;

use crate::sink::{Sink, SinkError};
use crate::spec::{Credential, ExecError};

/// Structured output is parsed from at most this much stdout.
const STRUCTURED_LIMIT: usize = 1024 * 1024;
/// How long output pipes may stay open after the process group was killed.
pub(crate) const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Copy a pipe into a sink to its end, keeping the first [`STRUCTURED_LIMIT`] bytes in `keep`
/// when asked (structured output is parsed from them).
pub(crate) async fn pump<R: AsyncRead + Unpin>(
    mut from: R,
    sink: &mut Sink<'_>,
    keep: Option<&mut Vec<u8>>,
) -> Result<(), SinkError> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut keep = keep;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return Ok(()),
            Ok(n) => n,
        };
        if let Some(k) = keep.as_deref_mut()
            && k.len() < STRUCTURED_LIMIT
        {
            let take = (STRUCTURED_LIMIT - k.len()).min(n);
            k.extend_from_slice(&buf[..take]);
        }
        sink.write(&buf[..n]).await?;
    }
}

/// SIGKILL to the tool's whole process group.
pub(crate) fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The tool's process, as every adapter that starts one needs it: only the environment the
/// spec names (and the credentials), its working directory, its own process group, the
/// sandbox's seccomp filters and, when the spec asks, Landlock confinement. Its stdio is the
/// caller's to set.
pub(crate) fn tool_process(
    spec: &ExecSpec,
    credentials: &[Credential],
    credentials_dir: &Path,
    program: &str,
    args: &[String],
) -> Result<tokio::process::Command, ExecError> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).env_clear();
    for name in &spec.env.inherit {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    cmd.envs(&spec.env.set);
    if let Some(url) = crate::egress::proxy_url() {
        for name in crate::egress::NO_PROXY_VARIABLES {
            cmd.env_remove(name);
        }
        for name in crate::egress::PROXY_VARIABLES {
            cmd.env(name, url);
        }
    }
    if let Some(bundle) = crate::egress::ca_bundle_path() {
        for name in crate::egress::CA_BUNDLE_VARIABLES {
            cmd.env(name, bundle);
        }
    }
    if credentials.iter().any(|c| c.file.env_name.is_none()) {
        cmd.env("TOOLGATE_CREDENTIALS_DIR", credentials_dir);
    }
    for c in credentials {
        if let Some(name) = &c.file.env_name {
            cmd.env(name, &c.value);
        }
    }
    if spec.dry_run {
        cmd.env("TOOLGATE_DRY_RUN", "1");
    }
    if let Some(dir) = &spec.working_dir {
        cmd.current_dir(dir);
    }
    cmd.process_group(0).kill_on_drop(true);
    // The sandbox's seccomp filters on the tool itself: in a pod nothing else refuses setuid
    // modes, device nodes and FIFOs. In the embedded sandbox bubblewrap installed them on this
    // process already and the tool inherits them; a second copy would only cost its start. The
    // spec's word is checked: without filters of its own this process installs them anyway.
    if !(spec.seccomp_inherited && runs_under_sandbox_filters()) {
        toolgate_sandbox::seccomp::apply_in_child(cmd.as_std_mut())
            .map_err(|e| ExecError::Unrunnable(e.to_string()))?;
    }
    if let Some(rules) = &spec.confinement {
        let mut rules = toolgate_sandbox::confine::with_system(rules.clone());
        if credentials.iter().any(|c| c.file.env_name.is_none()) {
            rules.read.push(credentials_dir.to_path_buf());
        }
        // Built here, applied in the child: the tool loses what the executor keeps for itself
        // (the spec, the result file, the artifact folder).
        toolgate_sandbox::confine::Confinement::prepare(&rules)?.apply_in_child(cmd.as_std_mut());
    }
    Ok(cmd)
}

/// Whether this process runs under the sandbox's seccomp filters (bubblewrap's two, at least),
/// as `/proc/self/status` says.
fn runs_under_sandbox_filters() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u32>().ok())
    };
    field("Seccomp:") == Some(2) && field("Seccomp_filters:").is_some_and(|n| n >= 2)
}
