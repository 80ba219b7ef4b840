//! The test cluster's real node (tests/cluster/up.sh): a kubelet with containerd and runc in its
//! own network namespace, scheduled to by the real kube-scheduler.
//!
//! The node is tainted and labelled `toolgate.dev/test-node`; a call's pod lands on it through
//! the RuntimeClass `RUNTIME_CLASS` (runc, with that node selector and toleration) named by its
//! SandboxPolicy ([`on_the_node`] puts a suite's policies there). The executor image is
//! this build's `toolgate-executor` with the files `executor/Containerfile` installs
//! (tests/cluster/node/image.py), imported into the node's containerd once per build.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};
use toolgate_testkit::moto::Moto;

use super::{executor_binary, root};

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
                "",
                &PathBuf::from(env!("CARGO_BIN_EXE_toolgate-operator")),
                &[],
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
            let dir = executor_binary()
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
    let extras: Vec<Extra> = probe
        .into_iter()
        .map(|p| Extra::File(p, "/usr/local/bin/tcp-probe"))
        .collect();
    let variant = if extras.is_empty() { "" } else { "-probe" };
    build_image("executor", variant, &executor_binary(), &extras)
}

/// What a suite adds to the executor image, as a team whose tools need more builds `FROM` it.
pub enum Extra {
    /// A file of this machine at a path of the image.
    File(PathBuf, &'static str),
    /// A folder of this machine at the same path in the image (a virtualenv, node_modules).
    Tree(PathBuf),
    /// A Debian package of this machine, with the packages it depends on.
    Package(&'static str),
}

/// The executor image with `extras`, tagged `toolgate.test/executor-<variant>:<digest>`: built
/// and imported once per test process and set of inputs.
pub fn executor_image_with(variant: &str, extras: &[Extra]) -> String {
    static IMAGES: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
    // A suite whose image failed to build panicked holding it: the others try again.
    let mut images = IMAGES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, tag)) = images.iter().find(|(v, _)| v == variant) {
        return tag.clone();
    }
    let tag = build_image(
        "executor",
        &format!("-{variant}"),
        &executor_binary(),
        extras,
    );
    images.push((variant.to_string(), tag.clone()));
    tag
}

/// What identifies a folder's content for an image's tag: each file's path, size and
/// modification time.
fn digest_tree(digest: &mut Sha256, dir: &std::path::Path) {
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)
            .expect("read a folder of the image")
            .flatten()
        {
            let path = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path);
            } else {
                let mtime = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
                seen.push(format!("{} {} {:?}", path.display(), meta.len(), mtime));
            }
        }
    }
    seen.sort();
    digest.update(seen.join("\n"));
}

/// The image of `component` (`<component>/Containerfile`, its binary from `binary`'s folder,
/// `extras` added), tagged by the digest of its inputs and imported once.
fn build_image(
    component: &str,
    variant: &str,
    binary: &std::path::Path,
    extras: &[Extra],
) -> String {
    let containerfile = root().join(component).join("Containerfile");
    let mut digest = Sha256::new();
    let inputs = [
        binary.to_path_buf(),
        containerfile.clone(),
        root().join("tests/cluster/node/image.py"),
    ];
    for input in &inputs {
        digest.update(std::fs::read(input).expect("read an input of the image"));
    }
    for extra in extras {
        match extra {
            Extra::File(src, dest) => {
                digest.update(std::fs::read(src).expect("read an input of the image"));
                digest.update(dest);
            }
            Extra::Tree(dir) => digest_tree(&mut digest, dir),
            Extra::Package(name) => digest.update(name),
        }
    }
    let tag = format!(
        "toolgate.test/{component}{variant}:{}",
        &hex::encode(digest.finalize())[..16]
    );
    let dir = binary.parent().expect("target dir").to_path_buf();
    let lock = std::fs::File::create(dir.join(format!("toolgate-{component}{variant}-image.lock")))
        .expect("lock");
    lock.lock().expect("lock the image build");
    let listed = ctr(&["images", "ls", "-q"]);
    if String::from_utf8_lossy(&listed.stdout)
        .lines()
        .any(|l| l == format!("docker.io/{tag}") || l == tag)
    {
        return tag;
    }
    let tar = dir.join(format!("toolgate-{component}{variant}-image.tar"));
    let mut build = Command::new("python3");
    build
        .arg(root().join("tests/cluster/node/image.py"))
        .args(["--tag", &tag, "--containerfile"])
        .arg(&containerfile)
        .arg("--target")
        .arg(&dir)
        .arg("--out")
        .arg(&tar);
    for extra in extras {
        match extra {
            Extra::File(src, dest) => build.arg("--add").arg(format!("{}:{dest}", src.display())),
            Extra::Tree(dir) => {
                build
                    .arg("--add")
                    .arg(format!("{}:{}", dir.display(), dir.display()))
            }
            Extra::Package(name) => build.arg("--package").arg(name),
        };
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

/// `manifests` with every SandboxPolicy putting its calls on the real node (its RuntimeClass in
/// place of any other): how a suite's policies, the examples' among them, reach this cluster.
pub fn on_the_node(manifests: &str) -> String {
    manifests
        .replace("  runtimeClassName: gvisor\n", "")
        .replace(
            "\nspec:\n  mode: ",
            &format!("\nspec:\n  runtimeClassName: {RUNTIME_CLASS}\n  mode: "),
        )
}

/// The example sandbox policies in `ns`, on the real node.
pub fn example_policies(ns: &str) -> String {
    on_the_node(
        &std::fs::read_to_string(root().join("examples/sandbox-policies.yaml"))
            .expect("examples/sandbox-policies.yaml")
            .replace("namespace: team-a}", &format!("namespace: {ns}}}")),
    )
}

/// An operator for `ns` (started as [`super::start_operator_s3`], with `extra` arguments) whose
/// calls run on the real node in the executor image, their artifacts in `bucket` of a moto on
/// the machine's end of the node's link; the RuntimeClass installed. Both end when dropped.
pub fn start_operator(ns: &str, bucket: &str, extra: &[&str]) -> (super::Operator, Moto) {
    let store = artifact_store(bucket);
    let operator = operator_for(ns, &store, bucket, extra);
    (operator, store)
}

/// A moto on the machine's end of the node's link with `bucket` made, the RuntimeClass
/// installed: what [`operator_for`] needs.
pub fn artifact_store(bucket: &str) -> Moto {
    install_runtime_class();
    let store = Moto::start(&host_ip());
    store.create_bucket(bucket);
    store
}

/// Another operator for `ns` like [`start_operator`]'s, on the same store (a restart, a
/// standby).
pub fn operator_for(ns: &str, store: &Moto, bucket: &str, extra: &[&str]) -> super::Operator {
    let image = executor_image();
    let mut args = vec!["--executor-image", image.as_str()];
    args.extend_from_slice(extra);
    super::start_operator_s3(ns, (&store.host, store.port), bucket, &args)
}

/// The pods of `ns` whose container the kubelet started, from its `Started` events: (pod name,
/// pod uid), one entry per start. What ran on the node, whatever became of the pods since.
pub fn pods_started(ns: &str) -> Vec<(String, String)> {
    let listed = super::kubectl(
        &[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            "reason=Started,involvedObject.kind=Pod",
            "-o",
            "jsonpath={range .items[*]}{.involvedObject.name} {.involvedObject.uid} {.count}{\"\\n\"}{end}",
        ],
        None,
    )
    .1;
    let mut started = Vec::new();
    for line in listed.lines() {
        let mut f = line.split_whitespace();
        let (Some(pod), Some(uid)) = (f.next(), f.next()) else {
            continue;
        };
        // The kubelet folds a repeated event into one with a count.
        let count = f.next().and_then(|c| c.parse().ok()).unwrap_or(1usize);
        started.extend(std::iter::repeat_n(
            (pod.to_string(), uid.to_string()),
            count.max(1),
        ));
    }
    started
}

/// The starts of pod `pod` in `ns` ([`pods_started`]), once at least `at_least` are recorded
/// (events reach the API server a moment after the container starts) or 30 s passed.
pub fn starts_of(ns: &str, pod: &str, at_least: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let uids: Vec<String> = pods_started(ns)
            .into_iter()
            .filter(|(p, _)| p == pod)
            .map(|(_, uid)| uid)
            .collect();
        if uids.len() >= at_least || std::time::Instant::now() > deadline {
            return uids;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// The executor image's user (`executor/Containerfile`): the one tools run as.
pub const IMAGE_USER: &str = "65532:65532";

/// A hostPath PersistentVolume at a folder of this machine, bound to a claim: a team's checkout
/// as the workspace of the calls whose SandboxPolicy names the claim (`workspaceClaimName`).
/// The volume is deleted when dropped (the claim goes with its namespace).
pub struct WorkspaceVolume {
    pv: String,
}

impl Drop for WorkspaceVolume {
    fn drop(&mut self) {
        let _ = super::kubectl(&["delete", "pv", &self.pv, "--wait=false"], None);
    }
}

/// Make `dir` the volume of claim `claim` in `ns`, owned by the image's user as a checkout is by
/// the CI user who made it, and wait until the claim is bound.
pub fn workspace_volume(ns: &str, claim: &str, dir: &std::path::Path) -> WorkspaceVolume {
    let owned = Command::new("chown")
        .args(["-R", IMAGE_USER])
        .arg(dir)
        .status()
        .expect("chown");
    assert!(owned.success(), "chown {}", dir.display());
    let pv = format!("{claim}-{ns}");
    super::ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {pv}}}\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: Retain\n  storageClassName: \"\"\n  hostPath: {{path: {}, type: Directory}}\n  claimRef: {{namespace: {ns}, name: {claim}}}\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {claim}, namespace: {ns}}}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: \"\"\n  volumeName: {pv}\n  resources: {{requests: {{storage: 1Gi}}}}\n",
            dir.display()
        )),
    );
    super::eventually(ns, &format!("pvc/{claim}"), "{.status.phase}", "Bound");
    WorkspaceVolume { pv }
}

/// Each of `calls` in `ns` ran in a pod of its own (`tg-<call>`), bound by the scheduler to the
/// real node (its `Scheduled` event); `refused` never had one.
pub fn ran_on_the_node(ns: &str, calls: &[&str], refused: &[&str]) {
    let scheduled = super::kubectl(
        &[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            "reason=Scheduled",
            "-o",
            "jsonpath={range .items[*]}{.involvedObject.name} {.message}{\"\\n\"}{end}",
        ],
        None,
    )
    .1;
    for call in calls {
        let pod = format!("tg-{call}");
        let bound: Vec<&str> = scheduled
            .lines()
            .filter(|l| l.split_whitespace().next() == Some(pod.as_str()))
            .collect();
        assert_eq!(bound.len(), 1, "{pod}: {scheduled}");
        assert!(bound[0].ends_with(&format!(" to {}", NODE)), "{bound:?}");
    }
    for call in refused {
        let pod = format!("tg-{call} ");
        assert!(!scheduled.contains(&pod), "{call} had a pod: {scheduled}");
    }
}
