//! Turn a plan into a command that runs inside the sandbox: bubblewrap with the plan's arguments,
//! the seccomp filters on inherited descriptors, rlimits set between fork and exec, and the
//! child placed in fresh memory and pids cgroups when the machine lets us create them.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

use crate::bwrap::{arguments, kind_of};
use crate::child::{ChildSetup, Failed, Started, start_piped};
use crate::label::{maker_of, unique};
use crate::plan::SandboxPlan;
use crate::seccomp;

/// Extra address space beyond the memory limit when only RLIMIT_AS can enforce it: the executor
/// reserves virtual memory (thread stacks, allocator arenas) it never touches.
const ADDRESS_SPACE_HEADROOM: u64 = 512 * 1024 * 1024;

/// Why a sandbox could not be set up. Nothing ran.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// bubblewrap is not installed.
    #[error(
        "bubblewrap (bwrap) is not installed or not on PATH; install the Debian package `bubblewrap` (scripts/install-deps.sh does)"
    )]
    BwrapMissing,
    /// The seccomp filter could not be built.
    #[error(transparent)]
    Filter(#[from] seccomp::FilterError),
    /// A blocked path lies under a symlink inside a write root: a tool could replace the link
    /// with a folder of its own and create the blocked path there.
    #[error(
        "blocked path {blocked} lies under {link}, a symlink inside a write root; a tool could replace the link and create the blocked path. Block the link itself, or make it a folder"
    )]
    BlockedUnderSymlink {
        /// The blocked path, inside the sandbox.
        blocked: String,
        /// The symlink, inside the sandbox.
        link: String,
    },
    /// A limit the policy sets cannot be enforced on this machine: the call must not run as if
    /// it were.
    #[error("{limit} cannot be enforced here: {why}")]
    Unenforceable {
        /// The policy's limit (`process.maxProcesses`).
        limit: &'static str,
        /// Why, and what would make it enforceable.
        why: &'static str,
    },
    /// The policy sets a write quota and no filesystem could be made to enforce it.
    #[error("filesystem.writeQuota cannot be enforced here: {0}")]
    WriteQuota(crate::layer::LayerError),
    /// A write root could not be created, or a temp file written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

/// How each limit is enforced on this machine, for the call's explanation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Enforcement {
    /// `cgroup` or `rlimit-as`.
    pub memory: &'static str,
    /// `cgroup`, `rlimit-nproc`, or `unlimited` when the policy sets no limit (a limit neither
    /// would bind refuses the sandbox: [`SpawnError::Unenforceable`]).
    pub processes: &'static str,
    /// The seccomp filters and what they refuse.
    pub seccomp: &'static str,
    /// `filesystem` (a filesystem of the quota's size under the write roots, [`crate::layer`]),
    /// `none` without write roots, or why the default quota is not enforced here.
    pub writes: String,
}

/// A command ready to spawn, and what must live as long as it does.
#[derive(Debug)]
pub struct SandboxedCommand {
    /// bubblewrap with its arguments and the command.
    pub command: Command,
    /// How the limits are enforced.
    pub enforcement: Enforcement,
    /// bubblewrap's path and arguments, for [`SandboxedCommand::start_piped`].
    argv: Vec<CString>,
    /// What the child does before bubblewrap's exec (both ways of starting it).
    setup: ChildSetup,
    _filters: Vec<File>,
    _empty: Option<tempfile::NamedTempFile>,
    cgroups: Vec<PathBuf>,
    /// The cpu cgroup of a sandbox made ahead of demand, idle until its call claims it.
    idle_cpu: Option<IdleCpu>,
    placeholders: Vec<Placeholder>,
    /// The filesystem the write roots' writes land on, when it could be made.
    layer: Option<crate::layer::WriteLayer>,
}

/// A cpu cgroup in which a sandbox made ahead of demand runs only on CPU time nothing else
/// wants, and the setting that says so (`cpu.idle`, where the kernel has it, else the lowest
/// `cpu.shares`).
#[derive(Debug)]
struct IdleCpu {
    dir: PathBuf,
    knob: &'static str,
    claimed: &'static str,
}

/// An empty file made on the host where a blocked path that does not exist would be, so the
/// sandbox can cover it (a tool cannot create a blocked `.npmrc`), and the folders made for it.
/// Removed when the sandbox is gone, if still empty.
#[derive(Debug)]
struct Placeholder {
    file: PathBuf,
    dirs: Vec<PathBuf>,
}

impl Placeholder {
    /// Make the placeholder for `host` (which does not exist) and the folders leading to it.
    fn make(host: &Path) -> std::io::Result<Placeholder> {
        let mut missing = Vec::new();
        let mut dir = host.parent();
        while let Some(d) = dir {
            if std::fs::symlink_metadata(d).is_ok() {
                break;
            }
            missing.push(d.to_path_buf());
            dir = d.parent();
        }
        let mut made = Placeholder {
            file: PathBuf::new(),
            dirs: Vec::new(),
        };
        for d in missing.iter().rev() {
            std::fs::create_dir(d)?;
            made.dirs.push(d.clone());
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(host)?;
        made.file = host.to_path_buf();
        Ok(made)
    }

    /// Remove what was made, as long as nothing was put in it.
    fn remove(self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.file)
            && m.is_file()
            && m.len() == 0
        {
            let _ = std::fs::remove_file(&self.file);
        }
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

impl SandboxedCommand {
    /// Start it with its standard streams piped, without copying this process (see
    /// [`crate::child`]); the same process `command` would start. The caller reaps the pid,
    /// then calls [`SandboxedCommand::cleanup`] (or drops this).
    pub fn start_piped(&self) -> Result<Started, SpawnError> {
        start_piped(&self.argv, &self.setup).map_err(|source| SpawnError::Io {
            what: "starting bubblewrap".into(),
            source,
        })
    }

    /// Give a sandbox made by [`prepare_ahead`] the CPU priority of any other process: its call
    /// has come. Nothing to do for one made by [`prepare`], or where no cpu cgroup could be made.
    pub fn claim_cpu(&self) -> std::io::Result<()> {
        match &self.idle_cpu {
            Some(cpu) => std::fs::write(cpu.dir.join(cpu.knob), cpu.claimed),
            None => Ok(()),
        }
    }

    /// Whether the sandbox runs on idle CPU time only, until [`SandboxedCommand::claim_cpu`].
    pub fn yields_cpu(&self) -> bool {
        self.idle_cpu.is_some()
    }

    /// The filesystem the sandbox's writes landed on, to keep them once it has exited
    /// ([`crate::layer::WriteLayer::keep`]); none without write roots or where the default quota
    /// is not enforced (the writes are in the write roots already).
    pub fn take_write_layer(&mut self) -> Option<crate::layer::WriteLayer> {
        self.layer.take()
    }

    /// Remove the cgroups once the sandbox has exited, killing anything left in them first, the
    /// placeholders of blocked paths, and the write layer with any writes not kept.
    pub fn cleanup(&mut self) {
        for p in self.placeholders.drain(..) {
            p.remove();
        }
        self.layer = None;
        for dir in self.cgroups.drain(..) {
            remove_cgroup(&dir);
        }
    }
}

/// Kill what is in a cgroup and remove it. A process killed here is gone within a millisecond
/// or so: try again soon, then less often, for about a second in all. Whether it is gone.
fn remove_cgroup(dir: &Path) -> bool {
    let mut pause = std::time::Duration::from_micros(250);
    for _ in 0..60 {
        if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: kill(2) with a pid read from the cgroup; no memory involved.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        match std::fs::remove_dir(dir) {
            Ok(()) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            Err(_) => {}
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(20));
    }
    false
}

impl Drop for SandboxedCommand {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// Find bubblewrap on PATH (or the usual place).
pub fn bwrap_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
}

/// Prepare `program args…` to run inside the sandbox of `plan`. `label` names the cgroups.
pub fn prepare(
    plan: &SandboxPlan,
    program: &Path,
    args: &[OsString],
    label: &str,
) -> Result<SandboxedCommand, SpawnError> {
    prepare_made(plan, program, args, label, Made::ForItsCall)
}

/// [`prepare`] a sandbox made before its call is known: until [`SandboxedCommand::claim_cpu`] it
/// runs only on CPU time nothing else wants (a cpu cgroup of its own, marked idle), so that
/// making it does not slow the calls running meanwhile — on two cores a sandbox's start
/// otherwise takes the core the next call's client, runtime or executor was about to run on.
/// Where this process cannot make a cpu cgroup, it runs at the normal priority.
pub fn prepare_ahead(
    plan: &SandboxPlan,
    program: &Path,
    args: &[OsString],
    label: &str,
) -> Result<SandboxedCommand, SpawnError> {
    prepare_made(plan, program, args, label, Made::AheadOfDemand)
}

/// Whether a sandbox is made for a call that waits for it, or ahead of demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Made {
    ForItsCall,
    AheadOfDemand,
}

/// Make a sandbox's command: its host paths checked and made, its seccomp filters, its cgroups
/// (limits, and an idle CPU weight when made ahead of demand), the placeholders that cover
/// blocked paths, and bubblewrap's command line with the rlimits set between fork and exec.
fn prepare_made(
    plan: &SandboxPlan,
    program: &Path,
    args: &[OsString],
    label: &str,
    made: Made,
) -> Result<SandboxedCommand, SpawnError> {
    let bwrap = bwrap_path().ok_or(SpawnError::BwrapMissing)?;
    host_paths(plan)?;
    let filters = [seccomp::deny_filter()?, seccomp::clone3_filter()?]
        .into_iter()
        .map(|bpf| memory_file(&bpf))
        .collect::<std::io::Result<Vec<File>>>()
        .map_err(|source| SpawnError::Io {
            what: "writing the seccomp filter".into(),
            source,
        })?;
    let fds: Vec<i32> = filters.iter().map(AsRawFd::as_raw_fd).collect();
    // Only a plan that hides files needs one (a file made and removed per sandbox costs an inode).
    let empty = if plan.hidden.is_empty() {
        None
    } else {
        Some(
            tempfile::NamedTempFile::new().map_err(|source| SpawnError::Io {
                what: "creating the empty file hidden paths show".into(),
                source,
            })?,
        )
    };
    let empty_path = empty
        .as_ref()
        .map_or_else(|| PathBuf::from("/dev/null"), |e| e.path().to_path_buf());
    let label = unique(label);
    let Cgroups {
        memory,
        pids,
        cgroups,
        procs_files,
        idle_cpu,
    } = Cgroups::make(plan, &label, made)?;
    let mut enforcement = Enforcement {
        memory: if memory.is_some() {
            "cgroup"
        } else {
            "rlimit-as"
        },
        processes: match (plan.limits.processes, pids.is_some()) {
            (None, _) => "unlimited",
            (Some(_), true) => "cgroup",
            (Some(_), false) => "rlimit-nproc",
        },
        seccomp: "deny-list (mount, ptrace, bpf, keyctl, kexec, modules, namespaces, setuid/setgid modes, mknod, …) + clone3/openat2→ENOSYS",
        writes: String::new(),
    };

    let placeholders = placeholders(plan)?;
    let (layer, writes) = write_layer(plan, &label)?;
    enforcement.writes = writes;
    // The sandbox binds each write root's overlay where the root would be (a copy of the plan
    // only then).
    let bound = match &layer {
        None => std::borrow::Cow::Borrowed(plan),
        Some(layer) => {
            let mut bound = plan.clone();
            for b in &mut bound.writable {
                if let Some(merged) = layer.merged(&b.host) {
                    b.host = merged.to_path_buf();
                }
            }
            std::borrow::Cow::Owned(bound)
        }
    };
    let mut command = Command::new(bwrap);
    command
        .args(arguments(&bound, &fds, &empty_path, &kind_of))
        .arg("--")
        .arg(program)
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .process_group(0);

    let limits = plan.limits.clone();
    let address_space = memory
        .is_none()
        .then(|| limits.memory_bytes.saturating_add(ADDRESS_SPACE_HEADROOM));
    let nproc = if pids.is_none() {
        limits.processes
    } else {
        None
    };
    // SAFETY: getpid(2) cannot fail.
    let parent = unsafe { libc::getpid() };
    let setup = ChildSetup {
        parent,
        procs: procs_files.iter().map(AsRawFd::as_raw_fd).collect(),
        inherit: fds.clone(),
        limits: vec![
            (libc::RLIMIT_CORE, Some(0)),
            (libc::RLIMIT_CPU, limits.cpu_seconds),
            (libc::RLIMIT_FSIZE, limits.file_bytes),
            (libc::RLIMIT_AS, address_space),
            (libc::RLIMIT_NPROC, nproc),
        ],
    };
    let argv = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<CString>, _>>()
        .map_err(|e| SpawnError::Io {
            what: "a sandbox argument".into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })?;
    let in_child = setup.clone();
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
    // calls on values prepared before the fork (ChildSetup::apply); it allocates nothing.
    unsafe {
        command.pre_exec(move || in_child.apply().map_err(Failed::into_io));
    }
    let _keep = procs_files;
    Ok(SandboxedCommand {
        command,
        argv,
        setup,
        enforcement,
        _filters: filters.into_iter().chain(_keep).collect(),
        _empty: empty,
        cgroups,
        idle_cpu,
        placeholders,
        layer,
    })
}

/// The filesystem a plan's writes land on, and how its quota is enforced. A quota the policy
/// set that cannot be enforced refuses the sandbox; the default one is said not to be.
fn write_layer(
    plan: &SandboxPlan,
    label: &str,
) -> Result<(Option<crate::layer::WriteLayer>, String), SpawnError> {
    let Some(limit) = plan.limits.writes else {
        return Ok((None, "none".into()));
    };
    let roots: Vec<PathBuf> = plan.writable.iter().map(|b| b.host.clone()).collect();
    let parent = plan.layers.clone().unwrap_or_else(std::env::temp_dir);
    match crate::layer::WriteLayer::make(&roots, limit, &parent, label) {
        Ok(layer) => Ok((
            Some(layer),
            format!(
                "filesystem ({} MiB, {} files)",
                limit.bytes / (1024 * 1024),
                limit.files
            ),
        )),
        Err(e) if limit.required => Err(SpawnError::WriteQuota(e)),
        Err(e) => Ok((None, format!("not enforced: {e}"))),
    }
}

/// Missing write roots created (an existing file is bound as it is); a blocked path under a
/// symlink refused (the link could point the block elsewhere).
fn host_paths(plan: &SandboxPlan) -> Result<(), SpawnError> {
    for b in plan.writable.iter().filter(|b| !b.host.exists()) {
        std::fs::create_dir_all(&b.host).map_err(|source| SpawnError::Io {
            what: format!("creating write root {}", b.host.display()),
            source,
        })?;
    }
    for inside in &plan.hidden {
        for dir in plan.pinned_ancestors(inside) {
            if std::fs::symlink_metadata(plan.host_behind(dir)).is_ok_and(|m| m.is_symlink()) {
                return Err(SpawnError::BlockedUnderSymlink {
                    blocked: inside.display().to_string(),
                    link: dir.display().to_string(),
                });
            }
        }
    }
    Ok(())
}

/// A sandbox's cgroups: memory, pids when the plan limits processes, and an idle CPU weight for
/// one made ahead of demand; each `cgroup.procs` held open for the child to join.
struct Cgroups {
    memory: Option<(PathBuf, File)>,
    pids: Option<(PathBuf, File)>,
    cgroups: Vec<PathBuf>,
    procs_files: Vec<File>,
    idle_cpu: Option<IdleCpu>,
}

impl Cgroups {
    /// Make them; refuse a process limit that nothing would enforce (root without a pids
    /// cgroup).
    fn make(plan: &SandboxPlan, label: &str, made: Made) -> Result<Cgroups, SpawnError> {
        let mut cgroups = Vec::new();
        let mut procs_files = Vec::new();
        let memory = make_cgroup("memory", &format!("toolgate-{label}"), |dir| {
            std::fs::write(
                dir.join("memory.limit_in_bytes"),
                plan.limits.memory_bytes.to_string(),
            )
            .or_else(|_| {
                std::fs::write(dir.join("memory.max"), plan.limits.memory_bytes.to_string())
            })?;
            // Swap counts too where the kernel accounts it; absent files are fine.
            let _ = std::fs::write(
                dir.join("memory.memsw.limit_in_bytes"),
                plan.limits.memory_bytes.to_string(),
            );
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            Ok(())
        });
        let pids = match plan.limits.processes {
            Some(max) => make_cgroup("pids", &format!("toolgate-{label}"), |dir| {
                std::fs::write(dir.join("pids.max"), max.to_string())
            }),
            None => None,
        };
        let mut knob = None;
        let cpu = (made == Made::AheadOfDemand)
            .then(|| {
                make_cgroup("cpu", &format!("toolgate-{label}"), |dir| {
                    knob = Some(mark_idle(dir)?);
                    Ok(())
                })
            })
            .flatten();
        let idle_cpu = cpu
            .as_ref()
            .zip(knob)
            .map(|((dir, _), (knob, claimed))| IdleCpu {
                dir: dir.clone(),
                knob,
                claimed,
            });
        for (dir, procs) in [memory.as_ref(), pids.as_ref(), cpu.as_ref()]
            .into_iter()
            .flatten()
        {
            cgroups.push(dir.clone());
            procs_files.push(procs.try_clone().map_err(|source| SpawnError::Io {
                what: "opening cgroup.procs".into(),
                source,
            })?);
        }
        // SAFETY: getuid(2) cannot fail.
        let root = unsafe { libc::getuid() } == 0;
        if plan.limits.processes.is_some() && pids.is_none() && root {
            // RLIMIT_NPROC does not bind uid 0: without a pids cgroup nothing would.
            for dir in &cgroups {
                remove_cgroup(dir);
            }
            return Err(SpawnError::Unenforceable {
                limit: "process.maxProcesses",
                why: "the runtime runs as root and cannot make a pids cgroup (RLIMIT_NPROC does not bind root); give it a writable pids cgroup, or run it as another user",
            });
        }
        Ok(Cgroups {
            memory,
            pids,
            cgroups,
            procs_files,
            idle_cpu,
        })
    }
}

/// Placeholders covering the blocked paths that do not exist but could be created (made last,
/// so no later failure leaves one behind; on failure the ones made are removed).
fn placeholders(plan: &SandboxPlan) -> Result<Vec<Placeholder>, SpawnError> {
    let mut placeholders = Vec::new();
    for inside in &plan.hidden {
        let host = plan.host_behind(inside);
        if plan.creatable(inside) && std::fs::symlink_metadata(&host).is_err() {
            match Placeholder::make(&host) {
                Ok(p) => placeholders.push(p),
                Err(source) => {
                    for p in placeholders {
                        p.remove();
                    }
                    return Err(SpawnError::Io {
                        what: format!("covering blocked path {}", inside.display()),
                        source,
                    });
                }
            }
        }
    }
    Ok(placeholders)
}

/// An in-memory file holding `bytes`, read from its start: what bubblewrap reads a seccomp filter
/// from. Not a temporary file on disk: a sandbox made per call should not cost a file made and
/// removed (on ext4 without a journal, new inodes skip every recently deleted one).
fn memory_file(bytes: &[u8]) -> std::io::Result<File> {
    // SAFETY: memfd_create(2) with a NUL-terminated name and a flag; the descriptor it returns is
    // new and owned by the File from here on.
    let fd = unsafe { libc::memfd_create(c"toolgate-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a valid descriptor nobody else owns.
    let mut file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    file.write_all(bytes)?;
    file.rewind()?;
    Ok(file)
}

/// This process's own cgroup folder under a v1 controller, where sandboxes' cgroups are made.
pub fn own_cgroup(controller: &str) -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    own.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == controller).then(|| {
            PathBuf::from("/sys/fs/cgroup")
                .join(controller)
                .join(path.trim_start_matches('/'))
        })
    })
}

/// Remove the sandbox cgroups (beside this process's own, under the memory, pids and cpu
/// controllers) whose runtime is gone, killing what is still in them first: a runtime killed
/// with SIGKILL cannot clean up, and a sandbox it was starting at that moment can outlive it
/// (bubblewrap's child waits forever for the parent that was to write its uid map). Cgroups of
/// a runtime still alive (another one on this machine, or this one) are left alone. Returns how
/// many were removed.
pub fn sweep_orphaned_cgroups() -> usize {
    let mut removed = 0;
    for controller in ["memory", "pids", "cpu"] {
        let Some(dir) = own_cgroup(controller) else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = maker_of(&name) else {
                continue;
            };
            if Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            if remove_cgroup(&entry.path()) {
                removed += 1;
            }
        }
    }
    removed
}

/// Mark a cpu cgroup idle: SCHED_IDLE for the whole group (`cpu.idle`, Linux 5.15), else the
/// least weight there is. The setting written, and what gives the group its normal share back.
fn mark_idle(dir: &Path) -> std::io::Result<(&'static str, &'static str)> {
    match std::fs::write(dir.join("cpu.idle"), "1") {
        Ok(()) => Ok(("cpu.idle", "0")),
        Err(_) => std::fs::write(dir.join("cpu.shares"), "2").map(|()| ("cpu.shares", "1024")),
    }
}

/// Create a child cgroup of ours under a v1 controller (or the v2 hierarchy) and configure it.
/// Returns its folder and an open `cgroup.procs`, or `None` when the machine does not allow it.
fn make_cgroup(
    controller: &str,
    name: &str,
    configure: impl FnOnce(&Path) -> std::io::Result<()>,
) -> Option<(PathBuf, File)> {
    let dir = own_cgroup(controller)?.join(name);
    std::fs::create_dir(&dir).ok()?;
    let setup = configure(&dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
    });
    match setup {
        Ok(procs) => Some((dir, procs)),
        Err(_) => {
            let _ = std::fs::remove_dir(&dir);
            None
        }
    }
}
