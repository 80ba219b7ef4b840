//! The test cluster's real node (tests/cluster/up.sh): a kubelet with containerd and runc in its
//! own network namespace, scheduled to by the real kube-scheduler.
//!
//! The node is tainted and labelled `toolgate.dev/test-node`; a call's pod lands on it through
//! the RuntimeClass `RUNTIME_CLASS` (runc, with that node selector and toleration) named by its
//! SandboxPolicy, so the node emulator's suites and this node never meet. The executor image is
//! this build's `toolgate-executor` with the files `executor/Containerfile` installs
//! (tests/cluster/node/image.py), imported into the node's containerd once per build.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::{node_emulator, root};

/// The RuntimeClass that puts a pod on the real node.
pub const RUNTIME_CLASS: &str = "toolgate-test-node";
/// The node's name (the kubelet's `--hostname-override`).
pub const NODE: &str = "toolgate-node";

/// Whether the test cluster has its real node; in CI its absence is a failure, never a skip.
pub fn have_node() -> bool {
    toolgate_testkit::have(
        "TOOLGATE_NODE_CONTAINERD",
        "no test node",
        "run tests/run.sh (tests/cluster/up.sh starts the test node)",
    )
}

/// The machine's end of the node's link: what pods reach this machine at (the artifact store).
pub fn host_ip() -> String {
    std::env::var("TOOLGATE_NODE_HOST_IP").expect("TOOLGATE_NODE_HOST_IP")
}

/// The node's own address on the link (the machine's end is `.1`, the node `.2`).
pub fn node_ip() -> String {
    let host = host_ip();
    let (net, _) = host.rsplit_once('.').expect("an IPv4 address");
    format!("{net}.2")
}

/// Two more addresses of this machine on the node's link (up.sh): test hosts.
pub fn test_hosts() -> (String, String) {
    let hosts = std::env::var("TOOLGATE_NODE_TEST_HOSTS").expect("TOOLGATE_NODE_TEST_HOSTS");
    let mut it = hosts.split_whitespace().map(str::to_string);
    (
        it.next().expect("a first test host"),
        it.next().expect("a second test host"),
    )
}

fn containerd_socket() -> PathBuf {
    std::env::var_os("TOOLGATE_NODE_CONTAINERD")
        .map(Into::into)
        .expect("TOOLGATE_NODE_CONTAINERD")
}

fn ctr(args: &[&str]) -> std::process::Output {
    Command::new("ctr")
        .arg("--address")
        .arg(containerd_socket())
        .args(["-n", "k8s.io"])
        .args(args)
        .output()
        .expect("ctr runs (Debian's containerd package; tests/cluster/node/install.sh)")
}

/// The executor image of this build on the node: built and imported on first use, its tag the
/// digest of what it is made from (the executor binary, the Containerfile, the image builder),
/// so a rebuilt executor is a new image and the same one is imported
/// once whichever suite asks first (a lock file orders the test processes).
pub fn executor_image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| build_executor_image(None)).clone()
}

/// The operator image of this build (`operator/Containerfile`), as the chart installs it.
pub fn operator_image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            build_image(
                "operator",
                &PathBuf::from(env!("CARGO_BIN_EXE_toolgate-operator")),
                None,
            )
        })
        .clone()
}

/// The executor image with `tcp-probe` (tests/cluster/node/tcp-probe.c, built static here) at
/// /usr/local/bin: the NetworkPolicy suite's tool that tries a connection, and its listener.
pub fn probe_image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let source = root().join("tests/cluster/node/tcp-probe.c");
            let dir = node_emulator::executor_binary()
                .parent()
                .expect("target dir")
                .join("toolgate-tcp-probe");
            std::fs::create_dir_all(&dir).expect("probe dir");
            let binary = dir.join("tcp-probe");
            let built = Command::new("gcc")
                .args(["-static", "-O2", "-o"])
                .arg(&binary)
                .arg(&source)
                .output()
                .expect("gcc runs (tests/cluster/node/install.sh installs it)");
            assert!(
                built.status.success(),
                "gcc: {}",
                String::from_utf8_lossy(&built.stderr)
            );
            build_executor_image(Some(binary))
        })
        .clone()
}

fn build_executor_image(probe: Option<PathBuf>) -> String {
    build_image("executor", &node_emulator::executor_binary(), probe)
}

/// The image of `component` (`<component>/Containerfile`, its binary from `binary`'s folder,
/// optionally `tcp-probe` added), tagged by the digest of its inputs and imported once.
fn build_image(component: &str, binary: &std::path::Path, probe: Option<PathBuf>) -> String {
    let containerfile = root().join(component).join("Containerfile");
    let mut digest = Sha256::new();
    let mut inputs = vec![
        binary.to_path_buf(),
        containerfile.clone(),
        root().join("tests/cluster/node/image.py"),
    ];
    inputs.extend(probe.clone());
    for input in &inputs {
        digest.update(std::fs::read(input).expect("read an input of the image"));
    }
    let tag = format!(
        "toolgate.test/{component}{}:{}",
        if probe.is_some() { "-probe" } else { "" },
        &hex::encode(digest.finalize())[..16]
    );
    let dir = binary.parent().expect("target dir").to_path_buf();
    let lock =
        std::fs::File::create(dir.join(format!("toolgate-{component}-image.lock"))).expect("lock");
    lock.lock().expect("lock the image build");
    let listed = ctr(&["images", "ls", "-q"]);
    if String::from_utf8_lossy(&listed.stdout)
        .lines()
        .any(|l| l == format!("docker.io/{tag}") || l == tag)
    {
        return tag;
    }
    let tar = dir.join(format!("toolgate-{component}-image.tar"));
    let mut build = Command::new("python3");
    build
        .arg(root().join("tests/cluster/node/image.py"))
        .args(["--tag", &tag, "--containerfile"])
        .arg(&containerfile)
        .arg("--target")
        .arg(&dir)
        .arg("--out")
        .arg(&tar);
    if let Some(p) = &probe {
        build
            .arg("--add")
            .arg(format!("{}:/usr/local/bin/tcp-probe", p.display()));
    }
    let built = build.output().expect("python3 runs");
    assert!(
        built.status.success(),
        "image.py: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let imported = ctr(&["images", "import", &tar.display().to_string()]);
    assert!(
        imported.status.success(),
        "ctr images import: {}",
        String::from_utf8_lossy(&imported.stderr)
    );
    let _ = std::fs::remove_file(&tar);
    tag
}

/// SandboxPolicy `name` in `ns`: read-only, no network, calls run on the real node (through
/// its RuntimeClass).
pub fn sandbox_policy(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: toolgate.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  \
         mode: read_only\n  runtimeClassName: {RUNTIME_CLASS}\n  \
         filesystem: {{cwd: workspace, readRoots: [workspace], writeRoots: []}}\n  network: {{egress: none}}\n  \
         environment: {{inheritedEnv: [PATH]}}\n  \
         process: {{timeoutMs: 15000, maxMemoryMb: 128, maxProcesses: 8, maxStdoutBytes: 65536, maxStderrBytes: 65536}}\n"
    )
}

/// The RuntimeClass of the real node, applied once (server-side: suites run in parallel).
pub fn install_runtime_class() {
    toolgate_testkit::apply_shared(&format!(
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {{name: {RUNTIME_CLASS}}}\nhandler: runc\n\
         scheduling:\n  nodeSelector: {{toolgate.dev/test-node: \"true\"}}\n  \
         tolerations: [{{key: toolgate.dev/test-node, operator: Equal, value: \"true\", effect: NoSchedule}}]\n"
    ));
}
