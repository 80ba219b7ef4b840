//! A real Vault for the broker suites: `vault server -dev` (built by `tests/vault/build.sh`,
//! named by `TOOLGATE_VAULT_BIN`) on a free loopback port, driven with Vault's own CLI. Each
//! suite starts its own and may stop, restart, seal and unseal it. That Vault is its `minimal`
//! build; the Kubernetes secrets engine and auth method are HashiCorp's plugins in
//! `TOOLGATE_VAULT_PLUGINS`, registered by the dev server and mounted where the built-in ones were.
//!
//! In CI a missing Vault fails the suite; elsewhere the suite says how to build one and skips.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running dev-mode Vault (in-memory: a restart forgets everything, so [`TestVault::restart`]
/// hands back an empty Vault on the same address and root token).
pub struct TestVault {
    bin: PathBuf,
    plugins: PathBuf,
    /// `http://127.0.0.1:<port>`.
    pub addr: String,
    port: u16,
    /// The root token (tests configure Vault with it; toolgate never gets it).
    pub root_token: String,
    unseal_key: String,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

/// Whether a Vault binary is there; in CI its absence is a failure, never a skip.
pub fn have_vault() -> bool {
    let how = "run tests/run.sh (or eval \"$(tests/vault/build.sh)\") for a real Vault";
    crate::have("TOOLGATE_VAULT_BIN", "no Vault", how)
        && crate::have("TOOLGATE_VAULT_PLUGINS", "no Vault plugins", how)
}

/// The plugin registered (by its file name) for Vault's Kubernetes secrets engine.
const SECRETS_PLUGIN: &str = "vault-plugin-secrets-kubernetes";
/// The plugin registered for Vault's Kubernetes auth method.
const AUTH_PLUGIN: &str = "vault-plugin-auth-kubernetes";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl TestVault {
    /// Start a dev server; panics with its log if it does not come up.
    pub fn start() -> TestVault {
        let bin =
            PathBuf::from(std::env::var_os("TOOLGATE_VAULT_BIN").expect("TOOLGATE_VAULT_BIN"));
        let plugins = PathBuf::from(
            std::env::var_os("TOOLGATE_VAULT_PLUGINS").expect("TOOLGATE_VAULT_PLUGINS"),
        );
        let port = free_port();
        let mut v = TestVault {
            bin,
            plugins,
            addr: format!("http://127.0.0.1:{port}"),
            port,
            root_token: format!("root-{:016x}", rand_u64()),
            unseal_key: String::new(),
            child: None,
            dir: tempfile::tempdir().expect("tempdir"),
        };
        v.spawn();
        v
    }

    fn spawn(&mut self) {
        let log = self.dir.path().join("vault.log");
        let out = std::fs::File::create(&log).expect("log");
        let child = Command::new(&self.bin)
            .args([
                "server",
                "-dev",
                &format!("-dev-root-token-id={}", self.root_token),
                &format!("-dev-listen-address=127.0.0.1:{}", self.port),
                "-dev-no-store-token",
                &format!("-dev-plugin-dir={}", self.plugins.display()),
                "-dev-plugin-init",
            ])
            .env("HOME", self.dir.path())
            .env_remove("VAULT_TOKEN")
            .current_dir(self.dir.path())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .stdin(Stdio::null())
            // Its own process group, with the plugin processes it starts: stopping it stops them
            // (killed alone, Vault leaves its plugins running, reparented to init).
            .process_group(0)
            .spawn()
            .expect("vault server -dev starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(key) = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("Unseal Key: "))
                && self.cli(&["status"]).0
            {
                self.unseal_key = key.trim().to_string();
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "vault server -dev did not come up:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Run Vault's CLI as root against this server: (success, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String, String) {
        self.cli_as(&self.root_token, args)
    }

    /// Run Vault's CLI with this token.
    pub fn cli_as(&self, token: &str, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(&self.bin)
            .args(args)
            .env("VAULT_ADDR", &self.addr)
            .env("VAULT_TOKEN", token)
            .env("HOME", self.dir.path())
            .env("VAULT_CLIENT_TIMEOUT", "10s")
            .stdin(Stdio::null())
            .output()
            .expect("vault cli");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The CLI, which must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.cli(args);
        assert!(ok, "vault {args:?}: {err}{out}");
        out
    }

    /// Enable an engine or auth method (`args`), unless it is mounted there already. An external
    /// plugin starts as its own process on its first mount, which a loaded machine can take
    /// longer than the CLI's timeout for: tried again (a mount that did land answers "already in
    /// use") for up to a minute.
    fn mount(&self, args: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (ok, out, err) = self.cli(args);
            if ok || err.contains("path is already in use") {
                return;
            }
            assert!(Instant::now() < deadline, "vault {args:?}: {err}{out}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Write a policy from HCL text.
    pub fn policy(&self, name: &str, hcl: &str) {
        let file = self.dir.path().join(format!("{name}.hcl"));
        std::fs::write(&file, hcl).expect("policy file");
        self.ok(&["policy", "write", name, &file.display().to_string()]);
    }

    /// A token with these policies and TTL (`"1h"`).
    pub fn token(&self, policies: &[&str], ttl: &str) -> String {
        let mut args = vec!["token", "create", "-field=token", "-ttl", ttl];
        for p in policies {
            args.push("-policy");
            args.push(p);
        }
        self.ok(&args).trim().to_string()
    }

    /// The lease ids under a prefix (`kubernetes/creds/agent/`), through `sys/leases/lookup`.
    pub fn leases(&self, prefix: &str) -> Vec<String> {
        let prefix = prefix.trim_end_matches('/');
        let (ok, out, _) = self.cli(&[
            "list",
            "-format=json",
            &format!("sys/leases/lookup/{prefix}"),
        ]);
        if !ok {
            return Vec::new(); // Vault answers 404 for a prefix with no leases.
        }
        let ids: Vec<String> = serde_json::from_str(&out).expect("a JSON list of lease ids");
        ids.into_iter().map(|id| format!("{prefix}/{id}")).collect()
    }

    /// The test API server as Vault reaches it: (URL, CA certificate file, admin token).
    fn cluster() -> (String, String, String) {
        let get = |path: &str| {
            crate::ok(
                &["config", "view", "--raw", "-o", &format!("jsonpath={path}")],
                None,
            )
        };
        (
            get("{.clusters[0].cluster.server}"),
            get("{.clusters[0].cluster.certificate-authority}"),
            get("{.users[?(@.name==\"admin\")].user.token}"),
        )
    }

    /// Vault's Kubernetes secrets engine at `kubernetes/`, minting tokens on the test API server,
    /// with role `role`: a service account Vault creates in the namespace it is asked for, bound
    /// to the ClusterRole `view`, deleted when the lease is revoked.
    pub fn kubernetes_engine(&self, role: &str) {
        let (server, ca, admin) = Self::cluster();
        self.mount(&["secrets", "enable", "-path=kubernetes", SECRETS_PLUGIN]);
        self.ok(&[
            "write",
            "kubernetes/config",
            &format!("kubernetes_host={server}"),
            &format!("kubernetes_ca_cert=@{ca}"),
            &format!("service_account_jwt={admin}"),
            "disable_local_ca_jwt=true",
        ]);
        self.ok(&[
            "write",
            &format!("kubernetes/roles/{role}"),
            "allowed_kubernetes_namespaces=*",
            "kubernetes_role_type=ClusterRole",
            "kubernetes_role_name=view",
            "token_default_ttl=10m",
        ]);
    }

    /// Vault's Kubernetes auth method at `auth/kubernetes/`, checking tokens with a TokenReview
    /// against the test API server; `role` admits `namespace/service_account` with `policies`.
    pub fn kubernetes_auth(&self, role: &str, namespace: &str, account: &str, policies: &str) {
        let (server, ca, admin) = Self::cluster();
        self.mount(&["auth", "enable", "-path=kubernetes", AUTH_PLUGIN]);
        self.ok(&[
            "write",
            "auth/kubernetes/config",
            &format!("kubernetes_host={server}"),
            &format!("kubernetes_ca_cert=@{ca}"),
            &format!("token_reviewer_jwt={admin}"),
            "disable_local_ca_jwt=true",
        ]);
        self.ok(&[
            "write",
            &format!("auth/kubernetes/role/{role}"),
            &format!("bound_service_account_names={account}"),
            &format!("bound_service_account_namespaces={namespace}"),
            &format!("policies={policies}"),
            "audience=vault",
            "ttl=1h",
        ]);
    }

    /// Stop the server (it forgets everything).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Ok(pid) = i32::try_from(c.id()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start it again, empty, on the same address and root token.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Seal it: every request is refused (503) until [`TestVault::unseal`].
    pub fn seal(&self) {
        self.ok(&["operator", "seal"]);
    }

    /// Unseal it with the dev server's key.
    pub fn unseal(&self) {
        self.ok(&["operator", "unseal", &self.unseal_key]);
    }
}

impl Drop for TestVault {
    fn drop(&mut self) {
        self.stop();
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish()
}
