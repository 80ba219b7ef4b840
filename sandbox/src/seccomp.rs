//! The seccomp filters every sandboxed process runs under, built with `seccompiler` and handed to
//! bubblewrap as raw BPF (`--add-seccomp-fd`), so they apply from the first instruction of the
//! sandboxed command on and are inherited by everything it starts.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Syscalls refused with EPERM: mounting, tracing, kernel and key management, namespaces,
/// loading code into the kernel, clock changes, and reading other processes' memory.
pub const DENIED: &[(&str, i64)] = &[
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("reboot", libc::SYS_reboot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("setns", libc::SYS_setns),
    ("unshare", libc::SYS_unshare),
    ("acct", libc::SYS_acct),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("quotactl", libc::SYS_quotactl),
    ("syslog", libc::SYS_syslog),
    ("vhangup", libc::SYS_vhangup),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
];

/// `clone` flags that create namespaces: refused like `unshare`.
const NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// `fchmodat2` (Linux 6.6), the same number on every architecture; libc does not name it on all.
const SYS_FCHMODAT2: i64 = 452;

/// Mode bits a file made by a tool must never carry: a setuid or setgid file left in a writable
/// root would hand whoever runs it on the host the identity of the user the sandbox ran as.
const PRIVILEGE_BITS: [u64; 2] = [libc::S_ISUID as u64, libc::S_ISGID as u64];

/// Syscalls that take a file mode, and the position of the mode argument. Each is refused with
/// EPERM when the mode asks for setuid or setgid.
fn mode_syscalls() -> Vec<(i64, u8)> {
    let mut calls = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_mkdirat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        (libc::SYS_chmod, 1),
        (libc::SYS_open, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mkdir, 1),
    ]);
    calls
}

/// Syscalls refused outright on files: `mknod` makes device nodes and FIFOs, which a tool has no
/// business leaving in a workspace for a host process to open.
fn node_syscalls() -> Vec<i64> {
    let mut calls = vec![libc::SYS_mknodat];
    #[cfg(target_arch = "x86_64")]
    calls.push(libc::SYS_mknod);
    calls
}

/// Errors building a filter (a bug, never input).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the seccomp filter: {0}")]
pub struct FilterError(String);

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
) -> Result<BpfProgram, FilterError> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, ARCH)
        .map_err(|e| FilterError(e.to_string()))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| FilterError(e.to_string()))
}

/// The deny-list filter (EPERM), as raw BPF instructions.
pub fn deny_filter() -> Result<Vec<u8>, FilterError> {
    Ok(to_bytes(&deny_program()?))
}

/// The `clone3`/`openat2` → ENOSYS filter, as raw BPF instructions.
pub fn clone3_filter() -> Result<Vec<u8>, FilterError> {
    Ok(to_bytes(&clone3_program()?))
}

/// The deny-list filter (EPERM).
fn deny_program() -> Result<BpfProgram, FilterError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|(_, nr)| (*nr, Vec::new())).collect();
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|flag| {
            let cond = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(*flag),
                *flag,
            )
            .map_err(|e| FilterError(e.to_string()))?;
            SeccompRule::new(vec![cond]).map_err(|e| FilterError(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    for (nr, arg) in mode_syscalls() {
        let mode_rules = PRIVILEGE_BITS
            .iter()
            .map(|bit| {
                let cond = SeccompCondition::new(
                    arg,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::MaskedEq(*bit),
                    *bit,
                )
                .map_err(|e| FilterError(e.to_string()))?;
                SeccompRule::new(vec![cond]).map_err(|e| FilterError(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        rules.insert(nr, mode_rules);
    }
    for nr in node_syscalls() {
        rules.insert(nr, Vec::new());
    }
    compile(rules, SeccompAction::Errno(libc::EPERM as u32))
}

/// `clone3` and `openat2` answer ENOSYS: their flags and modes sit in memory a filter cannot
/// read, and ENOSYS makes libc and language runtimes fall back to `clone` and `openat`, whose
/// arguments the deny filter checks (what container runtimes do).
fn clone3_program() -> Result<BpfProgram, FilterError> {
    let rules = BTreeMap::from([
        (libc::SYS_clone3, Vec::new()),
        (libc::SYS_openat2, Vec::new()),
    ]);
    compile(rules, SeccompAction::Errno(libc::ENOSYS as u32))
}

/// Install the same filters on the process `cmd` starts, between fork and exec: the executor
/// does this for the tool it runs, so a pod (where no bubblewrap hands them over) refuses setuid
/// modes, device nodes, FIFOs and new namespaces the same way the embedded sandbox does. The
/// programs are built here, before the fork; the child only makes the system calls.
pub fn apply_in_child(cmd: &mut std::process::Command) -> Result<(), FilterError> {
    use std::os::unix::process::CommandExt;
    let programs = [deny_program()?, clone3_program()?];
    // SAFETY: between fork and exec the child only calls prctl(2) and seccomp(2) with programs
    // built before the fork; nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            for p in &programs {
                // errno says why; nothing is allocated in the child.
                seccompiler::apply_filter(p).map_err(|_| std::io::Error::last_os_error())?;
            }
            Ok(())
        });
    }
    Ok(())
}

/// `struct sock_filter` in the kernel's (native) layout: u16 code, u8 jt, u8 jf, u32 k.
fn to_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for insn in program {
        out.extend_from_slice(&insn.code.to_ne_bytes());
        out.push(insn.jt);
        out.push(insn.jf);
        out.extend_from_slice(&insn.k.to_ne_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_to_whole_instructions() {
        let deny = deny_filter().expect("deny filter");
        assert!(!deny.is_empty() && deny.len().is_multiple_of(8));
        let clone3 = clone3_filter().expect("clone3 filter");
        assert!(!clone3.is_empty() && clone3.len().is_multiple_of(8));
    }
}
