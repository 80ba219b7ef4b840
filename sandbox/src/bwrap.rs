//! bubblewrap's command line for a plan. The new root holds only the system folders (read-only),
//! a private /dev, /proc and /tmp, the plan's roots, and the runtime's own files.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::plan::{Network, SandboxPlan};

/// System folders bound read-only (or re-created as the host's symlinks, on merged-/usr systems).
pub const SYSTEM_DIRS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"];

/// The few files of /etc programs read when they run; never the whole folder (no shadow, no host
/// config), nor what only an administrator's tool reads (`ld.so.conf` is ldconfig's, the
/// `ca-certificates` folder update-ca-certificates'; programs read `ld.so.cache` and
/// `ssl/certs`). Each bind costs bubblewrap a read of the mount table.
pub const ETC_FILES: &[&str] = &[
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/ssl/certs",
    "/etc/mime.types",
];

/// What a host path is, for choosing how to bind or hide it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Does not exist.
    Missing,
    /// A directory.
    Dir,
    /// A symlink with its target.
    Symlink(PathBuf),
    /// Anything else.
    File,
}

/// Look at a host path without following symlinks.
pub fn kind_of(path: &Path) -> Kind {
    match std::fs::symlink_metadata(path) {
        Err(_) => Kind::Missing,
        Ok(m) if m.file_type().is_symlink() => std::fs::read_link(path)
            .map(Kind::Symlink)
            .unwrap_or(Kind::Missing),
        Ok(m) if m.is_dir() => Kind::Dir,
        Ok(_) => Kind::File,
    }
}

/// Whether the symlink `link` -> `target` points, lexically, into one of the [`SYSTEM_DIRS`],
/// which the sandbox sees as the host does. Further links inside are resolved in the sandbox: at
/// worst such a link dangles there, it never shows more than the system folders.
pub(crate) fn resolves_into_system_dirs(link: &Path, target: &Path) -> bool {
    use std::path::Component;
    let mut at = PathBuf::from("/");
    if target.is_relative()
        && let Some(folder) = link.parent()
    {
        at.push(folder);
    }
    for c in target.components() {
        match c {
            Component::RootDir => at = PathBuf::from("/"),
            Component::ParentDir => {
                at.pop();
            }
            Component::Normal(part) => at.push(part),
            Component::CurDir | Component::Prefix(_) => {}
        }
    }
    SYSTEM_DIRS
        .iter()
        .any(|dir| at.starts_with(dir) && at != Path::new(dir))
}

/// The arguments before `--` and the command. `seccomp_fds` are descriptors the child inherits;
/// `empty_file` is an empty regular file bound read-only over hidden files (reads see nothing,
/// tools do not fail on them); `kind` inspects a host path (tests pass their own).
pub fn arguments(
    plan: &SandboxPlan,
    seccomp_fds: &[i32],
    empty_file: &Path,
    kind: &dyn Fn(&Path) -> Kind,
) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
        for i in items {
            a.push(i.as_ref().to_os_string());
        }
    };
    push(&[
        &"--unshare-all",
        &"--unshare-user",
        &"--disable-userns",
        &"--die-with-parent",
        &"--new-session",
        // The command is the namespace's pid 1, bubblewrap's direct child, so bubblewrap returns
        // only once it is reaped and the sandbox's cgroups are empty when the runtime sees it
        // end. With bubblewrap's own init as pid 1, bubblewrap returns when the command exits
        // and the orphaned init is still tearing the namespaces down (the cgroups stay busy).
        // As pid 1 the executor also cannot be signalled from inside the sandbox.
        &"--as-pid-1",
    ]);
    if plan.network == Network::Host {
        push(&[&"--share-net"]);
    }
    push(&[
        &"--cap-drop",
        &"ALL",
        &"--hostname",
        &"toolgate-sandbox",
        &"--clearenv",
    ]);
    for dir in SYSTEM_DIRS {
        match kind(Path::new(dir)) {
            Kind::Dir => push(&[&"--ro-bind", dir, dir]),
            Kind::Symlink(target) => push(&[&"--symlink", &target, dir]),
            Kind::File | Kind::Missing => {}
        }
    }
    match &plan.etc {
        Some(copy) => push(&[&"--ro-bind", copy, &"/etc"]),
        None => {
            for f in ETC_FILES {
                match kind(Path::new(f)) {
                    Kind::Missing => {}
                    // The same symlink resolves inside to the same file (`/etc/localtime` into
                    // /usr/share/zoneinfo) without a mount of its own.
                    Kind::Symlink(target) if resolves_into_system_dirs(Path::new(f), &target) => {
                        push(&[&"--symlink", &target, f]);
                    }
                    Kind::Dir | Kind::File | Kind::Symlink(_) => {
                        push(&[&"--ro-bind-try", f, f]);
                    }
                }
            }
        }
    }
    push(&[&"--proc", &"/proc", &"--dev", &"/dev"]);
    push(&[
        &"--size",
        &plan.limits.tmp_bytes.to_string(),
        &"--tmpfs",
        &"/tmp",
    ]);
    for b in &plan.read_only {
        push(&[&"--ro-bind-try", &b.host, &b.inside]);
    }
    for b in &plan.writable {
        push(&[&"--bind-try", &b.host, &b.inside]);
    }
    // Blocked wins over every root: each hidden path is covered after the roots are bound, an
    // existing folder by an empty tmpfs, anything else by the empty read-only file. A hidden path
    // that does not exist is covered too where the sandbox could create it (bubblewrap makes the
    // mount point; `spawn::prepare` already made it and removes it afterwards), so a
    // tool cannot create a blocked `.npmrc`. The runtime's own files come after the covers, so
    // they stay visible inside a hidden data folder; the covering tmpfs turns read-only last.
    //
    // A cover moves with its folder: a tool could rename `sub/` away and create a new
    // `sub/.env`. So every folder between a write root and a hidden path in it is bound onto
    // itself first; a mount point cannot be renamed or removed (EBUSY).
    let mut pinned: Vec<&Path> = Vec::new();
    for inside in &plan.hidden {
        for dir in plan.pinned_ancestors(inside) {
            if !pinned.contains(&dir) && kind(&plan.host_behind(dir)) == Kind::Dir {
                push(&[&"--bind", &plan.host_behind(dir), &dir]);
                pinned.push(dir);
            }
        }
    }
    let mut covered_dirs = Vec::new();
    for inside in &plan.hidden {
        match kind(&plan.host_behind(inside)) {
            Kind::Dir => {
                push(&[&"--tmpfs", inside]);
                covered_dirs.push(inside);
            }
            Kind::File | Kind::Symlink(_) => push(&[&"--ro-bind", &empty_file, inside]),
            Kind::Missing if plan.creatable(inside) => {
                push(&[&"--ro-bind", &empty_file, inside]);
            }
            Kind::Missing => {}
        }
    }
    for b in &plan.runtime {
        let flag = if b.writable { "--bind" } else { "--ro-bind" };
        push(&[&flag, &b.source(), &b.path]);
    }
    for inside in covered_dirs {
        push(&[&"--remount-ro", inside]);
    }
    push(&[&"--chdir", &plan.cwd]);
    for (k, v) in &plan.env {
        push(&[&"--setenv", k, v]);
    }
    for fd in seccomp_fds {
        push(&[&"--add-seccomp-fd", &fd.to_string()]);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Bind, Limits};
    use std::time::Duration;

    fn plan(network: Network) -> SandboxPlan {
        SandboxPlan {
            read_only: vec![Bind {
                host: "/srv/ws".into(),
                inside: "/workspace".into(),
            }],
            writable: vec![Bind {
                host: "/srv/ws/out".into(),
                inside: "/workspace/out".into(),
            }],
            hidden: vec![
                "/workspace/.env".into(),
                "/workspace/.git".into(),
                "/workspace/out/.npmrc".into(),
                "/workspace/.absent".into(),
            ],
            runtime: vec![crate::plan::RuntimeBind {
                path: "/srv/ws/.git/run".into(),
                host: None,
                writable: true,
            }],
            cwd: "/workspace".into(),
            network,
            limits: Limits {
                timeout: Duration::from_secs(1),
                memory_bytes: 1 << 20,
                cpu_seconds: None,
                processes: None,
                file_bytes: None,
                tmp_bytes: 1024,
                writes: None,
            },
            env: vec![("PATH".into(), "/usr/bin".into())],
            etc: None,
            layers: None,
        }
    }

    fn fake_kind(p: &Path) -> Kind {
        match p.to_str() {
            Some("/usr") => Kind::Dir,
            Some("/bin") => Kind::Symlink("usr/bin".into()),
            Some("/etc/localtime") => Kind::Symlink("../usr/share/zoneinfo/Europe/Berlin".into()),
            Some("/etc/nsswitch.conf") => Kind::File,
            Some("/etc/ssl/certs") => Kind::Dir,
            Some("/etc/mime.types") => Kind::Symlink("/opt/mime/types".into()),
            Some("/etc/alternatives") => Kind::Symlink("/usr/../etc/shadow".into()),
            Some("/srv/ws/.env") => Kind::File,
            Some("/srv/ws/.git") => Kind::Dir,
            _ => Kind::Missing,
        }
    }

    fn joined(a: &[OsString]) -> String {
        a.iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn no_network_unless_open() {
        let a = joined(&arguments(
            &plan(Network::None),
            &[7],
            Path::new("/e"),
            &fake_kind,
        ));
        assert!(a.starts_with("--unshare-all --unshare-user --disable-userns"));
        assert!(!a.contains("--share-net"));
        let a = joined(&arguments(
            &plan(Network::Host),
            &[],
            Path::new("/e"),
            &fake_kind,
        ));
        assert!(a.contains("--share-net"));
    }

    #[test]
    fn binds_roots_in_order_and_hides_blocked_paths() {
        let a = joined(&arguments(
            &plan(Network::None),
            &[7, 8],
            Path::new("/e"),
            &fake_kind,
        ));
        assert!(a.contains("--ro-bind /usr /usr --symlink usr/bin /bin"));
        let ro = a
            .find("--ro-bind-try /srv/ws /workspace")
            .expect("read root");
        let rw = a
            .find("--bind-try /srv/ws/out /workspace/out")
            .expect("write root");
        let env = a.find("--ro-bind /e /workspace/.env").expect(".env hidden");
        let git = a.find("--tmpfs /workspace/.git").expect(".git hidden");
        let npmrc = a
            .find("--ro-bind /e /workspace/out/.npmrc")
            .expect("a missing blocked path under a write root is covered");
        assert!(
            !a.contains("/workspace/.absent"),
            "a missing blocked path nothing can create needs no cover"
        );
        let runtime = a
            .find("--bind /srv/ws/.git/run /srv/ws/.git/run")
            .expect("runtime files");
        let ro_again = a
            .find("--remount-ro /workspace/.git")
            .expect("the cover turns read-only");
        assert!(ro < rw && rw < env && env < git && git < npmrc);
        assert!(npmrc < runtime && runtime < ro_again);
        assert!(a.contains("--size 1024 --tmpfs /tmp"));
        assert!(a.contains("--setenv PATH /usr/bin"));
        assert!(a.ends_with("--add-seccomp-fd 7 --add-seccomp-fd 8"));
        assert!(!a.contains("/etc/shadow") && !a.contains("--bind /etc"));
    }

    #[test]
    fn folders_above_a_blocked_path_in_a_write_root_are_pinned_before_the_cover() {
        let mut p = plan(Network::None);
        p.hidden = vec!["/workspace/out/a/b/.env".into(), "/workspace/.env".into()];
        let kind = |path: &Path| match path.to_str() {
            Some("/srv/ws/out/a" | "/srv/ws/out/a/b") => Kind::Dir,
            other => fake_kind(Path::new(other.unwrap_or_default())),
        };
        let a = joined(&arguments(&p, &[], Path::new("/e"), &kind));
        let pin_a = a
            .find("--bind /srv/ws/out/a /workspace/out/a ")
            .expect("a pinned");
        let pin_b = a
            .find("--bind /srv/ws/out/a/b /workspace/out/a/b ")
            .expect("b pinned");
        let cover = a
            .find("--ro-bind /e /workspace/out/a/b/.env")
            .expect("covered");
        assert!(pin_a < pin_b && pin_b < cover, "{a}");
        assert!(
            !a.contains("--bind /srv/ws /workspace "),
            "nothing is pinned under a read-only root: {a}"
        );
    }

    #[test]
    fn hidden_paths_resolve_through_the_deepest_bind() {
        let p = plan(Network::None);
        assert_eq!(
            p.host_behind(Path::new("/workspace/out/x")),
            Path::new("/srv/ws/out/x")
        );
        assert_eq!(
            p.host_behind(Path::new("/workspace/a")),
            Path::new("/srv/ws/a")
        );
        assert_eq!(
            p.host_behind(Path::new("/workspace/out")),
            Path::new("/srv/ws/out")
        );
    }

    /// Of /etc, only what programs read, each as the host has it: a file or folder bound
    /// read-only, a symlink into the system folders recreated (no mount), any other symlink bound
    /// as the file it leads to, nothing for what is missing.
    #[test]
    fn etc_gets_only_what_programs_read() {
        let a = joined(&arguments(
            &plan(Network::None),
            &[],
            Path::new("/e"),
            &fake_kind,
        ));
        assert!(a.contains(
            "--symlink ../usr/share/zoneinfo/Europe/Berlin /etc/localtime --ro-bind-try /etc/nsswitch.conf /etc/nsswitch.conf --ro-bind-try /etc/ssl/certs /etc/ssl/certs --ro-bind-try /etc/mime.types /etc/mime.types"
        ), "{a}");
        // Lexically `..` of /usr leaves the system folders: bound, not recreated.
        assert!(
            a.contains("--ro-bind-try /etc/alternatives /etc/alternatives"),
            "{a}"
        );
        assert!(
            !a.contains("ld.so.conf") && !a.contains("ca-certificates"),
            "{a}"
        );
        assert!(!a.contains("/etc/ld.so.cache"), "missing on this host: {a}");
        assert!(resolves_into_system_dirs(
            Path::new("/etc/localtime"),
            Path::new("/usr/share/zoneinfo/Etc/UTC")
        ));
        assert!(!resolves_into_system_dirs(
            Path::new("/etc/localtime"),
            Path::new("/usr")
        ));
        assert!(!resolves_into_system_dirs(
            Path::new("/etc/x"),
            Path::new("../../usrx/y")
        ));
    }

    /// With a copy of the /etc files, /etc is that one read-only bind, in the same place among
    /// the system folders, and none of the files is bound on its own.
    #[test]
    fn a_copy_of_etc_is_one_bind() {
        let mut p = plan(Network::None);
        p.etc = Some("/run/tg/etc-0".into());
        let a = joined(&arguments(&p, &[], Path::new("/e"), &fake_kind));
        let under_etc = a
            .split(' ')
            .filter(|w| *w == "/etc" || w.starts_with("/etc/"))
            .count();
        assert_eq!(under_etc, 1, "{a}");
        assert!(
            a.contains("--symlink usr/bin /bin --ro-bind /run/tg/etc-0 /etc --proc /proc"),
            "{a}"
        );
    }
}
