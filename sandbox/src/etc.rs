//! A copy of the few `/etc` files sandboxes see ([`ETC_FILES`]), bound whole as the sandbox's
//! `/etc`: one mount instead of one per file. bubblewrap reads the whole mount table after every
//! bind, and the files of `/etc` were five of a sandbox's dozen binds.
//!
//! The copy follows the host: before each sandbox the runtime asks for it again
//! ([`snapshot_in`]), which compares each path's inode, size and modification time (a few
//! `stat`s) and copies anew when one changed: `ldconfig` and `update-ca-certificates` replace
//! what they write by renaming, which changes both. A folder already copied is never changed,
//! since sandboxes made before the change still bind it; folders are removed with the run folder
//! they are in.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::bwrap::{ETC_FILES, Kind, kind_of, resolves_into_system_dirs};

/// What a path's copy depends on: the entry itself (a symlink's own inode) and, for a symlink,
/// what it points to.
type Stamp = Vec<Option<(u64, u64, i64, i64, u64)>>;

fn stamp_of<P: AsRef<Path>>(paths: &[P]) -> Stamp {
    let key = |m: std::fs::Metadata| (m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.size());
    paths
        .iter()
        .map(AsRef::as_ref)
        .flat_map(|p| {
            [
                std::fs::symlink_metadata(p).ok().map(key),
                std::fs::metadata(p).ok().map(key),
            ]
        })
        .collect()
}

/// The current copy of the host's [`ETC_FILES`] in `runs` (a folder of the runtime's own, on a
/// memory filesystem), made or made anew when the host's files changed since the last one.
/// `Ok(None)` when the same files could not be copied before (the error was returned then): the
/// sandbox binds each file instead, as it did before copies.
pub fn snapshot_in(runs: &Path) -> std::io::Result<Option<PathBuf>> {
    // Asked before every sandbox: the list is used as it is, nothing allocated for it.
    snapshot_of(Path::new("/etc"), ETC_FILES, runs, Budget::default())
}

/// Latest copy per run folder (`None`: copying failed), with the stamp it was made from.
type Snapshots = HashMap<PathBuf, (Stamp, Option<PathBuf>)>;
static SNAPSHOTS: Mutex<Option<Snapshots>> = Mutex::new(None);

/// How much a copy may hold: a few hundred entries and a megabyte or so on a Debian host. More
/// means something unusual is linked in (a whole tree behind a symlink), which binds serve better.
#[derive(Debug, Clone, Copy)]
struct Budget {
    max_entries: usize,
    max_bytes: u64,
    entries: usize,
    bytes: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::of(4096, 16 << 20)
    }
}

impl Budget {
    fn of(max_entries: usize, max_bytes: u64) -> Self {
        Budget {
            max_entries,
            max_bytes,
            entries: 0,
            bytes: 0,
        }
    }

    fn spend(&mut self, bytes: u64) -> std::io::Result<()> {
        self.entries += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        if self.entries > self.max_entries || self.bytes > self.max_bytes {
            return Err(std::io::Error::other(format!(
                "the /etc files to copy exceed {} entries or {} bytes",
                self.max_entries, self.max_bytes
            )));
        }
        Ok(())
    }
}

/// [`snapshot_in`] of `paths`, each under `etc`.
fn snapshot_of<P: AsRef<Path>>(
    etc: &Path,
    paths: &[P],
    runs: &Path,
    mut budget: Budget,
) -> std::io::Result<Option<PathBuf>> {
    let stamp = stamp_of(paths);
    // A panic while copying left nothing half-made in the map: the lock's data stays good.
    let mut snapshots = SNAPSHOTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let snapshots = snapshots.get_or_insert_with(HashMap::new);
    match snapshots.get(runs) {
        Some((made_from, None)) if *made_from == stamp => return Ok(None),
        // The run folder may have been renewed since (a runtime restarted in the same process).
        Some((made_from, Some(folder))) if *made_from == stamp && folder.is_dir() => {
            return Ok(Some(folder.clone()));
        }
        _ => {}
    }
    let mut n = 0;
    let folder = loop {
        let candidate = runs.join(format!("etc-{n}"));
        match std::fs::create_dir(&candidate) {
            Ok(()) => break candidate,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(e),
        }
    };
    let copied = paths.iter().map(AsRef::as_ref).try_for_each(|path| {
        let Ok(relative) = path.strip_prefix(etc) else {
            return Ok(());
        };
        let to = folder.join(relative);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        copy(path, &to, &mut budget)
    });
    match copied {
        Ok(()) => {
            snapshots.insert(runs.to_path_buf(), (stamp, Some(folder.clone())));
            Ok(Some(folder))
        }
        Err(e) => {
            // Nothing half-copied is left, and the same files are not tried again per sandbox.
            let _ = std::fs::remove_dir_all(&folder);
            snapshots.insert(runs.to_path_buf(), (stamp, None));
            Err(e)
        }
    }
}

/// Copy `from` to `to` as a bind of `from` would show it: a symlink into the system folders stays
/// a symlink (it resolves inside to the same file), any other is followed; a folder is copied
/// with the symlinks in it kept (they resolve inside as they do on the host).
fn copy(from: &Path, to: &Path, budget: &mut Budget) -> std::io::Result<()> {
    match kind_of(from) {
        Kind::Missing => Ok(()),
        Kind::Symlink(target) if resolves_into_system_dirs(from, &target) => {
            budget.spend(0)?;
            std::os::unix::fs::symlink(target, to)
        }
        Kind::Dir => copy_folder(from, to, budget),
        Kind::Symlink(_) if from.is_dir() => copy_folder(from, to, budget),
        Kind::Symlink(_) if !from.exists() => Ok(()),
        Kind::Symlink(_) | Kind::File => copy_file(from, to, budget),
    }
}

fn copy_file(from: &Path, to: &Path, budget: &mut Budget) -> std::io::Result<()> {
    budget.spend(std::fs::metadata(from)?.len())?;
    std::fs::copy(from, to).map(|_| ())
}

fn copy_folder(from: &Path, to: &Path, budget: &mut Budget) -> std::io::Result<()> {
    budget.spend(0)?;
    std::fs::create_dir(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            budget.spend(0)?;
            std::os::unix::fs::symlink(std::fs::read_link(&source)?, &target)?;
        } else if kind.is_dir() {
            copy_folder(&source, &target, budget)?;
        } else if kind.is_file() {
            copy_file(&source, &target, budget)?;
        }
        // Sockets, pipes and devices have no place in a sandbox's /etc.
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_shows_what_binds_showed_and_follows_changes() {
        let host = tempfile::tempdir().unwrap();
        let etc = host.path().join("etc");
        std::fs::create_dir_all(etc.join("ssl/certs")).unwrap();
        std::fs::write(etc.join("ld.so.cache"), "cache v1").unwrap();
        std::fs::write(etc.join("ssl/certs/bundle.crt"), "certs").unwrap();
        std::os::unix::fs::symlink("bundle.crt", etc.join("ssl/certs/hash.0")).unwrap();
        std::os::unix::fs::symlink("/usr/share/zoneinfo/UTC", etc.join("localtime")).unwrap();
        std::fs::write(host.path().join("outside"), "behind a link").unwrap();
        std::os::unix::fs::symlink(host.path().join("outside"), etc.join("mime.types")).unwrap();
        let paths: Vec<PathBuf> = [
            "ld.so.cache",
            "ssl/certs",
            "localtime",
            "mime.types",
            "absent",
        ]
        .iter()
        .map(|p| etc.join(p))
        .collect();
        let runs = tempfile::tempdir().unwrap();
        let copy = || {
            snapshot_of(&etc, &paths, runs.path(), Budget::default())
                .unwrap()
                .unwrap()
        };

        let first = copy();
        let read_in = |dir: &Path, p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
        let read = |p: &str| read_in(&first, p);
        assert_eq!(read("ld.so.cache"), "cache v1");
        assert_eq!(read("ssl/certs/bundle.crt"), "certs");
        assert_eq!(
            std::fs::read_link(first.join("ssl/certs/hash.0")).unwrap(),
            Path::new("bundle.crt")
        );
        assert_eq!(
            std::fs::read_link(first.join("localtime")).unwrap(),
            Path::new("/usr/share/zoneinfo/UTC")
        );
        // A link out of the system folders is followed, as its bind was.
        assert_eq!(read("mime.types"), "behind a link");
        assert!(!first.join("absent").exists());
        // Nothing changed: the same copy.
        assert_eq!(copy(), first);
        // Its run folder emptied (a runtime restarted): made again.
        std::fs::remove_dir_all(&first).unwrap();
        let first = copy();
        assert_eq!(read_in(&first, "ld.so.cache"), "cache v1");

        // Replaced by a rename, as ldconfig does: a new copy; the old one stays as it was.
        std::fs::write(etc.join("ld.so.cache.new"), "cache v2").unwrap();
        std::fs::rename(etc.join("ld.so.cache.new"), etc.join("ld.so.cache")).unwrap();
        let second = copy();
        assert_ne!(second, first);
        assert_eq!(read_in(&second, "ld.so.cache"), "cache v2");
        assert_eq!(read_in(&first, "ld.so.cache"), "cache v1");
        // A file behind a followed link changed: a new copy too.
        std::fs::write(host.path().join("outside"), "changed behind the link").unwrap();
        let third = copy();
        assert_ne!(third, second);
        assert_eq!(read_in(&third, "mime.types"), "changed behind the link");
    }

    #[test]
    fn a_copy_too_large_or_unreadable_is_not_left_nor_tried_again() {
        let host = tempfile::tempdir().unwrap();
        let etc = host.path().join("etc");
        std::fs::create_dir_all(etc.join("certs")).unwrap();
        for i in 0..10 {
            std::fs::write(etc.join(format!("certs/{i}.pem")), "x".repeat(100)).unwrap();
        }
        let paths = vec![etc.join("certs")];
        let runs = tempfile::tempdir().unwrap();
        let e = snapshot_of(&etc, &paths, runs.path(), Budget::of(5, 1 << 20)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the /etc files to copy exceed 5 entries or 1048576 bytes"
        );
        assert_eq!(std::fs::read_dir(runs.path()).unwrap().count(), 0);
        // The same files: not copied again (the caller binds each file).
        assert!(
            snapshot_of(&etc, &paths, runs.path(), Budget::default())
                .unwrap()
                .is_none()
        );
        // Bytes count as entries do.
        let other = tempfile::tempdir().unwrap();
        let e = snapshot_of(&etc, &paths, other.path(), Budget::of(100, 950)).unwrap_err();
        assert!(e.to_string().contains("950 bytes"), "{e}");
        assert_eq!(std::fs::read_dir(other.path()).unwrap().count(), 0);
        // Changed: tried again, and within the budget it is made.
        std::fs::remove_file(etc.join("certs/9.pem")).unwrap();
        let made = snapshot_of(&etc, &paths, runs.path(), Budget::default())
            .unwrap()
            .unwrap();
        assert_eq!(std::fs::read_dir(made.join("certs")).unwrap().count(), 9);
    }
}
