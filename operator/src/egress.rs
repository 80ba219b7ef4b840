//! The egress proxies of the calls this operator runs: one per call whose process tool may
//! reach domains, served by the operator itself on a port of its own.
//!
//! Why the operator and not a sidecar: containers of a pod share its network, and the pod's
//! NetworkPolicy is the pod's — a sidecar allowed out would let the tool out too. The call's
//! pod is allowed to reach one address and port, its own proxy's (and the artifact store);
//! each call has its own port, so a pod cannot reach another call's proxy, whose NetworkPolicy
//! names another port. The proxy decides names and addresses as the embedded runtime's does
//! (`toolgate-egress`), and its records join the call's result when the call ends.
//!
//! A proxy lives in this process's memory: an operator that restarts loses the proxies of the
//! calls in flight, whose tools then reach nothing (they fail; nothing is opened).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use toolgate_contract::egress::EgressRules;
use toolgate_contract::redact::Redactor;
use toolgate_crds::SandboxPolicySpec;
use toolgate_egress::{Injection, Interception, Proxy, Record, Resolver, Served};

/// Where the operator serves its calls' proxies.
#[derive(Debug, Clone)]
pub struct EgressConfig {
    /// The address the proxies listen on.
    pub listen: IpAddr,
    /// The address call pods reach them at (the operator pod's IP; the machine's own where
    /// the operator runs outside the cluster).
    pub advertise: IpAddr,
    /// Nameservers the proxies resolve with; empty: the system's resolver.
    pub nameservers: Vec<SocketAddr>,
    /// CA certificates (PEM files) the proxies trust beside the system's roots, for the hosts
    /// a `proxy`-delivered credential is sent to.
    pub upstream_ca: Vec<std::path::PathBuf>,
}

/// The proxies of the calls in flight, by call uid.
#[derive(Default)]
pub struct EgressProxies {
    config: Option<EgressConfig>,
    calls: Mutex<HashMap<String, Entry>>,
}

enum Entry {
    /// A port held for a call whose NetworkPolicy names it, until its proxy serves it.
    Reserved(std::net::TcpListener),
    Serving(Served),
}

/// Why a call's proxy could not be served.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// The operator was started without `--egress-proxy-address`.
    #[error("this operator serves no egress proxy (--egress-proxy-address)")]
    NotConfigured,
    /// A port could not be bound.
    #[error("a port for the call's egress proxy on {0}: {1}")]
    Bind(IpAddr, std::io::Error),
    /// The policy's rules or the resolver.
    #[error("the call's egress proxy: {0}")]
    Setup(String),
}

impl EgressProxies {
    /// Proxies served as `config` says; none when it is `None` (domain allowlists for process
    /// tools are then refused, as a NetworkPolicy cannot name domains).
    pub fn new(config: Option<EgressConfig>) -> EgressProxies {
        EgressProxies {
            config,
            calls: Mutex::default(),
        }
    }

    /// A CA for one call whose credential is delivered by its proxy: the proxy intercepts TLS
    /// to the binding's hosts with it, and the call's pod trusts it.
    pub fn interception(&self) -> Result<Interception, EgressError> {
        let config = self.config.as_ref().ok_or(EgressError::NotConfigured)?;
        let upstream = toolgate_egress::upstream_tls(&config.upstream_ca)
            .map_err(|e| EgressError::Setup(e.to_string()))?;
        Interception::new(upstream).map_err(|e| EgressError::Setup(e.to_string()))
    }

    /// Whether proxies are served at all.
    pub fn configured(&self) -> bool {
        self.config.is_some()
    }

    /// The address the call's pod reaches its proxy at: a port held for the call (the same one
    /// while the call holds it), before its NetworkPolicy names it.
    pub fn reserve(&self, uid: &str) -> Result<SocketAddr, EgressError> {
        let config = self.config.as_ref().ok_or(EgressError::NotConfigured)?;
        let mut calls = self
            .calls
            .lock()
            .map_err(|_| EgressError::Setup("the proxies' table".into()))?;
        let port = match calls.get(uid) {
            Some(Entry::Reserved(l)) => l.local_addr().map(|a| a.port()),
            Some(Entry::Serving(s)) => Ok(s.port()),
            None => {
                let listener = std::net::TcpListener::bind((config.listen, 0))
                    .map_err(|e| EgressError::Bind(config.listen, e))?;
                let port = listener.local_addr().map(|a| a.port());
                calls.insert(uid.to_string(), Entry::Reserved(listener));
                port
            }
        }
        .map_err(|e| EgressError::Bind(config.listen, e))?;
        Ok(SocketAddr::new(config.advertise, port))
    }

    /// Serve the call's proxy on its reserved port, deciding by `policy`'s egress and keeping
    /// `secrets` out of its records. Inside a tokio runtime.
    pub fn serve(
        &self,
        uid: &str,
        policy: &SandboxPolicySpec,
        secrets: &[&[u8]],
        injection: Option<(Injection, Interception)>,
    ) -> Result<(), EgressError> {
        let config = self.config.as_ref().ok_or(EgressError::NotConfigured)?;
        let rules = EgressRules::from_policy(&policy.network)
            .map_err(|e| EgressError::Setup(e.to_string()))?;
        let resolver =
            Resolver::new(&config.nameservers).map_err(|e| EgressError::Setup(e.to_string()))?;
        let mut calls = self
            .calls
            .lock()
            .map_err(|_| EgressError::Setup("the proxies' table".into()))?;
        let listener = match calls.remove(uid) {
            Some(Entry::Reserved(l)) => l,
            Some(serving @ Entry::Serving(_)) => {
                calls.insert(uid.to_string(), serving);
                return Ok(());
            }
            None => {
                return Err(EgressError::Setup(
                    "no port was reserved for the call".into(),
                ));
            }
        };
        let listener = listener
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(listener))
            .map_err(|e| EgressError::Bind(config.listen, e))?;
        let mut proxy = Proxy::new(rules, resolver, Redactor::new(secrets.iter().copied()));
        if let Some((injection, interception)) = injection {
            proxy = proxy.with_injection(injection, interception);
        }
        let served = proxy.serve_tcp(listener);
        calls.insert(uid.to_string(), Entry::Serving(served));
        Ok(())
    }

    /// Stop the call's proxy (or release its port) and hand back its records.
    pub fn finish(&self, uid: &str) -> Option<(Vec<Record>, u64)> {
        let entry = self.calls.lock().ok()?.remove(uid)?;
        match entry {
            Entry::Serving(served) => Some(served.records()),
            Entry::Reserved(_) => None,
        }
    }
}
