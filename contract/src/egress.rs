//! Which destinations a call may reach: the `network` rules of its SandboxPolicy, decided the
//! same way wherever a connection leaves a sandbox — the http adapter's own client and the
//! per-call egress proxy every other tool's traffic goes through.
//!
//! A destination is decided twice: by the name the tool asked for (an allowed domain and port,
//! or an IP literal inside an allowed CIDR), then by the address that name resolved to (a
//! private, loopback, link-local or otherwise special address only inside an allowed CIDR). The
//! second check is what stops a public name that points inside (DNS rebinding, a hostile
//! record, the cloud metadata address).

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use toolgate_crds::{EgressMode, NetworkPolicy};

/// The resolvers that answer DNS over HTTPS: a tool that reached one could look up (and, through
/// its answers, tunnel to) any name the policy does not allow. Refused unless a domain entry
/// names the host itself (a `*.` entry does not).
pub const DNS_OVER_HTTPS_HOSTS: &[&str] = &[
    "dns.google",
    "dns.google.com",
    "cloudflare-dns.com",
    "mozilla.cloudflare-dns.com",
    "one.one.one.one",
    "1dot1dot1dot1.cloudflare-dns.com",
    "security.cloudflare-dns.com",
    "family.cloudflare-dns.com",
    "dns.quad9.net",
    "dns9.quad9.net",
    "dns10.quad9.net",
    "dns11.quad9.net",
    "doh.opendns.com",
    "doh.familyshield.opendns.com",
    "dns.nextdns.io",
    "doh.cleanbrowsing.org",
    "dns.adguard.com",
    "dns.adguard-dns.com",
    "doh.mullvad.net",
    "dns.alidns.com",
    "doh.pub",
];

/// The port of DNS over TLS: refused unless a domain entry names it.
pub const DNS_OVER_TLS_PORT: u16 = 853;

/// A SandboxPolicy's egress, ready to decide destinations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRules {
    open: bool,
    domains: Vec<DomainRule>,
    cidrs: Vec<IpNet>,
    deny_private: bool,
}

/// One `allowDomains` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DomainRule {
    /// Lower case, without the `*.` of a wildcard.
    name: String,
    /// `*.name`: subdomains of `name`, not `name` itself.
    wildcard: bool,
    /// The entry's port; the scheme's default port when it names none.
    port: Option<u16>,
}

/// A rule that cannot be read: which entry and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// Not a CIDR.
    #[error(
        "network.allowCidrs[{index}]: expected a CIDR such as 140.82.112.0/20, found {found:?}"
    )]
    Cidr {
        /// Index in `allowCidrs`.
        index: usize,
        /// The entry.
        found: String,
    },
    /// Not a domain entry.
    #[error(
        "network.allowDomains[{index}]: expected a name such as api.github.com, *.example.com or api.example.com:8443, found {found:?}"
    )]
    Domain {
        /// Index in `allowDomains`.
        index: usize,
        /// The entry.
        found: String,
    },
    /// `none` egress has nothing to decide.
    #[error("network.egress: none allows no destination")]
    NoEgress,
}

/// Why a destination is refused. Says what was asked and which rule refused it; never holds
/// anything but names, addresses and ports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The name (or its port) is not among the allowed domains.
    #[error(
        "{host}:{port} is not among the sandbox's allowed domains ({allowed}; an entry without a port allows the scheme's default port only)"
    )]
    Name {
        /// Host asked for.
        host: String,
        /// Port asked for.
        port: u16,
        /// The allowed domains, joined.
        allowed: String,
    },
    /// An IP literal outside every allowed CIDR.
    #[error(
        "{ip} is an address, not a name: an address is reached only inside network.allowCidrs ({allowed}) or when network.allowDomains names it"
    )]
    Literal {
        /// The literal.
        ip: IpAddr,
        /// The allowed CIDRs, joined.
        allowed: String,
    },
    /// A name resolved to a private or otherwise special address no CIDR allows.
    #[error(
        "{host} resolved to {ip}, a private, loopback, link-local or metadata address no entry of network.allowCidrs names (denied whatever the name, against DNS rebinding)"
    )]
    Private {
        /// Host asked for.
        host: String,
        /// The address it resolved to.
        ip: IpAddr,
    },
    /// A DNS-over-HTTPS resolver, or the DNS-over-TLS port.
    #[error(
        "{host}:{port} is an encrypted DNS resolver (DNS over HTTPS or TLS), which would answer for names the policy does not allow; refused unless network.allowDomains names it exactly"
    )]
    EncryptedDns {
        /// Host asked for.
        host: String,
        /// Port asked for.
        port: u16,
    },
    /// The name resolved to nothing usable.
    #[error("{host} could not be resolved: {reason}")]
    Unresolved {
        /// Host asked for.
        host: String,
        /// The resolver's words.
        reason: String,
    },
}

impl Refusal {
    /// A short machine-readable kind, for audit records and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Name { .. } => "domain-not-allowed",
            Refusal::Literal { .. } => "address-not-allowed",
            Refusal::Private { .. } => "private-address",
            Refusal::EncryptedDns { .. } => "encrypted-dns",
            Refusal::Unresolved { .. } => "unresolved",
        }
    }
}

/// Parse a CIDR (`a.b.c.d/n` or an IPv6 prefix).
pub fn parse_cidr(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>().ok()
}

impl EgressRules {
    /// The rules of a policy's `network`. `none` has none: its sandbox has no route out.
    pub fn from_policy(network: &NetworkPolicy) -> Result<EgressRules, RuleError> {
        let open = match network.egress {
            EgressMode::None => return Err(RuleError::NoEgress),
            EgressMode::Open => true,
            EgressMode::Allowlist => false,
        };
        EgressRules::new(
            open,
            &network.allow_domains,
            &network.allow_cidrs,
            network.deny_private_networks,
        )
    }

    /// Rules from their parts: `open` admits any name (still checking addresses).
    pub fn new(
        open: bool,
        domains: &[String],
        cidrs: &[String],
        deny_private: bool,
    ) -> Result<EgressRules, RuleError> {
        let domains = domains
            .iter()
            .enumerate()
            .map(|(index, entry)| {
                DomainRule::parse(entry).ok_or_else(|| RuleError::Domain {
                    index,
                    found: entry.clone(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cidrs = cidrs
            .iter()
            .enumerate()
            .map(|(index, entry)| {
                parse_cidr(entry).ok_or_else(|| RuleError::Cidr {
                    index,
                    found: entry.clone(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EgressRules {
            open,
            domains,
            cidrs,
            deny_private,
        })
    }

    /// Whether `host` (a name or an IP literal, as the tool wrote it) on `port` may be asked for;
    /// `default_port` is the scheme's (443 for a tunnel, 80 for plain HTTP). A name must be
    /// among the allowed domains; an address inside an allowed CIDR or named by a domain entry
    /// (`127.0.0.1:8080`). Either way the address it reaches is checked after resolution
    /// ([`EgressRules::check_address`]).
    pub fn check_host(&self, host: &str, port: u16, default_port: u16) -> Result<(), Refusal> {
        let host = normalise_host(host);
        let named_exactly = self
            .domains
            .iter()
            .any(|d| !d.wildcard && d.name == host && d.port_matches(port, default_port));
        if let Ok(ip) = host.parse::<IpAddr>() {
            if self.open || named_exactly || self.in_cidr(ip) {
                return Ok(());
            }
            return Err(Refusal::Literal {
                ip,
                allowed: self.cidrs_text(),
            });
        }
        let encrypted_dns =
            DNS_OVER_HTTPS_HOSTS.contains(&host.as_str()) || port == DNS_OVER_TLS_PORT;
        if encrypted_dns && !named_exactly {
            return Err(Refusal::EncryptedDns { host, port });
        }
        if self.open
            || self
                .domains
                .iter()
                .any(|d| d.host_matches(&host) && d.port_matches(port, default_port))
        {
            return Ok(());
        }
        Err(Refusal::Name {
            host,
            port,
            allowed: self.domains_text(),
        })
    }

    /// Whether `host`, resolved to `ip`, may be reached at that address.
    pub fn check_address(&self, host: &str, ip: IpAddr) -> Result<(), Refusal> {
        if self.address_ok(ip) {
            return Ok(());
        }
        Err(Refusal::Private {
            host: normalise_host(host),
            ip,
        })
    }

    /// The domains, as the policy wrote them (what a refusal lists).
    pub fn domains_text(&self) -> String {
        if self.domains.is_empty() {
            return "none".into();
        }
        self.domains
            .iter()
            .map(DomainRule::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn cidrs_text(&self) -> String {
        if self.cidrs.is_empty() {
            return "none".into();
        }
        self.cidrs
            .iter()
            .map(IpNet::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn in_cidr(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.cidrs.iter().any(|c| c.contains(&ip))
    }

    /// A public address, or a special one an allowed CIDR names. Link-local (the metadata
    /// address) is refused even when private networks are not denied.
    fn address_ok(&self, ip: IpAddr) -> bool {
        if self.in_cidr(ip) {
            return true;
        }
        if is_link_local(ip) || ip.is_unspecified() || ip.is_multicast() {
            return false;
        }
        !(self.deny_private && is_private(ip))
    }
}

impl DomainRule {
    fn parse(entry: &str) -> Option<DomainRule> {
        let entry = entry.trim().to_ascii_lowercase();
        let (name, port) = match entry.rsplit_once(':') {
            Some((name, port)) => (
                name.to_string(),
                Some(port.parse::<u16>().ok().filter(|p| *p > 0)?),
            ),
            None => (entry, None),
        };
        let (name, wildcard) = match name.strip_prefix("*.") {
            Some(base) => (base.to_string(), true),
            None => (name, false),
        };
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        (!name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok)).then_some(
            DomainRule {
                name,
                wildcard,
                port,
            },
        )
    }

    fn host_matches(&self, host: &str) -> bool {
        if self.wildcard {
            host.len() > self.name.len() + 1
                && host.ends_with(&self.name)
                && host.as_bytes()[host.len() - self.name.len() - 1] == b'.'
        } else {
            host == self.name
        }
    }

    fn port_matches(&self, port: u16, default_port: u16) -> bool {
        port == self.port.unwrap_or(default_port)
    }
}

impl fmt::Display for DomainRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        f.write_str(&self.name)?;
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// A host as compared: lower case, without brackets or a trailing dot.
fn normalise_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn is_link_local(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// Private, loopback, link-local, shared (CGNAT), unspecified, broadcast, multicast and
/// "this network" addresses, and their IPv6 equivalents: what `denyPrivateNetworks` keeps a tool
/// from reaching.
pub fn is_private(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(a) => {
            let o = a.octets();
            a.is_private()
                || a.is_loopback()
                || a.is_link_local()
                || a.is_unspecified()
                || a.is_broadcast()
                || a.is_multicast()
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || o[0] == 0
        }
        IpAddr::V6(a) => {
            let first = a.segments()[0];
            a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(domains: &[&str], cidrs: &[&str]) -> EgressRules {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        EgressRules::new(false, &s(domains), &s(cidrs), true).unwrap()
    }

    #[test]
    fn a_name_is_allowed_on_its_entry_port_or_the_scheme_default_only() {
        let r = rules(
            &["api.github.com", "*.example.com", "git.example.org:8443"],
            &[],
        );
        assert!(r.check_host("api.github.com", 443, 443).is_ok());
        assert!(r.check_host("API.GitHub.com.", 443, 443).is_ok());
        assert!(r.check_host("api.github.com", 80, 80).is_ok());
        assert!(r.check_host("api.github.com", 22, 443).is_err());
        assert!(r.check_host("a.example.com", 443, 443).is_ok());
        assert!(
            r.check_host("example.com", 443, 443).is_err(),
            "a wildcard is subdomains only"
        );
        assert!(r.check_host("badexample.com", 443, 443).is_err());
        assert!(r.check_host("git.example.org", 8443, 443).is_ok());
        assert!(r.check_host("git.example.org", 443, 443).is_err());
        let err = r.check_host("evil.test", 443, 443).unwrap_err();
        assert_eq!(err.kind(), "domain-not-allowed");
        assert!(err.to_string().contains("evil.test:443"), "{err}");
    }

    #[test]
    fn literals_only_inside_a_cidr_and_special_addresses_only_when_a_cidr_names_them() {
        let r = rules(&["api.github.com"], &["140.82.112.0/20", "127.0.0.2/32"]);
        assert!(r.check_host("140.82.113.4", 443, 443).is_ok());
        assert!(r.check_host("8.8.8.8", 443, 443).is_err());
        assert_eq!(
            r.check_host("127.0.0.3", 80, 80).unwrap_err().kind(),
            "address-not-allowed"
        );
        assert!(
            r.check_address("api.github.com", "140.82.113.4".parse().unwrap())
                .is_ok()
        );
        assert!(
            r.check_address("api.github.com", "127.0.0.2".parse().unwrap())
                .is_ok()
        );
        for special in [
            "127.0.0.1",
            "10.1.2.3",
            "169.254.169.254",
            "::1",
            "fd00::1",
            "::ffff:10.0.0.1",
            "0.0.0.0",
            "100.64.0.1",
        ] {
            let err = r
                .check_address("api.github.com", special.parse().unwrap())
                .unwrap_err();
            assert_eq!(err.kind(), "private-address", "{special}");
        }
        // Open egress with private networks allowed: still never the metadata address.
        let open = EgressRules::new(true, &[], &[], false).unwrap();
        assert!(open.check_address("x", "10.1.2.3".parse().unwrap()).is_ok());
        assert!(
            open.check_address("x", "169.254.169.254".parse().unwrap())
                .is_err()
        );
        assert!(
            open.check_address("169.254.169.254", "169.254.169.254".parse().unwrap())
                .is_err()
        );
        // An address named by a domain entry, on its port (an MCP server on loopback).
        let named = rules(&["127.0.0.1:8080"], &[]);
        assert!(named.check_host("127.0.0.1", 8080, 80).is_ok());
        assert!(named.check_host("127.0.0.1", 9090, 80).is_err());
    }

    #[test]
    fn encrypted_dns_is_refused_unless_named_exactly() {
        let open = EgressRules::new(true, &[], &[], true).unwrap();
        assert_eq!(
            open.check_host("dns.google", 443, 443).unwrap_err().kind(),
            "encrypted-dns"
        );
        assert_eq!(
            open.check_host("example.com", 853, 443).unwrap_err().kind(),
            "encrypted-dns"
        );
        assert!(open.check_host("example.com", 443, 443).is_ok());
        let wild = rules(&["*.cloudflare-dns.com"], &[]);
        assert!(
            wild.check_host("mozilla.cloudflare-dns.com", 443, 443)
                .is_err()
        );
        let named = rules(&["dns.google"], &[]);
        assert!(named.check_host("dns.google", 443, 443).is_ok());
    }

    #[test]
    fn unreadable_entries_say_which() {
        let err =
            EgressRules::new(false, &["ok.com".into(), "bad host".into()], &[], true).unwrap_err();
        assert_eq!(
            err.to_string().split(':').next(),
            Some("network.allowDomains[1]")
        );
        let err = EgressRules::new(false, &[], &["10.0.0.0/33".into()], true).unwrap_err();
        assert!(
            err.to_string().starts_with("network.allowCidrs[0]"),
            "{err}"
        );
        for bad in [
            "",
            "*.",
            "a..b",
            "-a.com",
            "a.com:0",
            "a.com:99999",
            "a.com:x",
        ] {
            assert!(DomainRule::parse(bad).is_none(), "{bad}");
        }
    }
}
