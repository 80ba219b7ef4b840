//! How the embedded runtime is set up.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::broker::CredentialBroker;

/// How the embedded runtime is set up.
pub struct Config {
    /// Folder of manifests (tools, grants, sandbox policies, credential bindings).
    pub manifests: PathBuf,
    /// Data folder: the store, event logs, artifacts, per-call run folders.
    pub data: PathBuf,
    /// The workspace the sandbox policies' roots refer to.
    pub workspace: PathBuf,
    /// The executor command (program and leading arguments), run inside the sandbox.
    pub executor: Vec<OsString>,
    /// Where credentials come from.
    pub broker: Arc<dyn CredentialBroker>,
    /// How often the manifests folder is checked for changes.
    pub reload_interval: Duration,
    /// Where call spans go (nowhere by default).
    pub tracer: toolgate_api::trace::CallTracer,
    /// Sandboxes kept started ahead of demand per sandbox plan (each runs one call, then is
    /// destroyed); 0 starts every sandbox when its call needs it.
    pub warm_sandboxes: usize,
    /// The host folder under which the sandboxes' run files go (each call's spec, credential
    /// and result while its sandbox lives): in a folder of this runtime's own,
    /// [`crate::slot::run_folder_in`], emptied when the runtime starts; nothing else in it is
    /// touched. `None`: [`crate::slot::default_run_folder`] of the data folder, on a memory
    /// filesystem.
    pub runs: Option<PathBuf>,
    /// The nameservers each call's egress proxy resolves names with; empty: the system's
    /// resolver (`/etc/resolv.conf`).
    pub egress_nameservers: Vec<std::net::SocketAddr>,
    /// CA certificates (PEM files) the egress proxies trust, beside the system's roots, for the
    /// upstreams whose TLS they intercept to deliver a credential.
    pub egress_upstream_ca: Vec<PathBuf>,
}
