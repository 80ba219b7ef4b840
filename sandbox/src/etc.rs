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

fn stamp_of(paths: &[PathBuf]) -> Stamp {
    let key = |m: std::fs::Metadata| (m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.size());
    paths
        .iter()
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
pub fn snapshot_in(runs: &Path) -> std::io::Result<PathBuf> {
    let paths: Vec<PathBuf> = ETC_FILES.iter().map(PathBuf::from).collect();
    snapshot_of(Path::new("/etc"), &paths, runs)
}

/// Latest copy per run folder, with the stamp it was made from.
static SNAPSHOTS: Mutex<Option<HashMap<PathBuf, (Stamp, PathBuf)>>> = Mutex::new(None);

/// [`snapshot_in`] of `paths`, each under `etc`.
fn snapshot_of(etc: &Path, paths: &[PathBuf], runs: &Path) -> std::io::Result<PathBuf> {
    let stamp = stamp_of(paths);
    // A panic while copying left nothing half-made in the map: the lock's data stays good.
    let mut snapshots = SNAPSHOTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let snapshots = snapshots.get_or_insert_with(HashMap::new);
    // The run folder may have been renewed since (a runtime restarted in the same process).
    if let Some((made_from, folder)) = snapshots.get(runs)
        && *made_from == stamp
        && folder.is_dir()
    {
        return Ok(folder.clone());
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
    for path in paths {
        let Ok(relative) = path.strip_prefix(etc) else {
            continue;
        };
        let to = folder.join(relative);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        copy(path, &to)?;
    }
    snapshots.insert(runs.to_path_buf(), (stamp, folder.clone()));
    Ok(folder)
}

/// Copy `from` to `to` as a bind of `from` would show it: a symlink into the system folders stays
/// a symlink (it resolves inside to the same file), any other is followed; a folder is copied
/// with the symlinks in it kept (they resolve inside as they do on the host).
fn copy(from: &Path, to: &Path) -> std::io::Result<()> {
    match kind_of(from) {
        Kind::Missing => Ok(()),
        Kind::Symlink(target) if resolves_into_system_dirs(from, &target) => {
            std::os::unix::fs::symlink(target, to)
        }
        Kind::Dir => copy_folder(from, to),
        Kind::Symlink(_) if from.is_dir() => copy_folder(from, to),
        Kind::Symlink(_) if !from.exists() => Ok(()),
        Kind::Symlink(_) | Kind::File => std::fs::copy(from, to).map(|_| ()),
    }
}

fn copy_folder(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&source)?, &target)?;
        } else if kind.is_dir() {
            copy_folder(&source, &target)?;
        } else if kind.is_file() {
            std::fs::copy(&source, &target)?;
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

        let first = snapshot_of(&etc, &paths, runs.path()).unwrap();
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
        assert_eq!(snapshot_of(&etc, &paths, runs.path()).unwrap(), first);
        // Its run folder emptied (a runtime restarted): made again.
        std::fs::remove_dir_all(&first).unwrap();
        let first = snapshot_of(&etc, &paths, runs.path()).unwrap();
        assert_eq!(read_in(&first, "ld.so.cache"), "cache v1");

        // Replaced by a rename, as ldconfig does: a new copy; the old one stays as it was.
        std::fs::write(etc.join("ld.so.cache.new"), "cache v2").unwrap();
        std::fs::rename(etc.join("ld.so.cache.new"), etc.join("ld.so.cache")).unwrap();
        let second = snapshot_of(&etc, &paths, runs.path()).unwrap();
        assert_ne!(second, first);
        assert_eq!(
            std::fs::read_to_string(second.join("ld.so.cache")).unwrap(),
            "cache v2"
        );
        assert_eq!(read_in(&first, "ld.so.cache"), "cache v1");
        // A file behind a followed link changed: a new copy too.
        std::fs::write(host.path().join("outside"), "changed behind the link").unwrap();
        let third = snapshot_of(&etc, &paths, runs.path()).unwrap();
        assert_ne!(third, second);
        assert_eq!(
            std::fs::read_to_string(third.join("mime.types")).unwrap(),
            "changed behind the link"
        );
    }
}
