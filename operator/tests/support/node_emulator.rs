//! The node emulator: test infrastructure that plays the kubelet for the operator's pods in the
//! suites that do not yet run on the test cluster's real node (`support::node`, tests/cluster).
//!
//! It registers one Node, binds the namespace's pending toolgate pods to it (there is no
//! scheduler either), materializes their ConfigMap, Secret and emptyDir volumes into a temporary
//! folder and mounts a PersistentVolumeClaim's bound hostPath volume, runs the container's command — the real `toolgate-executor` — inside the same Linux
//! sandbox as the embedded runtime (volumes at their mount paths, `/dev/termination-log` bound to
//! a file), honors `activeDeadlineSeconds`, and writes pod status the way a kubelet does:
//! Pending → Running → terminated with exit code, reason and termination message (4 KiB at most).
//!
//! What it does not prove: image pulls and the image's contents (the executor binary comes from
//! this build), NetworkPolicy enforcement (no CNI plugin runs: a pod whose policy allows no
//! egress gets no network, one that allows any address gets the host's, ports and excepted
//! ranges are not enforced), the pod security fields' enforcement by a container runtime (the sandbox applies its
//! own: no capabilities, seccomp, no new privileges), resource requests' scheduling.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use toolgate_sandbox::plan::{Bind, Limits, Network, SandboxPlan};

/// The emulated node's name.
pub const NODE: &str = "toolgate-emulated-node";

/// A running emulator; stops when dropped.
pub struct NodeEmulator {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Pods it ran: (name, uid) → exit code.
    pub ran: Arc<Mutex<BTreeMap<(String, String), i32>>>,
}

impl Drop for NodeEmulator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the emulator needs to know about the "node".
#[derive(Clone)]
pub struct NodeConfig {
    /// The namespace whose pods it runs.
    pub namespace: String,
    /// The executor binary standing in for the image's `toolgate-executor`.
    pub executor: PathBuf,
    /// Host folders the node shares with pods at the same path (the operator's artifact folder).
    pub shared: Vec<PathBuf>,
}

/// The admin client of the test control plane.
pub async fn admin_client() -> Client {
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
    Client::try_from(config).expect("client")
}

/// The `toolgate-executor` built beside the test binaries (`cargo test --workspace` builds it).
pub fn executor_binary() -> PathBuf {
    let operator = PathBuf::from(env!("CARGO_BIN_EXE_toolgate-operator"));
    let exe = operator.with_file_name("toolgate-executor");
    assert!(
        exe.is_file(),
        "{} is missing: build it first (cargo build -p toolgate-executor; tests/run.sh does)",
        exe.display()
    );
    exe
}

/// Start the emulator for a namespace.
pub fn start(config: NodeConfig) -> NodeEmulator {
    let stop = Arc::new(AtomicBool::new(false));
    let ran = Arc::new(Mutex::new(BTreeMap::new()));
    let (s, r) = (stop.clone(), ran.clone());
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(run(config, s, r));
    });
    NodeEmulator {
        stop,
        thread: Some(thread),
        ran,
    }
}

async fn register_node(client: &Client) {
    let nodes = Api::<Node>::all(client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, "toolgate.dev/emulated": "true"}},
        // The scheduler leaves this node alone: the emulator binds its namespace's pods itself.
        "spec": {"taints": [{"key": "toolgate.dev/emulated", "value": "true", "effect": "NoSchedule"}]},
    }))
    .expect("node");
    let _ = nodes.create(&PostParams::default(), &node).await;
    let status = serde_json::json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "NodeEmulatorReady",
                        "message": "toolgate's test node emulator", "lastHeartbeatTime": now(), "lastTransitionTime": now()}],
        "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
        "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
    }});
    let _ = nodes
        .patch_status(NODE, &PatchParams::default(), &Patch::Merge(&status))
        .await;
}

fn now() -> String {
    // Kubernetes times have second precision.
    let t = jiff::Timestamp::now();
    jiff::Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

async fn run(
    config: NodeConfig,
    stop: Arc<AtomicBool>,
    ran: Arc<Mutex<BTreeMap<(String, String), i32>>>,
) {
    let client = admin_client().await;
    register_node(&client).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &config.namespace);
    let running: Arc<Mutex<HashMap<String, i32>>> = Arc::default();
    let started: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    while !stop.load(Ordering::SeqCst) {
        let list = match pods
            .list(&ListParams::default().labels("toolgate.dev/call"))
            .await
        {
            Ok(l) => l.items,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let present: std::collections::HashSet<String> = list
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        // A deleted pod's processes are killed, as a kubelet would.
        for (name, pgid) in running.lock().expect("lock").iter() {
            if !present.contains(name) {
                // SAFETY: signalling the sandbox's own process group.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
            }
        }
        for pod in list {
            let Some(name) = pod.metadata.name.clone() else {
                continue;
            };
            let spec = pod.spec.clone().unwrap_or_default();
            if pod.metadata.deletion_timestamp.is_some() {
                // As a kubelet does: stop the containers, then confirm the deletion.
                if let Some(pgid) = running.lock().expect("lock").get(&name) {
                    // SAFETY: signalling the sandbox's own process group.
                    unsafe { libc::kill(-pgid, libc::SIGKILL) };
                }
                let _ = pods
                    .delete(&name, &kube::api::DeleteParams::default().grace_period(0))
                    .await;
                continue;
            }
            if spec.node_name.is_none() {
                let binding = serde_json::json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
                });
                let _ = pods
                    .create_subresource::<_, serde_json::Value>(
                        "binding",
                        &name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await;
                continue;
            }
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            // A pod the scheduler bound to the real test node is the kubelet's, not ours.
            if phase == "Succeeded" || phase == "Failed" || spec.node_name.as_deref() != Some(NODE)
            {
                continue;
            }
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if !started.lock().expect("lock").insert(uid.clone()) {
                continue;
            }
            let (client, config, running, ran) =
                (client.clone(), config.clone(), running.clone(), ran.clone());
            tokio::spawn(async move {
                let code = run_pod(&client, &config, &pod, &running).await;
                ran.lock().expect("lock").insert((name.clone(), uid), code);
                running.lock().expect("lock").remove(&name);
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Stop whatever still runs.
    for pgid in running.lock().expect("lock").values() {
        // SAFETY: signalling the sandbox's own process group.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
}

fn quantity_bytes(q: &str) -> Option<u64> {
    let (num, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
    let n: u64 = num.parse().ok()?;
    Some(match unit {
        "Ki" => n << 10,
        "Mi" => n << 20,
        "Gi" => n << 30,
        "" => n,
        _ => return None,
    })
}

/// The network the pod gets: none when its NetworkPolicy allows no egress; the host's when it
/// allows egress to any address (an `open` policy, or the `http` adapter's domain allowlist,
/// whose executor checks every request). Ports and CIDR exceptions are not emulated.
async fn pod_network(client: &Client, ns: &str, pod: &str) -> Network {
    let policy = Api::<NetworkPolicy>::namespaced(client.clone(), ns)
        .get(pod)
        .await
        .ok();
    let any_address = policy
        .and_then(|p| p.spec)
        .and_then(|s| s.egress)
        .unwrap_or_default()
        .iter()
        .flat_map(|rule| rule.to.clone().unwrap_or_default())
        .filter_map(|peer| peer.ip_block)
        .any(|block| block.cidr == "0.0.0.0/0");
    if any_address {
        Network::Host
    } else {
        Network::None
    }
}

/// Materialize the volumes, run the container in the sandbox, report like a kubelet.
async fn run_pod(
    client: &Client,
    config: &NodeConfig,
    pod: &Pod,
    running: &Arc<Mutex<HashMap<String, i32>>>,
) -> i32 {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let ns = &config.namespace;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let spec = pod.spec.clone().unwrap_or_default();
    let container = spec.containers.first().cloned().unwrap_or_default();
    let dir = tempfile::tempdir().expect("pod dir");
    let mut volumes: HashMap<String, (PathBuf, bool)> = HashMap::new();
    for v in spec.volumes.clone().unwrap_or_default() {
        let path = dir.path().join(&v.name);
        std::fs::create_dir_all(&path).expect("volume");
        if let Some(cm) = &v.config_map {
            let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
                .get(&cm.name)
                .await
                .expect("configmap");
            for (k, val) in cm.data.unwrap_or_default() {
                std::fs::write(path.join(k), val).expect("write");
            }
            volumes.insert(v.name.clone(), (path, false));
        } else if let Some(s) = &v.secret {
            let secret = Api::<Secret>::namespaced(client.clone(), ns)
                .get(s.secret_name.as_deref().unwrap_or_default())
                .await
                .expect("secret");
            for (k, val) in secret.data.unwrap_or_default() {
                std::fs::write(path.join(k), val.0).expect("write");
            }
            volumes.insert(v.name.clone(), (path, false));
        } else if let Some(claim) = &v.persistent_volume_claim {
            // As a kubelet with a hostPath PersistentVolume: the claim's bound volume's folder.
            let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
                .get(&claim.claim_name)
                .await
                .expect("persistentvolumeclaim");
            let volume = pvc
                .spec
                .and_then(|s| s.volume_name)
                .expect("the claim is bound to a volume");
            let pv = Api::<PersistentVolume>::all(client.clone())
                .get(&volume)
                .await
                .expect("persistentvolume");
            let host = pv
                .spec
                .and_then(|s| s.host_path)
                .map(|h| PathBuf::from(h.path))
                .expect("the node emulator mounts hostPath volumes only");
            volumes.insert(v.name.clone(), (host, claim.read_only != Some(true)));
        } else {
            volumes.insert(v.name.clone(), (path, true));
        }
    }
    let network = pod_network(client, ns, &name).await;
    let termination = dir.path().join("termination-log");
    std::fs::write(&termination, "").expect("termination log");
    let started_at = now();
    let _ = pods
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"status": {
                "phase": "Running", "startTime": started_at, "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": started_at}],
                "containerStatuses": [{"name": container.name, "ready": true, "started": true, "restartCount": 0,
                    "image": container.image.clone().unwrap_or_default(), "imageID": "",
                    "state": {"running": {"startedAt": started_at}}}],
            }})),
        )
        .await;

    let mut read_only = Vec::new();
    let mut writable = vec![Bind {
        host: termination.clone(),
        inside: "/dev/termination-log".into(),
    }];
    for m in container.volume_mounts.clone().unwrap_or_default() {
        if let Some((host, rw)) = volumes.get(&m.name) {
            let bind = Bind {
                host: host.clone(),
                inside: PathBuf::from(&m.mount_path),
            };
            if *rw && m.read_only != Some(true) {
                writable.push(bind);
            } else {
                read_only.push(bind);
            }
        }
    }
    for shared in &config.shared {
        std::fs::create_dir_all(shared).expect("shared dir");
        writable.push(Bind {
            host: shared.clone(),
            inside: shared.clone(),
        });
    }
    read_only.push(Bind {
        host: config.executor.clone(),
        inside: config.executor.clone(),
    });
    let memory = container
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
        .and_then(|q| quantity_bytes(&q.0))
        .unwrap_or(256 << 20);
    let deadline = Duration::from_secs(
        spec.active_deadline_seconds
            .map_or(300, |s| s.max(1) as u64),
    );
    let plan = SandboxPlan {
        read_only,
        writable,
        hidden: vec![],
        runtime: vec![],
        cwd: container
            .working_dir
            .clone()
            .unwrap_or_else(|| "/".into())
            .into(),
        network,
        limits: Limits {
            timeout: deadline,
            memory_bytes: memory,
            cpu_seconds: None,
            processes: Some(64),
            file_bytes: None,
            tmp_bytes: 64 << 20,
        },
        env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
    };
    let command = container.command.clone().unwrap_or_default();
    let program = match command.first().map(String::as_str) {
        Some("toolgate-executor") | None => config.executor.clone(),
        Some(other) => PathBuf::from(other),
    };
    let args: Vec<std::ffi::OsString> = command
        .iter()
        .skip(1)
        .chain(container.args.clone().unwrap_or_default().iter())
        .map(Into::into)
        .collect();
    let mut prepared = toolgate_sandbox::prepare(&plan, &program, &args, &format!("node-{name}"))
        .expect("sandbox");
    let mut child = tokio::process::Command::from(std::mem::replace(
        &mut prepared.command,
        std::process::Command::new("true"),
    ))
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .kill_on_drop(true)
    .spawn()
    .expect("spawn");
    if let Some(pid) = child.id() {
        running
            .lock()
            .expect("lock")
            .insert(name.clone(), pid as i32);
    }
    let begun = Instant::now();
    let (code, deadline_exceeded) = match tokio::time::timeout(deadline, child.wait()).await {
        Ok(Ok(status)) => (status.code().unwrap_or(137), false),
        Ok(Err(_)) => (128, false),
        Err(_) => {
            if let Some(pid) = child.id() {
                // SAFETY: the sandbox's own process group.
                unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
            }
            let _ = child.wait().await;
            (137, true)
        }
    };
    prepared.cleanup();
    let _ = begun;
    let mut message = std::fs::read(&termination).unwrap_or_default();
    message.truncate(4096);
    let finished_at = now();
    let terminated = serde_json::json!({
        "exitCode": code,
        "reason": if code == 0 { "Completed" } else { "Error" },
        "message": String::from_utf8_lossy(&message),
        "startedAt": started_at,
        "finishedAt": finished_at,
    });
    let mut status = serde_json::json!({
        "phase": if code == 0 && !deadline_exceeded { "Succeeded" } else { "Failed" },
        "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": finished_at}],
        "containerStatuses": [{"name": container.name, "ready": false, "started": false, "restartCount": 0,
            "image": container.image.clone().unwrap_or_default(), "imageID": "",
            "state": {"terminated": terminated}}],
    });
    if deadline_exceeded {
        status["reason"] = "DeadlineExceeded".into();
        status["message"] = "Pod was active on the node longer than the specified deadline".into();
    }
    let _ = pods
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"status": status})),
        )
        .await;
    let _ = Path::new("");
    code
}
