//! `toolgate local`: the embedded runtime on this machine.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::outln;
use anyhow::Context;
use toolgate_api::{Authenticator, TokenFile};
use toolgate_local::broker::{CredentialBroker, FileBroker, NoBroker};
use toolgate_local::{Config, Runtime};

/// Options of `toolgate local`.
#[derive(Debug, Clone, clap::Args)]
pub struct LocalArgs {
    /// Folder of manifests: tools, grants, sandbox policies, credential bindings.
    #[arg(long, default_value = "examples")]
    pub manifests: PathBuf,
    /// Data folder: the call store, event logs, artifacts. Default: a folder for this workspace
    /// under $XDG_STATE_HOME/toolgate (or ~/.local/state/toolgate), outside the workspace, so no
    /// tool ever sees it. Wherever it is, sandboxes never see it.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The workspace the sandbox policies' roots refer to.
    #[arg(long, default_value = ".")]
    pub workspace: PathBuf,
    /// Address to serve the gRPC API on. Without TLS, loopback only: bearer tokens must not
    /// cross a network in clear.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: String,
    /// Serve TLS with this certificate chain (PEM); then any address may be listened on.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates chaining to this CA (PEM): mutual TLS.
    #[arg(long, requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Serve Prometheus `/metrics` here (the operator's call metrics: phases, decisions, shadow
    /// forbids, durations by tool and outcome, approval waits, starts, calls in flight, build
    /// info) and `/healthz`, `/livez`, `/readyz`; off unless given.
    #[arg(long)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Bearer tokens: a YAML list of {token, principal, groups, approverIn, readerIn}, mode 600
    /// (default: tokens.yaml in the data folder).
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// Local secrets for CredentialBindings: `mount/path: {field: value}`, mode 600.
    #[arg(long, conflicts_with = "vault_addr")]
    pub secrets: Option<PathBuf>,
    /// Export a span per call (and per step of its chain) to this OTLP/gRPC collector
    /// (`http://127.0.0.1:4317`); a call proposed with a `traceparent` joins the agent's trace.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Sandboxes kept started ahead of demand for each sandbox plan a call has used: the
    /// executor already waiting inside, each given to exactly one call and destroyed after it.
    /// They are made on idle CPU time only (a cpu cgroup marked idle, where the machine lets
    /// the runtime make one) until a call takes one. 0 starts every sandbox when its call needs it.
    /// Four: an agent's calls one after another outrun the refills (made only on idle time)
    /// for a while, and a call that finds none waiting starts its sandbox cold; a waiting one
    /// holds about 2.5 MB.
    #[arg(long, default_value_t = 4)]
    pub warm_sandboxes: usize,
    /// The executor each sandbox runs: a `toolgate-executor` binary of this same build, or
    /// `builtin` for this binary's own `executor` command. Default: the `toolgate-executor`
    /// beside this binary when it is of this build (it starts faster), else `builtin`.
    #[arg(long, value_name = "PATH|builtin")]
    pub executor: Option<ExecutorChoice>,
    #[command(flatten)]
    pub egress: EgressArgs,
    #[command(flatten)]
    pub vault: VaultArgs,
}

/// How the calls' egress proxies resolve names and verify upstreams. A policy with
/// `egress: allowlist` sends a call's connections through a proxy of its own, which resolves
/// each name itself and checks the address it gets.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EgressArgs {
    /// A nameserver (`ip:port`) the egress proxies resolve names with, instead of the system's
    /// resolver; repeat for more.
    #[arg(long = "egress-nameserver", value_name = "IP:PORT")]
    pub nameservers: Vec<std::net::SocketAddr>,
    /// A CA certificate (PEM file) the egress proxies trust, beside the system's roots, for
    /// the hosts a `proxy`-delivered credential is sent to (a private CA); repeat for more.
    #[arg(long = "egress-upstream-ca", value_name = "FILE")]
    pub upstream_ca: Vec<PathBuf>,
}

/// Where `toolgate local` (or the operator) gets credentials from Vault.
#[derive(Debug, Clone, clap::Args)]
pub struct VaultArgs {
    /// Broker credentials from Vault at this address (`https://vault.example:8200`) instead of
    /// a secrets file: KV v2 reads and leased dynamic secrets, revoked when each call ends.
    #[arg(long = "vault-addr", env = "VAULT_ADDR")]
    pub vault_addr: Option<String>,
    /// A file (mode 600) holding the Vault token the broker uses.
    #[arg(long, requires = "vault_addr", conflicts_with = "vault_approle_file")]
    pub vault_token_file: Option<PathBuf>,
    /// A file (mode 600) with AppRole credentials: `{roleId: …, secretId: …}`.
    #[arg(long, requires = "vault_addr")]
    pub vault_approle_file: Option<PathBuf>,
    /// Mount of the AppRole auth method.
    #[arg(long, default_value = "approle")]
    pub vault_approle_mount: String,
    /// A CA certificate (PEM) to trust for Vault's TLS certificate.
    #[arg(long, requires = "vault_addr")]
    pub vault_ca: Option<PathBuf>,
    /// Deadline of each request to Vault, in seconds.
    #[arg(long, default_value_t = 10)]
    pub vault_timeout_seconds: u64,
}

impl VaultArgs {
    /// The Vault broker these options name, if any.
    pub fn broker(&self) -> anyhow::Result<Option<Arc<dyn CredentialBroker>>> {
        use toolgate_local::broker::vault::{VaultAuth, VaultBroker, VaultConfig};
        let Some(addr) = &self.vault_addr else {
            return Ok(None);
        };
        let auth = match (&self.vault_token_file, &self.vault_approle_file) {
            (Some(file), _) => VaultAuth::Token { file: file.clone() },
            (None, Some(file)) => VaultAuth::AppRole {
                mount: self.vault_approle_mount.clone(),
                file: file.clone(),
            },
            (None, None) => anyhow::bail!(
                "--vault-addr needs the broker's identity: --vault-token-file FILE or --vault-approle-file FILE (mode 600)"
            ),
        };
        let broker = VaultBroker::new(VaultConfig {
            addr: addr.clone(),
            ca_cert: self.vault_ca.clone(),
            auth,
            timeout: Duration::from_secs(self.vault_timeout_seconds.max(1)),
        })?;
        Ok(Some(Arc::new(broker)))
    }
}

/// What `toolgate local` and `toolgate demo` share: a started runtime and its listener.
pub struct Started {
    /// The runtime.
    pub runtime: Runtime,
    /// The bound listener.
    pub listener: tokio::net::TcpListener,
    /// The address actually bound.
    pub addr: std::net::SocketAddr,
}

/// Which executor each sandbox runs (`--executor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutorChoice {
    /// The `toolgate-executor` beside this binary when it is of this very build, else this
    /// binary's own `executor` command.
    Default,
    /// This binary's `executor` command.
    Builtin,
    /// This `toolgate-executor` binary; it must be of this very build.
    Path(PathBuf),
}

impl std::str::FromStr for ExecutorChoice {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "builtin" => ExecutorChoice::Builtin,
            path => ExecutorChoice::Path(PathBuf::from(path)),
        })
    }
}

/// The command the runtime runs inside each sandbox. The small `toolgate-executor` binary starts
/// in about half the time of this one (a third of its size, half its relocations), and every
/// call starts one; this binary's `executor` command is the same code, so one binary is all a new
/// user needs. A `toolgate-executor` is run only when it reports this build's version and
/// source hash: a stale one left beside a rebuilt `toolgate` is passed over, with a note.
pub fn executor_command(choice: &ExecutorChoice) -> anyhow::Result<Vec<std::ffi::OsString>> {
    let exe = std::env::current_exe().context("locating the toolgate binary")?;
    let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
    let builtin = || vec![exe.clone().into_os_string(), "executor".into()];
    match choice {
        ExecutorChoice::Builtin => Ok(builtin()),
        ExecutorChoice::Path(path) => {
            let path = std::fs::canonicalize(path)
                .with_context(|| format!("--executor {}", path.display()))?;
            toolgate_executor::same_build(&path)
                .map_err(|e| anyhow::anyhow!("--executor {e} (or give --executor builtin)"))?;
            Ok(vec![path.into_os_string()])
        }
        ExecutorChoice::Default => {
            let beside = exe.with_file_name("toolgate-executor");
            if !beside.is_file() {
                return Ok(builtin());
            }
            match toolgate_executor::same_build(&beside) {
                Ok(()) => Ok(vec![beside.into_os_string()]),
                Err(why) => {
                    tracing::info!(
                        "running this binary's executor command in the sandboxes, not the toolgate-executor beside it ({why})"
                    );
                    Ok(builtin())
                }
            }
        }
    }
}

/// The data folder `toolgate local` uses for a workspace when `--data` is not given: outside the
/// workspace, one per workspace, under $XDG_STATE_HOME/toolgate or ~/.local/state/toolgate.
pub fn default_data_folder(workspace: &Path) -> anyhow::Result<PathBuf> {
    use sha2::Digest;
    let workspace = std::fs::canonicalize(workspace)
        .with_context(|| format!("--workspace {}", workspace.display()))?;
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .context(
            "neither XDG_STATE_HOME nor HOME is set: pass --data <folder outside the workspace>",
        )?;
    let name: String = workspace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let hash = hex::encode(&sha2::Sha256::digest(workspace.as_os_str().as_encoded_bytes())[..4]);
    Ok(state.join("toolgate").join(format!("{name}-{hash}")))
}

/// How the embedded runtime is started.
pub struct Setup<'a> {
    /// The manifests folder.
    pub manifests: &'a Path,
    /// The data folder.
    pub data: &'a Path,
    /// The workspace.
    pub workspace: &'a Path,
    /// The address to listen on.
    pub listen: &'a str,
    /// Whether the API is served with TLS.
    pub tls: bool,
    /// Where credentials come from.
    pub broker: Arc<dyn CredentialBroker>,
    /// Where call spans go.
    pub tracer: toolgate_api::trace::CallTracer,
    /// Sandboxes started ahead of demand per plan.
    pub warm_sandboxes: usize,
    /// The executor each sandbox runs.
    pub executor: &'a ExecutorChoice,
    /// How the calls' egress proxies resolve and verify.
    pub egress: &'a EgressArgs,
}

/// Start the runtime and bind the listener.
pub async fn start(setup: Setup<'_>) -> anyhow::Result<Started> {
    let Setup {
        manifests,
        data,
        workspace,
        listen,
        tls,
        broker,
        tracer,
        warm_sandboxes,
        executor,
        egress,
    } = setup;
    let workspace = std::fs::canonicalize(workspace)
        .with_context(|| format!("--workspace {}", workspace.display()))?;
    std::fs::create_dir_all(data).with_context(|| format!("--data {}", data.display()))?;
    let data = std::fs::canonicalize(data)?;
    if workspace.starts_with(&data) {
        anyhow::bail!(
            "--workspace {} is inside --data {}: the data folder holds the call store, other calls' specs and artifacts, and no sandbox may see it. Put the data folder outside the workspace",
            workspace.display(),
            data.display()
        );
    }
    if data.starts_with(&workspace) {
        tracing::info!(
            data = %data.display(),
            "the data folder is inside the workspace; every sandbox gets it hidden (a folder outside the workspace is simpler)"
        );
    }
    if !egress.upstream_ca.is_empty() {
        // Said now, not at the first call that needs it.
        toolgate_egress::upstream_tls(&egress.upstream_ca).context("--egress-upstream-ca")?;
    }
    if toolgate_sandbox::spawn::bwrap_path().is_none() {
        anyhow::bail!(
            "bubblewrap (bwrap) is not installed; the embedded runtime runs every call inside it. Install it with scripts/install-deps.sh (apt-get install bubblewrap)"
        );
    }
    let listen_addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host(listen)
        .await
        .with_context(|| format!("--listen {listen}: expected host:port"))?
        .collect();
    if let Some(open) = listen_addrs.iter().find(|a| !a.ip().is_loopback())
        && !tls
    {
        anyhow::bail!(
            "--listen {listen}: {} is not a loopback address. Without TLS the API would take bearer tokens in clear, so toolgate local then listens on loopback only (127.0.0.1 or [::1]); give --tls-cert and --tls-key to serve elsewhere",
            open.ip()
        );
    }
    let executor = executor_command(executor)?;
    tracing::info!(executor = ?executor, "each sandbox runs this executor");
    let runtime = Runtime::start(Config {
        manifests: manifests.to_path_buf(),
        data,
        workspace,
        executor,
        broker,
        reload_interval: Duration::from_secs(1),
        tracer,
        warm_sandboxes,
        runs: None,
        egress_nameservers: egress.nameservers.clone(),
        egress_upstream_ca: egress.upstream_ca.clone(),
    })
    .await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("--listen {listen}"))?;
    let addr = listener.local_addr()?;
    Ok(Started {
        runtime,
        listener,
        addr,
    })
}

/// `toolgate local`.
pub fn run(args: &LocalArgs) -> anyhow::Result<ExitCode> {
    crate::init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let data = match &args.data {
            Some(d) => d.clone(),
            None => default_data_folder(&args.workspace)?,
        };
        let tokens_path = args
            .tokens
            .clone()
            .unwrap_or_else(|| data.join("tokens.yaml"));
        if !tokens_path.exists() {
            anyhow::bail!(
                "no tokens file at {}: create one (mode 600) mapping bearer tokens to principals, e.g.\n\
                 - {{token: <32 random characters>, principal: \"system:serviceaccount:team-a:fixer\"}}\n\
                 - {{token: <32 random characters>, principal: alice@example.com, approverIn: [team-a]}}\n\
                 or run `toolgate demo`, which mints its own",
                tokens_path.display()
            );
        }
        let auth: Arc<dyn Authenticator> = Arc::new(TokenFile::load(&tokens_path)?);
        let broker: Arc<dyn CredentialBroker> = match (&args.secrets, args.vault.broker()?) {
            (_, Some(vault)) => vault,
            (Some(p), None) => Arc::new(FileBroker::load(p)?),
            (None, None) => Arc::new(NoBroker),
        };
        let tls = args
            .tls_cert
            .clone()
            .zip(args.tls_key.clone())
            .map(|(cert, key)| toolgate_api::TlsFiles {
                cert,
                key,
                client_ca: args.tls_client_ca.clone(),
            });
        if let Some(t) = &tls {
            // Refused here, before anything starts, rather than by the server once bound.
            t.server_config()?;
        }
        let tracer = match &args.otlp_endpoint {
            Some(e) => toolgate_api::trace::CallTracer::otlp(e, "toolgate-local")?,
            None => Default::default(),
        };
        let started = start(Setup {
            manifests: &args.manifests,
            data: &data,
            workspace: &args.workspace,
            listen: &args.listen,
            tls: tls.is_some(),
            broker,
            tracer: tracer.clone(),
            warm_sandboxes: args.warm_sandboxes,
            executor: args.executor.as_ref().unwrap_or(&ExecutorChoice::Default),
            egress: &args.egress,
        })
        .await?;
        let metrics = match args.metrics_addr {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("--metrics-addr {addr}"))?,
            ),
            None => None,
        };
        let metrics_note = match &metrics {
            Some(l) => format!("; /metrics on {}", l.local_addr()?),
            None => String::new(),
        };
        if let Some(listener) = metrics {
            let runtime = started.runtime.clone();
            // Served once the runtime has started: its manifests linted and loaded, its store open.
            let app = axum::Router::new()
                .route("/healthz", axum::routing::get(|| async { "ok" }))
                .route("/livez", axum::routing::get(|| async { "ok" }))
                .route("/readyz", axum::routing::get(|| async { "ok" }))
                .route(
                "/metrics",
                axum::routing::get(move || {
                    let text = runtime.metrics_text();
                    async move {
                        (
                            [(
                                "content-type",
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            text,
                        )
                    }
                }),
            );
            tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!(error = %e, "serving /metrics");
                }
            });
        }
        let loaded = started.runtime.loaded();
        outln!(
            "toolgate local: serving toolgate.v1 on {} ({}{} tools, {} objects from {}; data in {}{metrics_note})",
            started.addr,
            match (&tls, args.tls_client_ca.is_some()) {
                (Some(_), true) => "TLS with client certificates; ",
                (Some(_), false) => "TLS; ",
                (None, _) => "",
            },
            loaded.policies.registry.tool_count(),
            loaded.policies.objects.len(),
            args.manifests.display(),
            data.display()
        );
        let auth = started.runtime.authenticator(auth);
        toolgate_api::serve(
            Arc::new(started.runtime),
            auth,
            started.listener,
            tls.as_ref(),
            shutdown_signal(),
        )
        .await?;
        // Off the runtime's threads: the exporter's last batch needs them to be sent.
        let _ = tokio::task::spawn_blocking(move || tracer.shutdown()).await;
        outln!("toolgate local: stopped");
        Ok(ExitCode::SUCCESS)
    })
}

/// Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
