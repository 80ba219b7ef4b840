//! `toolgate-operator [--context NAME] (--artifacts-bucket B | --artifacts-dir D) …`: runs the
//! toolgate controllers against the cluster of the current kubeconfig (or the in-cluster service
//! account).

use std::process::ExitCode;

use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use toolgate_crds::ToolDescriptor;

mod api;
mod build;
mod cache;
mod call;
mod delegation;
mod descriptor;
mod egress;
mod grant;
mod kit;
mod mcp_server;
mod metrics;
mod ops;
mod policies;
mod readiness;
mod scope;
mod skill;
mod tool_policy;

/// The client, and the API server's addresses as it reaches them (the egress gate's default
/// probes).
async fn client(context: Option<String>) -> anyhow::Result<(Client, Vec<std::net::SocketAddr>)> {
    let config = match context {
        Some(context) => {
            let kubeconfig = Kubeconfig::read()?;
            Config::from_custom_kubeconfig(
                kubeconfig,
                &KubeConfigOptions {
                    context: Some(context),
                    ..Default::default()
                },
            )
            .await?
        }
        None => Config::infer().await?,
    };
    let url = &config.cluster_url;
    let host = url.host().unwrap_or_default().trim_matches(['[', ']']);
    let port = url
        .port_u16()
        .unwrap_or(if url.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    let api_server = match tokio::net::lookup_host((host, port)).await {
        Ok(addresses) => addresses.collect(),
        Err(e) => {
            tracing::warn!(%host, error = %e, "cannot resolve the API server's address: the egress gate has no default probe");
            Vec::new()
        }
    };
    Ok((Client::try_from(config)?, api_server))
}

/// The toolgate operator: reconciles tool descriptors, grants and calls.
#[derive(clap::Parser)]
#[command(name = "toolgate-operator", version, about)]
struct Args {
    /// kubeconfig context (default: the current one, or in-cluster).
    #[arg(long)]
    context: Option<String>,
    /// Executor image for tools that name none.
    #[arg(long, default_value = "ghcr.io/toolgate/executor:0.1.0")]
    executor_image: String,
    /// S3-compatible bucket for artifacts.
    #[arg(long, conflicts_with = "artifacts_dir")]
    artifacts_bucket: Option<String>,
    /// Endpoint of the S3-compatible server (default: AWS).
    #[arg(long, requires = "artifacts_bucket")]
    artifacts_endpoint: Option<String>,
    /// CIDR of the artifact store (repeatable): every call's NetworkPolicy lets the executor
    /// reach it, whatever the tool's egress. Without it, a CNI that enforces NetworkPolicies
    /// blocks the upload of calls whose egress is none.
    #[arg(long = "artifacts-egress-cidr")]
    artifacts_egress_cidrs: Vec<String>,
    /// How long a call's NetworkPolicy may take to be in force after its pod starts, in ms.
    /// The executor connects to the probe addresses the policy refuses and starts the tool only
    /// once all are refused; otherwise the call fails `egress-not-enforced`. 0 turns this off:
    /// only for a cluster that enforces no NetworkPolicy and knows it.
    #[arg(long, default_value_t = 30_000)]
    egress_gate_ms: u64,
    /// A listening TCP address (`ip:port`, repeatable) a call's pod must be refused before its
    /// tool starts, when its NetworkPolicy refuses it. Default: the API server, as this
    /// operator's client reaches it (give its endpoint address when the client goes through a
    /// Service's virtual IP and calls' policies allow the endpoint but not the virtual IP).
    #[arg(long = "egress-probe")]
    egress_probes: Vec<std::net::SocketAddr>,
    /// Serve an egress proxy per call whose process tool may reach domains
    /// (`egress: allowlist` with `allowDomains`), at this address of the operator's: the call's
    /// pod may reach that address on its proxy's port and nothing else. The operator pod's IP
    /// (the chart passes it); without it such calls are refused, as a NetworkPolicy cannot
    /// name domains.
    #[arg(long)]
    egress_proxy_address: Option<std::net::IpAddr>,
    /// The address the egress proxies listen on, when it is not `--egress-proxy-address` (a
    /// NAT in between).
    #[arg(long, requires = "egress_proxy_address")]
    egress_proxy_listen: Option<std::net::IpAddr>,
    /// A nameserver (`ip:port`, repeatable) the egress proxies resolve names with, instead of
    /// the system's resolver.
    #[arg(long = "egress-nameserver", requires = "egress_proxy_address")]
    egress_nameservers: Vec<std::net::SocketAddr>,
    /// A CA certificate (PEM file, repeatable) the egress proxies trust beside the system's
    /// roots, for the hosts a `proxy`-delivered credential is sent to (a private CA).
    #[arg(long = "egress-upstream-ca", requires = "egress_proxy_address")]
    egress_upstream_ca: Vec<std::path::PathBuf>,
    /// A directory for artifacts, shared with the node (single-node and test clusters).
    #[arg(long)]
    artifacts_dir: Option<std::path::PathBuf>,
    /// Secret in each call's namespace whose keys become the executor's environment
    /// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY for the artifact bucket).
    #[arg(long)]
    artifact_secret: Option<String>,
    /// Local secrets file for CredentialBindings (`mount/path: {field: value}`, mode 600), for
    /// a cluster without Vault.
    #[arg(long, conflicts_with = "vault_addr")]
    secrets: Option<std::path::PathBuf>,
    /// Broker credentials from Vault at this address: KV v2 reads and leased dynamic secrets,
    /// each lease revoked when its call ends. The operator logs in with Vault's Kubernetes auth
    /// method, with its own projected service-account token.
    #[arg(long)]
    vault_addr: Option<String>,
    /// Mount of Vault's Kubernetes auth method.
    #[arg(long, default_value = "kubernetes")]
    vault_auth_mount: String,
    /// Vault role the operator logs in as when a binding names no `authRole`.
    #[arg(long, default_value = "toolgate-operator")]
    vault_role: String,
    /// The projected service-account token presented to Vault (audience `vault`).
    #[arg(long, default_value = "/var/run/secrets/toolgate/vault/token")]
    vault_token_file: std::path::PathBuf,
    /// A CA certificate (PEM) to trust for Vault's TLS certificate.
    #[arg(long)]
    vault_ca: Option<std::path::PathBuf>,
    /// Deadline of each request to Vault, in seconds.
    #[arg(long, default_value_t = 10)]
    vault_timeout_seconds: u64,
    /// Watch only this namespace (a namespace-scoped install); default: all namespaces.
    #[arg(long)]
    namespace: Option<String>,
    /// Serve the agent API (toolgate.v1 gRPC) here; callers authenticate with their Kubernetes
    /// token (TokenReview) and RBAC decides what they may read and approve.
    #[arg(long)]
    grpc_addr: Option<std::net::SocketAddr>,
    /// Serve the agent API over TLS with this certificate chain (PEM): callers send their
    /// Kubernetes tokens, which must not cross the network in clear.
    #[arg(long, requires = "grpc_tls_key")]
    grpc_tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "grpc_tls_cert")]
    grpc_tls_key: Option<std::path::PathBuf>,
    /// Require client certificates chaining to this CA (PEM): mutual TLS.
    #[arg(long, requires = "grpc_tls_cert")]
    grpc_tls_client_ca: Option<std::path::PathBuf>,
    /// Address of `/metrics`, `/livez` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8080")]
    health_addr: std::net::SocketAddr,
    /// Run without leader election (one replica only).
    #[arg(long)]
    no_leader_election: bool,
    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE, else toolgate-system).
    #[arg(long)]
    lease_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "toolgate-operator")]
    lease_name: String,
    /// How long a Lease holds without renewal, in seconds.
    #[arg(long, default_value_t = 15)]
    lease_duration_seconds: u64,
    /// Seconds a failed call's pod is kept for debugging.
    #[arg(long, default_value_t = 600)]
    keep_failed_pods_seconds: u64,
    /// Export a span per call (and per step of its chain) to this OTLP/gRPC collector; a call
    /// proposed with a `traceparent` (gRPC metadata, or the `toolgate.dev/traceparent`
    /// annotation) joins the agent's trace.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
}

fn call_config(args: &Args) -> anyhow::Result<call::CallConfig> {
    use toolgate_core::exec::ArtifactTarget;
    let artifacts = match (&args.artifacts_bucket, &args.artifacts_dir) {
        (Some(bucket), None) => ArtifactTarget::S3 {
            bucket: bucket.clone(),
            endpoint: args.artifacts_endpoint.clone(),
            region: "us-east-1".into(),
            allow_http: args
                .artifacts_endpoint
                .as_deref()
                .is_some_and(|e| e.starts_with("http://")),
        },
        (None, Some(dir)) => ArtifactTarget::Local {
            dir: dir.display().to_string(),
        },
        _ => anyhow::bail!(
            "artifacts: pass --artifacts-bucket (with --artifacts-endpoint for S3-compatible servers) or --artifacts-dir"
        ),
    };
    let broker: std::sync::Arc<dyn toolgate_broker::CredentialBroker> =
        match (&args.secrets, &args.vault_addr) {
            (_, Some(addr)) => {
                use toolgate_broker::vault::{VaultAuth, VaultBroker, VaultConfig};
                std::sync::Arc::new(VaultBroker::new(VaultConfig {
                    addr: addr.clone(),
                    ca_cert: args.vault_ca.clone(),
                    auth: VaultAuth::Kubernetes {
                        mount: args.vault_auth_mount.clone(),
                        role: args.vault_role.clone(),
                        token_file: args.vault_token_file.clone(),
                    },
                    timeout: std::time::Duration::from_secs(args.vault_timeout_seconds.max(1)),
                })?)
            }
            (Some(p), None) => std::sync::Arc::new(toolgate_broker::FileBroker::load(p)?),
            (None, None) => std::sync::Arc::new(toolgate_broker::NoBroker),
        };
    if !args.egress_upstream_ca.is_empty() {
        // Said now, not at the first call that needs it.
        toolgate_egress::upstream_tls(&args.egress_upstream_ca)
            .map_err(|e| anyhow::anyhow!("--egress-upstream-ca: {e}"))?;
    }
    Ok(call::CallConfig {
        executor_image: args.executor_image.clone(),
        artifacts,
        artifact_secret: args.artifact_secret.clone(),
        broker,
        artifact_egress: build::ArtifactEgress::new(
            args.artifacts_egress_cidrs.clone(),
            args.artifacts_endpoint.as_deref(),
        ),
        egress_gate: build::EgressGateConfig {
            probes: args.egress_probes.clone(),
            within_ms: args.egress_gate_ms,
        },
        keep_failed_pods: std::time::Duration::from_secs(args.keep_failed_pods_seconds),
        egress: std::sync::Arc::new(egress::EgressProxies::new(args.egress_proxy_address.map(
            |advertise| egress::EgressConfig {
                listen: args.egress_proxy_listen.unwrap_or(advertise),
                advertise,
                nameservers: args.egress_nameservers.clone(),
                upstream_ca: args.egress_upstream_ca.clone(),
            },
        ))),
        tracer: match &args.otlp_endpoint {
            Some(e) => toolgate_api::trace::CallTracer::otlp(e, "toolgate-operator")?,
            None => Default::default(),
        },
    })
}

fn main() -> ExitCode {
    use clap::Parser;
    // Structured JSON on stderr, one object per line, with the call or descriptor as a field.
    tracing_subscriber::fmt()
        .json()
        .with_current_span(false)
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolgate-operator: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // The OTLP exporter's channel is made inside the runtime.
    let config = match runtime.block_on(async { call_config(&args) }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("toolgate-operator: {e:#}");
            return ExitCode::from(2);
        }
    };
    let tracer = config.tracer.clone();
    let result = runtime.block_on(run(args, config));
    // Off the runtime's threads: the last batch of spans needs them to be sent.
    runtime.block_on(async {
        let _ = tokio::task::spawn_blocking(move || tracer.shutdown()).await;
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolgate-operator: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Start the caches, health and metrics, the agent API; lead; then run every controller.
async fn run(args: Args, mut config: call::CallConfig) -> anyhow::Result<()> {
    use anyhow::Context;
    let (client, api_server) = client(args.context.clone())
        .await
        .context("cannot configure the Kubernetes client")?;
    if config.egress_gate.probes.is_empty() {
        config.egress_gate.probes = api_server;
    }
    if config.egress_gate.within_ms == 0 {
        tracing::warn!(
            "--egress-gate-ms 0: a call's tool may start before its NetworkPolicy is in force"
        );
    }
    // The operator never installs CRDs (Helm does); it says what is missing.
    let scope = scope::Scope(args.namespace.clone());
    if let Err(e) = scope
        .api::<ToolDescriptor>(&client)
        .list_metadata(&ListParams::default().limit(1))
        .await
    {
        anyhow::bail!(
            "cannot list ToolDescriptors ({e}); are the CRDs installed? kubectl apply -f crds/generated/"
        );
    }
    // Shared by the agent API (also on standby replicas) and the ToolCall controller.
    let (cache, subscriptions) = cache::PolicyCache::start(&client, &scope)?;
    let metrics = std::sync::Arc::new(metrics::Metrics::default());
    let health = std::sync::Arc::new(ops::Health::default());
    tokio::spawn(ops::serve(
        args.health_addr,
        metrics.clone(),
        health.clone(),
    ));
    if let Some(addr) = args.grpc_addr {
        let backend = api::KubeBackend {
            client: client.clone(),
            scope: scope.clone(),
            artifacts: config.artifacts.clone(),
            cache: cache.clone(),
        };
        let tls = args
            .grpc_tls_cert
            .clone()
            .zip(args.grpc_tls_key.clone())
            .map(|(cert, key)| toolgate_api::TlsFiles {
                cert,
                key,
                client_ca: args.grpc_tls_client_ca.clone(),
            });
        if tls.is_none() {
            tracing::warn!(%addr, "the agent API serves without TLS: callers' tokens cross the network in clear; give --grpc-tls-cert and --grpc-tls-key");
        }
        serve_agent_api(addr, tls, backend).await?;
    }
    if !args.no_leader_election {
        ops::lead(client.clone(), lease_config(&args)).await;
    }
    tracing::info!("toolgate-operator started");
    tokio::join!(
        descriptor::run(client.clone(), scope.clone(), metrics.clone()),
        grant::run(client.clone(), scope.clone(), metrics.clone()),
        readiness::run(
            client.clone(),
            config.broker.clone(),
            scope.clone(),
            metrics.clone()
        ),
        mcp_server::run(
            client.clone(),
            config.broker.clone(),
            scope.clone(),
            mcp_server::Pods {
                executor_image: config.executor_image.clone(),
                artifacts: config.artifacts.clone(),
                artifact_secret: config.artifact_secret.clone(),
                artifact_egress: config.artifact_egress.clone(),
                egress_gate: config.egress_gate.clone(),
            },
            metrics.clone()
        ),
        tool_policy::run(client.clone(), scope.clone(), metrics.clone()),
        skill::run(client.clone(), scope.clone(), metrics.clone()),
        call::run(
            client,
            config,
            scope,
            metrics,
            health,
            (cache, subscriptions)
        )
    );
    Ok(())
}

/// Serve the `toolgate.v1` agent API on `addr` (every replica, leader or not).
async fn serve_agent_api(
    addr: std::net::SocketAddr,
    tls: Option<toolgate_api::TlsFiles>,
    backend: api::KubeBackend,
) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(t) = &tls {
        t.server_config()?;
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--grpc-addr {addr}"))?;
    let auth = std::sync::Arc::new(api::TokenReviewAuth {
        client: backend.client.clone(),
        cache: backend.cache.clone(),
    });
    tracing::info!(%addr, tls = tls.is_some(), "serving the toolgate.v1 agent API");
    tokio::spawn(async move {
        if let Err(e) = toolgate_api::serve(
            std::sync::Arc::new(backend),
            auth,
            listener,
            tls.as_ref(),
            std::future::pending(),
        )
        .await
        {
            tracing::error!(error = %e, "the agent API stopped");
        }
    });
    Ok(())
}

/// Which Lease this replica competes for, as whom.
fn lease_config(args: &Args) -> ops::LeaseConfig {
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
        format!(
            "{}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "toolgate-operator".into()),
            std::process::id()
        )
    });
    let namespace = args
        .lease_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "toolgate-system".into());
    tracing::info!(%identity, lease = %args.lease_name, %namespace, "waiting to lead");
    ops::LeaseConfig {
        namespace,
        name: args.lease_name.clone(),
        identity,
        duration: std::time::Duration::from_secs(args.lease_duration_seconds.max(3)),
    }
}
