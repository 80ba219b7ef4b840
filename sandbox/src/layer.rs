//! The filesystem a call's writes land on: a write quota the kernel enforces, even for root.
//!
//! Each call with write roots gets an ext4 image of its quota's size (no journal, no blocks
//! reserved for root, its inode count the quota's files), loop-mounted by the runtime, and each
//! write root is an overlay whose lower layer is the host folder and whose upper layer is a folder
//! on that image. The sandbox binds the overlay where the write root would be: it sees the
//! workspace as it is, and every byte and inode it writes is taken from the image, so a write past
//! the quota fails with `No space left on device`. The writes reach the host folder only when the
//! runtime [`keeps`](WriteLayer::keep) them (a call that succeeded): copied file by file through
//! folder descriptors that never follow a link, deletions (overlay whiteouts) applied as deletes.
//!
//! Why an image and not the alternatives: a tmpfs upper layer would charge the writes to the
//! call's memory limit (pages that cannot be reclaimed); a byte count kept in user space does not
//! bind a process; project quotas need a filesystem mounted with `prjquota`, which no default
//! install has. Making one costs ~15 ms (mkfs and a loop mount), paid when the sandbox is made —
//! ahead of demand for the embedded runtime's warm sandboxes.

use std::ffi::{CStr, OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::mount::{MountFlags, UnmountFlags};

use crate::plan::WriteLimit;

/// Bytes of the image taken by each inode's table entry (ext4's default inode size).
const INODE_BYTES: u64 = 256;
/// Room for ext4's own metadata (superblock copies, group descriptors, bitmaps, the root and
/// `lost+found`), so the quota's bytes are all the call's.
const METADATA_BYTES: u64 = 2 * 1024 * 1024;
/// The xattr overlayfs marks a folder with when it replaced the lower one whole.
const OPAQUE: &CStr = c"trusted.overlay.opaque";
/// The mode bits a kept file or folder takes: never setuid, setgid or sticky, whatever the upper
/// layer holds (the seccomp filter already refuses making them). Kept writes are owned by the
/// runtime's user, as the tool's own writes would be.
const PERMISSIONS: u32 = 0o777;
/// Prefix of the folders layers are made in: a sweep finds what a dead runtime left by it.
pub const LAYER_PREFIX: &str = "toolgate-layer-";

/// Why a write layer could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// Mounting needs privileges this process lacks; nothing was made.
    #[error(
        "making a filesystem for the call's writes needs root (mount and a loop device); this runtime runs as uid {0}"
    )]
    Unprivileged(u32),
    /// A step failed.
    #[error("{what}: {why}")]
    Failed {
        /// The step.
        what: String,
        /// What went wrong.
        why: String,
    },
}

fn failed(what: impl Into<String>, why: impl std::fmt::Display) -> LayerError {
    LayerError::Failed {
        what: what.into(),
        why: why.to_string(),
    }
}

/// The filesystem a call's writes land on, and an overlay over each of its write roots. Dropped:
/// unmounted and removed, the writes not kept gone with it.
#[derive(Debug)]
pub struct WriteLayer {
    /// The folder everything is made in.
    dir: PathBuf,
    /// Where the image is mounted.
    fs: PathBuf,
    fs_mounted: bool,
    roots: Vec<Root>,
    limit: WriteLimit,
}

/// One write root's overlay.
#[derive(Debug)]
struct Root {
    /// The host folder (the overlay's lower layer, where kept writes go).
    lower: PathBuf,
    /// Where the overlay is mounted (what the sandbox binds).
    merged: PathBuf,
    /// The overlay's upper layer, on the image.
    upper: PathBuf,
    mounted: bool,
}

/// What [`WriteLayer::keep`] brought back into the host folders.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    /// Files and links written.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Paths deleted.
    pub removed: u64,
}

impl WriteLayer {
    /// Make the filesystem for `limit` in a new folder under `parent` and an overlay over each
    /// host folder of `roots` (which exist). `label` names the folder.
    pub fn make(
        roots: &[PathBuf],
        limit: WriteLimit,
        parent: &Path,
        label: &str,
    ) -> Result<WriteLayer, LayerError> {
        let uid = rustix::process::geteuid();
        if !uid.is_root() {
            return Err(LayerError::Unprivileged(uid.as_raw()));
        }
        std::fs::create_dir_all(parent)
            .map_err(|e| failed(format!("creating {}", parent.display()), e))?;
        let dir = parent.join(format!("{LAYER_PREFIX}{label}"));
        std::fs::create_dir(&dir).map_err(|e| failed(format!("creating {}", dir.display()), e))?;
        let mut layer = WriteLayer {
            fs: dir.join("fs"),
            dir,
            fs_mounted: false,
            roots: Vec::new(),
            limit,
        };
        layer.mount_image()?;
        for (i, lower) in roots.iter().enumerate() {
            layer.mount_overlay(i, lower)?;
        }
        layer.reserve_beyond_quota()?;
        Ok(layer)
    }

    /// Take whatever room the image has beyond the quota's bytes (ext4's metadata rarely needs
    /// all that was made for it) with a file no overlay shows, so the call gets the quota, not
    /// the quota and the margin.
    fn reserve_beyond_quota(&self) -> Result<(), LayerError> {
        let stat = rustix::fs::statvfs(&self.fs).map_err(|e| failed("measuring the image", e))?;
        let room = stat.f_bavail.saturating_mul(stat.f_bsize);
        if room <= self.limit.bytes {
            return Ok(());
        }
        let reserve = File::create(self.fs.join("reserve"))
            .map_err(|e| failed("reserving the image's margin", e))?;
        rustix::fs::fallocate(
            &reserve,
            rustix::fs::FallocateFlags::empty(),
            0,
            room - self.limit.bytes,
        )
        .map_err(|e| failed("reserving the image's margin", e))
    }

    /// Make the image and mount it.
    fn mount_image(&mut self) -> Result<(), LayerError> {
        let image = self.dir.join("image");
        let size = self
            .limit
            .bytes
            .saturating_add(self.limit.files.saturating_mul(INODE_BYTES))
            .saturating_add(METADATA_BYTES);
        File::create(&image)
            .and_then(|f| f.set_len(size))
            .map_err(|e| failed("creating the image of the call's writes", e))?;
        run(Command::new(system_program("mkfs.ext4"))
            .args(["-q", "-F", "-m", "0", "-N"])
            .arg(self.limit.files.to_string())
            .args([
                "-O",
                "^has_journal,^resize_inode",
                "-E",
                "lazy_itable_init=1,nodiscard",
            ])
            .arg(&image))
        .map_err(|e| {
            failed(
                "making the filesystem of the call's writes (mkfs.ext4, e2fsprogs)",
                e,
            )
        })?;
        std::fs::create_dir(&self.fs).map_err(|e| failed("creating its mount point", e))?;
        run(Command::new(system_program("mount"))
            .args(["-t", "ext4", "-o", "loop,nosuid,nodev"])
            .arg(&image)
            .arg(&self.fs))
        .map_err(|e| failed("mounting the filesystem of the call's writes", e))?;
        self.fs_mounted = true;
        // The loop device holds the image open; its name can go now.
        let _ = std::fs::remove_file(&image);
        Ok(())
    }

    /// The overlay of write root `i`: `lower` under an upper folder on the image, the upper's
    /// root given the lower's owner and mode (an overlay's root shows its upper's).
    fn mount_overlay(&mut self, i: usize, lower: &Path) -> Result<(), LayerError> {
        let upper = self.fs.join(format!("u{i}"));
        let work = self.fs.join(format!("w{i}"));
        let merged = self.dir.join(format!("m{i}"));
        let meta = std::fs::metadata(lower)
            .map_err(|e| failed(format!("reading write root {}", lower.display()), e))?;
        for d in [&upper, &work, &merged] {
            std::fs::create_dir(d).map_err(|e| failed(format!("creating {}", d.display()), e))?;
        }
        {
            use std::os::unix::fs::MetadataExt;
            std::os::unix::fs::chown(&upper, Some(meta.uid()), Some(meta.gid()))
                .and_then(|()| {
                    std::fs::set_permissions(
                        &upper,
                        std::os::unix::fs::PermissionsExt::from_mode(meta.mode() & 0o7777),
                    )
                })
                .map_err(|e| failed("giving the upper layer the write root's owner", e))?;
        }
        // Each layer by a descriptor: any path works, commas and colons included, which the
        // overlay's options could not carry.
        let open = |p: &Path| {
            rustix::fs::open(p, OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| failed(format!("opening {}", p.display()), e))
        };
        let (l, u, w) = (open(lower)?, open(&upper)?, open(&work)?);
        let fd = |f: &OwnedFd| format!("/proc/self/fd/{}", f.as_raw_fd());
        let options = format!("lowerdir={},upperdir={},workdir={}", fd(&l), fd(&u), fd(&w));
        let options =
            std::ffi::CString::new(options).map_err(|e| failed("the overlay's options", e))?;
        rustix::mount::mount(
            "toolgate-writes",
            &merged,
            "overlay",
            MountFlags::NOSUID | MountFlags::NODEV,
            options.as_c_str(),
        )
        .map_err(|e| failed(format!("mounting the overlay of {}", lower.display()), e))?;
        self.roots.push(Root {
            lower: lower.to_path_buf(),
            merged,
            upper,
            mounted: true,
        });
        Ok(())
    }

    /// What the sandbox binds for the write root at `host`, when it has an overlay.
    pub fn merged(&self, host: &Path) -> Option<&Path> {
        self.roots
            .iter()
            .find(|r| r.lower == host)
            .map(|r| r.merged.as_path())
    }

    /// The limit it enforces.
    pub fn limit(&self) -> WriteLimit {
        self.limit
    }

    /// Whether the call used its quota up, so a failure was likely for want of room: no inode
    /// left, or less room than a tenth of the quota (at least 1 MiB; ext4 refuses a write while
    /// it still counts some blocks free, held back for its own metadata).
    pub fn used_up(&self) -> bool {
        rustix::fs::statvfs(&self.fs).is_ok_and(|s| {
            let room = s.f_bavail.saturating_mul(s.f_bsize);
            s.f_favail == 0 || room < (self.limit.bytes / 10).max(1024 * 1024)
        })
    }

    /// Bring the writes into the host folders, once the sandbox is gone: each overlay unmounted,
    /// then its upper layer copied over its lower one.
    pub fn keep(&mut self) -> std::io::Result<Kept> {
        let mut kept = Kept::default();
        for root in &mut self.roots {
            if root.mounted {
                rustix::mount::unmount(&root.merged, UnmountFlags::DETACH)?;
                root.mounted = false;
            }
            let upper = rustix::fs::open(
                &root.upper,
                OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let lower = rustix::fs::open(
                &root.lower,
                OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            merge(upper.as_fd(), lower.as_fd(), &mut kept)?;
        }
        Ok(kept)
    }
}

impl Drop for WriteLayer {
    fn drop(&mut self) {
        for root in &self.roots {
            if root.mounted {
                let _ = rustix::mount::unmount(&root.merged, UnmountFlags::DETACH);
            }
        }
        if self.fs_mounted {
            let _ = rustix::mount::unmount(&self.fs, UnmountFlags::DETACH);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A system program, on PATH or in the folders administrators' tools live in (a runtime started
/// by a service manager may have neither `/sbin` nor `/usr/sbin` on its PATH).
fn system_program(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// Run a command, its stderr the error when it fails.
fn run(command: &mut Command) -> Result<(), String> {
    let out = command.output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Copy the upper folder `upper` over the lower folder `lower`, entry by entry: regular files,
/// folders and links (devices, pipes and sockets are no workspace content), one file each
/// (no hard link survives). Every path is
/// taken relative to a folder descriptor and no link is followed: whatever the sandbox (or
/// anything else) made of the lower folder meanwhile, nothing lands outside it.
fn merge(upper: BorrowedFd<'_>, lower: BorrowedFd<'_>, kept: &mut Kept) -> std::io::Result<()> {
    let entries = rustix::fs::Dir::read_from(upper)?;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let name = OsStr::from_bytes(name.to_bytes()).to_os_string();
        let stat = rustix::fs::statat(upper, &name, AtFlags::SYMLINK_NOFOLLOW)?;
        match FileType::from_raw_mode(stat.st_mode) {
            // A whiteout: the sandbox deleted it.
            FileType::CharacterDevice if stat.st_rdev == 0 => {
                kept.removed += u64::from(remove(lower, &name)?);
            }
            FileType::Directory => {
                let from = open_dir(upper, &name)?;
                let opaque = is_opaque(from.as_fd());
                let existing = rustix::fs::statat(lower, &name, AtFlags::SYMLINK_NOFOLLOW).ok();
                let is_dir = existing
                    .as_ref()
                    .is_some_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory);
                if opaque || (existing.is_some() && !is_dir) {
                    remove(lower, &name)?;
                }
                if opaque || !is_dir {
                    rustix::fs::mkdirat(lower, &name, Mode::from_raw_mode(0o700))?;
                }
                let to = open_dir(lower, &name)?;
                rustix::fs::fchmod(&to, Mode::from_raw_mode(stat.st_mode & PERMISSIONS))?;
                merge(from.as_fd(), to.as_fd(), kept)?;
            }
            FileType::RegularFile => {
                kept.bytes += copy_file(upper, lower, &name, &stat)?;
                kept.files += 1;
            }
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(upper, &name, Vec::new())?;
                remove(lower, &name)?;
                rustix::fs::symlinkat(target.as_c_str(), lower, &name)?;
                kept.files += 1;
            }
            // Devices, pipes and sockets are not workspace content (seccomp refuses mknod).
            _ => {}
        }
    }
    Ok(())
}

/// A folder below `dir`, never through a link.
fn open_dir(dir: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        name,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY,
        Mode::empty(),
    )?)
}

/// Whether overlayfs marked an upper folder as replacing the lower one whole.
fn is_opaque(dir: BorrowedFd<'_>) -> bool {
    let mut value = [0u8; 4];
    rustix::fs::fgetxattr(dir, OPAQUE, &mut value[..]).is_ok_and(|n| value[..n] == *b"y")
}

/// Copy a regular file into `lower`: created in place when the name is free (a new file, the
/// common case), else written under a temporary name and renamed over the old one, so a reader
/// sees the old file or the new one, never half of it. Its bytes.
fn copy_file(
    upper: BorrowedFd<'_>,
    lower: BorrowedFd<'_>,
    name: &OsStr,
    stat: &rustix::fs::Stat,
) -> std::io::Result<u64> {
    let from = rustix::fs::openat(
        upper,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let create = |at: &OsStr| {
        rustix::fs::openat(
            lower,
            at,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
    };
    let mut temp = None;
    let to = match create(name) {
        Ok(to) => to,
        Err(rustix::io::Errno::EXIST) => {
            let mut t = OsString::from(".toolgate-keep-");
            t.push(name);
            let _ = rustix::fs::unlinkat(lower, &t, AtFlags::empty());
            let to = create(&t)?;
            temp = Some(t);
            to
        }
        Err(e) => return Err(e.into()),
    };
    let (mut from, mut to) = (File::from(from), File::from(to));
    let bytes = std::io::copy(&mut from, &mut to)?;
    rustix::fs::fchmod(&to, Mode::from_raw_mode(stat.st_mode & PERMISSIONS))?;
    let modified = std::time::UNIX_EPOCH
        + std::time::Duration::new(
            u64::try_from(stat.st_mtime).unwrap_or(0),
            u32::try_from(stat.st_mtime_nsec).unwrap_or(0),
        );
    let _ = to.set_modified(modified);
    drop(to);
    if let Some(temp) = temp {
        // A folder where the file goes is replaced (the sandbox deleted it and wrote a file).
        if rustix::fs::statat(lower, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory)
        {
            remove(lower, name)?;
        }
        rustix::fs::renameat(lower, &temp, lower, name)?;
    }
    Ok(bytes)
}

/// Remove `name` from `dir`, a folder with all it holds, never following a link. Whether there
/// was anything.
fn remove(dir: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<bool> {
    let Ok(stat) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return Ok(false);
    };
    if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
        let inside = open_dir(dir, name)?;
        let names: Vec<OsString> = rustix::fs::Dir::read_from(&inside)?
            .filter_map(Result::ok)
            .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
            .filter(|n| n != "." && n != "..")
            .collect();
        for n in names {
            remove(inside.as_fd(), &n)?;
        }
        rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
    } else {
        rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
    }
    Ok(true)
}

/// Unmount and remove the layers a runtime that is gone left under `parent` (its pid is in the
/// folder's name: `toolgate-layer-<label>-<pid>-<sequence>`). The number removed.
pub fn sweep_orphaned(parent: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    let mut swept = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(crate::label::maker_of) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = entry.path();
        for m in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if m.file_name().as_bytes().starts_with(b"m") {
                let _ = rustix::mount::unmount(m.path(), UnmountFlags::DETACH);
            }
        }
        let _ = rustix::mount::unmount(dir.join("fs"), UnmountFlags::DETACH);
        if std::fs::remove_dir_all(&dir).is_ok() {
            swept += 1;
        }
    }
    swept
}
