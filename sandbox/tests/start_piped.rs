//! A sandbox started without a fork (`SandboxedCommand::start_piped`, what the embedded runtime
//! uses) is the same sandbox as one `SandboxedCommand::command` starts: the same seccomp filters,
//! cgroups, limits, process group and clean signal state, seen from inside by the same probe.
//! Needs `bwrap` (the test command installs it); fails, never skips, without it.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use toolgate_sandbox::plan::{Limits, Network, SandboxPlan};
use toolgate_sandbox::prepare;

fn plan() -> SandboxPlan {
    SandboxPlan {
        read_only: vec![],
        writable: vec![],
        hidden: vec![],
        runtime: vec![],
        cwd: "/tmp".into(),
        network: Network::None,
        limits: Limits {
            timeout: Duration::from_secs(10),
            memory_bytes: 64 << 20,
            cpu_seconds: Some(5),
            processes: Some(32),
            file_bytes: Some(1 << 20),
            tmp_bytes: 4 << 20,
            writes: None,
        },
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        etc: None,
        layers: None,
    }
}

/// Reads its input line, then reports what it is inside: its seccomp mode, limits, its blocked and
/// ignored signals.
const PROBE: &str = r#"read line; echo "said: $line"
grep -E '^(Seccomp|NoNewPrivs|SigBlk|SigIgn):' /proc/self/status
echo "core $(ulimit -c) cpu $(ulimit -t) fsize $(ulimit -f)"
echo to-stderr >&2
exit 3"#;

fn args() -> Vec<OsString> {
    vec!["-c".into(), PROBE.into()]
}

/// The sandbox cgroups bubblewrap (`pid`) is in, seen from the host, without their unique suffix.
fn cgroups_of(pid: u32) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let mut found: Vec<String> = text
        .lines()
        .filter(|l| l.contains("/toolgate-"))
        .map(|l| {
            let (controller, path) = l.split_once(':').map_or(("", l), |(_, rest)| {
                rest.split_once(':').unwrap_or((rest, ""))
            });
            let name = path.rsplit('/').next().unwrap_or("");
            let stem: Vec<&str> = name.rsplitn(3, '-').collect();
            format!("{controller}:{}", stem.last().unwrap_or(&""))
        })
        .collect();
    found.sort();
    found
}

/// Whether bubblewrap (`pid`) leads its own process group, and its blocked and ignored signals.
fn bubblewrap_itself(pid: u32) -> (bool, String) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let leads = after.split_whitespace().nth(2) == Some(&pid.to_string());
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    // bubblewrap blocks SIGCHLD itself at some point while it runs: left out.
    let sigchld = 1u64 << (libc::SIGCHLD - 1);
    let signals = status
        .lines()
        .filter_map(|l| {
            let (name, mask) = l.split_once(":\t")?;
            let mask = u64::from_str_radix(mask.trim(), 16).ok()?;
            matches!(name, "SigBlk" | "SigIgn").then(|| format!("{name} {:x}", mask & !sigchld))
        })
        .collect::<Vec<_>>()
        .join(" ");
    (leads, signals)
}

type Report = (String, String, Option<i32>, Vec<String>, (bool, String));

/// The probe's report through `command` (a fork).
fn through_a_fork(label: &str) -> Report {
    let mut prepared =
        prepare(&plan(), Path::new("/bin/sh"), &args(), label).expect("sandbox prepared");
    let mut child = prepared
        .command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bwrap spawned");
    // The probe waits for its line: bubblewrap is up, in its cgroups.
    let cgroups = cgroups_of(child.id());
    let leads = bubblewrap_itself(child.id());
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"hello\n")
        .expect("write");
    let out = child.wait_with_output().expect("output");
    prepared.cleanup();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
        cgroups,
        leads,
    )
}

/// The same through `start_piped`.
fn without_a_fork(label: &str) -> Report {
    let mut prepared =
        prepare(&plan(), Path::new("/bin/sh"), &args(), label).expect("sandbox prepared");
    let started = prepared.start_piped().expect("started");
    let mut process = started.process;
    let pid = u32::try_from(process.id()).expect("pid");
    let cgroups = cgroups_of(pid);
    let leads = bubblewrap_itself(pid);
    std::fs::File::from(started.stdin)
        .write_all(b"hello\n")
        .expect("write");
    let mut stdout = String::new();
    std::fs::File::from(started.stdout)
        .read_to_string(&mut stdout)
        .expect("stdout");
    let mut stderr = String::new();
    std::fs::File::from(started.stderr)
        .read_to_string(&mut stderr)
        .expect("stderr");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = process.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "the sandbox did not end");
        std::thread::sleep(Duration::from_millis(5));
    };
    prepared.cleanup();
    (stdout, stderr, status.code(), cgroups, leads)
}

#[test]
fn a_sandbox_started_without_a_fork_is_the_same_sandbox() {
    let label = "start-piped";
    let forked = through_a_fork(label);
    let cloned = without_a_fork(label);
    assert_eq!(cloned, forked);
    let (stdout, stderr, code, cgroups, leads) = cloned;
    // Not equal by both being empty: the probe ran, confined, and said so.
    assert!(stdout.starts_with("said: hello\n"), "{stdout}");
    assert!(stdout.contains("Seccomp:\t2"), "{stdout}");
    assert!(stdout.contains("NoNewPrivs:\t1"), "{stdout}");
    assert!(
        stdout.contains("SigBlk:\t0000000000000000"),
        "nothing blocked: {stdout}"
    );
    assert!(stdout.contains("core 0 cpu 5 fsize 2048"), "{stdout}");
    assert_eq!(stderr, "to-stderr\n");
    assert_eq!(code, Some(3));
    assert!(leads.0, "bubblewrap leads its own process group");
    assert!(leads.1.contains("SigBlk"), "{}", leads.1);
    // Where this machine lets us make cgroups (CI's machines do), it started in them.
    if std::fs::read_to_string("/proc/self/cgroup").is_ok_and(|c| c.contains(":memory:")) {
        assert!(
            cgroups.contains(&format!("memory:toolgate-{label}")),
            "in its cgroups: {cgroups:?}"
        );
    }
}

#[test]
fn a_sandbox_dropped_while_it_runs_is_killed_and_reaped() {
    let args: Vec<OsString> = vec!["-c".into(), "echo up; sleep 30".into()];
    let mut prepared =
        prepare(&plan(), Path::new("/bin/sh"), &args, "start-piped-drop").expect("prepared");
    let started = prepared.start_piped().expect("started");
    let pid = started.process.id();
    let mut up = [0u8; 3];
    std::fs::File::from(started.stdout)
        .read_exact(&mut up)
        .expect("up");
    assert_eq!(&up, b"up\n");
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    drop(started.process);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            Instant::now() < deadline,
            "bubblewrap {pid} outlived its handle"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    prepared.cleanup();
}

/// The folder of the cpu cgroup `pid` is in, when the machine has a v1 cpu controller.
fn cpu_cgroup_of(pid: i32) -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "cpu")
            .then(|| Path::new("/sys/fs/cgroup/cpu").join(path.trim_start_matches('/')))
    })
}

/// CPU time (clock ticks) `pids` have used, from /proc/<pid>/stat.
fn ticks(pids: &[i32]) -> u64 {
    pids.iter()
        .map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            let fields: Vec<&str> = after.split_whitespace().collect();
            // utime and stime: fields 14 and 15 of stat, 12 and 13 after the name.
            [11, 12]
                .iter()
                .filter_map(|i| fields.get(*i)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// Pin the calling thread (and so what it starts) to the first CPU it may run on.
fn pin_to_one_cpu() {
    // SAFETY: sched_getaffinity/sched_setaffinity on this thread with a cpu_set_t we own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        let first = (0..libc::CPU_SETSIZE as usize)
            .find(|c| libc::CPU_ISSET(*c, &set))
            .expect("a CPU");
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(first, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

/// A sandbox made ahead of demand runs only on CPU time nothing else wants until its call claims
/// it, then shares the CPU like any process. Measured as shares of one CPU both spin on.
#[test]
fn a_sandbox_made_ahead_of_demand_yields_the_cpu_until_it_is_claimed() {
    let Some(own) = cpu_cgroup_of(std::process::id() as i32) else {
        eprintln!("no v1 cpu controller on this machine: the sandbox runs at the normal priority");
        return;
    };
    assert!(own.exists(), "{}", own.display());
    // On a thread of its own, pinned to one CPU, which everything it starts shares; and alive
    // throughout (the sandbox's parent-death signal follows the thread that started it).
    let (idle, other, claimed, other_after) = std::thread::spawn(|| {
        pin_to_one_cpu();
        let spin: Vec<OsString> = vec!["-c".into(), "echo up; while :; do :; done".into()];
        let prepared =
            toolgate_sandbox::prepare_ahead(&plan(), Path::new("/bin/sh"), &spin, "ahead")
                .expect("prepared");
        assert!(
            prepared.yields_cpu(),
            "a cpu cgroup was made and marked idle"
        );
        let started = prepared.start_piped().expect("started");
        let mut up = [0u8; 3];
        std::fs::File::from(started.stdout)
            .read_exact(&mut up)
            .expect("up");
        let group = cpu_cgroup_of(started.process.id()).expect("bubblewrap's cpu cgroup");
        assert_eq!(
            std::fs::read_to_string(group.join("cpu.idle"))
                .ok()
                .as_deref(),
            Some("1\n")
        );
        let mut competitor = std::process::Command::new("/bin/sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("competitor");
        let competitor_pid = i32::try_from(competitor.id()).expect("pid");
        let inside = || -> Vec<i32> {
            std::fs::read_to_string(group.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect()
        };
        let share = || {
            let (a, b) = (ticks(&inside()), ticks(&[competitor_pid]));
            std::thread::sleep(Duration::from_millis(600));
            (ticks(&inside()) - a, ticks(&[competitor_pid]) - b)
        };
        // A window can be lost to other tests of this binary on the same CPU: up to three
        // windows, the first that shows the share (an unmarked sandbox shows it in none).
        let (mut idle, mut other) = share();
        for _ in 0..2 {
            if other >= 20 && idle * 10 <= other {
                break;
            }
            (idle, other) = share();
        }
        prepared.claim_cpu().expect("claimed");
        assert_eq!(
            std::fs::read_to_string(group.join("cpu.idle"))
                .ok()
                .as_deref(),
            Some("0\n")
        );
        let (mut claimed, mut other_after) = share();
        for _ in 0..2 {
            if claimed * 3 >= other_after {
                break;
            }
            (claimed, other_after) = share();
        }
        let spinning = inside().len();
        let _ = competitor.kill();
        let _ = competitor.wait();
        assert_eq!(
            spinning, 2,
            "bubblewrap and the spinner still ran at the end"
        );
        (idle, other, claimed, other_after)
    })
    .join()
    .expect("measured");
    assert!(
        other >= 20 && idle * 10 <= other,
        "before its claim the sandbox spun {idle} ticks against the other process's {other}"
    );
    // Claimed, it is no longer starved. Not "exactly fair": the competitor's cgroup is this test
    // process's, whose weight it shares with whatever else of the suite runs on that CPU.
    assert!(
        claimed * 3 >= other_after,
        "after its claim the sandbox spun {claimed} ticks against the other process's {other_after}"
    );
}
