//! Sandboxes started ahead of demand. Making a sandbox (cgroups, namespaces, bubblewrap's mounts,
//! the executor's start) is most of what a governed call costs here, so a [`Slot`] is a sandbox
//! made before its call is known, the executor started inside it and waiting for its go. Its
//! folder is bound in empty; a call's spec and credential are written into it only once the slot
//! is given to that call, which it runs once, and the slot is destroyed with the run: nothing of
//! one call is ever seen by another, and a slot sees exactly what a sandbox made for its call
//! would. The first call of a sandbox plan makes its slot on demand; after each run, [`Pool`]
//! starts another for the same plan, up to `warm` waiting per plan.

use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use toolgate_crds::CallResult;
use toolgate_sandbox::SandboxPlan;

use crate::config::Config;
use crate::sync::lock;

/// Bytes of the executor's stderr kept for a failure message.
const STDERR_KEPT: usize = 4096;
/// The longest result line read from the executor (its result is at most 4 KiB).
const RESULT_LINE_MAX: u64 = 64 * 1024;
/// Grace after the sandbox's own timeout before the runtime kills it.
const KILL_GRACE: Duration = Duration::from_secs(5);
/// A waiting slot older than this is replaced by a fresh one when next asked for (its plan's
/// environment may have changed; nothing waits forever).
const IDLE_LIMIT: Duration = Duration::from_secs(300);
/// Plans with waiting slots, at most: the least recently used plan's slots go first.
const PLANS_KEPT: usize = 16;
/// Empty folders kept for reuse, at most (see [`Spares`]).
const SPARES_KEPT: usize = 64;

/// How a slot's sandbox is prepared: for a call waiting for it, or ahead of demand.
pub(crate) type Prepare =
    fn(
        &SandboxPlan,
        &Path,
        &[OsString],
        &str,
    ) -> Result<toolgate_sandbox::SandboxedCommand, toolgate_sandbox::SpawnError>;

/// Where a slot's artifacts are seen inside its sandbox.
#[derive(Debug, Clone)]
pub(crate) enum ArtifactsAt {
    /// At the runtime's artifact store (the data folder's `artifacts/`): the executor writes
    /// where the call's artifacts belong, into the slot's folder; [`Slot::keep_artifacts`] moves
    /// them there once the sandbox is gone.
    Store(PathBuf),
    /// In the slot's own folder, read there and dropped with it (a discovery's listing).
    Own,
}

/// A sandbox with the executor started in it, waiting for its one call.
pub(crate) struct Slot {
    /// Its run files on the host (the spec, the credential, the result): see [`default_run_folder`].
    dir: PathBuf,
    /// The same folder as the sandbox sees it.
    inside: PathBuf,
    /// Where the executor writes artifacts, on the host: on the artifact store's filesystem, so
    /// keeping them is a rename.
    staging: PathBuf,
    base: SandboxPlan,
    plan: SandboxPlan,
    artifacts: ArtifactsAt,
    sandboxed: toolgate_sandbox::SandboxedCommand,
    child: toolgate_sandbox::Process,
    go: Option<pipe::Sender>,
    /// The executor's stdout: its result line says the call has ended.
    said: Option<pipe::Receiver>,
    stderr: Option<tokio::task::JoinHandle<Vec<u8>>>,
    made: Instant,
    /// Where its staging folders go back to when it is dropped.
    spares: std::sync::Arc<Spares>,
}

impl Slot {
    /// Make a slot for `base` (a resolved plan, nothing of any call in it) and start the
    /// executor in it. `label` names its cgroups; `prepare` is [`toolgate_sandbox::prepare`] for
    /// a call waiting for it, [`toolgate_sandbox::prepare_ahead`] ahead of demand.
    pub(crate) fn start(
        config: &Config,
        spares: &std::sync::Arc<Spares>,
        base: &SandboxPlan,
        artifacts: ArtifactsAt,
        label: &str,
        prepare: Prepare,
    ) -> Result<Slot, String> {
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        let Some((program, lead)) = config.executor.split_first() else {
            return Err("no executor configured".into());
        };
        let name = format!(
            "{}-{}",
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        );
        let dir = run_folder(config).join(&name);
        // Inside, the run files are under the data folder whatever filesystem holds them.
        let inside = slots_folder(&config.data).join(&name);
        let staging = staging_folder(&config.data).join(&name);
        let mut folder = SlotFolder(vec![dir.clone(), staging.clone()]);
        let io = |what: &str, e: std::io::Error| format!("{what} of its sandbox: {e}");
        for d in [dir.join("credentials"), dir.join("out")] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)
                .map_err(|e| io("the folders", e))?;
        }
        spares
            .make(&staging)
            .map_err(|e| io("the artifacts' folder", e))?;
        // There from the start, so the executor's argument names a file; the call's spec is
        // written into it in place.
        std::fs::write(dir.join("spec.json"), b"").map_err(|e| io("the spec file", e))?;
        let mut plan = base.clone();
        // /etc in one bind of a copy kept in the run folder; where it cannot be made, the
        // sandbox binds each file as before (the same files either way).
        plan.etc = toolgate_sandbox::etc::snapshot_in(&run_folder(config)).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "copying /etc for the sandboxes; binding each file");
            None
        });
        plan.expose_read_only(PathBuf::from(program));
        // The folder read-only in one bind (the spec, the credential), `out` writable over it:
        // each bind costs bubblewrap a read of the whole mount table.
        plan.expose_read_only_at(&dir, &inside);
        plan.expose_writable_at(dir.join("out"), inside.join("out"));
        match &artifacts {
            ArtifactsAt::Store(store) => plan.expose_writable_at(&staging, store),
            ArtifactsAt::Own => plan.expose_writable(&staging),
        }
        let mut args: Vec<OsString> = lead.to_vec();
        args.extend([
            "--spec".into(),
            inside.join("spec.json").into(),
            "--credentials".into(),
            inside.join("credentials").into(),
            "--result".into(),
            inside.join("out/result.json").into(),
            "--wait-for-go".into(),
        ]);
        let sandboxed =
            prepare(&plan, Path::new(program), &args, label).map_err(|e| e.to_string())?;
        let started = sandboxed.start_piped().map_err(|e| e.to_string())?;
        let streams = |e: std::io::Error| format!("the sandbox's streams: {e}");
        let go = pipe::Sender::from_owned_fd(started.stdin).map_err(streams)?;
        let said = pipe::Receiver::from_owned_fd(started.stdout).map_err(streams)?;
        let stderr = pipe::Receiver::from_owned_fd(started.stderr).map_err(streams)?;
        folder.0.clear();
        Ok(Slot {
            dir,
            inside,
            staging,
            base: base.clone(),
            plan,
            artifacts,
            sandboxed,
            child: started.process,
            go: Some(go),
            said: Some(said),
            stderr: Some(tokio::spawn(read_stderr(stderr))),
            made: Instant::now(),
            spares: spares.clone(),
        })
    }

    /// Make the folder of `namespace` the executor writes the call's artifacts into, before its
    /// go: from a spare when there is one. Best effort: the executor makes it when missing.
    pub(crate) fn make_namespace_folder(&self, namespace: &str) {
        if matches!(self.artifacts, ArtifactsAt::Store(_))
            && toolgate_core::names::is_dns_label(namespace)
        {
            let _ = self.spares.make(&self.staging.join(namespace));
        }
    }

    /// The plan it was made for, without its own files.
    pub(crate) fn base(&self) -> &SandboxPlan {
        &self.base
    }

    /// The whole plan its sandbox runs (what a call records as its sandbox).
    pub(crate) fn plan(&self) -> &SandboxPlan {
        &self.plan
    }

    /// How its limits are enforced on this machine.
    pub(crate) fn enforcement(&self) -> &toolgate_sandbox::spawn::Enforcement {
        &self.sandboxed.enforcement
    }

    /// Where the call's spec goes.
    pub(crate) fn spec_path(&self) -> PathBuf {
        self.dir.join("spec.json")
    }

    /// Where the call's egress proxy listens: on the host, and as the executor inside sees it.
    pub(crate) fn egress_socket(&self) -> (PathBuf, PathBuf) {
        (
            self.dir.join("egress.sock"),
            self.inside.join("egress.sock"),
        )
    }

    /// The call's CA when its egress proxy intercepts TLS: on the host, and as the sandbox sees
    /// it.
    pub(crate) fn egress_ca(&self) -> (PathBuf, PathBuf) {
        (
            self.dir.join("egress-ca.pem"),
            self.inside.join("egress-ca.pem"),
        )
    }

    /// Where the call's credential goes (removed the moment the sandbox is gone).
    pub(crate) fn credentials(&self) -> PathBuf {
        self.dir.join("credentials")
    }

    /// The host folder of its artifacts (for [`ArtifactsAt::Own`], where the sandbox sees it too).
    pub(crate) fn artifacts(&self) -> &Path {
        &self.staging
    }

    /// Its process group (bubblewrap leads its own), so a cancel can kill it.
    pub(crate) fn process_group(&self) -> i32 {
        self.child.id()
    }

    /// Still waiting, and young enough to be given a call.
    fn fresh(&mut self) -> bool {
        self.made.elapsed() < IDLE_LIMIT && matches!(self.child.try_wait(), Ok(None))
    }

    /// Tell the executor to go (its spec and credential are in the folder), wait for it with the
    /// plan's time limit and a grace, and read its result. The result, and how long the sandbox
    /// ran from the go.
    ///
    /// The call has ended when the executor prints its result, not when bubblewrap returns: as
    /// the sandbox's pid 1 it has killed and reaped every other process of the sandbox by then
    /// (`toolgate_executor::cli`), and what is left — its own exit, the namespaces torn down —
    /// is nobody's wait. Its cgroups and folder go with the slot, after the end is recorded.
    pub(crate) async fn run(&mut self) -> Result<(CallResult, Duration), String> {
        let started = Instant::now();
        let told = match self.go.take() {
            Some(mut go) => go.write_all(b"go\n").await.and(go.shutdown().await),
            None => Err(std::io::Error::other("the slot was already used")),
        };
        let limit = self.plan.limits.timeout + KILL_GRACE;
        let status = match told {
            Err(e) => Err(format!("starting the call in its sandbox: {e}")),
            Ok(()) => match tokio::time::timeout(limit, self.end()).await {
                Ok(s) => s.map_err(|e| format!("waiting for the sandbox: {e}")),
                Err(_) => {
                    kill_group(self.child.id());
                    let _ = self.child.wait().await;
                    Err(format!(
                        "the sandbox outlived its time limit ({} ms) and was killed",
                        limit.as_millis()
                    ))
                }
            },
        };
        let elapsed = started.elapsed();
        let _ = std::fs::remove_dir_all(self.credentials());
        let status = status?;
        match std::fs::read(self.dir.join("out/result.json")) {
            Ok(bytes) if !bytes.is_empty() => serde_json::from_slice::<CallResult>(&bytes)
                .map(|r| (r, elapsed))
                .map_err(|e| format!("the executor's result is not valid: {e}")),
            _ => {
                // Read to its end: the executor has exited, or exits now that it has said all.
                let stderr = match self.stderr.take() {
                    Some(reader) => reader.await.unwrap_or_default(),
                    None => Vec::new(),
                };
                Err(format!(
                    "the executor wrote no result ({status}); stderr: {}",
                    String::from_utf8_lossy(&stderr).trim()
                ))
            }
        }
    }

    /// Until bubblewrap has exited (it returns once its pid 1, the executor, is reaped), killed
    /// after a grace. A sandbox whose executor has told its end is gone within milliseconds;
    /// waiting for it here, rather than killing it on drop, lets bubblewrap reap the executor,
    /// so the CPU time of the whole sandbox stays accounted to this process's children.
    pub(crate) async fn exited(&mut self) {
        if tokio::time::timeout(KILL_GRACE, self.child.wait())
            .await
            .is_err()
        {
            kill_group(self.child.id());
            let _ = self.child.wait().await;
        }
    }

    /// Bring the call's writes into its write roots from the filesystem they landed on
    /// ([`toolgate_sandbox::layer`]), once the sandbox is gone and nothing writes any more. After
    /// every run, whatever its end: a call's writes into a cluster's workspace volume stay too.
    /// The quota when the run used it up (the likely cause of a failure).
    pub(crate) async fn keep_writes(
        &mut self,
    ) -> Result<Option<toolgate_sandbox::plan::WriteLimit>, String> {
        let Some(mut layer) = self.sandboxed.take_write_layer() else {
            return Ok(None);
        };
        self.exited().await;
        let used_up = layer.used_up().then(|| layer.limit());
        // Copying is file work of any size: off the runtime's threads, the layer removed there too.
        let kept = tokio::task::spawn_blocking(move || layer.keep())
            .await
            .map_err(|e| e.to_string())
            .and_then(|k| k.map_err(|e| e.to_string()))
            .map_err(|e| format!("bringing the call's writes into the workspace: {e}"))?;
        tracing::debug!(
            files = kept.files,
            bytes = kept.bytes,
            removed = kept.removed,
            "kept the call's writes"
        );
        Ok(used_up)
    }

    /// Until the executor prints its result line, or exits without one.
    async fn end(&mut self) -> std::io::Result<Ended> {
        let said = self.said.take();
        let told = async move {
            let mut line = Vec::new();
            if let Some(out) = said {
                // The result is at most 4 KiB of JSON: a longer line is not one.
                let mut out = tokio::io::BufReader::new(out.take(RESULT_LINE_MAX));
                if matches!(out.read_until(b'\n', &mut line).await, Ok(n) if n > 0)
                    && line.ends_with(b"\n")
                {
                    return;
                }
            }
            // No line (end of output): the exit says how it ended.
            std::future::pending::<()>().await;
        };
        tokio::select! {
            biased;
            () = told => Ok(Ended::Told),
            status = self.child.wait() => status.map(Ended::Exited),
        }
    }

    /// Move a call's artifacts from the slot's folder to the store they were written for
    /// (`store`, the folder of `call` in it), once the sandbox is gone.
    pub(crate) fn keep_artifacts(&self, relative: &Path, store: &Path) -> std::io::Result<()> {
        if !matches!(self.artifacts, ArtifactsAt::Store(_)) {
            return Ok(());
        }
        move_call_folder(&self.staging.join(relative), store)
    }
}

/// Move a call's artifact folder `from` (staged) to `to` in the store: renamed whole (no folder
/// made or removed for it), or file by file when `to` has artifacts already (a run before a
/// restart; a file of the same name is replaced). Nothing staged is nothing to move.
fn move_call_folder(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if !from.is_dir() {
        return Ok(());
    }
    let made = |dir: &Path| {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    };
    if let Some(parent) = to.parent() {
        made(parent)?;
    }
    if std::fs::rename(from, to).is_ok() {
        return std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700));
    }
    made(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        std::fs::rename(entry.path(), to.join(entry.file_name()))?;
    }
    Ok(())
}

impl Drop for Slot {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            kill_group(self.child.id());
        }
        self.sandboxed.cleanup();
        let _ = std::fs::remove_dir_all(&self.dir);
        // Its call's artifacts have moved into the store: what is left are the empty folders
        // they were in, kept for the next slots (anything else is removed).
        if matches!(self.artifacts, ArtifactsAt::Store(_))
            && let Ok(inside) = std::fs::read_dir(&self.staging)
        {
            for entry in inside.flatten() {
                self.spares.keep(&entry.path());
            }
        }
        self.spares.keep(&self.staging);
    }
}

/// Empty folders on the artifact store's filesystem, kept for the next slots instead of removed
/// and made again. On ext4 without a journal (how this project's machines make `/tmp`), each new
/// inode is checked against every inode freed in about the last half minute; a slot's staging
/// folder and the namespace folder in it, made and removed for every call, fed that check (the
/// allocator was ~8 % of all CPU under load). A call now frees no inode there. Spares are renamed, never
/// shared: a folder is kept only when empty, and taken by one slot.
pub(crate) struct Spares {
    /// Where they wait: under the staging folder, so a restart removes them with it.
    dir: PathBuf,
    free: Mutex<Free>,
    next: AtomicU64,
}

/// The spares that wait, and how many are being renamed in: counted together, so at most
/// [`SPARES_KEPT`] are ever kept however many slots end at once.
#[derive(Default)]
struct Free {
    waiting: Vec<PathBuf>,
    coming: usize,
}

impl Spares {
    /// Spares kept under `staging` (the runtime's [`staging_folder`]).
    pub(crate) fn new(staging: &Path) -> Spares {
        Spares {
            dir: staging.join(".spare"),
            free: Mutex::new(Free::default()),
            next: AtomicU64::new(0),
        }
    }

    /// Make `to` an empty folder only its owner may enter: a spare renamed there, else a new one.
    fn make(&self, to: &Path) -> std::io::Result<()> {
        loop {
            // Taken out under the lock, renamed outside it.
            let spare = lock(&self.free).waiting.pop();
            let Some(spare) = spare else { break };
            if std::fs::rename(&spare, to).is_ok() {
                return Ok(());
            }
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(to)
    }

    /// Keep `folder` for a later [`Spares::make`] when it is an empty folder and fewer than
    /// [`SPARES_KEPT`] wait; otherwise remove it and what it holds.
    fn keep(&self, folder: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let empty = std::fs::symlink_metadata(folder).is_ok_and(|m| m.is_dir())
            && std::fs::read_dir(folder).is_ok_and(|mut d| d.next().is_none());
        let room = empty && {
            let mut free = lock(&self.free);
            let room = free.waiting.len() + free.coming < SPARES_KEPT;
            free.coming += usize::from(room);
            room
        };
        if room {
            let to = self
                .dir
                .join(self.next.fetch_add(1, Ordering::Relaxed).to_string());
            let kept = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)
                .and_then(|()| {
                    std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o700))
                })
                .and_then(|()| std::fs::rename(folder, &to));
            let mut free = lock(&self.free);
            free.coming -= 1;
            if kept.is_ok() {
                free.waiting.push(to);
                return;
            }
        }
        let _ = std::fs::remove_dir_all(folder);
    }
}

/// How a sandbox's run ended.
enum Ended {
    /// The executor printed its result (and is exiting).
    Told,
    /// bubblewrap exited first, with this status.
    Exited(std::process::ExitStatus),
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Told => f.write_str("it said it ended"),
            Ended::Exited(status) => write!(f, "{status}"),
        }
    }
}

/// A slot's folders, removed unless the slot was made.
struct SlotFolder(Vec<PathBuf>);

impl Drop for SlotFolder {
    fn drop(&mut self) {
        for d in self.0.drain(..) {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Where a sandbox sees its slot's run files: under the data folder, which no tool sees. On the
/// host they are there too when no memory filesystem is private to this user.
pub(crate) fn slots_folder(data: &Path) -> PathBuf {
    data.join("slots")
}

/// Where the filesystems that hold the calls' writes are made (on disk: writes are not held in
/// memory), inside the data folder no sandbox sees.
pub(crate) fn layers_folder(data: &Path) -> PathBuf {
    data.join("layers")
}

/// Where slots stage their calls' artifacts on the host, beside the artifact store.
pub(crate) fn staging_folder(data: &Path) -> PathBuf {
    data.join("staging")
}

/// The host folder of the slots' run files: the one the runtime resolved when it started.
fn run_folder(config: &Config) -> PathBuf {
    config
        .runs
        .clone()
        .unwrap_or_else(|| slots_folder(&config.data))
}

/// Where a runtime on `data` keeps its sandboxes' run files by default (a call's spec, credential
/// and result, for as long as its sandbox lives): a folder of its own on a memory filesystem —
/// under `$XDG_RUNTIME_DIR`, else under `/dev/shm/toolgate-<uid>` — so a credential never
/// reaches the disk, and a slot's files cost no disk inodes (on ext4 without a journal each new
/// inode is found by scanning past every one freed in the last seconds: at 60 calls/s that was a
/// third of a no-op call's CPU). `<data>/slots` where neither is private to this user. A sandbox
/// sees them at `<data>/slots/<slot>` either way, never under its own `/dev/shm`, which tools
/// may write.
pub fn default_run_folder(data: &Path) -> PathBuf {
    memory_folder().map_or_else(
        || slots_folder(&std::fs::canonicalize(data).unwrap_or_else(|_| data.to_path_buf())),
        |m| run_folder_in(&m, data),
    )
}

/// The run folder under `parent` of the runtime on `data`: a folder named for the data folder
/// (a digest of its path), which the runtime empties when it starts — never `parent` itself nor
/// anything else in it, so runtimes on different data folders share a parent.
pub fn run_folder_in(parent: &Path, data: &Path) -> PathBuf {
    use sha2::Digest;
    let data = std::fs::canonicalize(data).unwrap_or_else(|_| data.to_path_buf());
    parent.join(hex::encode(
        &sha2::Sha256::digest(data.as_os_str().as_encoded_bytes())[..8],
    ))
}

/// In a run folder on a memory filesystem: a link to the data folder of the runtime it is for.
const DATA_LINK: &str = ".data";

/// Make `runs`, the run folder of the runtime on `data`, anew: the sandboxes a previous runtime
/// on `data` started died with it, their run files are left. Beside it on a memory filesystem,
/// the run folders of runtimes whose data folder is gone (a test's, a demo's) are removed too:
/// nobody else would, and memory is not the place to leave them.
pub(crate) fn renew_run_folder(runs: &Path, data: &Path, sweep: bool) -> std::io::Result<()> {
    let _ = std::fs::remove_dir_all(runs);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(runs)?;
    let data = std::fs::canonicalize(data)?;
    // Only in the default memory folder: beside a folder the caller named may be anything.
    if runs.starts_with(&data) || !sweep {
        return Ok(());
    }
    std::os::unix::fs::symlink(&data, runs.join(DATA_LINK))?;
    let Some(Ok(entries)) = runs.parent().map(std::fs::read_dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let other = entry.path();
        let orphaned = match std::fs::read_link(other.join(DATA_LINK)) {
            Ok(data) => !data.exists(),
            // Without its link for a minute: not one being made now.
            Err(_) => entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(60)),
        };
        if other != runs && orphaned {
            let _ = std::fs::remove_dir_all(&other);
        }
    }
    Ok(())
}

/// A folder on a memory filesystem that no other user can enter.
fn memory_folder() -> Option<PathBuf> {
    let uid = nix::unistd::geteuid().as_raw();
    if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty())
        && private_to(Path::new(&xdg), uid)
    {
        return Some(Path::new(&xdg).join("toolgate"));
    }
    let shm = Path::new("/dev/shm").join(format!("toolgate-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&shm) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    private_to(&shm, uid).then_some(shm)
}

/// A folder itself (not a symlink to one), owned by `uid`, that no other user can enter.
fn private_to(dir: &Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
}

/// The first bytes of the executor's stderr; the rest is drained.
async fn read_stderr(mut stderr: pipe::Receiver) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if kept.len() < STDERR_KEPT {
            kept.extend_from_slice(&buf[..n.min(STDERR_KEPT - kept.len())]);
        }
    }
    kept
}

/// Slots waiting for calls, by plan.
pub(crate) struct Pool {
    /// Slots kept waiting per plan; 0 makes every slot on demand.
    warm: usize,
    /// Empty folders for the slots' artifacts.
    spares: std::sync::Arc<Spares>,
    /// Least recently used plan first.
    plans: Mutex<Vec<Plan>>,
    /// The thread slots are started ahead of demand from, for as long as the pool lives: a
    /// sandbox's parent-death signal follows the *thread* that started it, and tokio ends a
    /// blocking thread after ten idle seconds (the waiting sandboxes of a quiet runtime died
    /// with it, and its next call started cold).
    starter: Mutex<Option<std::sync::mpsc::Sender<Job>>>,
}

/// Work for the starter thread.
type Job = Box<dyn FnOnce() + Send>;

/// The slots of one plan.
struct Plan {
    key: String,
    waiting: Vec<Slot>,
    /// Being started by a refill now, so that refills at once do not overshoot.
    starting: usize,
}

impl Pool {
    /// A pool keeping `warm` slots waiting per plan, their artifacts staged under `staging`.
    pub(crate) fn new(warm: usize, staging: &Path) -> Pool {
        Pool {
            warm,
            spares: std::sync::Arc::new(Spares::new(staging)),
            plans: Mutex::new(Vec::new()),
            starter: Mutex::new(None),
        }
    }

    /// The empty folders every slot of this runtime takes its artifacts' folders from.
    pub(crate) fn spares(&self) -> &std::sync::Arc<Spares> {
        &self.spares
    }

    fn key(plan: &SandboxPlan) -> String {
        serde_json::to_string(plan).unwrap_or_default()
    }

    /// The entry of `key`, moved last (most recently used); made when missing.
    fn used<'p>(plans: &'p mut Vec<Plan>, key: &str) -> &'p mut Plan {
        let entry = match plans.iter().position(|p| p.key == key) {
            Some(at) => plans.remove(at),
            None => Plan {
                key: key.to_string(),
                waiting: Vec::new(),
                starting: 0,
            },
        };
        plans.push(entry);
        let last = plans.len() - 1;
        &mut plans[last]
    }

    /// A slot for a call of `base`: a waiting one when there is one, else one made now.
    pub(crate) fn take(&self, config: &Config, base: &SandboxPlan) -> Result<Slot, String> {
        match self.take_waiting(base) {
            Some(slot) => Ok(slot),
            None => Slot::start(
                config,
                &self.spares,
                base,
                ArtifactsAt::Store(store_of(config)),
                "call",
                toolgate_sandbox::prepare,
            ),
        }
    }

    /// A slot for a call of `base` that is waiting already, if there is one: quick enough to
    /// ask under the store's write lock.
    pub(crate) fn take_waiting(&self, base: &SandboxPlan) -> Option<Slot> {
        let key = Pool::key(base);
        let (found, stale) = {
            let mut plans = lock(&self.plans);
            let plan = Pool::used(&mut plans, &key);
            let mut stale = Vec::new();
            let mut found = None;
            while let Some(mut slot) = plan.waiting.pop() {
                // Made on idle CPU time; its call's run gets the priority of any other process.
                if slot.fresh() && slot.sandboxed.claim_cpu().is_ok() {
                    found = Some(slot);
                    break;
                }
                stale.push(slot);
            }
            (found, stale)
        };
        // Dropped outside the lock, and off the caller's way: each kills its sandbox and
        // removes its cgroups and folder.
        if !stale.is_empty() {
            std::thread::spawn(move || drop(stale));
        }
        found
    }

    /// Run `job` on the pool's starter thread (started on first use, inside this tokio runtime),
    /// after the jobs before it; inline when it cannot be started.
    pub(crate) fn in_background(&self, job: impl FnOnce() + Send + 'static) {
        let mut starter = lock(&self.starter);
        if starter.is_none()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let (jobs, next) = std::sync::mpsc::channel::<Job>();
            let spawned = std::thread::Builder::new()
                .name("toolgate-sandboxes".into())
                .spawn(move || {
                    let _runtime = runtime.enter();
                    while let Ok(job) = next.recv() {
                        job();
                    }
                });
            match spawned {
                Ok(_) => *starter = Some(jobs),
                Err(e) => tracing::warn!(error = %e, "starting the sandbox starter thread"),
            }
        }
        let job: Job = Box::new(job);
        let unsent = match starter.as_ref() {
            Some(jobs) => jobs.send(job).err().map(|e| e.0),
            None => Some(job),
        };
        drop(starter);
        if let Some(job) = unsent {
            job();
        }
    }

    /// Start slots for `base` until `warm` wait or are being started; the least recently used
    /// plans' slots go when too many plans have some.
    pub(crate) fn refill(&self, config: &Config, base: &SandboxPlan) {
        let key = Pool::key(base);
        loop {
            {
                let mut plans = lock(&self.plans);
                let plan = Pool::used(&mut plans, &key);
                if plan.waiting.len() + plan.starting >= self.warm {
                    return;
                }
                plan.starting += 1;
            }
            let started = Slot::start(
                config,
                &self.spares,
                base,
                ArtifactsAt::Store(store_of(config)),
                "warm",
                toolgate_sandbox::prepare_ahead,
            );
            let evicted = {
                let mut plans = lock(&self.plans);
                let plan = Pool::used(&mut plans, &key);
                plan.starting = plan.starting.saturating_sub(1);
                match started {
                    Ok(slot) => plan.waiting.push(slot),
                    Err(e) => {
                        tracing::warn!(error = %e, "starting a sandbox ahead of demand");
                        return;
                    }
                }
                let over = plans.len().saturating_sub(PLANS_KEPT);
                plans.drain(..over).collect::<Vec<_>>()
            };
            drop(evicted);
        }
    }
}

/// Where the executor writes a call's artifacts, inside: the runtime's artifact store.
pub(crate) fn store_of(config: &Config) -> PathBuf {
    config.data.join("artifacts")
}

/// SIGKILL to a sandbox's whole process group.
pub(crate) fn kill_group(pgid: i32) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn a_call_folder_moves_whole_or_file_by_file_beside_what_a_run_before_left() {
        let dir = tempfile::tempdir().expect("tmp");
        let staged = dir.path().join("staging/slot/team-a/call-1");
        std::fs::create_dir_all(&staged).expect("staged");
        std::fs::write(staged.join("stdout"), "new\n").expect("stdout");
        let store = dir.path().join("artifacts/team-a/call-1");

        move_call_folder(&staged, &store).expect("moved whole");
        assert!(!staged.exists());
        assert_eq!(
            std::fs::read_to_string(store.join("stdout")).expect("kept"),
            "new\n"
        );
        let mode = std::fs::metadata(&store)
            .expect("store")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700);

        // A second run of the same call after a restart: its files join the first run's.
        std::fs::create_dir_all(&staged).expect("staged again");
        std::fs::write(staged.join("stdout"), "again\n").expect("stdout");
        std::fs::write(staged.join("stderr"), "err\n").expect("stderr");
        std::fs::write(store.join("earlier"), "kept\n").expect("earlier");
        move_call_folder(&staged, &store).expect("moved file by file");
        assert_eq!(
            std::fs::read_to_string(store.join("stdout")).expect("stdout"),
            "again\n"
        );
        assert_eq!(
            std::fs::read_to_string(store.join("stderr")).expect("stderr"),
            "err\n"
        );
        assert_eq!(
            std::fs::read_to_string(store.join("earlier")).expect("earlier"),
            "kept\n"
        );
        assert!(std::fs::read_dir(&staged).expect("staged").next().is_none());

        // Nothing staged (a dry run that wrote nothing): nothing made.
        let none = dir.path().join("artifacts/team-a/call-2");
        move_call_folder(&dir.path().join("staging/slot/team-a/call-2"), &none).expect("nothing");
        assert!(!none.exists());
    }

    #[test]
    fn spares_keep_only_empty_folders_and_give_each_to_one_taker() {
        let dir = tempfile::tempdir().expect("tmp");
        let staging = dir.path().join("staging");
        let spares = Spares::new(&staging);
        let used = staging.join("slot-1");
        std::fs::create_dir_all(used.join("team-a")).expect("folders");
        std::fs::set_permissions(&used, std::fs::Permissions::from_mode(0o755)).expect("mode");
        let full = staging.join("slot-2");
        std::fs::create_dir_all(&full).expect("full");
        std::fs::write(full.join("left"), "x").expect("left");

        spares.keep(&used.join("team-a"));
        spares.keep(&used);
        spares.keep(&full);
        assert!(!used.exists() && !full.exists(), "given back or removed");
        let kept: Vec<_> = std::fs::read_dir(staging.join(".spare"))
            .expect("spares")
            .flatten()
            .collect();
        assert_eq!(kept.len(), 2, "only the empty ones: {kept:?}");
        for k in &kept {
            let mode = k.metadata().expect("spare").permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", k.path().display());
        }
        let inodes: BTreeSet<u64> = kept
            .iter()
            .map(|k| k.metadata().expect("m").ino())
            .collect();

        let a = staging.join("slot-3");
        let b = staging.join("slot-4");
        let c = staging.join("slot-5");
        for to in [&a, &b, &c] {
            spares.make(to).expect("made");
        }
        let taken: BTreeSet<u64> = [&a, &b]
            .iter()
            .map(|p| std::fs::metadata(p).expect("m").ino())
            .collect();
        assert_eq!(taken, inodes, "the two spares, one each");
        assert!(c.is_dir(), "a new folder once none is spare");
        assert!(
            std::fs::read_dir(staging.join(".spare"))
                .expect("spares")
                .next()
                .is_none()
        );
    }

    #[test]
    fn at_most_the_cap_of_spares_is_kept_when_many_slots_end_at_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let staging = dir.path().join("staging");
        let spares = Spares::new(&staging);
        let ended: Vec<PathBuf> = (0..SPARES_KEPT + 36)
            .map(|i| {
                let d = dir.path().join(format!("slot-{i}"));
                std::fs::create_dir(&d).expect("slot");
                d
            })
            .collect();
        std::thread::scope(|s| {
            for chunk in ended.chunks(25) {
                let spares = &spares;
                s.spawn(move || chunk.iter().for_each(|d| spares.keep(d)));
            }
        });
        let kept = std::fs::read_dir(staging.join(".spare"))
            .expect("spares")
            .count();
        assert_eq!(kept, SPARES_KEPT);
        assert_eq!(lock(&spares.free).waiting.len(), SPARES_KEPT);
        assert!(ended.iter().all(|d| !d.exists()), "each kept or removed");
    }
}
