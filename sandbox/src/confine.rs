//! Landlock confinement: the filesystem rules of a SandboxPolicy enforced by the kernel on the
//! executor and the tool it starts, without privileges or namespaces.
//!
//! Why: in a Kubernetes pod there is no bubblewrap (no user namespaces, no capabilities), yet the
//! workspace volume holds files the policy blocks (`.env`, `.git/config`). Landlock lets an
//! unprivileged process give up access to everything but the paths it names, and its children
//! inherit that. The embedded runtime applies it too, inside bubblewrap, so a blocked path is
//! refused the same way on both runtimes.
//!
//! Landlock only grants, hierarchically: a rule on a folder covers everything beneath it. A
//! blocked path inside a granted root is carved out by granting the root's children one by one,
//! except the blocked one, down the blocked path's ancestors ([`grants`]). Those ancestors are
//! only listable: a tool may change what exists in them but not create or remove entries there
//! (creating `.git/hooks/x` beside a blocked `.git/config` would otherwise be allowed). Symlinks
//! are never granted: the kernel checks access at their target, under the target's own rules.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus,
};

/// The newest Landlock ABI whose rights we handle; older kernels enforce what they know.
const ABI_HANDLED: ABI = ABI::V5;

pub use toolgate_contract::exec::FsRules;

/// Programs, libraries, configuration and devices every process needs, read-only.
pub const SYSTEM_READ: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/proc", "/dev",
];
/// The devices a process writes to and the private temporary folder. Not all of `/dev`: in a
/// pod `/dev/termination-log` is the executor's result, which the tool must not forge.
pub const SYSTEM_WRITE: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/pts",
    "/dev/shm",
    "/tmp",
];

/// The rules plus what every process needs ([`SYSTEM_READ`], [`SYSTEM_WRITE`]).
pub fn with_system(mut rules: FsRules) -> FsRules {
    rules.read.extend(SYSTEM_READ.iter().map(PathBuf::from));
    rules.write.extend(SYSTEM_WRITE.iter().map(PathBuf::from));
    rules
}

/// Why a process could not be confined. It must not run then.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The kernel enforces no Landlock at all.
    #[error(
        "Landlock is not enforced by this kernel (Linux 5.13+ with Landlock enabled is needed); refusing to run with the workspace's blocked paths readable"
    )]
    Unsupported,
    /// Creating the ruleset or adding a rule failed.
    #[error("Landlock ruleset: {0}")]
    Ruleset(String),
    /// A granted path could not be opened.
    #[error("cannot open {path} to grant it: {source}")]
    Open {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The access one grant gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Read and execute beneath.
    Read,
    /// Everything beneath.
    Write,
    /// List the folder only: it holds a blocked path.
    List,
}

/// An entry of a folder, as [`grants`] needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A folder.
    Dir,
    /// A symlink (never granted).
    Symlink,
    /// Anything else.
    Other,
}

/// The rules as concrete grants: roots whole where nothing beneath is blocked, otherwise carved
/// around the blocked paths. `list` reads a folder's entries; roots it cannot stat are skipped.
pub fn grants(
    rules: &FsRules,
    kind: &dyn Fn(&Path) -> Option<EntryKind>,
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
) -> Vec<(PathBuf, Grant, EntryKind)> {
    let mut out = Vec::new();
    let roots = rules
        .read
        .iter()
        .map(|p| (p, Grant::Read))
        .chain(rules.write.iter().map(|p| (p, Grant::Write)));
    for (root, grant) in roots {
        if let Some(k) = kind(root) {
            carve(root, k, grant, &rules.blocked, kind, list, &mut out);
        }
    }
    out
}

fn carve(
    path: &Path,
    entry: EntryKind,
    grant: Grant,
    blocked: &[PathBuf],
    kind: &dyn Fn(&Path) -> Option<EntryKind>,
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
    out: &mut Vec<(PathBuf, Grant, EntryKind)>,
) {
    if blocked.iter().any(|b| path.starts_with(b)) {
        return;
    }
    if entry != EntryKind::Dir || !blocked.iter().any(|b| b.starts_with(path)) {
        out.push((path.to_path_buf(), grant, entry));
        return;
    }
    out.push((path.to_path_buf(), Grant::List, entry));
    for child in list(path) {
        match kind(&child) {
            None | Some(EntryKind::Symlink) => {}
            Some(k) => carve(&child, k, grant, blocked, kind, list, out),
        }
    }
}

fn kind_on_disk(path: &Path) -> Option<EntryKind> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some(if meta.file_type().is_symlink() {
        // A root given as a symlink (`/lib64` → `usr/lib64`) is granted at its target.
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => EntryKind::Dir,
            Ok(_) => EntryKind::Other,
            Err(_) => return None,
        }
    } else if meta.is_dir() {
        EntryKind::Dir
    } else {
        EntryKind::Other
    })
}

fn child_kind(path: &Path) -> Option<EntryKind> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some(if meta.file_type().is_symlink() {
        EntryKind::Symlink
    } else if meta.is_dir() {
        EntryKind::Dir
    } else {
        EntryKind::Other
    })
}

fn list_on_disk(path: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    entries
}

/// Whether this kernel enforces Landlock (ABI 1 or newer); probed once per process.
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(ABI::V1))
            .and_then(|r| r.create())
            .is_ok()
    })
}

/// A ruleset built in advance, so that applying it (in a child between fork and exec) is two
/// system calls.
#[derive(Debug)]
pub struct Confinement {
    ruleset: RulesetCreated,
}

impl Confinement {
    /// Build the ruleset for `rules` as the filesystem is now.
    pub fn prepare(rules: &FsRules) -> Result<Self, ConfineError> {
        let all = AccessFs::from_all(ABI_HANDLED);
        let read = AccessFs::from_read(ABI_HANDLED);
        let rule_err = |e: landlock::RulesetError| ConfineError::Ruleset(e.to_string());
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(all)
            .map_err(rule_err)?
            .create()
            .map_err(rule_err)?;
        let roots = |p: &Path| {
            if rules.read.iter().chain(&rules.write).any(|r| r == p) {
                kind_on_disk(p)
            } else {
                child_kind(p)
            }
        };
        for (path, grant, entry) in grants(rules, &roots, &list_on_disk) {
            let mut access: BitFlags<AccessFs> = match grant {
                Grant::Read => read,
                // Write roots get every right but making device nodes and FIFOs, which a tool
                // has no business leaving in a workspace.
                Grant::Write => {
                    all & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::MakeFifo)
                }
                Grant::List => AccessFs::ReadDir.into(),
            };
            if entry != EntryKind::Dir {
                access &= AccessFs::from_file(ABI_HANDLED);
            }
            let fd = PathFd::new(&path).map_err(|e| ConfineError::Open {
                path: path.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(rule_err)?;
        }
        Ok(Self { ruleset })
    }

    /// Confine the calling thread and every process and thread it starts from now on. Call it
    /// before starting threads (or in a child before exec). Fails when nothing is enforced.
    pub fn restrict_self(self) -> Result<(), ConfineError> {
        let status = self
            .ruleset
            .restrict_self()
            .map_err(|e| ConfineError::Ruleset(e.to_string()))?;
        match status.ruleset {
            RulesetStatus::NotEnforced => Err(ConfineError::Unsupported),
            RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => Ok(()),
        }
    }

    /// Confine the process `cmd` starts, between fork and exec; the parent stays as it is. If
    /// the kernel refuses, the spawn fails with that error and nothing runs.
    pub fn apply_in_child(self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let mut slot = Some(self);
        // SAFETY: between fork and exec the child only applies the prepared ruleset (a prctl
        // and one landlock system call on a descriptor opened beforehand).
        unsafe {
            cmd.pre_exec(move || match slot.take() {
                Some(c) => c.restrict_self().map_err(std::io::Error::other),
                None => Ok(()),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A fake tree: path → kind; children are the paths one level below.
    fn tree(entries: &[(&str, EntryKind)]) -> BTreeMap<PathBuf, EntryKind> {
        entries
            .iter()
            .map(|(p, k)| (PathBuf::from(p), *k))
            .collect()
    }

    fn carve_with(
        t: &BTreeMap<PathBuf, EntryKind>,
        rules: &FsRules,
    ) -> Vec<(PathBuf, Grant, EntryKind)> {
        let kind = |p: &Path| t.get(p).copied();
        let list = |p: &Path| {
            t.keys()
                .filter(|c| c.parent() == Some(p))
                .cloned()
                .collect::<Vec<_>>()
        };
        grants(rules, &kind, &list)
    }

    #[test]
    fn a_root_without_blocked_paths_is_granted_whole() {
        let t = tree(&[("/w", EntryKind::Dir), ("/w/a", EntryKind::Other)]);
        let g = carve_with(
            &t,
            &FsRules {
                read: vec!["/w".into()],
                ..Default::default()
            },
        );
        assert_eq!(g, vec![("/w".into(), Grant::Read, EntryKind::Dir)]);
    }

    #[test]
    fn blocked_paths_are_carved_out_down_their_ancestors() {
        use EntryKind::*;
        let t = tree(&[
            ("/w", Dir),
            ("/w/.env", Other),
            ("/w/.git", Dir),
            ("/w/.git/config", Other),
            ("/w/.git/HEAD", Other),
            ("/w/src", Dir),
            ("/w/link", Symlink),
        ]);
        let g = carve_with(
            &t,
            &FsRules {
                write: vec!["/w".into()],
                blocked: vec!["/w/.env".into(), "/w/.git/config".into()],
                ..Default::default()
            },
        );
        assert_eq!(
            g,
            vec![
                ("/w".into(), Grant::List, Dir),
                ("/w/.git".into(), Grant::List, Dir),
                ("/w/.git/HEAD".into(), Grant::Write, Other),
                ("/w/src".into(), Grant::Write, Dir),
            ]
        );
    }

    #[test]
    fn a_root_inside_a_blocked_path_is_not_granted() {
        let t = tree(&[("/w", EntryKind::Dir), ("/w/.git", EntryKind::Dir)]);
        let g = carve_with(
            &t,
            &FsRules {
                read: vec!["/w/.git".into()],
                blocked: vec!["/w/.git".into()],
                ..Default::default()
            },
        );
        assert!(g.is_empty());
    }

    #[test]
    fn missing_roots_are_skipped() {
        let g = carve_with(
            &tree(&[]),
            &FsRules {
                read: vec!["/nowhere".into()],
                ..Default::default()
            },
        );
        assert!(g.is_empty());
    }

    proptest::proptest! {
        /// Whatever the tree and the blocked paths: nothing at or beneath a blocked path is
        /// granted, every other path is reachable through a whole grant unless it leads to a
        /// blocked path (then it is only listable), and only such ancestors are list-only.
        #[test]
        fn carving_never_grants_a_blocked_path_and_loses_nothing_else(
            dirs in proptest::collection::btree_set("[ab]{1,2}(/[ab]{1,2}){0,2}", 0..12),
            files in proptest::collection::btree_set("[ab]{1,2}(/[ab]{1,2}){0,2}/f", 0..8),
            blocked_picks in proptest::collection::vec(0usize..40, 0..4),
        ) {
            let root = PathBuf::from("/w");
            let mut t: BTreeMap<PathBuf, EntryKind> = BTreeMap::new();
            t.insert(root.clone(), EntryKind::Dir);
            for d in &dirs {
                let mut p = root.clone();
                for part in d.split('/') {
                    p.push(part);
                    t.entry(p.clone()).or_insert(EntryKind::Dir);
                }
            }
            for f in &files {
                let path = root.join(f);
                if let Some(parent) = path.parent()
                    && t.get(parent) == Some(&EntryKind::Dir)
                    && !t.contains_key(&path)
                {
                    t.insert(path, EntryKind::Other);
                }
            }
            let all: Vec<PathBuf> = t.keys().cloned().collect();
            let blocked: Vec<PathBuf> = blocked_picks
                .iter()
                .map(|i| all[i % all.len()].clone())
                .filter(|p| *p != root)
                .collect();
            let g = carve_with(
                &t,
                &FsRules { write: vec![root.clone()], blocked: blocked.clone(), ..Default::default() },
            );
            let under_blocked = |p: &Path| blocked.iter().any(|b| p.starts_with(b));
            let leads_to_blocked = |p: &Path| blocked.iter().any(|b| b.starts_with(p) && b != p);
            for (path, grant, _) in &g {
                proptest::prop_assert!(!under_blocked(path), "granted {path:?} under {blocked:?}");
                if *grant == Grant::List {
                    proptest::prop_assert!(leads_to_blocked(path), "list-only {path:?}");
                }
            }
            for p in &all {
                if under_blocked(p) || leads_to_blocked(p) {
                    continue;
                }
                proptest::prop_assert!(
                    g.iter().any(|(q, grant, _)| *grant == Grant::Write && p.starts_with(q)),
                    "{p:?} lost (blocked {blocked:?}, grants {g:?})"
                );
            }
        }
    }
}
