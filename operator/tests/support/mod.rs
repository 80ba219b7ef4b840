//! Test infrastructure shared by the operator's suites: kubectl against the test cluster
//! (tests/cluster), namespaces, the operator process and the cluster's real node.
#![allow(dead_code, reason = "each suite uses a part")]

pub mod helm;
pub mod node;

#[allow(unused_imports, reason = "each suite uses a part")]
pub use toolgate_testkit::api::{authorized, grpc_client, wait_call};
#[allow(unused_imports, reason = "each suite uses a part")]
pub use toolgate_testkit::{eventually, have_cluster, kubectl, ok, root};

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the operator's log goes: a file per process under the temp dir, printed on failure.
pub fn log_file() -> Stdio {
    let path = std::env::temp_dir().join(format!("toolgate-operator-{}.log", std::process::id()));
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        Ok(f) => Stdio::from(f),
        Err(_) => Stdio::null(),
    }
}

/// The operator's log so far.
pub fn operator_log() -> String {
    std::fs::read_to_string(
        std::env::temp_dir().join(format!("toolgate-operator-{}.log", std::process::id())),
    )
    .unwrap_or_default()
}

/// The admin client of the test cluster.
pub async fn admin_client() -> kube::Client {
    let path = std::env::var_os("TOOLGATE_KUBECONFIG").expect("TOOLGATE_KUBECONFIG");
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions {
            context: Some("admin".into()),
            ..Default::default()
        },
    )
    .await
    .expect("admin config");
    kube::Client::try_from(config).expect("client")
}

/// The `toolgate-executor` built beside the test binaries (`cargo test --workspace` builds it):
/// what the executor image holds.
pub fn executor_binary() -> std::path::PathBuf {
    let operator = std::path::PathBuf::from(env!("CARGO_BIN_EXE_toolgate-operator"));
    let exe = operator.with_file_name("toolgate-executor");
    assert!(
        exe.is_file(),
        "{} is missing: build it first (cargo build -p toolgate-executor; tests/run.sh does)",
        exe.display()
    );
    exe
}

/// The `toolgate` binary beside the test binaries (`cargo test --workspace` builds it).
pub fn toolgate_cli() -> std::path::PathBuf {
    let exe = executor_binary().with_file_name("toolgate");
    assert!(
        exe.is_file(),
        "{} is missing: build it first (cargo build -p toolgate; tests/run.sh does)",
        exe.display()
    );
    exe
}

/// helm, built by tests/run.sh; in CI its absence is a failure.
pub fn helm() -> std::path::PathBuf {
    std::env::var_os("TOOLGATE_HELM")
        .map(Into::into)
        .expect("TOOLGATE_HELM: run the suite through tests/run.sh, which builds helm")
}

/// `helm template` of the chart with `args`.
pub fn helm_template(args: &[&str]) -> String {
    let out = Command::new(helm())
        .args(["template", "toolgate"])
        .arg(root().join("charts/toolgate"))
        // Offline rendering assumes an old cluster; say which one the suite runs.
        .args(["--kube-version", "1.37.2"])
        .args(args)
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The operator's namespace, service account and RBAC exactly as the Helm chart renders them.
pub fn operator_rbac() -> String {
    let rendered = helm_template(&[
        "--namespace",
        "toolgate-system",
        "--show-only",
        "templates/serviceaccount.yaml",
        "--show-only",
        "templates/rbac.yaml",
    ]);
    format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: toolgate-system}}\n---\n{rendered}")
}

/// A secrets file for the operator's file broker (`--secrets`), mode 600, holding `token` for
/// the example CredentialBinding github-issues-bot. Dropping the folder removes it.
pub fn secrets_file(token: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("secrets");
    let path = dir.path().join("secrets.yaml");
    std::fs::write(
        &path,
        format!("secret/team-a/github-issues-bot: {{token: {token}}}\n"),
    )
    .expect("secrets");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    (dir, path.display().to_string())
}

/// A running operator process; killed (SIGKILL) when dropped.
pub struct Operator {
    /// The process.
    pub child: Child,
    /// Port of its `/metrics`, `/livez`, `/readyz` on 127.0.0.1.
    pub health_port: u16,
}

/// A free port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `GET path` on loopback: (status code, body); (0, "") when nothing answers.
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (code, body)
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CRDs and the operator's ClusterRole installed, and a fresh namespace.
pub fn prepare(prefix: &str) -> String {
    let ns = toolgate_testkit::namespace(prefix);
    toolgate_testkit::apply_shared(&operator_rbac());
    ns
}

/// The operator binary for one namespace, running as its own identity (the shipped
/// least-privilege role) until dropped, its artifacts in a local folder: for the suites whose
/// calls run no pod (registration); [`node::start_operator`] runs calls on the real node.
/// `extra` adds arguments.
pub fn start_operator(namespace: &str, extra: &[&str]) -> Operator {
    let artifacts = std::env::temp_dir().join("toolgate-operator-test-artifacts");
    let mut args = vec![
        "--artifacts-dir".to_string(),
        artifacts.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    spawn_operator(namespace, &args, &[])
}

/// The operator for one namespace with its artifacts in an S3-compatible bucket at `host:port`
/// (moto): the executor in each pod uploads with the keys of a Secret created here in the
/// namespace, the operator reads back with the same; the store's address is in every call's
/// NetworkPolicy.
pub fn start_operator_s3(
    namespace: &str,
    (host, port): (&str, u16),
    bucket: &str,
    extra: &[&str],
) -> Operator {
    let secret = "toolgate-artifacts";
    ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {secret}, namespace: {namespace}}}\n\
             stringData: {{AWS_ACCESS_KEY_ID: testing, AWS_SECRET_ACCESS_KEY: testing}}\n"
        )),
    );
    let mut args: Vec<String> = [
        "--artifacts-bucket",
        bucket,
        "--artifacts-endpoint",
        &format!("http://{host}:{port}"),
        "--artifacts-egress-cidr",
        &format!("{host}/32"),
        "--artifact-secret",
        secret,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    spawn_operator(
        namespace,
        &args,
        &[
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
        ],
    )
}

fn spawn_operator(namespace: &str, args: &[String], env: &[(&str, &str)]) -> Operator {
    let health_port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_toolgate-operator"))
        .args(["--context", "operator", "--namespace", namespace])
        .arg("--health-addr")
        .arg(format!("127.0.0.1:{health_port}"))
        .arg("--lease-name")
        .arg(format!("toolgate-operator-{namespace}"))
        .args(["--lease-duration-seconds", "3"])
        .args(args)
        .envs(env.iter().copied())
        .env(
            "KUBECONFIG",
            std::env::var_os("TOOLGATE_KUBECONFIG").expect("kubeconfig"),
        )
        .stdout(Stdio::null())
        .stderr(log_file())
        .spawn()
        .expect("operator");
    Operator { child, health_port }
}

/// The phases of every ToolCall in `ns`, space-separated.
pub fn call_phases(ns: &str) -> String {
    ok(
        &[
            "get",
            "toolcalls",
            "-n",
            ns,
            "-o",
            "jsonpath={.items[*].status.phase}",
        ],
        None,
    )
}

/// Until all `calls` ToolCalls of `ns` have ended (within `within`), pause a random time of
/// `pause_ms` (from, spread) and call `kill` — up to `max_kills` times. Returns how many kills.
pub fn finish_while_killing(
    ns: &str,
    calls: usize,
    within: Duration,
    pause_ms: (u64, u64),
    max_kills: u32,
    mut kill: impl FnMut(),
) -> u32 {
    let mut seed = jiff::Timestamp::now().as_nanosecond() as u64 | 1;
    let mut random = move |range: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % range
    };
    let deadline = Instant::now() + within;
    let mut kills = 0;
    loop {
        std::thread::sleep(Duration::from_millis(pause_ms.0 + random(pause_ms.1)));
        let phases = call_phases(ns);
        let done = phases
            .split_whitespace()
            .filter(|p| *p == "Succeeded" || *p == "Failed")
            .count();
        if done == calls {
            return kills;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {calls} calls finished: {phases}"
        );
        if kills < max_kills {
            kill();
            kills += 1;
        }
    }
}

/// Wait until no pod or Secret of any call is left in `ns`.
pub fn wait_children_gone(ns: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = ok(
            &[
                "get",
                "secrets,pods",
                "-n",
                ns,
                "-l",
                "toolgate.dev/call",
                "-o",
                "name",
            ],
            None,
        );
        if left.trim().is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left behind: {left}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The API server's address (`ip:port`), as the kubeconfig names it: the machine's end of the
/// test node's link.
pub fn api_server() -> String {
    let path = std::env::var_os("TOOLGATE_KUBECONFIG").expect("kubeconfig");
    let text = std::fs::read_to_string(path).expect("kubeconfig");
    text.split("server: \"https://")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the server's address")
        .to_string()
}

pub fn jsonpath(ns: &str, object: &str, path: &str) -> String {
    kubectl(
        &["get", object, "-n", ns, "-o", &format!("jsonpath={path}")],
        None,
    )
    .1
}

pub fn wait_for(ns: &str, object: &str, path: &str, want: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got = jsonpath(ns, object, path);
        if want.contains(&got.as_str()) {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{object} {path}: expected one of {want:?}, last saw {got:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Follow WatchCall to the call's end: the event types in order.
pub async fn watch_to_end(
    api: &mut toolgate_proto::v1::toolgate_client::ToolgateClient<tonic::transport::Channel>,
    token: &str,
    id: &str,
) -> Vec<String> {
    toolgate_testkit::api::watch_events(api, token, id)
        .await
        .into_iter()
        .map(|e| e.r#type)
        .collect()
}

/// Print the namespace's objects and the operator's log (a failing test's evidence).
pub fn dump(ns: &str, kinds: &str) {
    eprintln!(
        "--- objects in {ns} ---\n{}",
        kubectl(&["get", kinds, "-n", ns, "-o", "wide"], None).1
    );
    eprintln!("--- operator log ---\n{}", operator_log());
}

/// A user's bearer token from the test control plane's kubeconfig (tests/cluster/up.sh writes
/// `- {name: agent, user: {token: …}}`).
pub fn token_of(user: &str) -> String {
    let path = std::env::var_os("TOOLGATE_KUBECONFIG").expect("kubeconfig");
    let text = std::fs::read_to_string(path).expect("kubeconfig");
    let marker = format!("- {{name: {user}, user: {{token: ");
    text.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(&marker)
                .and_then(|r| r.strip_suffix("}}"))
        })
        .unwrap_or_else(|| panic!("no token for {user}"))
        .to_string()
}

/// The admission policies (crds/admission/identity.yaml) and the example agent and reviewer
/// RBAC (operator/deploy/agent-rbac.example.yaml) applied to `ns`; the agent's identity stays
/// system:serviceaccount:team-a:fixer (tests/cluster/up.sh).
pub fn apply_agent_access(ns: &str) {
    toolgate_testkit::apply_admission_policies();
    let rbac = std::fs::read_to_string(root().join("operator/deploy/agent-rbac.example.yaml"))
        .expect("rbac")
        .replace("namespace: team-a}", &format!("namespace: {ns}}}"))
        .replace(
            &format!("{{kind: ServiceAccount, name: fixer, namespace: {ns}}}"),
            "{kind: ServiceAccount, name: fixer, namespace: team-a}",
        );
    ok(&["apply", "-f", "-"], Some(&rbac));
}

/// Wait up to 90 s for `done` to hold, looking every 300 ms.
pub fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(300));
    }
}
