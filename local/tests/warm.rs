//! Sandboxes started ahead of demand (`--warm-sandboxes`, on by default): each waits empty, is
//! given to exactly one call, sees nothing another call left, and dies with its runtime.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::*;
use toolgate_proto::v1 as pb;

fn add_tools(root: &Path) {
    let tool = |name: &str, argv: &str| {
        Tool::test(name)
            .argv(argv)
            .approval("never")
            .summary("A tool of the warm-sandbox suite.")
            .policy("read-only")
            .timeout_ms(15000)
            .yaml("team-a")
    };
    let m = root.join("manifests");
    for (file, text) in [
        (
            "w-leave",
            tool(
                "w.leave",
                "[sh, -c, \"echo left-behind > /tmp/left; echo left\"]",
            ),
        ),
        (
            "w-look",
            tool(
                "w.look",
                "[sh, -c, \"cat /tmp/left 2>/dev/null || echo clean\"]",
            ),
        ),
        (
            // Runs long enough to be seen running.
            "w-nap",
            tool("w.nap", "[sh, -c, \"sleep 2.71; echo rested\"]"),
        ),
        (
            // Which seccomp filters the tool runs under, and whether they refuse a FIFO.
            "w-filters",
            tool(
                "w.filters",
                "[sh, -c, \"grep ^Seccomp /proc/self/status; mkfifo /tmp/f 2>/dev/null && echo made || echo refused\"]",
            ),
        ),
        (
            // Leaves a process in a session of its own, out of reach of the tool's group.
            "w-linger",
            tool(
                "w.linger",
                "[sh, -c, \"setsid sleep 317 </dev/null >/dev/null 2>&1 & echo started\"]",
            ),
        ),
    ] {
        std::fs::write(m.join(format!("tools/{file}.yaml")), text).expect("tool");
    }
    std::fs::write(
        m.join("w-grant.yaml"),
        toolgate_testkit::fixtures::grant(
            "team-a",
            "warm-tools",
            &["w.leave", "w.look", "w.linger", "w.nap", "w.filters"],
        ),
    )
    .expect("grant");
}

/// The `pid command line` of every executor waiting for its go now (bubblewrap's own lines,
/// which carry the same arguments, left out), and the slots folder of `data`.
fn waiting_executor_lines(data: &Path) -> (Vec<String>, String) {
    let out = Command::new("pgrep")
        .args(["-af", "--", "--wait-for-go"])
        .output()
        .expect("pgrep");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains("bwrap"))
        .map(str::to_owned)
        .collect();
    (lines, data.join("slots").display().to_string())
}

/// The slot folders whose executor waits for its go now (from the processes' command lines).
fn waiting_slots(data: &Path) -> BTreeSet<String> {
    let (lines, slots) = waiting_executor_lines(data);
    lines.iter().filter_map(|l| slot_in(l, &slots)).collect()
}

/// The pids of the executors waiting for their go now.
fn waiting_executors(data: &Path) -> Vec<i32> {
    let (lines, slots) = waiting_executor_lines(data);
    lines
        .iter()
        .filter(|l| l.contains(&slots))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The `cpu.idle` of the v1 cpu cgroup `pid` is in (`None` without a cpu controller).
fn cpu_idle_of(pid: i32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == "cpu").then_some(path)
    })?;
    let file = Path::new("/sys/fs/cgroup/cpu")
        .join(path.trim_start_matches('/'))
        .join("cpu.idle");
    Some(
        std::fs::read_to_string(file)
            .unwrap_or_default()
            .trim()
            .to_string(),
    )
}

/// Sandboxes a plan keeps waiting by default (`--warm-sandboxes`).
const WARM_BY_DEFAULT: usize = 4;

/// The sandboxes a plan keeps waiting by default, once all are up (within 20 s).
async fn all_waiting(data: &Path) -> BTreeSet<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut waiting = waiting_slots(data);
    while waiting.len() < WARM_BY_DEFAULT && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        waiting = waiting_slots(data);
    }
    assert_eq!(
        waiting.len(),
        WARM_BY_DEFAULT,
        "sandboxes waiting: {waiting:?}"
    );
    waiting
}

/// The host folders of a slot the sandbox sees at `<data>/slots/<name>`: its run files (on a
/// memory filesystem when this user has one of its own) and its artifacts' staging folder.
fn host_folders(data: &Path, slot: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let name = Path::new(slot).file_name().expect("a slot's name");
    (
        toolgate_local::default_run_folder(data).join(name),
        data.join("staging").join(name),
    )
}

/// The slot folder (`<data>/slots/<name>`) a text names first.
fn slot_in(text: &str, slots: &str) -> Option<String> {
    let at = text.find(slots)? + slots.len() + 1;
    let name: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (!name.is_empty()).then(|| format!("{slots}/{name}"))
}

async fn run(c: &mut Client, tool: &str) -> (pb::Call, String) {
    let call = submit(c, tool, serde_json::json!({}), "execute").await;
    let done = wait_phase(c, &call.id, &["Succeeded", "Failed"]).await;
    (done, explain_as(c, REVIEWER, &call.id).await.sandbox_json)
}

type Client = toolgate_proto::v1::toolgate_client::ToolgateClient<tonic::transport::Channel>;

/// A runtime with the test tools that has run one `w.look`; its first sandboxes are in use.
async fn after_one_look() -> (tempfile::TempDir, Server, Client) {
    let dir = setup();
    add_tools(dir.path());
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let (done, _) = run(&mut c, "w.look").await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    (dir, server, c)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_started_ahead_waits_empty_runs_one_call_and_dies_with_the_runtime() {
    let dir = setup();
    add_tools(dir.path());
    let data = dir.path().join("data");
    let slots = data.join("slots").display().to_string();
    let mut server = Server::start(dir.path());
    let mut c = server.client().await;

    let (left, _) = run(&mut c, "w.leave").await;
    assert_eq!(left.phase, "Succeeded", "{:#?}", left.conditions);
    assert_eq!(left.output_preview, "left\n");

    // After the first run of a plan, sandboxes of it wait (four, the default).
    let waiting = all_waiting(&data).await;
    // Nothing of any call is in a waiting sandbox's folders: no spec, no credential, no output,
    // no artifact.
    for slot in &waiting {
        let (run_files, staging) = host_folders(&data, slot);
        // The spec and the credential never reach the disk where a memory filesystem is there.
        if Path::new("/dev/shm").is_dir() {
            let fs = Command::new("stat")
                .args(["-f", "-c", "%T"])
                .arg(&run_files)
                .output()
                .expect("stat");
            assert_eq!(
                String::from_utf8_lossy(&fs.stdout).trim(),
                "tmpfs",
                "{}",
                run_files.display()
            );
        }
        assert_eq!(
            std::fs::metadata(run_files.join("spec.json"))
                .expect("spec")
                .len(),
            0,
            "{}",
            run_files.display()
        );
        for empty in [
            run_files.join("credentials"),
            run_files.join("out"),
            staging,
        ] {
            let entries: Vec<_> = std::fs::read_dir(&empty).expect("folder").collect();
            assert!(entries.is_empty(), "{}: {entries:?}", empty.display());
        }
    }

    // Each call gets its own sandbox, a waiting one first; none sees what another left in its
    // private /tmp.
    let mut used = BTreeSet::new();
    for i in 0..3 {
        let (look, sandbox) = run(&mut c, "w.look").await;
        assert_eq!(look.phase, "Succeeded", "{:#?}", look.conditions);
        assert_eq!(look.output_preview, "clean\n", "call {i}");
        let slot = slot_in(&sandbox, &slots).expect("the call's sandbox names its slot");
        if i == 0 {
            assert!(
                waiting.contains(&slot),
                "the first call after the warm-up ran in a waiting sandbox: {slot} not in {waiting:?}"
            );
        }
        assert!(used.insert(slot.clone()), "{slot} ran two calls");
        // Removed after the end is recorded, off the call's path: soon, not at once.
        let (run_files, staging) = host_folders(&data, &slot);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while (run_files.exists() || staging.exists()) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            !run_files.exists() && !staging.exists(),
            "a used sandbox's folders are removed: {} and {}",
            run_files.display(),
            staging.display()
        );
    }

    // SIGKILL of the runtime: the waiting sandboxes die with it (their parent-death signal).
    // The calls above took waiting sandboxes; wait for the refill so there is something to kill.
    let before = all_waiting(&data).await;
    server.kill9();
    let leftovers = || {
        Command::new("pgrep")
            .args(["-f", &slots])
            .output()
            .expect("pgrep")
            .stdout
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !leftovers().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = leftovers();
    assert!(
        left.is_empty(),
        "a sandbox outlived its runtime: {}",
        String::from_utf8_lossy(&left)
    );
    // The next runtime clears the folders they left before it takes any call.
    let server = Server::start(dir.path());
    let _c = server.client().await;
    for slot in before {
        assert!(!Path::new(&slot).exists(), "{slot} left after a restart");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_warm_sandboxes_every_call_still_gets_its_own_and_nothing_waits() {
    let dir = setup();
    add_tools(dir.path());
    let data = dir.path().join("data");
    let slots = data.join("slots").display().to_string();
    let server = Server::start_with(
        dir.path(),
        &data,
        &dir.path().join("workspace"),
        &["--listen", "127.0.0.1:0", "--warm-sandboxes", "0"],
    );
    let mut c = server.client().await;
    let (left, _) = run(&mut c, "w.leave").await;
    assert_eq!(left.phase, "Succeeded", "{:#?}", left.conditions);
    let (look, sandbox) = run(&mut c, "w.look").await;
    assert_eq!(look.output_preview, "clean\n");
    assert!(slot_in(&sandbox, &slots).is_some(), "{sandbox}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(waiting_slots(&data).is_empty(), "nothing waits with 0");
}

/// A data folder that is not under /tmp (the default one is under `$HOME`): a tempdir there.
/// Inside the sandbox /tmp is private and writable, so a data folder under it hides mistakes in
/// what the executor is granted; one elsewhere does not.
fn data_outside_tmp() -> tempfile::TempDir {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let base = [Some(target.to_path_buf()), home]
        .into_iter()
        .flatten()
        .find(|p| !p.starts_with("/tmp") && p.is_dir())
        .expect("a folder outside /tmp (CARGO_TARGET_TMPDIR or HOME)");
    tempfile::tempdir_in(base).expect("data folder")
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_run_with_the_data_folder_outside_the_temporary_folder_warm_and_cold() {
    for warm in ["2", "0"] {
        let dir = setup();
        add_tools(dir.path());
        let data = data_outside_tmp();
        let server = Server::start_with(
            dir.path(),
            data.path(),
            &dir.path().join("workspace"),
            &["--listen", "127.0.0.1:0", "--warm-sandboxes", warm],
        );
        let mut c = server.client().await;
        for i in 0..2 {
            let (done, _) = run(&mut c, "w.leave").await;
            assert_eq!(
                done.phase,
                "Succeeded",
                "--warm-sandboxes {warm}, call {i}, data in {}: {:#?}",
                data.path().display(),
                done.conditions
            );
            assert_eq!(done.output_preview, "left\n");
        }
    }
}

/// A call's end is recorded once its executor has printed the result, before bubblewrap is gone;
/// by then nothing the tool started runs any more, not even a process in a session of its own.
#[tokio::test(flavor = "multi_thread")]
async fn nothing_a_tool_started_outlives_the_recorded_end_of_its_call() {
    let dir = setup();
    add_tools(dir.path());
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    let lingering = || {
        let out = Command::new("pgrep")
            .args(["-f", "^sleep 317$"])
            .output()
            .expect("pgrep");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(lingering(), "", "a `sleep 317` runs before the test");
    for _ in 0..3 {
        let (done, _) = run(&mut c, "w.linger").await;
        assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
        assert_eq!(done.output_preview, "started\n");
        assert_eq!(
            lingering(),
            "",
            "the tool's process outlived its call's end"
        );
    }
}

/// Waiting sandboxes last through a quiet spell: their parent-death signal follows the thread
/// that started them, which must live as long as the runtime (tokio ends an idle blocking thread
/// after ten seconds; the sandboxes started from one died with it).
#[tokio::test(flavor = "multi_thread")]
async fn waiting_sandboxes_outlive_a_quiet_spell() {
    let (dir, _server, mut c) = after_one_look().await;
    let data = dir.path().join("data");
    let waiting = all_waiting(&data).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(
        waiting_slots(&data),
        waiting,
        "the same sandboxes still wait after 12 idle seconds"
    );
    let (look, sandbox) = run(&mut c, "w.look").await;
    assert_eq!(look.phase, "Succeeded", "{:#?}", look.conditions);
    let slots = data.join("slots").display().to_string();
    let slot = slot_in(&sandbox, &slots).expect("the call's sandbox names its slot");
    assert!(waiting.contains(&slot), "{slot} was not one that waited");
}

/// A sandbox made ahead of demand waits on CPU time nothing else wants (its making must not slow
/// the calls running meanwhile); the one given to a call runs at the priority of any process.
#[tokio::test(flavor = "multi_thread")]
async fn waiting_sandboxes_yield_the_cpu_and_the_one_given_a_call_does_not() {
    if cpu_idle_of(i32::try_from(std::process::id()).expect("pid")).is_none() {
        eprintln!("no v1 cpu controller on this machine: sandboxes run at the normal priority");
        return;
    }
    let (dir, _server, mut c) = after_one_look().await;
    let data = dir.path().join("data");
    all_waiting(&data).await;
    let executors = waiting_executors(&data);
    assert_eq!(executors.len(), WARM_BY_DEFAULT, "{executors:?}");
    for pid in executors {
        assert_eq!(
            cpu_idle_of(pid).as_deref(),
            Some("1"),
            "waiting executor {pid}"
        );
    }
    let call = submit(&mut c, "w.nap", serde_json::json!({}), "execute").await;
    let napping = || {
        let out = Command::new("pgrep")
            .args(["-f", "^sleep 2.71$"])
            .output()
            .expect("pgrep");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .and_then(|p| p.parse::<i32>().ok())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let tool = loop {
        if let Some(pid) = napping() {
            break pid;
        }
        assert!(std::time::Instant::now() < deadline, "the tool never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(cpu_idle_of(tool).as_deref(), Some("0"), "the call's tool");
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    assert_eq!(done.output_preview, "rested\n");
}

/// The tool runs under the sandbox's two seccomp filters, which bubblewrap installed on the
/// executor: once, not stacked again by the executor, and they refuse what they are for.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_runs_under_the_sandbox_filters_once_and_they_refuse_a_fifo() {
    let dir = setup();
    add_tools(dir.path());
    let server = Server::start(dir.path());
    let mut c = server.client().await;
    for _ in 0..2 {
        let (done, _) = run(&mut c, "w.filters").await;
        assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
        assert_eq!(
            done.output_preview, "Seccomp:\t2\nSeccomp_filters:\t2\nrefused\n",
            "each call, whether its sandbox waited for it or was made for it"
        );
    }
}

/// The run files of a runtime killed and whose data folder was then deleted (a test's, a
/// demo's) do not stay in memory: the next runtime to start, on any data folder, removes them;
/// those of a runtime whose data folder is there are left to it.
#[tokio::test(flavor = "multi_thread")]
async fn run_files_whose_data_folder_is_gone_are_removed_by_the_next_runtime() {
    let (gone, mut server, _c) = after_one_look().await;
    let gone_runs = toolgate_local::default_run_folder(&gone.path().join("data"));
    all_waiting(&gone.path().join("data")).await;
    let (kept, mut other, _c) = after_one_look().await;
    let kept_runs = toolgate_local::default_run_folder(&kept.path().join("data"));
    server.kill9();
    other.kill9();
    assert!(gone_runs.is_dir(), "{}", gone_runs.display());
    drop(gone);

    let dir = setup();
    add_tools(dir.path());
    let next = Server::start(dir.path());
    next.client().await;
    assert!(!gone_runs.exists(), "left: {}", gone_runs.display());
    assert!(kept_runs.is_dir(), "removed: {}", kept_runs.display());
}

/// The inode numbers of the folders under `dir` (none when it is missing).
fn folder_inodes(dir: &Path) -> BTreeSet<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_dir())
                .map(|m| m.ino())
                .collect()
        })
        .unwrap_or_default()
}

/// A call frees no folder on the data filesystem: a used slot's artifacts' folder and the
/// namespace folder in it are kept empty and renamed into the next slots, each used by one slot
/// at a time; the call's artifacts are in the store; a waiting slot's folder is empty.
#[tokio::test(flavor = "multi_thread")]
async fn a_used_slots_empty_folders_are_kept_for_the_next_and_hold_nothing_of_its_call() {
    use std::os::unix::fs::MetadataExt;
    let (dir, _server, mut c) = after_one_look().await;
    let data = dir.path().join("data");
    let staging = data.join("staging");
    let spares = staging.join(".spare");
    let slots = data.join("slots").display().to_string();
    let mut seen = BTreeSet::new();
    for _ in 0..4 {
        let waiting = all_waiting(&data).await;
        seen.extend(folder_inodes(&staging));
        seen.extend(folder_inodes(&spares));
        let (done, sandbox) = run(&mut c, "w.leave").await;
        assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
        let slot = slot_in(&sandbox, &slots).expect("the call's sandbox names its slot");
        assert!(waiting.contains(&slot), "{slot} was not one that waited");
        let stdout = data.join("artifacts/team-a").join(&done.id).join("stdout");
        assert_eq!(
            std::fs::read_to_string(&stdout).expect("its stdout in the store"),
            "left\n"
        );
        let (_, used) = host_folders(&data, &slot);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while used.exists() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!used.exists(), "{} is given back", used.display());
    }
    // The slots waiting now were made from folders that were there before: no folder made.
    let waiting = all_waiting(&data).await;
    for slot in &waiting {
        let (_, folder) = host_folders(&data, slot);
        let inode = std::fs::metadata(&folder).expect("its folder").ino();
        assert!(
            seen.contains(&inode),
            "{} (inode {inode}) is a kept folder, one of {seen:?}",
            folder.display()
        );
        let entries: Vec<_> = std::fs::read_dir(&folder).expect("folder").collect();
        assert!(entries.is_empty(), "{}: {entries:?}", folder.display());
    }
    for spare in std::fs::read_dir(&spares).expect("spares").flatten() {
        let entries: Vec<_> = std::fs::read_dir(spare.path()).expect("spare").collect();
        assert!(
            entries.is_empty(),
            "{}: {entries:?}",
            spare.path().display()
        );
        let mode = spare.metadata().expect("spare").mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", spare.path().display());
    }
}

/// A run folder the runtime's configuration names is a parent: the runtime empties only a
/// folder of its own in it (named for its data folder), never what else is there.
#[tokio::test(flavor = "multi_thread")]
async fn a_named_run_folder_keeps_what_else_is_in_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let parent = dir.path().join("runs");
    std::fs::create_dir_all(parent.join("someone-elses")).expect("folder");
    std::fs::write(parent.join("precious"), "keep me").expect("file");
    let data = dir.path().join("data");
    let own = toolgate_local::run_folder_in(&parent, &data);
    // What a runtime on the same data folder that died left.
    std::fs::create_dir_all(own.join("slot-1")).expect("left");
    toolgate_local::Runtime::start(toolgate_local::Config {
        manifests: Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples"),
        data: data.clone(),
        workspace: dir.path().to_path_buf(),
        executor: vec!["/nonexistent/toolgate-executor".into()],
        broker: std::sync::Arc::new(toolgate_local::broker::NoBroker),
        reload_interval: Duration::from_secs(3600),
        warm_sandboxes: 0,
        tracer: Default::default(),
        runs: Some(parent.clone()),
        egress_nameservers: Vec::new(),
        egress_upstream_ca: Vec::new(),
    })
    .await
    .expect("starts");
    assert!(own.is_dir(), "{}", own.display());
    assert!(
        !own.join("slot-1").exists(),
        "the runtime's own folder is renewed"
    );
    assert_eq!(
        std::fs::read_to_string(parent.join("precious")).expect("kept"),
        "keep me"
    );
    assert!(parent.join("someone-elses").is_dir());
}
