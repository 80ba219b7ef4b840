//! Operations: the `/metrics` (see [`crate::metrics`]), `/livez` and `/readyz` endpoints (ready
//! once this replica leads and its caches synced), and leader election on a coordination.k8s.io
//! Lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::metrics::Metrics;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, PostParams};

/// Labels of a reconcile: the controller (three values) and the outcome (two).
/// Turn ready once the calls' cache and the policy caches have synced (and, before this runs,
/// the lease is held).
pub fn ready_when_synced<K>(
    health: std::sync::Arc<Health>,
    calls: kube::runtime::reflector::Store<K>,
    policies: crate::cache::PolicyCache,
) where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    tokio::spawn(async move {
        // Polled again and again: a store's readiness signal wakes only its latest waiter, and
        // the controller waits on the calls' store too.
        loop {
            let both = async {
                calls.wait_until_ready().await?;
                policies.wait_until_ready().await
            };
            match tokio::time::timeout(Duration::from_millis(250), both).await {
                Ok(Ok(())) => {
                    health
                        .ready
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                    tracing::info!("ToolCall and policy caches synced; ready");
                    return;
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "the caches never synced");
                    return;
                }
                Err(_) => {}
            }
        }
    });
}

/// Liveness and readiness.
#[derive(Default)]
pub struct Health {
    /// Leading and caches synced.
    pub ready: AtomicBool,
}

/// Serve `/metrics`, `/livez` and `/readyz` until the process ends.
pub async fn serve(addr: std::net::SocketAddr, metrics: Arc<Metrics>, health: Arc<Health>) {
    use axum::http::StatusCode;
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move {
                    (
                        [(
                            "content-type",
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.encode(),
                    )
                }
            }),
        )
        .route("/livez", get(|| async { "ok" }))
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let h = health.clone();
                async move {
                    if h.ready.load(Ordering::SeqCst) {
                        (StatusCode::OK, "ok")
                    } else {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "not leading, or caches not synced",
                        )
                    }
                }
            }),
        );
    match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => {
            tracing::info!(%addr, "serving /metrics, /livez, /readyz");
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the health server stopped");
            }
        }
        Err(e) => tracing::error!(%addr, error = %e, "cannot bind the health server"),
    }
}

/// Leader election settings.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// How long a lease holds without renewal.
    pub duration: Duration,
}

fn micro_now() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// Try once to take or renew the lease. `Ok(true)` when this replica holds it afterwards.
async fn try_acquire(api: &Api<Lease>, cfg: &LeaseConfig) -> Result<bool, kube::Error> {
    let seconds = i32::try_from(cfg.duration.as_secs()).unwrap_or(15);
    let Some(mut lease) = api.get_opt(&cfg.name).await? else {
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": cfg.name, "namespace": cfg.namespace},
        }))
        .map_err(kube::Error::SerdeError)?;
        let mut lease = lease;
        lease.spec = Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: Some(cfg.identity.clone()),
            lease_duration_seconds: Some(seconds),
            acquire_time: Some(micro_now()),
            renew_time: Some(micro_now()),
            lease_transitions: Some(0),
            ..Default::default()
        });
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let mine = spec.holder_identity.as_deref() == Some(cfg.identity.as_str());
    let expired = spec.renew_time.as_ref().is_none_or(|t| {
        let held = i64::from(spec.lease_duration_seconds.unwrap_or(seconds));
        t.0.as_second() + held < k8s_openapi::jiff::Timestamp::now().as_second()
    });
    if !mine && !expired {
        return Ok(false);
    }
    let mut new = spec.clone();
    if !mine {
        new.holder_identity = Some(cfg.identity.clone());
        new.acquire_time = Some(micro_now());
        new.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    new.renew_time = Some(micro_now());
    new.lease_duration_seconds = Some(seconds);
    lease.spec = Some(new);
    // The resourceVersion makes this a compare-and-swap: two replicas cannot both win.
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Wait until this replica leads, then keep renewing in the background. If a renewal fails for
/// longer than the lease lasts, the process exits: another replica may lead by then, and two
/// leaders must never reconcile at once.
pub async fn lead(client: Client, cfg: LeaseConfig) {
    let api = Api::<Lease>::namespaced(client, &cfg.namespace);
    let retry = cfg.duration / 3;
    loop {
        match try_acquire(&api, &cfg).await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "leader election"),
        }
        tokio::time::sleep(retry).await;
    }
    tracing::info!(identity = %cfg.identity, lease = %cfg.name, "leading");
    tokio::spawn(async move {
        let mut last_renewal = std::time::Instant::now();
        loop {
            tokio::time::sleep(retry).await;
            match try_acquire(&api, &cfg).await {
                Ok(true) => last_renewal = std::time::Instant::now(),
                Ok(false) => {
                    tracing::error!("lost the lease to another replica; exiting");
                    std::process::exit(3);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "renewing the lease");
                    if last_renewal.elapsed() > cfg.duration {
                        tracing::error!("could not renew the lease in time; exiting");
                        std::process::exit(3);
                    }
                }
            }
        }
    });
}
