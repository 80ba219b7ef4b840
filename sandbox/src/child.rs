//! The sandbox's first process between its start and bubblewrap's exec, and a way to start it
//! that does not copy the runtime.
//!
//! `std::process::Command` forks as soon as a command has a `pre_exec` step, and a fork of a busy
//! runtime copies its page tables and write-protects its whole heap: every page it writes next
//! faults (on a 2-core machine under load, a quarter of the runtime's own CPU time went to those
//! faults). [`start_piped`] starts the same process with `clone(CLONE_VM | CLONE_VFORK)`, as
//! `posix_spawn` does: the child runs [`ChildSetup::apply`] in the runtime's memory while the
//! calling thread waits, then execs; nothing is copied.

use std::ffi::{CString, c_char, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// What the child does before bubblewrap's exec, on values prepared before it starts. Only
/// async-signal-safe system calls, no allocation: it runs after a fork of a threaded process, or
/// in the runtime's own memory.
#[derive(Debug, Clone)]
pub(crate) struct ChildSetup {
    /// The runtime's pid: a child whose parent is already gone stops.
    pub(crate) parent: libc::pid_t,
    /// Open `cgroup.procs` files the child writes itself into.
    pub(crate) procs: Vec<RawFd>,
    /// Descriptors bubblewrap reads its seccomp filters from, kept across the exec.
    pub(crate) inherit: Vec<RawFd>,
    /// Resource limits, set when `Some`.
    pub(crate) limits: Vec<(libc::__rlimit_resource_t, Option<u64>)>,
}

/// The step of the child's setup that failed, and its errno.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failed {
    step: u8,
    errno: i32,
}

const STEPS: [&str; 8] = [
    "setting the parent-death signal",
    "finding its parent alive",
    "joining its cgroups",
    "keeping the seccomp filters open",
    "setting a resource limit",
    "connecting its standard streams",
    "starting its own process group",
    "executing bubblewrap",
];

impl Failed {
    fn last(step: u8) -> Failed {
        Failed {
            step,
            errno: std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        }
    }

    /// As an I/O error, for `pre_exec` (no allocation: an OS error).
    pub(crate) fn into_io(self) -> std::io::Error {
        std::io::Error::from_raw_os_error(self.errno)
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let step = STEPS.get(usize::from(self.step)).unwrap_or(&"starting");
        write!(
            f,
            "{step}: {}",
            std::io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl ChildSetup {
    /// Run in the child, between its start and the exec.
    ///
    /// # Safety
    /// Only in a child that is about to exec (after fork, or in [`start_piped`]'s clone).
    pub(crate) unsafe fn apply(&self) -> Result<(), Failed> {
        // SAFETY: system calls on plain values prepared before the child started (the whole block).
        unsafe {
            // The sandbox dies with the runtime that started it, even by SIGKILL, from the first
            // instruction on (bubblewrap's own --die-with-parent is set only once it runs); a
            // parent already gone by now means nobody would ever reap or time the sandbox. The
            // signal follows the spawning *thread*: spawn from a thread that lives as long as the
            // sandbox should.
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(Failed::last(0));
            }
            if libc::getppid() != self.parent {
                return Err(Failed {
                    step: 1,
                    errno: libc::ESRCH,
                });
            }
            for fd in &self.procs {
                if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(Failed::last(2));
                }
            }
            for fd in &self.inherit {
                if libc::fcntl(*fd, libc::F_SETFD, 0) != 0 {
                    return Err(Failed::last(3));
                }
            }
            for (resource, value) in &self.limits {
                let Some(v) = *value else { continue };
                let lim = libc::rlimit {
                    rlim_cur: v,
                    rlim_max: v,
                };
                if libc::setrlimit(*resource, &lim) != 0 {
                    return Err(Failed::last(4));
                }
            }
        }
        Ok(())
    }
}

/// A sandbox started by [`start_piped`]: its process and the runtime's ends of its standard input,
/// output and error.
#[derive(Debug)]
pub struct Started {
    /// bubblewrap's process.
    pub process: Process,
    /// Its standard input (write end).
    pub stdin: OwnedFd,
    /// Its standard output (read end).
    pub stdout: OwnedFd,
    /// Its standard error (read end).
    pub stderr: OwnedFd,
}

/// Everything the cloned child reads; on the calling thread's stack, which waits until the child
/// has exec'd or exited.
struct CloneArgs<'a> {
    argv: &'a [*const c_char],
    envp: &'a [*const c_char],
    stdio: [RawFd; 3],
    report: RawFd,
    setup: &'a ChildSetup,
}

/// Bytes of the child's own stack (it only makes system calls).
const CHILD_STACK: usize = 64 * 1024;

/// Start `argv` (an absolute program path first) with an empty environment in a process group of
/// its own, its standard streams piped, after `setup` — without copying this process.
pub(crate) fn start_piped(argv: &[CString], setup: &ChildSetup) -> std::io::Result<Started> {
    let mut pointers: Vec<*const c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    pointers.push(std::ptr::null());
    let envp: [*const c_char; 1] = [std::ptr::null()];
    let (stdin_read, stdin_write) = pipe()?;
    let (stdout_read, stdout_write) = pipe()?;
    let (stderr_read, stderr_write) = pipe()?;
    let (report_read, report_write) = pipe()?;
    let args = CloneArgs {
        argv: &pointers,
        envp: &envp,
        stdio: [
            stdin_read.as_raw_fd(),
            stdout_write.as_raw_fd(),
            stderr_write.as_raw_fd(),
        ],
        report: report_write.as_raw_fd(),
        setup,
    };
    let mut stack = vec![0u8; CHILD_STACK];
    // SAFETY: the stack is ours and outlives the child's use of it (CLONE_VFORK: clone returns
    // once the child has exec'd or exited); the top is 16-byte aligned as the ABI wants.
    let top = unsafe { stack.as_mut_ptr().add(CHILD_STACK) };
    let top = (top as usize & !15) as *mut c_void;
    // No signal handler may run in the child while it shares this memory: block them all around
    // the clone (the child resets them before it unblocks).
    // SAFETY: sigset_t is plain data, filled and passed by pointer.
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child_main,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&args as *const CloneArgs<'_>).cast_mut().cast(),
        );
        let error = std::io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(error);
        }
        pid
    };
    drop(stack);
    drop((stdin_read, stdout_write, stderr_write, report_write));
    // The report pipe closed on exec; a message in it means the child failed before.
    let mut message = [0u8; 5];
    let got = read_all(&report_read, &mut message);
    if got == message.len() {
        let failed = Failed {
            step: message[0],
            errno: i32::from_ne_bytes([message[1], message[2], message[3], message[4]]),
        };
        reap(pid);
        return Err(std::io::Error::other(failed.to_string()));
    }
    // A pidfd says when it exits (and keeps its pid from being reused until it is reaped).
    // SAFETY: pidfd_open(2) of our own unreaped child; the descriptor it returns is new and owned.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        let error = std::io::Error::last_os_error();
        // SAFETY: kill(2) of our own unreaped child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        reap(pid);
        return Err(std::io::Error::other(format!(
            "pidfd_open (Linux 5.3 or later): {error}"
        )));
    }
    // SAFETY: the descriptor is new (checked above) and owned from here on.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    Ok(Started {
        process: Process {
            pid,
            pidfd: Some(pidfd),
            watched: None,
            status: None,
        },
        stdin: stdin_write,
        stdout: stdout_read,
        stderr: stderr_read,
    })
}

/// The cloned child: reset signals, connect the streams, join the process group, apply the setup,
/// exec. On failure, the step and errno go to the report pipe and the child exits 127.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the CloneArgs on the waiting parent's stack; everything below is a system
    // call on prepared values (the child shares the parent's memory and must not allocate).
    unsafe {
        let args = &*(arg as *const CloneArgs<'_>);
        let fail = |failed: Failed| -> c_int {
            let e = failed.errno.to_ne_bytes();
            let message = [failed.step, e[0], e[1], e[2], e[3]];
            libc::write(args.report, message.as_ptr().cast(), message.len());
            libc::_exit(127)
        };
        // Handlers of the parent's must not run here: caught signals back to their defaults
        // (ignored ones stay ignored, as across an exec), SIGPIPE to its default as
        // `std::process::Command` does, then the mask the parent blocked everything with cleared.
        for signal in 1..libc::SIGRTMAX() {
            let mut action: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut action) == 0
                && action.sa_sigaction != libc::SIG_DFL
                && action.sa_sigaction != libc::SIG_IGN
            {
                action.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        for (target, fd) in args.stdio.iter().enumerate() {
            // dup2 leaves the copy open across the exec (the pipes are close-on-exec).
            if libc::dup2(*fd, target as c_int) < 0 {
                return fail(Failed::last(5));
            }
        }
        if libc::setpgid(0, 0) != 0 {
            return fail(Failed::last(6));
        }
        if let Err(failed) = args.setup.apply() {
            return fail(failed);
        }
        libc::execve(args.argv[0], args.argv.as_ptr(), args.envp.as_ptr());
        fail(Failed::last(7))
    }
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2(2) fills the two-element array; each descriptor it returns is new and owned.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// Read until `buf` is full or the end; how much was read.
fn read_all(fd: &OwnedFd, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: read(2) into the unfilled rest of `buf`.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf[got..].as_mut_ptr().cast(),
                buf.len() - got,
            )
        };
        match n {
            n if n > 0 => got += n as usize,
            0 => break,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    got
}

/// Wait for a child that has exited (or is about to).
fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waitpid(2) on our own child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
}

/// bubblewrap's process, started by [`start_piped`]: reaped by [`Process::try_wait`] or
/// [`Process::wait`]; killed and reaped (on a thread of its own) if dropped before. tokio's own
/// child handle only adopts what `tokio::process` started, so an async wait goes through a pidfd.
#[derive(Debug)]
pub struct Process {
    pid: libc::pid_t,
    /// Readable once it has exited; moved into `watched` when first awaited.
    pidfd: Option<OwnedFd>,
    watched: Option<tokio::io::unix::AsyncFd<OwnedFd>>,
    status: Option<std::process::ExitStatus>,
}

impl Process {
    /// Its pid, also its process group.
    pub fn id(&self) -> libc::pid_t {
        self.pid
    }

    /// Its exit status once it has exited (reaping it), `None` while it runs.
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        let mut raw = 0;
        // SAFETY: waitpid(2) of our own child, which the pidfd keeps from being reused.
        match unsafe { libc::waitpid(self.pid, &mut raw, libc::WNOHANG) } {
            0 => Ok(None),
            pid if pid == self.pid => {
                let status = std::process::ExitStatus::from_raw(raw);
                self.status = Some(status);
                Ok(Some(status))
            }
            _ => Err(std::io::Error::last_os_error()),
        }
    }
}

impl Process {
    /// Until it has exited (reaping it). Within a tokio runtime.
    pub async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            if self.watched.is_none() {
                let pidfd = self
                    .pidfd
                    .take()
                    .ok_or_else(|| std::io::Error::other("the sandbox's pidfd is gone"))?;
                // SAFETY: the AsyncFd owns the pidfd from here on, which stays open, the same
                // descriptor, until the AsyncFd is dropped.
                let watched = unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        pidfd,
                        tokio::io::Interest::READABLE,
                    )
                }
                .map_err(|e| e.into_parts().1)?;
                self.watched = Some(watched);
            }
            if let Some(watched) = &self.watched {
                watched.readable().await?.clear_ready();
            }
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        // SAFETY: kill(2) of our own unreaped child (its pid cannot have been reused).
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        let pid = self.pid;
        std::thread::spawn(move || reap(pid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn setup(parent: libc::pid_t) -> ChildSetup {
        ChildSetup {
            parent,
            procs: vec![],
            inherit: vec![],
            limits: vec![(libc::RLIMIT_CORE, Some(0))],
        }
    }

    fn argv(args: &[&str]) -> Vec<CString> {
        args.iter()
            .map(|a| CString::new(*a).expect("argument"))
            .collect()
    }

    fn own_pid() -> libc::pid_t {
        // SAFETY: getpid(2) cannot fail.
        unsafe { libc::getpid() }
    }

    #[test]
    fn a_started_process_has_its_streams_and_its_exit_status() {
        let started = start_piped(
            &argv(&[
                "/bin/sh",
                "-c",
                "read x; echo \"got $x\"; ulimit -c; exit 4",
            ]),
            &setup(own_pid()),
        )
        .expect("started");
        let mut process = started.process;
        std::fs::File::from(started.stdin)
            .write_all(b"hi\n")
            .expect("stdin");
        let mut out = String::new();
        std::fs::File::from(started.stdout)
            .read_to_string(&mut out)
            .expect("stdout");
        assert_eq!(out, "got hi\n0\n");
        let status = loop {
            if let Some(s) = process.try_wait().expect("wait") {
                break s;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        assert_eq!(status.code(), Some(4));
    }

    #[test]
    fn a_failed_exec_names_its_step_and_errno() {
        let e = start_piped(&argv(&["/nonexistent/bwrap"]), &setup(own_pid()))
            .expect_err("nothing to execute");
        let text = e.to_string();
        assert!(text.starts_with("executing bubblewrap: "), "{text}");
        assert!(text.contains("No such file"), "{text}");
    }

    #[test]
    fn a_child_whose_parent_is_not_the_runtime_stops_before_the_exec() {
        let e = start_piped(&argv(&["/bin/true"]), &setup(1)).expect_err("wrong parent");
        assert!(
            e.to_string().starts_with("finding its parent alive: "),
            "{e}"
        );
    }
}
