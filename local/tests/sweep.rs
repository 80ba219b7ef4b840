//! A runtime that died (SIGKILL) can leave the cgroups of a sandbox it was starting, with what
//! runs in them; the next `toolgate local` sweeps them before it serves. Its own test binary, so
//! no other runtime of the suite sweeps in its place.

mod support;

use std::process::Command;

use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_runtime_sweeps_the_cgroups_a_dead_runtime_left_before_it_serves() {
    // The runtime is this test's child: it shares the test's cgroup, where its sandboxes' go.
    let Some(memory) = toolgate_sandbox::spawn::own_cgroup("memory") else {
        eprintln!("no memory cgroup here: nothing to sweep");
        return;
    };
    let mut gone = Command::new("true").spawn().expect("true");
    let dead = gone.id();
    gone.wait().expect("wait");
    let orphan = memory.join(format!("toolgate-warm-{dead}-3"));
    if let Err(e) = std::fs::create_dir(&orphan) {
        eprintln!("cannot make a cgroup under {}: {e}", memory.display());
        return;
    }
    let mut stuck = Command::new("sleep").arg("60").spawn().expect("sleep");
    std::fs::write(orphan.join("cgroup.procs"), stuck.id().to_string()).expect("move");

    let dir = setup();
    let server = Server::start(dir.path());
    let _serving = server.client().await;
    assert!(
        !orphan.exists(),
        "{} is left after the runtime started",
        orphan.display()
    );
    let status = stuck.wait().expect("wait");
    assert!(
        !status.success(),
        "what ran in the orphaned cgroup was killed"
    );
}
