//! A call's writes land on a filesystem of its quota's size: the kernel refuses a write past it
//! (root included), nothing reaches the host folder until the writes are kept, and keeping them
//! never follows a link out of the folder. Real mounts: needs root, as the runtime does.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use toolgate_sandbox::layer::{Kept, WriteLayer, sweep_orphaned};
use toolgate_sandbox::plan::WriteLimit;

fn root() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    eprintln!("not root: a write layer cannot be mounted here, nothing to test");
    false
}

const MIB: u64 = 1024 * 1024;

fn limit(mib: u64, files: u64) -> WriteLimit {
    WriteLimit {
        bytes: mib * MIB,
        files,
        required: true,
    }
}

/// Write `bytes` bytes in 1 MiB pieces; how many were written before the first error.
fn fill(path: &Path, bytes: u64) -> (u64, Option<std::io::Error>) {
    use std::io::Write;
    let mut f = match fs::File::create(path) {
        Ok(f) => f,
        Err(e) => return (0, Some(e)),
    };
    let piece = vec![7u8; MIB as usize];
    let mut written = 0;
    while written < bytes {
        if let Err(e) = f.write_all(&piece).and_then(|()| f.sync_data()) {
            return (written, Some(e));
        }
        written += MIB;
    }
    (written, None)
}

#[test]
fn writes_past_the_quota_fail_for_root_and_nothing_lands_until_kept() {
    if !root() {
        return;
    }
    let ws = tempfile::tempdir().expect("workspace");
    let layers = tempfile::tempdir().expect("layers");
    let outside = tempfile::tempdir().expect("outside");
    let w = ws.path();
    fs::write(w.join("a.txt"), "old").expect("a");
    fs::create_dir_all(w.join("dir")).expect("dir");
    fs::write(w.join("dir/b.txt"), "b").expect("b");
    fs::create_dir_all(w.join("gone/deep")).expect("gone");
    fs::write(w.join("gone/deep/c.txt"), "c").expect("c");
    // A link out of the workspace, which a tool replaces by a folder of its own.
    symlink(outside.path(), w.join("out")).expect("link");

    let mut layer =
        WriteLayer::make(&[w.to_path_buf()], limit(8, 64), layers.path(), "t-1-0").expect("layer");
    let m = layer.merged(w).expect("merged").to_path_buf();
    assert_eq!(fs::read_to_string(m.join("a.txt")).expect("read"), "old");

    // Bytes: at most the 8 MiB of the quota, never 20.
    let (written, error) = fill(&m.join("big"), 20 * MIB);
    let error = error.expect("a write past the quota fails");
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
    assert!(written <= 8 * MIB, "wrote {written} bytes");
    assert!(layer.used_up());
    fs::remove_file(m.join("big")).expect("rm big");
    assert!(!layer.used_up());

    // Files: the inode count binds too.
    fs::create_dir(m.join("many")).expect("many");
    let made = (0..10_000)
        .take_while(|i| fs::write(m.join(format!("many/{i}")), "").is_ok())
        .count();
    assert!(made < 1000, "made {made} files under a quota of 64");
    fs::remove_dir_all(m.join("many")).expect("rm many");

    // What a call does: change, create, delete, replace a folder, replace the link.
    fs::write(m.join("a.txt"), "new").expect("a");
    fs::set_permissions(m.join("a.txt"), fs::Permissions::from_mode(0o640)).expect("chmod");
    fs::write(m.join("new.txt"), "hello").expect("new");
    fs::remove_file(m.join("dir/b.txt")).expect("rm b");
    fs::remove_dir_all(m.join("gone")).expect("rm gone");
    fs::write(m.join("gone"), "a file now").expect("gone as a file");
    fs::remove_file(m.join("out")).expect("rm link");
    fs::create_dir(m.join("out")).expect("out folder");
    fs::write(m.join("out/escaped.txt"), "x").expect("escaped");
    symlink("a.txt", m.join("to-a")).expect("to-a");

    // Nothing is on the host yet.
    assert_eq!(fs::read_to_string(w.join("a.txt")).expect("read"), "old");
    assert!(!w.join("new.txt").exists());
    assert!(w.join("dir/b.txt").exists());

    let kept = layer.keep().expect("keep");
    assert_eq!(
        kept,
        Kept {
            // a.txt, new.txt, gone, out/escaped.txt and the link to-a.
            files: 5,
            bytes: 3 + 5 + 10 + 1,
            // dir/b.txt; what a file or folder replaced is not counted.
            removed: 1,
        }
    );
    assert_eq!(fs::read_to_string(w.join("a.txt")).expect("read"), "new");
    assert_eq!(
        fs::metadata(w.join("a.txt"))
            .expect("a")
            .permissions()
            .mode()
            & 0o777,
        0o640
    );
    assert_eq!(fs::read_to_string(w.join("new.txt")).expect("new"), "hello");
    assert!(!w.join("dir/b.txt").exists() && w.join("dir").is_dir());
    assert_eq!(
        fs::read_to_string(w.join("gone")).expect("gone"),
        "a file now"
    );
    assert!(fs::symlink_metadata(w.join("out")).expect("out").is_dir());
    assert_eq!(
        fs::read_link(w.join("to-a")).expect("to-a"),
        Path::new("a.txt")
    );
    assert_eq!(
        fs::read_dir(outside.path()).expect("outside").count(),
        0,
        "nothing written through the link"
    );
    let folder = layers.path().join("toolgate-layer-t-1-0");
    assert!(folder.exists());
    drop(layer);
    assert!(!folder.exists(), "unmounted and removed");
}

#[test]
fn writes_not_kept_are_gone_with_the_layer() {
    if !root() {
        return;
    }
    let ws = tempfile::tempdir().expect("workspace");
    let layers = tempfile::tempdir().expect("layers");
    fs::write(ws.path().join("a.txt"), "old").expect("a");
    let layer = WriteLayer::make(
        &[ws.path().to_path_buf()],
        limit(4, 64),
        layers.path(),
        "t-1-1",
    )
    .expect("layer");
    let m = layer.merged(ws.path()).expect("merged").to_path_buf();
    fs::write(m.join("a.txt"), "new").expect("write");
    fs::remove_file(m.join("a.txt")).expect("rm");
    fs::write(m.join("b.txt"), "b").expect("b");
    drop(layer);
    assert_eq!(
        fs::read_to_string(ws.path().join("a.txt")).expect("a"),
        "old"
    );
    assert!(!ws.path().join("b.txt").exists());
    assert_eq!(fs::read_dir(layers.path()).expect("layers").count(), 0);
}

#[test]
fn the_layers_of_a_runtime_that_is_gone_are_swept_and_a_live_ones_stay() {
    if !root() {
        return;
    }
    let ws = tempfile::tempdir().expect("workspace");
    let layers = tempfile::tempdir().expect("layers");
    let mut gone = std::process::Command::new("true").spawn().expect("true");
    let dead = gone.id();
    gone.wait().expect("wait");
    let orphan = WriteLayer::make(
        &[ws.path().to_path_buf()],
        limit(4, 64),
        layers.path(),
        &format!("call-{dead}-3"),
    )
    .expect("orphan");
    let live = WriteLayer::make(
        &[ws.path().to_path_buf()],
        limit(4, 64),
        layers.path(),
        &format!("call-{}-4", std::process::id()),
    )
    .expect("live");
    // The dead runtime never dropped its layer.
    std::mem::forget(orphan);
    assert_eq!(sweep_orphaned(layers.path()), 1);
    let left: Vec<_> = fs::read_dir(layers.path())
        .expect("layers")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(live.merged(ws.path()).expect("merged").join(".").exists());
    let mounts = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(!mounts.contains(&format!("call-{dead}-3")), "unmounted");
}

fn plan_writing(workspace: &Path, layers: &Path, required: bool) -> toolgate_sandbox::SandboxPlan {
    use toolgate_sandbox::plan::{Bind, Limits, Network, SandboxPlan};
    SandboxPlan {
        read_only: vec![],
        writable: vec![Bind {
            host: workspace.to_path_buf(),
            inside: "/work".into(),
        }],
        hidden: vec![],
        runtime: vec![],
        cwd: "/work".into(),
        network: Network::None,
        limits: Limits {
            timeout: std::time::Duration::from_secs(10),
            memory_bytes: 64 << 20,
            cpu_seconds: Some(5),
            processes: Some(32),
            file_bytes: None,
            tmp_bytes: 4 << 20,
            writes: Some(WriteLimit {
                bytes: 4 * MIB,
                files: 64,
                required,
            }),
        },
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        etc: None,
        layers: Some(layers.to_path_buf()),
    }
}

/// What a sandbox writes goes through its layer: bounded, and in the workspace once kept.
#[test]
fn a_sandbox_writes_through_its_layer_and_a_quota_it_cannot_have_refuses_it() {
    if !root() {
        return;
    }
    let ws = tempfile::tempdir().expect("workspace");
    let layers = tempfile::tempdir().expect("layers");
    let mut sandboxed = toolgate_sandbox::prepare(
        &plan_writing(ws.path(), layers.path(), true),
        Path::new("/bin/sh"),
        &[
            "-c".into(),
            "echo hi > a.txt; head -c 8388608 /dev/zero > big; echo $?".into(),
        ],
        "layer-test",
    )
    .expect("prepare");
    assert_eq!(sandboxed.enforcement.writes, "filesystem (4 MiB, 64 files)");
    let out = sandboxed.command.output().expect("run");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(said.trim(), "1", "the write past the quota failed: {said}");
    assert!(!ws.path().join("a.txt").exists(), "not kept yet");
    let mut layer = sandboxed.take_write_layer().expect("a layer");
    assert!(layer.used_up());
    layer.keep().expect("keep");
    assert_eq!(
        fs::read_to_string(ws.path().join("a.txt")).expect("a"),
        "hi\n"
    );
    assert!(fs::metadata(ws.path().join("big")).expect("big").len() <= 4 * MIB);

    // A quota the runtime cannot make a filesystem for: refused when the policy set it, said
    // not enforced when it is the default.
    let nowhere = Path::new("/proc/toolgate-no-such-folder");
    let refused = toolgate_sandbox::prepare(
        &plan_writing(ws.path(), nowhere, true),
        Path::new("/bin/true"),
        &[],
        "layer-test",
    )
    .expect_err("refused");
    assert!(
        refused
            .to_string()
            .starts_with("filesystem.writeQuota cannot be enforced here: "),
        "{refused}"
    );
    let default = toolgate_sandbox::prepare(
        &plan_writing(ws.path(), nowhere, false),
        Path::new("/bin/true"),
        &[],
        "layer-test",
    )
    .expect("the default quota does not refuse");
    assert!(
        default.enforcement.writes.starts_with("not enforced: "),
        "{}",
        default.enforcement.writes
    );
}
