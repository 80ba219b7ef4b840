//! Landlock confinement on the real kernel: processes started under [`Confinement`] cannot read
//! a blocked file (directly or through a symlink), write outside their write roots, create
//! entries beside a blocked path, or touch anything outside the rules.

use std::path::Path;
use std::process::Command;

use toolgate_sandbox::confine::{Confinement, FsRules, with_system};

/// Run `sh -c script` confined by `rules`; (exit code, stdout, stderr).
fn confined(rules: &FsRules, script: &str) -> (i32, String, String) {
    let confinement = Confinement::prepare(&with_system(rules.clone())).expect("ruleset");
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", script]);
    confinement.apply_in_child(&mut cmd);
    let out = cmd.output().expect("run sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A folder outside `/tmp`, which every confined process may write.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir")
}

fn workspace() -> tempfile::TempDir {
    let dir = scratch();
    let w = dir.path();
    std::fs::create_dir_all(w.join("src")).expect("src");
    std::fs::create_dir_all(w.join(".git/hooks")).expect("git");
    std::fs::write(w.join("src/a.ts"), "export const a = 1;\n").expect("a");
    std::fs::write(w.join(".env"), "SECRET=canary-landlock-7e2\n").expect("env");
    std::fs::write(w.join(".git/config"), "[core]\n").expect("config");
    std::fs::write(w.join(".git/HEAD"), "ref: refs/heads/main\n").expect("head");
    std::os::unix::fs::symlink(w.join(".env"), w.join("src/env-link")).expect("symlink");
    dir
}

fn rules(w: &Path, write: bool) -> FsRules {
    let root = vec![w.to_path_buf()];
    FsRules {
        read: if write { vec![] } else { root.clone() },
        write: if write { root } else { vec![] },
        blocked: vec![w.join(".env"), w.join(".git/config")],
    }
}

#[test]
fn blocked_files_cannot_be_read_but_their_neighbours_can() {
    let dir = workspace();
    let w = dir.path();
    let (code, out, err) = confined(
        &rules(w, false),
        &format!(
            "cat {w}/src/a.ts; cat {w}/.git/HEAD; cat {w}/.env; cat {w}/src/env-link; cat {w}/.git/config; ls -a {w}",
            w = w.display()
        ),
    );
    assert!(out.contains("export const a = 1;"), "{out} {err}");
    assert!(out.contains("ref: refs/heads/main"), "{out} {err}");
    assert!(!out.contains("canary-landlock"), "blocked file read: {out}");
    assert!(!out.contains("[core]"), "blocked file read: {out}");
    assert_eq!(err.matches("Permission denied").count(), 3, "{err}");
    // Listing shows names; only contents are refused.
    assert!(out.contains(".env"), "{out}");
    assert_eq!(code, 0, "ls succeeds: {err}");
}

#[test]
fn writes_stay_inside_write_roots_and_never_beside_a_blocked_path() {
    let dir = workspace();
    let w = dir.path();
    let ro = confined(
        &rules(w, false),
        &format!("echo x > {}/src/a.ts", w.display()),
    );
    assert_ne!(ro.0, 0, "read-only root was written");
    let (code, _, err) = confined(
        &rules(w, true),
        &format!(
            "echo fixed > {w}/src/a.ts && mkdir {w}/src/new && echo n > {w}/src/new/f",
            w = w.display()
        ),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(w.join("src/a.ts")).expect("a"),
        "fixed\n"
    );
    for attempt in [
        format!("echo x > {}/.env", w.display()),
        format!("echo x > {}/.git/description", w.display()),
        format!("echo x > {}/top-level-new", w.display()),
        format!("rm {}/.git/HEAD", w.display()),
        format!("echo x > {}/../escaped", w.display()),
    ] {
        let (code, _, _) = confined(&rules(w, true), &attempt);
        assert_ne!(code, 0, "allowed: {attempt}");
    }
    assert_eq!(
        std::fs::read_to_string(w.join(".env")).expect("env"),
        "SECRET=canary-landlock-7e2\n"
    );
    assert!(!w.join(".git/description").exists());
    assert!(!w.join("top-level-new").exists());
}

#[test]
fn everything_not_granted_is_refused() {
    let dir = workspace();
    let outside = scratch();
    std::fs::write(outside.path().join("notes"), "outside the roots\n").expect("notes");
    let (_, out, err) = confined(
        &rules(dir.path(), false),
        &format!(
            "cat {}/notes; ls {}; cat /usr/share/common-licenses/GPL-3 | head -c 10 | wc -c",
            outside.path().display(),
            outside.path().display()
        ),
    );
    assert!(!out.contains("outside the roots"), "{out}");
    assert_eq!(err.matches("Permission denied").count(), 2, "{err}");
    assert_eq!(out.trim(), "10", "system files stay readable: {out} {err}");
}

#[test]
fn devices_are_usable_but_not_every_file_in_dev() {
    let dir = workspace();
    let (code, out, err) = confined(
        &rules(dir.path(), false),
        "echo discarded > /dev/null && head -c 4 /dev/urandom | wc -c && ls /dev/null && echo via-stdout > /dev/stdout",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "4\n/dev/null\nvia-stdout\n");
    // Creating or writing anything else under /dev (a pod's /dev/termination-log) is refused.
    let (code, _, err) = confined(
        &rules(dir.path(), false),
        "echo forged > /dev/toolgate-forged-result",
    );
    assert_ne!(code, 0);
    assert!(err.contains("Permission denied"), "{err}");
    assert!(!std::path::Path::new("/dev/toolgate-forged-result").exists());
}

#[test]
fn a_write_root_takes_files_and_folders_but_not_fifos_or_device_nodes() {
    let dir = scratch();
    let w = dir.path();
    let (_, out, err) = confined(
        &FsRules {
            write: vec![w.to_path_buf()],
            ..Default::default()
        },
        &format!(
            "cd {}; echo x > f && mkdir d && echo made; mkfifo fifo || echo fifo-refused; echo end",
            w.display()
        ),
    );
    assert!(
        out.contains("made") && out.contains("fifo-refused"),
        "{out} {err}"
    );
    assert!(!w.join("fifo").exists());
}
