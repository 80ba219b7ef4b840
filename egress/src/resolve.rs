//! Names resolved by the proxy, never by the tool: what the proxy connects to is what it checked.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;

/// A resolver that asks every time: no answer is cached between connections, so a name that
/// changes its address (DNS rebinding) has each address checked when it is used.
#[derive(Clone)]
pub struct Resolver {
    inner: hickory_resolver::TokioResolver,
}

/// Why a resolver could not be made.
#[derive(Debug, thiserror::Error)]
#[error("the egress proxy's resolver: {0}")]
pub struct ResolverError(String);

impl Resolver {
    /// The system's resolver (`/etc/resolv.conf`, `/etc/hosts`), or the nameservers given.
    pub fn new(nameservers: &[SocketAddr]) -> Result<Resolver, ResolverError> {
        let mut opts = ResolverOpts::default();
        opts.cache_size = 0;
        opts.timeout = Duration::from_secs(5);
        opts.attempts = 2;
        let builder = if nameservers.is_empty() {
            hickory_resolver::Resolver::builder_tokio().map_err(|e| ResolverError(e.to_string()))?
        } else {
            let mut config = ResolverConfig::new();
            for addr in nameservers {
                config.add_name_server(NameServerConfig::new(*addr, Protocol::Udp));
                config.add_name_server(NameServerConfig::new(*addr, Protocol::Tcp));
            }
            hickory_resolver::Resolver::builder_with_config(
                config,
                TokioConnectionProvider::default(),
            )
        };
        Ok(Resolver {
            inner: builder.with_options(opts).build(),
        })
    }

    /// The addresses of `host`, in the resolver's order; an IP literal is itself.
    pub async fn addresses(&self, host: &str) -> Result<Vec<IpAddr>, String> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        let answer = self
            .inner
            .lookup_ip(host)
            .await
            .map_err(|e| e.to_string())?;
        let addrs: Vec<IpAddr> = answer.iter().collect();
        if addrs.is_empty() {
            return Err("no address".into());
        }
        Ok(addrs)
    }
}
