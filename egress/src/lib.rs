//! The per-call egress proxy: the only route out of a sandbox whose SandboxPolicy allows egress
//! by name.
//!
//! A tool's HTTP client talks to it as to any forward proxy (`HTTPS_PROXY`, `HTTP_PROXY`): a
//! `CONNECT host:port` for TLS, an absolute-form request for plain HTTP. The proxy decides each
//! connection under the call's rules ([`toolgate_contract::egress::EgressRules`]): the name and
//! port the tool asked for, then — after resolving the name itself, once per connection — the
//! address it would reach. A refused connection is answered `403` with the reason in words; an
//! allowed one is tunnelled untouched (TLS) or forwarded with `Connection: close`, so every
//! request to a new host is a new connection the proxy decides. Every connection is an audit
//! record ([`Record`]): host, port, method, path without its query, address, decision, bytes.
//!
//! One proxy serves one call and ends with it: its rules and records are that call's alone.

mod inject;
mod proxy;
mod record;
mod resolve;

pub use inject::{Injection, InterceptError, Interception, Pending, upstream_tls};
pub use proxy::{Proxy, Served};
pub use record::{Decision, Record, Records, fold, observe, refusals};
pub use resolve::{Resolver, ResolverError};
