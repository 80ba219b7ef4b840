//! Resolve a SandboxPolicy into a concrete plan, before anything runs (invariant 10). Pure: no
//! I/O, so a refusal is decided the same way everywhere and tested without a kernel.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use toolgate_crds::{EgressMode, SandboxMode, SandboxPolicySpec, WriteQuota};

pub use toolgate_contract::exec::WORKSPACE_INSIDE;

/// Default size of the sandbox's private `/tmp`.
pub const DEFAULT_TMP_BYTES: u64 = 64 * 1024 * 1024;

/// A host path made visible inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bind {
    /// The path on the host.
    pub host: PathBuf,
    /// Where it appears inside.
    pub inside: PathBuf,
}

/// The network the sandbox gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Network {
    /// A new network namespace with loopback only.
    None,
    /// The host's network (policy `open`).
    Host,
    /// A new network namespace with loopback only, and the call's egress proxy as its one
    /// route out (policy `allowlist`): the runtime serves the proxy on a socket the executor
    /// relays the tool's proxied connections to.
    Proxied,
}

/// Resource limits of one sandboxed run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Wall clock; the whole sandbox is killed after it.
    #[serde(with = "millis")]
    pub timeout: Duration,
    /// Memory of the whole sandbox.
    pub memory_bytes: u64,
    /// CPU time of each process, when limited.
    pub cpu_seconds: Option<u64>,
    /// Processes (and threads) of the whole sandbox.
    pub processes: Option<u64>,
    /// Largest file a process may write.
    pub file_bytes: Option<u64>,
    /// Size of the private `/tmp`.
    pub tmp_bytes: u64,
    /// What the write roots may take in all; none without write roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writes: Option<WriteLimit>,
}

/// A call's writes into its write roots, at most: the size of the filesystem its writes land on
/// ([`crate::layer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteLimit {
    /// Bytes.
    pub bytes: u64,
    /// Files, folders and links.
    pub files: u64,
    /// Whether the policy set it: then a runtime that cannot enforce it refuses the call; the
    /// default is recorded as not enforced.
    pub required: bool,
}

mod millis {
    use std::time::Duration;
    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u128(d.as_millis())
    }
}

/// Everything the sandbox of one call is made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxPlan {
    /// Visible read-only (the policy's read roots, then the runtime's own files).
    pub read_only: Vec<Bind>,
    /// Visible read-write (the policy's write roots, then the runtime's output folders).
    pub writable: Vec<Bind>,
    /// Paths inside the sandbox that are hidden even though a root contains them: the policy's
    /// blocked paths and wherever toolgate's own data folder would show.
    pub hidden: Vec<PathBuf>,
    /// The runtime's own files (the executor, its spec, credentials and output folders), bound
    /// after the hidden paths are covered, so they stay visible even inside a hidden folder.
    pub runtime: Vec<RuntimeBind>,
    /// Working directory inside.
    pub cwd: PathBuf,
    /// Network.
    pub network: Network,
    /// Limits.
    pub limits: Limits,
    /// The whole environment of the sandbox (nothing else is inherited).
    pub env: Vec<(String, String)>,
    /// A copy of the host's `/etc` files ([`crate::etc::snapshot_in`]) bound whole as `/etc`;
    /// `None` binds each file (one mount each).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etc: Option<PathBuf>,
    /// The host folder the filesystems that hold a call's writes are made in (a folder no
    /// sandbox sees); `None`: the system's temp folder.
    #[serde(skip)]
    pub layers: Option<PathBuf>,
}

/// One of the runtime's own files or folders, visible at `path` inside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeBind {
    /// The path inside the sandbox (and on the host, unless `host` says otherwise).
    pub path: PathBuf,
    /// The host file or folder behind `path`, when it is not `path` itself: a sandbox started
    /// before its call is known writes the call's artifacts into its own folder, seen inside
    /// where the runtime's artifact store is; its run files are on a memory filesystem, seen
    /// inside under the data folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<PathBuf>,
    /// Whether the sandbox may write it.
    pub writable: bool,
}

impl RuntimeBind {
    /// The host side of the bind.
    pub fn source(&self) -> &Path {
        self.host.as_deref().unwrap_or(&self.path)
    }
}

impl SandboxPlan {
    /// Make a runtime file or folder visible read-only at the same path.
    pub fn expose_read_only(&mut self, host: impl Into<PathBuf>) {
        self.runtime.push(RuntimeBind {
            path: host.into(),
            host: None,
            writable: false,
        });
    }

    /// Make a runtime folder `host` visible read-only inside at `inside`.
    pub fn expose_read_only_at(&mut self, host: impl Into<PathBuf>, inside: impl Into<PathBuf>) {
        self.runtime.push(RuntimeBind {
            path: inside.into(),
            host: Some(host.into()),
            writable: false,
        });
    }

    /// Make a runtime folder writable at the same path.
    pub fn expose_writable(&mut self, host: impl Into<PathBuf>) {
        self.runtime.push(RuntimeBind {
            path: host.into(),
            host: None,
            writable: true,
        });
    }

    /// Make a runtime folder `host` writable inside at `inside`.
    pub fn expose_writable_at(&mut self, host: impl Into<PathBuf>, inside: impl Into<PathBuf>) {
        self.runtime.push(RuntimeBind {
            path: inside.into(),
            host: Some(host.into()),
            writable: true,
        });
    }

    /// The deepest root containing a path inside the sandbox, if any.
    fn bind_behind(&self, inside: &Path) -> Option<(&Bind, bool)> {
        self.read_only
            .iter()
            .map(|b| (b, false))
            .chain(self.writable.iter().map(|b| (b, true)))
            .filter(|(b, _)| inside.starts_with(&b.inside))
            .max_by_key(|(b, _)| b.inside.components().count())
    }

    /// The host path a path inside the sandbox comes from (through the deepest root containing
    /// it), or the path itself when no root holds it.
    pub fn host_behind(&self, inside: &Path) -> PathBuf {
        match self.bind_behind(inside) {
            // `join("")` would add a trailing '/', and a file with a trailing '/' does not exist.
            Some((b, _)) if inside == b.inside => b.host.clone(),
            Some((b, _)) => inside
                .strip_prefix(&b.inside)
                .map_or_else(|_| inside.to_path_buf(), |rest| b.host.join(rest)),
            None => inside.to_path_buf(),
        }
    }

    /// The folders strictly between the write root holding a hidden path and the path: the
    /// ones a tool could rename to carry the path's cover away. None under a read-only root.
    pub fn pinned_ancestors<'p>(&self, inside: &'p Path) -> Vec<&'p Path> {
        let Some((root, true)) = self.bind_behind(inside) else {
            return Vec::new();
        };
        let mut dirs: Vec<&Path> = inside
            .ancestors()
            .skip(1)
            .take_while(|a| *a != root.inside && a.starts_with(&root.inside))
            .collect();
        dirs.reverse();
        dirs
    }

    /// Whether the sandbox could create a path inside it: the deepest root holding it is a
    /// write root.
    pub fn creatable(&self, inside: &Path) -> bool {
        self.bind_behind(inside)
            .is_some_and(|(_, writable)| writable)
    }
}

/// Why a policy cannot run here. Each says which field and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// An egress rule the proxy cannot read.
    #[error(transparent)]
    Egress(#[from] toolgate_contract::egress::RuleError),
    /// A credential the egress proxy delivers, for a sandbox without one (the core's words:
    /// `toolgate_core::exec::proxied_credential_refused`).
    #[error("{0}")]
    ProxiedCredential(String),
    /// A runtime class asks for stronger isolation than namespaces.
    #[error(
        "runtimeClassName: {0:?} asks for a stronger runtime than the embedded sandbox gives; refusing to run with weaker isolation (run on a cluster with that RuntimeClass)"
    )]
    RuntimeClass(String),
    /// A mode the embedded runtime does not provide.
    #[error("mode: {0} is not available in the embedded runtime")]
    Mode(&'static str),
    /// A path that is not a plain path.
    #[error(transparent)]
    Path(#[from] toolgate_contract::exec::PathError),
    /// An environment entry without `=`.
    #[error("environment.injectedEnv[{index}]: expected NAME=value, found {entry:?}")]
    Env {
        /// Index.
        index: usize,
        /// Entry.
        entry: String,
    },
}

/// What the runtime knows that the policy does not.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    /// The workspace folder on the host.
    pub workspace: &'a Path,
    /// The runtime's environment, for `inheritedEnv`.
    pub env: &'a [(String, String)],
    /// Host folders no sandbox may see, whatever the policy's roots (toolgate's data folder: the
    /// store, other calls' specs, event logs and artifacts). Hidden where a root contains them;
    /// a root inside one is refused.
    pub private: &'a [PathBuf],
    /// Override of the policy's timeout (the descriptor's, when shorter).
    pub timeout_ms: Option<u64>,
    /// The only process that touches the network is the executor's own HTTP client, which
    /// checks every request and redirect against `allowDomains` (and private addresses): the
    /// `http` adapter. Then a domain allowlist is enforced without an egress proxy.
    pub executor_is_the_only_client: bool,
}

/// Resolve a policy.
pub fn resolve(policy: &SandboxPolicySpec, cx: &Context<'_>) -> Result<SandboxPlan, ResolveError> {
    match policy.mode {
        SandboxMode::Vm => return Err(ResolveError::Mode("vm")),
        SandboxMode::RemoteApi => return Err(ResolveError::Mode("remote_api")),
        _ => {}
    }
    if let Some(class) = &policy.runtime_class_name {
        return Err(ResolveError::RuntimeClass(class.clone()));
    }
    let network = match policy.network.egress {
        EgressMode::None => Network::None,
        EgressMode::Open => Network::Host,
        EgressMode::Allowlist
            if cx.executor_is_the_only_client && policy.network.allow_cidrs.is_empty() =>
        {
            Network::Host
        }
        EgressMode::Allowlist => {
            toolgate_contract::egress::EgressRules::from_policy(&policy.network)?;
            Network::Proxied
        }
    };
    let fs = &policy.filesystem;
    let map = |field: String, p: &str| map_path(&field, p, cx.workspace);
    let mut read_only = Vec::new();
    for (i, p) in fs.read_roots.iter().enumerate() {
        read_only.push(map(format!("filesystem.readRoots[{i}]"), p)?);
    }
    let mut writable = Vec::new();
    for (i, p) in fs.write_roots.iter().enumerate() {
        writable.push(map(format!("filesystem.writeRoots[{i}]"), p)?);
    }
    // Deeper binds after shallower ones, so a write root inside a read root stays writable.
    writable.sort_by_key(|b| b.inside.components().count());
    read_only.sort_by_key(|b| b.inside.components().count());
    let mut hidden = Vec::new();
    for (i, p) in fs.blocked_paths.iter().enumerate() {
        hidden.push(map(format!("filesystem.blockedPaths[{i}]"), p)?.inside);
    }
    hidden.extend(private_paths(&read_only, &writable, cx.private)?);
    let cwd = match &fs.cwd {
        Some(c) => map("filesystem.cwd".into(), c)?.inside,
        None => PathBuf::from("/"),
    };
    let mut env: Vec<(String, String)> = Vec::new();
    for name in &policy.environment.inherited_env {
        if let Some((_, v)) = cx.env.iter().find(|(k, _)| k == name) {
            env.push((name.clone(), v.clone()));
        }
    }
    for (index, entry) in policy.environment.injected_env.iter().enumerate() {
        let Some((k, v)) = entry.split_once('=') else {
            return Err(ResolveError::Env {
                index,
                entry: entry.clone(),
            });
        };
        env.retain(|(name, _)| name != k);
        env.push((k.into(), v.into()));
    }
    let process = &policy.process;
    let mut timeout_ms = u64::from(process.timeout_ms);
    if let Some(t) = cx.timeout_ms {
        timeout_ms = timeout_ms.min(t);
    }
    let writes = (!writable.is_empty()).then(|| {
        let quota = fs.write_quota.unwrap_or(WriteQuota::DEFAULT);
        WriteLimit {
            bytes: u64::from(quota.size_mb) * 1024 * 1024,
            files: u64::from(quota.files),
            required: fs.write_quota.is_some(),
        }
    });
    Ok(SandboxPlan {
        read_only,
        writable,
        hidden,
        runtime: Vec::new(),
        cwd,
        network,
        limits: Limits {
            timeout: Duration::from_millis(timeout_ms),
            memory_bytes: u64::from(process.max_memory_mb) * 1024 * 1024,
            // Local CPU limit: millicores over the timeout, as CPU seconds (at least one).
            cpu_seconds: process
                .max_cpu_millis
                .map(|m| (u64::from(m) * timeout_ms / 1000 / 1000).max(1)),
            processes: process.max_processes.map(u64::from),
            file_bytes: process.max_file_bytes,
            tmp_bytes: fs
                .temp_dir_size_mb
                .map_or(DEFAULT_TMP_BYTES, |mb| u64::from(mb) * 1024 * 1024),
            writes,
        },
        env,
        etc: None,
        layers: None,
    })
}

/// Where the private host folders would show inside the sandbox; a root inside one is refused.
fn private_paths(
    read_only: &[Bind],
    writable: &[Bind],
    private: &[PathBuf],
) -> Result<Vec<PathBuf>, ResolveError> {
    let mut hidden = Vec::new();
    let roots = read_only
        .iter()
        .map(|b| ("readRoots", b))
        .chain(writable.iter().map(|b| ("writeRoots", b)));
    for (field, b) in roots {
        for folder in private {
            if b.host.starts_with(folder) {
                return Err(ResolveError::Path(toolgate_contract::exec::PathError {
                    field: format!("filesystem.{field}"),
                    path: b.host.display().to_string(),
                    why: "it is inside toolgate's data folder, which no sandbox may see",
                }));
            }
            if let Ok(rest) = folder.strip_prefix(&b.host) {
                let inside = b.inside.join(rest);
                if !hidden.contains(&inside) {
                    hidden.push(inside);
                }
            }
        }
    }
    Ok(hidden)
}

/// The policy's filesystem rules as paths inside the sandbox (or pod): the core's
/// [`toolgate_contract::exec::confinement`], refusing what [`resolve`] refuses.
pub fn confinement(
    policy: &SandboxPolicySpec,
) -> Result<toolgate_contract::exec::FsRules, ResolveError> {
    Ok(toolgate_contract::exec::confinement(policy)?)
}

/// A policy path as a bind (see [`toolgate_contract::exec::map_path`]).
fn map_path(field: &str, p: &str, workspace: &Path) -> Result<Bind, ResolveError> {
    let (host, inside) = toolgate_contract::exec::map_path(field, p, workspace)?;
    Ok(Bind { host, inside })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: serde_json::Value) -> SandboxPolicySpec {
        serde_json::from_value(yaml).expect("policy")
    }

    fn base() -> serde_json::Value {
        serde_json::json!({
            "mode": "workspace_write",
            "filesystem": {"cwd": "workspace", "readRoots": ["workspace"], "writeRoots": ["workspace/coverage"],
                           "blockedPaths": ["workspace/.env"]},
            "network": {"egress": "none"},
            "environment": {"inheritedEnv": ["PATH", "MISSING"], "injectedEnv": ["CI=true"]},
            "process": {"timeoutMs": 10000, "maxMemoryMb": 128, "maxProcesses": 4,
                        "maxStdoutBytes": 100, "maxStderrBytes": 100},
            "audit": {}
        })
    }

    fn cx(ws: &Path) -> Context<'_> {
        Context {
            workspace: ws,
            env: &[],
            private: &[],
            timeout_ms: None,
            executor_is_the_only_client: false,
        }
    }

    #[test]
    fn confinement_names_the_paths_inside() {
        let rules = confinement(&policy(base())).expect("rules");
        assert_eq!(rules.read, vec![PathBuf::from("/workspace")]);
        assert_eq!(rules.write, vec![PathBuf::from("/workspace/coverage")]);
        assert_eq!(rules.blocked, vec![PathBuf::from("/workspace/.env")]);
        let mut bad = base();
        bad["filesystem"]["blockedPaths"] = serde_json::json!(["workspace/../.ssh"]);
        let e = confinement(&policy(bad)).expect_err("refused");
        assert!(
            e.to_string().starts_with("filesystem.blockedPaths[0]"),
            "{e}"
        );
    }

    #[test]
    fn maps_roots_into_the_workspace() {
        let ws = Path::new("/srv/ws");
        let env = [("PATH".to_string(), "/usr/bin".to_string())];
        let plan = resolve(
            &policy(base()),
            &Context {
                workspace: ws,
                env: &env,
                private: &[],
                timeout_ms: Some(5000),
                executor_is_the_only_client: false,
            },
        )
        .expect("plan");
        assert_eq!(plan.read_only[0].host, Path::new("/srv/ws"));
        assert_eq!(plan.read_only[0].inside, Path::new("/workspace"));
        assert_eq!(plan.writable[0].host, Path::new("/srv/ws/coverage"));
        assert_eq!(plan.hidden, vec![PathBuf::from("/workspace/.env")]);
        assert_eq!(plan.cwd, Path::new("/workspace"));
        assert_eq!(plan.network, Network::None);
        assert_eq!(plan.limits.timeout, Duration::from_millis(5000));
        assert_eq!(plan.limits.memory_bytes, 128 << 20);
        assert_eq!(plan.limits.processes, Some(4));
        assert_eq!(
            plan.env,
            vec![
                ("PATH".into(), "/usr/bin".into()),
                ("CI".into(), "true".into())
            ]
        );
    }

    #[test]
    fn an_allowlist_goes_through_the_proxy_and_never_opens_the_network() {
        let mut p = base();
        p["network"] =
            serde_json::json!({"egress": "allowlist", "allowDomains": ["api.github.com"]});
        let plan = resolve(&policy(p), &cx(Path::new("/w"))).expect("plan");
        assert_eq!(plan.network, Network::Proxied);
        let mut p = base();
        p["network"] = serde_json::json!({"egress": "allowlist", "allowCidrs": ["10.0.0.0/33"]});
        let err = resolve(&policy(p), &cx(Path::new("/w"))).expect_err("refused");
        assert!(
            err.to_string().starts_with("network.allowCidrs[0]"),
            "{err}"
        );
    }

    #[test]
    fn an_allowlist_of_names_holds_for_the_http_adapter_and_cidrs_go_through_the_proxy() {
        let mut p = base();
        p["network"] =
            serde_json::json!({"egress": "allowlist", "allowDomains": ["api.github.com"]});
        let mut c = cx(Path::new("/w"));
        c.executor_is_the_only_client = true;
        assert_eq!(
            resolve(&policy(p), &c).expect("plan").network,
            Network::Host
        );
        let mut p = base();
        p["network"] = serde_json::json!({"egress": "allowlist", "allowCidrs": ["10.0.0.0/8"]});
        assert_eq!(
            resolve(&policy(p), &c).expect("plan").network,
            Network::Proxied
        );
    }

    #[test]
    fn refuses_runtime_classes_and_vm_mode() {
        let mut p = base();
        p["runtimeClassName"] = "gvisor".into();
        assert!(matches!(
            resolve(&policy(p), &cx(Path::new("/w"))),
            Err(ResolveError::RuntimeClass(_))
        ));
        let mut p = base();
        p["mode"] = "vm".into();
        assert!(matches!(
            resolve(&policy(p), &cx(Path::new("/w"))),
            Err(ResolveError::Mode("vm"))
        ));
    }

    #[test]
    fn refuses_parent_segments_and_the_host_root() {
        for bad in ["workspace/../etc", "../x", "/", "", "./x"] {
            let mut p = base();
            p["filesystem"]["writeRoots"] = serde_json::json!([bad]);
            let err = resolve(&policy(p), &cx(Path::new("/w"))).expect_err(bad);
            assert!(
                err.to_string().starts_with("filesystem.writeRoots[0]:"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_data_folder_is_hidden_wherever_a_root_shows_it_and_never_a_root() {
        let ws = Path::new("/srv/ws");
        let private = [PathBuf::from("/srv/ws/.toolgate")];
        let mut c = cx(ws);
        c.private = &private;
        let mut p = base();
        p["filesystem"]["readRoots"] = serde_json::json!(["workspace", "/srv"]);
        let plan = resolve(&policy(p), &c).expect("plan");
        assert!(plan.hidden.contains(&PathBuf::from("/workspace/.toolgate")));
        assert!(plan.hidden.contains(&PathBuf::from("/srv/ws/.toolgate")));
        let mut p = base();
        p["filesystem"]["readRoots"] = serde_json::json!(["workspace/.toolgate/calls"]);
        let e = resolve(&policy(p), &c).expect_err("a root inside the data folder");
        assert!(
            e.to_string().starts_with("filesystem.readRoots:")
                && e.to_string().contains("data folder"),
            "{e}"
        );
    }

    #[test]
    fn a_blocked_root_resolves_to_the_root_itself() {
        let mut p = base();
        p["filesystem"]["readRoots"] = serde_json::json!(["workspace", "workspace/secret.txt"]);
        p["filesystem"]["blockedPaths"] = serde_json::json!(["workspace/secret.txt"]);
        let plan = resolve(&policy(p), &cx(Path::new("/srv/ws"))).expect("plan");
        let inside = Path::new("/workspace/secret.txt");
        assert_eq!(plan.host_behind(inside), Path::new("/srv/ws/secret.txt"));
        assert_eq!(
            plan.host_behind(Path::new("/workspace/coverage/x")),
            Path::new("/srv/ws/coverage/x")
        );
        assert!(plan.creatable(Path::new("/workspace/coverage/new")));
        assert!(!plan.creatable(Path::new("/workspace/new")));
    }

    #[test]
    fn open_egress_shares_the_host_network() {
        let mut p = base();
        p["network"] = serde_json::json!({"egress": "open"});
        let plan = resolve(&policy(p), &cx(Path::new("/w"))).expect("plan");
        assert_eq!(plan.network, Network::Host);
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use std::path::Component;

    proptest! {
        /// Whatever a policy names as a root, resolution never panics, and a relative root never
        /// maps outside the workspace on the host or outside /workspace inside.
        #[test]
        fn relative_roots_stay_in_the_workspace(root in "[a-z./]{0,12}|workspace(/[a-z.]{0,6}){0,3}|\\PC{0,16}") {
            let ws = Path::new("/srv/ws");
            match map_path("filesystem.writeRoots[0]", &root, ws) {
                Ok(b) if !Path::new(&root).is_absolute() => {
                    prop_assert!(b.host.starts_with(ws), "{root:?} → {}", b.host.display());
                    prop_assert!(b.inside.starts_with(WORKSPACE_INSIDE));
                    prop_assert!(!b.host.components().any(|c| c == Component::ParentDir));
                }
                Ok(b) => prop_assert_ne!(b.host, PathBuf::from("/")),
                Err(e) => prop_assert!(e.to_string().starts_with("filesystem.writeRoots[0]:")),
            }
        }
    }
}
