//! The sandbox escape suite: each test is one attempt a hostile tool would make, run for real
//! inside bubblewrap with the seccomp filters and limits, and each asserts the attempt was
//! contained. Needs `bwrap` (the test command installs it); fails, never skips, without it.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use toolgate_sandbox::plan::{Bind, Limits, Network, SandboxPlan};
use toolgate_sandbox::prepare;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    workspace: PathBuf,
    secrets: PathBuf,
    outside: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    let workspace = root.join("ws");
    std::fs::create_dir_all(workspace.join("out")).expect("ws");
    std::fs::create_dir_all(workspace.join(".git")).expect(".git");
    std::fs::write(workspace.join("README.md"), "hello\n").expect("readme");
    std::fs::write(workspace.join(".env"), "API_KEY=canary-env-4f1d\n").expect(".env");
    std::fs::write(workspace.join(".git/config"), "token=canary-git-77aa\n").expect("git");
    let secrets = root.join("secrets.yaml");
    std::fs::write(&secrets, "token: canary-secret-9c2e\n").expect("secrets");
    let outside = root.join("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    Fixture {
        _dir: dir,
        root,
        workspace,
        secrets,
        outside,
    }
}

fn plan(f: &Fixture) -> SandboxPlan {
    SandboxPlan {
        read_only: vec![Bind {
            host: f.workspace.clone(),
            inside: "/workspace".into(),
        }],
        writable: vec![Bind {
            host: f.workspace.join("out"),
            inside: "/workspace/out".into(),
        }],
        hidden: vec!["/workspace/.env".into(), "/workspace/.git".into()],
        runtime: vec![],
        cwd: "/workspace".into(),
        network: Network::None,
        limits: Limits {
            timeout: Duration::from_secs(10),
            memory_bytes: 64 << 20,
            cpu_seconds: Some(5),
            processes: Some(32),
            file_bytes: Some(1 << 20),
            tmp_bytes: 4 << 20,
            // As `toolgate local` runs them: the write root an overlay on a filesystem of its
            // quota (where this process may mount one).
            writes: Some(toolgate_sandbox::plan::WriteLimit {
                bytes: 16 << 20,
                files: 1000,
                required: false,
            }),
        },
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        // As `toolgate local` runs them: /etc a copy of the few files sandboxes see.
        etc: Some(etc_copy(f)),
        layers: Some(f.root.join("layers")),
    }
}

fn etc_copy(f: &Fixture) -> PathBuf {
    let runs = f.root.join("runs");
    std::fs::create_dir_all(&runs).expect("runs");
    toolgate_sandbox::etc::snapshot_in(&runs)
        .expect("a copy of /etc")
        .expect("a copy of /etc")
}

const MARKER: &str = "__toolgate_sandbox_up__";

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    killed: bool,
}

fn run(plan: &SandboxPlan, script: &str) -> Outcome {
    // The marker proves the sandbox really started: a test must never pass because nothing ran.
    let args: Vec<OsString> = vec!["-c".into(), format!("echo {MARKER}; {script}").into()];
    let mut prepared =
        prepare(plan, Path::new("/bin/sh"), &args, "escape-test").expect("sandbox prepared");
    let mut child = prepared
        .command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bwrap spawned");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.by_ref().take(1 << 20).read_to_end(&mut s);
        // Drain the rest so a flood cannot block the child.
        let _ = std::io::copy(&mut out, &mut std::io::sink());
        String::from_utf8_lossy(&s).into_owned()
    });
    let ereader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let mut killed = false;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > plan.limits.timeout {
            let pgid = i32::try_from(child.id()).expect("pid");
            // SAFETY: signalling the sandbox's own process group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // As the runtime does once the sandbox has exited: its writes brought into the write roots.
    if let Some(mut layer) = prepared.take_write_layer() {
        layer.keep().expect("the sandbox's writes kept");
    }
    prepared.cleanup();
    let stdout = reader.join().expect("stdout reader");
    let stderr = ereader.join().expect("stderr reader");
    let Some(stdout) = stdout.strip_prefix(&format!("{MARKER}\n")) else {
        panic!("the sandbox did not start: {stdout}{stderr}");
    };
    Outcome {
        code: status.code(),
        stdout: stdout.to_string(),
        stderr,
        killed,
    }
}

fn contained(o: &Outcome, canary: &str) {
    assert!(
        !o.stdout.contains(canary),
        "leaked {canary}: {}\n{}",
        o.stdout,
        o.stderr
    );
}

#[test]
fn a_normal_command_runs_and_sees_the_workspace() {
    let f = fixture();
    let o = run(&plan(&f), "cat README.md && echo ok > out/result && pwd");
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(o.stdout, "hello\n/workspace\n");
    assert_eq!(
        std::fs::read_to_string(f.workspace.join("out/result")).expect("written"),
        "ok\n"
    );
}

#[test]
fn write_outside_the_write_roots_fails() {
    let f = fixture();
    let o = run(
        &plan(&f),
        "echo x > /workspace/new.txt; echo x > /workspace/README.md; echo x > /usr/evil; echo x > /evil; echo done",
    );
    assert!(o.stdout.contains("done"));
    assert!(!f.workspace.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(f.workspace.join("README.md")).expect("readme"),
        "hello\n"
    );
    assert!(!Path::new("/usr/evil").exists() && !Path::new("/evil").exists());
}

#[test]
fn the_host_filesystem_outside_the_roots_is_not_there() {
    let f = fixture();
    let script = format!(
        "ls {outside}; cat {secrets}; ls /root /home /var /etc/shadow /srv 2>&1; echo x > {outside}/planted",
        outside = f.outside.display(),
        secrets = f.secrets.display()
    );
    let o = run(&plan(&f), &script);
    contained(&o, "canary-secret");
    assert!(!f.outside.join("planted").exists());
    assert!(o.stdout.contains("No such file"), "{}", o.stdout);
}

#[test]
fn etc_holds_only_its_few_files_read_only() {
    let f = fixture();
    let o = run(
        &plan(&f),
        "ls -A /etc; echo END-LS; echo x > /etc/nsswitch.conf; echo x > /etc/ssl/certs/new; mkdir /etc/x; cat /etc/nsswitch.conf",
    );
    let listed: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| *l != MARKER)
        .take_while(|l| *l != "END-LS")
        .collect();
    let expected: Vec<&str> = toolgate_sandbox::bwrap::ETC_FILES
        .iter()
        .filter(|p| Path::new(p).symlink_metadata().is_ok())
        .map(|p| {
            p.trim_start_matches("/etc/")
                .split('/')
                .next()
                .expect("a name")
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(listed, expected, "{}", o.stdout);
    assert_eq!(
        o.stderr.matches("Read-only file system").count(),
        3,
        "{}",
        o.stderr
    );
    let host = std::fs::read_to_string("/etc/nsswitch.conf").expect("nsswitch.conf");
    assert!(o.stdout.ends_with(&host), "{}", o.stdout);
    assert!(!etc_copy(&f).join("x").exists());
}

#[test]
fn blocked_paths_are_not_visible() {
    let f = fixture();
    let o = run(
        &plan(&f),
        "cat .env; cat .git/config; ls -a .git; cat /workspace/.env",
    );
    contained(&o, "canary-env");
    contained(&o, "canary-git");
}

#[test]
fn ssh_keys_of_the_host_are_not_visible() {
    let f = fixture();
    let o = run(&plan(&f), "cat ~/.ssh/id_rsa /root/.ssh/* 2>&1; ls -la / ");
    assert!(!o.stdout.contains("PRIVATE KEY"));
    assert!(!o.stdout.contains("root\n") || !o.stdout.contains(".ssh"));
}

#[test]
fn symlink_escapes_stay_inside() {
    let f = fixture();
    std::os::unix::fs::symlink(&f.secrets, f.workspace.join("link-to-secrets")).expect("link");
    std::os::unix::fs::symlink(&f.outside, f.workspace.join("out/link-out")).expect("link");
    let o = run(
        &plan(&f),
        "cat link-to-secrets; echo x > out/link-out/planted; ln -s / out/rootlink; cat out/rootlink/etc/shadow; echo end",
    );
    contained(&o, "canary-secret");
    assert!(!f.outside.join("planted").exists());
}

#[test]
fn dot_dot_escapes_stay_inside() {
    let f = fixture();
    let o = run(
        &plan(&f),
        "cat ../secrets.yaml ../../secrets.yaml out/../../secrets.yaml; cd /workspace/../..; ls; echo x > out/../../planted",
    );
    contained(&o, "canary-secret");
    assert!(!f.root.join("planted").exists());
}

#[test]
fn proc_1_root_is_the_sandbox_root() {
    let f = fixture();
    let script = format!(
        "cat /proc/1/root{secrets}; ls /proc/1/root{outside}; cat /proc/1/environ | tr '\\0' '\\n'",
        secrets = f.secrets.display(),
        outside = f.outside.display()
    );
    let o = run(&plan(&f), &script);
    contained(&o, "canary-secret");
}

#[test]
fn other_host_processes_are_not_visible() {
    let f = fixture();
    let o = run(&plan(&f), "ls /proc | grep -c '^[0-9]'");
    let n: u32 = o.stdout.trim().parse().expect("count");
    assert!(n <= 4, "saw {n} processes");
}

#[test]
fn network_none_has_only_loopback() {
    let f = fixture();
    let o = run(&plan(&f), "cat /proc/net/dev | tail -n +3 | cut -d: -f1");
    let ifaces: Vec<&str> = o.stdout.split_whitespace().collect();
    assert_eq!(ifaces, vec!["lo"], "{}", o.stdout);
}

#[test]
fn egress_to_a_host_service_fails_with_network_none() {
    let f = fixture();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let o = run(
        &plan(&f),
        &format!("(exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected) 2>&1; echo end"),
    );
    // /bin/sh may be dash (no /dev/tcp); try python/perl-free probe through bash when present.
    let o2 = run(
        &plan(&f),
        &format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected' 2>&1; echo end"),
    );
    assert!(!o.stdout.contains("connected") && !o2.stdout.contains("connected"));
    listener.set_nonblocking(true).expect("nonblocking");
    assert!(listener.accept().is_err(), "a connection reached the host");
}

#[test]
fn a_fork_bomb_is_contained() {
    let f = fixture();
    let probe = prepare(&plan(&f), Path::new("/bin/true"), &[], "probe").expect("prepared");
    assert!(
        matches!(probe.enforcement.processes, "cgroup" | "rlimit-nproc"),
        "this machine cannot limit processes for the sandbox ({:?}): no writable pids cgroup and uid 0",
        probe.enforcement
    );
    drop(probe);
    let started = std::time::Instant::now();
    let o = run(
        &plan(&f),
        "bomb() { bomb | bomb & }; bomb; sleep 2; echo survived",
    );
    // The bomb ends one way or another (exit, the memory cgroup's OOM kill of the sandbox, or
    // the deadline) within the sandbox's time limit; the host is fine and the next sandbox runs.
    assert!(started.elapsed() < plan(&f).limits.timeout + Duration::from_secs(5));
    let _ = o;
    let o2 = run(
        &plan(&f),
        "for i in $(seq 1 100); do sleep 5 & done 2>&1; wait; echo end",
    );
    assert!(
        o2.stdout.contains("end") || o2.stderr.contains("fork") || o2.stdout.contains("fork"),
        "{} {}",
        o2.stdout,
        o2.stderr
    );
    let o3 = run(
        &plan(&f),
        "for i in $(seq 1 100); do sleep 1 & done 2>&1 | grep -c -i 'fork\\|resource'",
    );
    assert!(
        o3.stdout.trim().parse::<u32>().unwrap_or(0) > 0,
        "100 processes started under a limit of 32: {} {}",
        o3.stdout,
        o3.stderr
    );
}

#[test]
fn a_memory_bomb_is_stopped() {
    let f = fixture();
    // Grow a shell variable past the 64 MiB limit.
    let o = run(
        &plan(&f),
        "x=$(head -c 1000000000 /dev/zero | tr '\\0' a); echo survived ${#x}",
    );
    assert!(!o.stdout.contains("survived 1000000000"), "{}", o.stdout);
}

#[test]
fn an_output_flood_is_bounded_by_the_reader() {
    let f = fixture();
    let o = run(&plan(&f), "head -c 50000000 /dev/zero; echo end");
    assert!(o.stdout.len() <= 1 << 20);
}

#[test]
fn a_huge_file_stops_at_the_file_size_limit() {
    let f = fixture();
    let o = run(
        &plan(&f),
        "head -c 5000000 /dev/zero > out/big 2>&1; echo rc=$?",
    );
    let size = std::fs::metadata(f.workspace.join("out/big"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(size <= 1 << 20, "wrote {size} bytes");
    assert!(!o.stdout.contains("rc=0"), "{}", o.stdout);
}

#[test]
fn tmp_is_private_and_bounded() {
    let f = fixture();
    let o = run(
        &plan(&f),
        "ls /tmp | wc -l; head -c 10000000 /dev/zero > /tmp/fill 2>&1; echo rc=$?",
    );
    assert!(o.stdout.starts_with("0\n"), "{}", o.stdout);
    assert!(!o.stdout.contains("rc=0"), "{}", o.stdout);
}

#[test]
fn a_timeout_kills_the_whole_sandbox() {
    let f = fixture();
    let mut p = plan(&f);
    p.limits.timeout = Duration::from_millis(500);
    let o = run(&p, "sleep 30 & sleep 30; echo late");
    assert!(o.killed && !o.stdout.contains("late"));
}

#[test]
fn setuid_binaries_do_not_raise_privileges() {
    let f = fixture();
    let o = run(
        &plan(&f),
        "grep -E 'NoNewPrivs|CapEff|CapBnd' /proc/self/status",
    );
    assert!(o.stdout.contains("NoNewPrivs:\t1"), "{}", o.stdout);
    assert!(
        o.stdout.contains("CapEff:\t0000000000000000"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("CapBnd:\t0000000000000000"),
        "{}",
        o.stdout
    );
}

#[test]
fn chmod_setuid_in_the_sandbox_gains_nothing() {
    let f = fixture();
    let o = run(
        &plan(&f),
        "cp /bin/cat out/cat && chmod 4755 out/cat; out/cat /proc/self/status | grep -E '^(Uid|CapEff)'",
    );
    assert!(!o.stdout.contains("CapEff:\t000001"), "{}", o.stdout);
    assert!(o.stdout.contains("CapEff:\t0000000000000000") || o.stdout.is_empty());
}

#[test]
fn ptrace_of_the_parent_is_refused() {
    let f = fixture();
    // strace may be missing; the seccomp filter shows in /proc and a direct attach fails.
    let o = run(
        &plan(&f),
        "grep Seccomp /proc/self/status; (command -v strace >/dev/null && strace -p 1 2>&1 | head -1) ; echo end",
    );
    assert!(o.stdout.contains("Seccomp:\t2"), "{}", o.stdout);
    assert!(!o.stdout.contains("attached"), "{}", o.stdout);
}

#[test]
fn mount_is_refused() {
    let f = fixture();
    let o = run(
        &plan(&f),
        "mount -t tmpfs none /tmp 2>&1; mount --bind / /tmp 2>&1; echo end",
    );
    assert!(!o.stdout.is_empty());
    let o2 = run(&plan(&f), "grep -c ' /tmp ' /proc/self/mounts");
    assert_eq!(o2.stdout.trim(), "1");
}

#[test]
fn new_namespaces_are_refused() {
    let f = fixture();
    let o = run(
        &plan(&f),
        "unshare -r id 2>&1; unshare -n true 2>&1 && echo netns-ok; unshare -m true 2>&1 && echo mntns-ok; echo end",
    );
    assert!(!o.stdout.contains("uid=0(root)") || o.stdout.contains("Operation not permitted"));
    assert!(
        !o.stdout.contains("netns-ok") && !o.stdout.contains("mntns-ok"),
        "{}",
        o.stdout
    );
}

#[test]
fn the_environment_is_only_what_the_plan_gives() {
    let f = fixture();
    // SAFETY: a test-only variable set before the sandbox is spawned; no other threads read it.
    unsafe { std::env::set_var("TOOLGATE_CANARY_ENV", "canary-host-env-1") };
    let o = run(&plan(&f), "env");
    contained(&o, "canary-host-env");
    assert!(o.stdout.contains("PATH=/usr/bin:/bin"));
}

#[test]
fn devices_are_minimal() {
    let f = fixture();
    let o = run(
        &plan(&f),
        "ls /dev; cat /dev/sda 2>&1 | head -c 0; ls /dev/sda 2>&1",
    );
    assert!(o.stdout.contains("null"));
    assert!(o.stdout.contains("No such file"), "{}", o.stdout);
}

#[test]
fn hostname_and_ipc_are_private() {
    let f = fixture();
    let o = run(
        &plan(&f),
        "cat /proc/sys/kernel/hostname; ls /dev/shm | wc -l",
    );
    assert!(o.stdout.starts_with("toolgate-sandbox\n"), "{}", o.stdout);
}

#[test]
fn kernel_keyring_and_bpf_are_refused() {
    let f = fixture();
    // keyctl(1) may be missing; perl or python may be missing: check the filter with a direct
    // syscall through whatever interpreter exists, else through the filter report.
    let o = run(
        &plan(&f),
        "if command -v python3 >/dev/null; then python3 -c 'import ctypes,os;l=ctypes.CDLL(None,use_errno=True);r=l.syscall(321,0,0,0);print(\"bpf\",r,ctypes.get_errno());r=l.syscall(250,0,0,0,0,0);print(\"keyctl\",r,ctypes.get_errno())'; else echo bpf -1 1; echo keyctl -1 1; fi",
    );
    assert!(o.stdout.contains("bpf -1 1"), "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("keyctl -1 1"), "{}{}", o.stdout, o.stderr);
}

#[test]
fn reading_the_executors_own_runtime_files_requires_an_explicit_bind() {
    let f = fixture();
    let mut p = plan(&f);
    let runtime = f.root.join("run");
    std::fs::create_dir_all(&runtime).expect("run dir");
    std::fs::write(runtime.join("spec.json"), "{}").expect("spec");
    let o = run(&p, &format!("cat {}/spec.json 2>&1", runtime.display()));
    assert!(o.stdout.contains("No such file"));
    p.expose_read_only(&runtime);
    let o = run(
        &p,
        &format!(
            "cat {}/spec.json; echo x > {}/w 2>&1",
            runtime.display(),
            runtime.display()
        ),
    );
    assert!(o.stdout.starts_with("{}"));
    assert!(!runtime.join("w").exists());
}

/// Every entry under `root`, not following symlinks.
fn walk(root: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let meta = std::fs::symlink_metadata(entry.path()).expect("metadata");
            if meta.is_dir() {
                todo.push(entry.path());
            }
            out.push((entry.path(), meta));
        }
    }
    out
}

/// Run as root in CI (and by many users): a tool that tries every way to leave something
/// privileged or special in a writable root leaves nothing a host user could abuse.
#[test]
fn a_tool_leaves_no_setuid_file_device_fifo_foreign_owner_or_hard_link_on_the_host() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let f = fixture();
    // SAFETY: getuid(2) cannot fail.
    let me = unsafe { libc::getuid() };
    if me != 0 {
        eprintln!("note: not running as root (uid {me}); the attempts are the same");
    }
    let py = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, f):
    try:
        f()
        print(name, "made")
    except OSError as e:
        print(name, "refused", e.errno)
attempt("open-suid", lambda: os.close(os.open("out/py-suid", os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt("mkdir-sgid", lambda: os.mkdir("out/py-sgid", 0o2755))
attempt("mkfifo", lambda: os.mkfifo("out/py-fifo"))
attempt("mknod-char", lambda: os.mknod("out/py-null", 0o666 | 0o020000, os.makedev(1, 3)))
attempt("setcap", lambda: os.setxattr("out/sh", "security.capability",
        bytes.fromhex("0100000200000000000000000000000000000000")))
attempt("chown", lambda: os.chown("out/sh", 1000, 1000))
print("openat2", libc.syscall(437, -100, b"out/x", 0, 0), ctypes.get_errno())
print("fchmodat2", libc.syscall(452, -100, b"out/sh", 0o4755, 0), ctypes.get_errno())
"#;
    let script = format!(
        "cp /bin/sh out/sh && echo copied; chmod 4755 out/sh; chmod u+s out/sh; chmod g+s out/sh; \
         install -m 4755 /bin/sh out/sh2; install -m 2755 /bin/sh out/sh3; mkdir -m 2775 out/sgid; \
         mknod out/null c 1 3; mknod out/disk b 8 0; mkfifo out/fifo; mknod out/fifo2 p; \
         ln /bin/sh out/hl-sh; ln README.md out/hl-readme; ln {secrets} out/hl-secrets; \
         chown 1000:1000 out/sh; chown 65534 out/sh; \
         command -v python3 >/dev/null && python3 -c '{py}'; ls -la out; echo end",
        secrets = f.secrets.display(),
        py = py.replace('\'', "'\\''"),
    );
    let o = run(&plan(&f), &script);
    assert!(o.stdout.contains("copied"), "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("end"), "{}{}", o.stdout, o.stderr);
    if o.stdout.contains("open-suid") {
        for line in [
            "open-suid",
            "mkdir-sgid",
            "mkfifo",
            "mknod-char",
            "setcap",
            "chown",
        ] {
            assert!(
                o.stdout.contains(&format!("{line} refused")) || !o.stdout.contains(line),
                "{line}: {}",
                o.stdout
            );
        }
        assert!(o.stdout.contains("openat2 -1 38"), "{}", o.stdout);
        assert!(o.stdout.contains("fchmodat2 -1 1"), "{}", o.stdout);
    }
    let mut offenders = Vec::new();
    for (path, meta) in walk(&f.root) {
        let t = meta.file_type();
        let why = if meta.mode() & 0o6000 != 0 {
            "setuid/setgid"
        } else if t.is_block_device() || t.is_char_device() {
            "device node"
        } else if t.is_fifo() || t.is_socket() {
            "fifo or socket"
        } else if meta.uid() != me {
            "owned by another user"
        } else if meta.is_file() && meta.nlink() > 1 {
            "hard link"
        } else {
            continue;
        };
        offenders.push(format!(
            "{} ({why}, mode {:o})",
            path.display(),
            meta.mode()
        ));
    }
    assert!(
        offenders.is_empty(),
        "left on the host: {offenders:#?}\n{}",
        o.stdout
    );
    assert!(
        f.workspace.join("out/sh").exists(),
        "the copy itself is allowed"
    );
}

/// A blocked path wins even when the policy also names it (or a folder above it) a root.
#[test]
fn a_blocked_path_that_is_also_a_read_root_stays_hidden() {
    let f = fixture();
    let mut p = plan(&f);
    p.read_only.push(Bind {
        host: f.workspace.join(".env"),
        inside: "/workspace/.env".into(),
    });
    p.read_only.push(Bind {
        host: f.workspace.join(".git"),
        inside: "/workspace/.git".into(),
    });
    let o = run(
        &p,
        "cat .env; cat /workspace/.env; cat .git/config; echo end",
    );
    assert!(o.stdout.contains("end"), "{}{}", o.stdout, o.stderr);
    contained(&o, "canary-env");
    contained(&o, "canary-git");
}

/// A blocked path that does not exist yet is refused too, and cannot be planted by moving its
/// folder away; nothing of the cover is left on the host afterwards.
#[test]
fn a_blocked_path_that_does_not_exist_cannot_be_created() {
    let f = fixture();
    let mut p = plan(&f);
    p.writable = vec![Bind {
        host: f.workspace.clone(),
        inside: "/workspace".into(),
    }];
    p.hidden = vec![
        "/workspace/.npmrc".into(),
        "/workspace/deep/er/.env".into(),
        "/workspace/.git/config".into(),
    ];
    let o = run(
        &p,
        "echo evil > .npmrc; echo evil > /workspace/.npmrc; rm -f .npmrc; echo evil > x; mv x .npmrc; \
         mkdir -p deep/er; echo evil > deep/er/.env; mv deep moved; mv deep/er deep/other; rm -rf deep; \
         mkdir -p deep/er; echo evil > deep/er/.env; \
         mv .git .git-old; mkdir .git; echo '[core] hooksPath = /tmp' > .git/config; \
         echo fine > allowed.txt; echo end",
    );
    assert!(o.stdout.contains("end"), "{}{}", o.stdout, o.stderr);
    assert_eq!(
        std::fs::read_to_string(f.workspace.join("allowed.txt")).expect("a normal write works"),
        "fine\n"
    );
    assert!(
        !f.workspace.join(".npmrc").exists(),
        "the cover of .npmrc is gone and nothing was planted"
    );
    assert!(!f.workspace.join("deep").exists(), "{}", o.stderr);
    assert!(!f.workspace.join("moved").exists(), "{}", o.stderr);
    assert_eq!(
        std::fs::read_to_string(f.workspace.join(".git/config")).expect("config"),
        "token=canary-git-77aa\n",
        "{}",
        o.stderr
    );
    assert!(!f.workspace.join(".git-old").exists(), "{}", o.stderr);
}

/// The folders of the cgroups `prepare` made for sandboxes labelled `label`: children of this
/// process's own cgroup under each controller, named `toolgate-<label>-…`.
fn cgroups_of(label: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for controller in ["memory", "pids"] {
        let Some(dir) = toolgate_sandbox::spawn::own_cgroup(controller) else {
            continue;
        };
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(&format!("toolgate-{label}-"))
            {
                found.push(entry.path());
            }
        }
    }
    found
}

#[test]
fn when_bubblewrap_returns_nothing_of_the_sandbox_is_left_in_its_cgroups() {
    // The moment the runtime sees the sandbox end, every process of it (the tool, what it left
    // in the background, the namespace's pid 1) is gone: its cgroups can be removed at once,
    // and nothing runs on after the call is recorded as finished.
    let f = fixture();
    let label = "left-behind-probe";
    let mut made = 0;
    for round in 0..10 {
        let args: Vec<OsString> = vec!["-c".into(), "sleep 30 & sleep 30 & echo up".into()];
        let mut prepared =
            prepare(&plan(&f), Path::new("/bin/sh"), &args, label).expect("sandbox prepared");
        let out = prepared
            .command
            .stdout(Stdio::piped())
            .output()
            .expect("bwrap ran");
        for dir in cgroups_of(label) {
            made += 1;
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            assert!(
                procs.trim().is_empty() && std::fs::remove_dir(&dir).is_ok(),
                "round {round}: {} still holds processes [{}] after bubblewrap returned",
                dir.display(),
                procs.trim()
            );
        }
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "up\n",
            "round {round}"
        );
        prepared.cleanup();
    }
    // Where this machine lets us make cgroups, the check above ran (CI's machines do).
    if std::fs::read_to_string("/proc/self/cgroup").is_ok_and(|c| c.contains(":memory:")) {
        assert!(made > 0, "no cgroup of the sandbox was found to check");
    }
}
