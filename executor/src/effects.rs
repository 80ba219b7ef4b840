//! Observed effects: what a call created, changed or deleted under its writable roots, found by
//! comparing snapshots taken before and after, with a unified diff of the text files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Files larger than this are compared by hash only, without a text diff.
const DIFF_TEXT_LIMIT: u64 = 256 * 1024;
/// A snapshot stops after this many files (the rest is reported as not observed).
const MAX_FILES: usize = 20_000;

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileState {
    hash: [u8; 32],
    text: Option<String>,
}

/// The files under the writable roots at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    files: BTreeMap<PathBuf, FileState>,
    /// Whether the file limit cut the walk.
    pub incomplete: bool,
}

/// What changed between two snapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Created or modified files.
    pub writes: Vec<String>,
    /// Deleted files.
    pub deletes: Vec<String>,
    /// A unified diff of the text files.
    pub diff: String,
}

/// Walk the roots without following symlinks.
pub fn snapshot(roots: &[String]) -> Snapshot {
    let mut snap = Snapshot::default();
    let mut stack: Vec<PathBuf> = roots.iter().map(PathBuf::from).collect();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                if snap.files.len() >= MAX_FILES {
                    snap.incomplete = true;
                    return snap;
                }
                if let Some(state) = read_state(&path, meta.len()) {
                    snap.files.insert(path, state);
                }
            }
        }
    }
    snap
}

fn read_state(path: &Path, len: u64) -> Option<FileState> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut hasher = Sha256::new();
    let mut text = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        if len <= DIFF_TEXT_LIMIT {
            text.extend_from_slice(&buf[..n]);
        }
    }
    let text = (len <= DIFF_TEXT_LIMIT)
        .then(|| String::from_utf8(text).ok())
        .flatten();
    Some(FileState {
        hash: hasher.finalize().into(),
        text,
    })
}

/// Compare two snapshots.
pub fn compare(before: &Snapshot, after: &Snapshot) -> Changes {
    let mut c = Changes::default();
    for (path, new) in &after.files {
        let old = before.files.get(path);
        if old == Some(new) {
            continue;
        }
        let name = path.display().to_string();
        let old_text = old.map_or(Some(""), |o| o.text.as_deref());
        match (old_text, new.text.as_deref()) {
            (Some(a), Some(b)) => {
                let from = if old.is_some() {
                    name.clone()
                } else {
                    "/dev/null".into()
                };
                c.diff.push_str(
                    &similar::TextDiff::from_lines(a, b)
                        .unified_diff()
                        .header(&from, &name)
                        .to_string(),
                );
            }
            _ => c
                .diff
                .push_str(&format!("Binary or large file {name} changed\n")),
        }
        c.writes.push(name);
    }
    for (path, old) in &before.files {
        if !after.files.contains_key(path) {
            let name = path.display().to_string();
            match old.text.as_deref() {
                Some(a) => c.diff.push_str(
                    &similar::TextDiff::from_lines(a, "")
                        .unified_diff()
                        .header(&name, "/dev/null")
                        .to_string(),
                ),
                None => c
                    .diff
                    .push_str(&format!("Binary or large file {name} deleted\n")),
            }
            c.deletes.push(name);
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_created_changed_and_deleted_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().display().to_string();
        std::fs::write(dir.path().join("keep.txt"), "same\n").unwrap();
        std::fs::write(dir.path().join("edit.txt"), "old\n").unwrap();
        std::fs::write(dir.path().join("gone.txt"), "bye\n").unwrap();
        let before = snapshot(std::slice::from_ref(&root));
        std::fs::write(dir.path().join("edit.txt"), "new\n").unwrap();
        std::fs::remove_file(dir.path().join("gone.txt")).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/made.txt"), "hi\n").unwrap();
        let c = compare(&before, &snapshot(&[root]));
        assert_eq!(c.writes.len(), 2, "{c:?}");
        assert!(
            c.writes.iter().any(|w| w.ends_with("edit.txt"))
                && c.writes.iter().any(|w| w.ends_with("sub/made.txt"))
        );
        assert!(c.deletes[0].ends_with("gone.txt"));
        assert!(c.diff.contains("-old\n+new\n"), "{}", c.diff);
        assert!(c.diff.contains("+hi\n"));
    }
}
