//! `toolgate local`: the embedded runtime on this machine.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::out::outln;
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
    /// Data folder: the call store, event logs, artifacts.
    #[arg(long, default_value = ".toolgate")]
    pub data: PathBuf,
    /// The workspace the sandbox policies' roots refer to.
    #[arg(long, default_value = ".")]
    pub workspace: PathBuf,
    /// Address to serve the gRPC API on (loopback unless you front it with TLS).
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: String,
    /// Bearer tokens: a YAML list of {token, principal, groups, approverIn}, mode 600
    /// (default: <data>/tokens.yaml).
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// Local secrets for CredentialBindings: `mount/path: {field: value}`, mode 600.
    #[arg(long)]
    pub secrets: Option<PathBuf>,
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

/// The command the runtime runs inside each sandbox: this binary's `executor` subcommand.
pub fn executor_command() -> anyhow::Result<Vec<std::ffi::OsString>> {
    let exe = std::env::current_exe().context("locating the toolgate binary")?;
    let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
    Ok(vec![exe.into(), "executor".into()])
}

/// Start the runtime and bind the listener.
pub async fn start(
    manifests: &Path,
    data: &Path,
    workspace: &Path,
    listen: &str,
    broker: Arc<dyn CredentialBroker>,
) -> anyhow::Result<Started> {
    let workspace = std::fs::canonicalize(workspace)
        .with_context(|| format!("--workspace {}", workspace.display()))?;
    std::fs::create_dir_all(data).with_context(|| format!("--data {}", data.display()))?;
    let data = std::fs::canonicalize(data)?;
    if toolgate_sandbox::spawn::bwrap_path().is_none() {
        anyhow::bail!(
            "bubblewrap (bwrap) is not installed; the embedded runtime runs every call inside it. Install it with scripts/install-deps.sh (apt-get install bubblewrap)"
        );
    }
    let runtime = Runtime::start(Config {
        manifests: manifests.to_path_buf(),
        data,
        workspace,
        executor: executor_command()?,
        broker,
        reload_interval: Duration::from_secs(1),
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
        let tokens_path = args
            .tokens
            .clone()
            .unwrap_or_else(|| args.data.join("tokens.yaml"));
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
        let broker: Arc<dyn CredentialBroker> = match &args.secrets {
            Some(p) => Arc::new(FileBroker::load(p)?),
            None => Arc::new(NoBroker),
        };
        let started = start(&args.manifests, &args.data, &args.workspace, &args.listen, broker).await?;
        let loaded = started.runtime.loaded();
        outln!(
            "toolgate local: serving toolgate.v1 on {} ({} tools, {} objects from {}; data in {})",
            started.addr,
            loaded.registry.tool_count(),
            loaded.objects.len(),
            args.manifests.display(),
            args.data.display()
        );
        toolgate_api::serve(
            Arc::new(started.runtime),
            auth,
            started.listener,
            shutdown_signal(),
        )
        .await?;
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
