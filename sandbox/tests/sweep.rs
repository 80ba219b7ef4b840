//! Sandbox cgroups a dead runtime left are swept, with what still runs in them; those of a
//! live runtime are not. Real cgroups (v1 memory and pids, as on CI's machines).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// This process's own folder under a v1 controller, when it can make cgroups there.
fn own(controller: &str) -> Option<PathBuf> {
    let dir = toolgate_sandbox::spawn::own_cgroup(controller)?;
    let probe = dir.join(format!("toolgate-sweep-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).ok()?;
    std::fs::remove_dir(&probe).ok()?;
    Some(dir)
}

/// A `sleep` placed in a new cgroup `name` under `dir`.
fn sleeper_in(dir: &Path, name: &str) -> (PathBuf, Child) {
    let cgroup = dir.join(name);
    std::fs::create_dir(&cgroup).expect("cgroup");
    let child = Command::new("sleep").arg("60").spawn().expect("sleep");
    std::fs::write(cgroup.join("cgroup.procs"), child.id().to_string()).expect("move");
    (cgroup, child)
}

#[test]
fn the_cgroups_of_a_dead_runtime_go_with_what_runs_in_them_and_a_live_ones_stay() {
    let Some(memory) = own("memory") else {
        eprintln!("this machine lets us make no memory cgroup: nothing to sweep");
        return;
    };
    // A pid that was a runtime and is gone now.
    let mut gone = Command::new("true").spawn().expect("true");
    let dead = gone.id();
    gone.wait().expect("wait");
    assert!(!Path::new(&format!("/proc/{dead}")).exists());

    let (orphan, mut orphan_sleep) = sleeper_in(&memory, &format!("toolgate-warm-{dead}-7"));
    let (alive, mut alive_sleep) =
        sleeper_in(&memory, &format!("toolgate-warm-{}-7", std::process::id()));

    let swept = toolgate_sandbox::spawn::sweep_orphaned_cgroups();
    assert!(swept >= 1, "swept {swept}");
    assert!(!orphan.exists(), "{} is left", orphan.display());
    let status = orphan_sleep.wait().expect("wait");
    assert!(
        !status.success(),
        "what ran in the orphaned cgroup was killed"
    );
    assert!(alive.exists(), "the live runtime's cgroup was swept");
    assert!(
        alive_sleep.try_wait().expect("try_wait").is_none(),
        "the live runtime's process was killed"
    );
    let _ = alive_sleep.kill();
    let _ = alive_sleep.wait();
    std::fs::remove_dir(&alive).expect("remove the live one");
}
