//! The operator as users run it: installed by `helm install` from `charts/toolgate` (its
//! ServiceAccount and RBAC, leader election, probes, its gRPC Service with the chart's
//! self-signed certificate), running *in* the cluster as a pod of this build's operator image on
//! the test cluster's real node, reaching the API server through the `kubernetes` Service
//! (kube-proxy). Calls are proposed with kubectl and over gRPC through the operator's Service;
//! each runs in a pod of its own; artifacts land in a real S3 bucket (moto) and `toolgate
//! artifact` fetches them through the operator, which reads the bucket with the chart's
//! `artifacts.credentialsSecret`.
//!
//! The chart's cluster-wide objects (ClusterRole, admission policies) carry fixed names, which
//! the other suites apply too: the release takes them over (`--take-ownership`) in
//! `toolgate-system`, the namespace they name, and is uninstalled at the end; every suite
//! applies what it needs again when it starts (test binaries run one after another).

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use support::node;
use support::{have_cluster, jsonpath, kubectl, ok, prepare, wait_for};
use toolgate_testkit::fixtures::{self, Tool};
use toolgate_testkit::moto::Moto;

const BUCKET: &str = "helm-artifacts";
const RELEASE: &str = "toolgate";
const RELEASE_NS: &str = "toolgate-system";

fn helm(args: &[&str]) -> (bool, String) {
    let out = Command::new(support::helm())
        .args(args)
        .arg("--kubeconfig")
        .arg(std::env::var_os("TOOLGATE_KUBECONFIG").expect("kubeconfig"))
        .current_dir(support::root())
        .output()
        .expect("helm runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The release, uninstalled when dropped (its operator pod with it).
struct Release {
    ns: String,
}

impl Drop for Release {
    fn drop(&mut self) {
        if std::thread::panicking() {
            support::dump(&self.ns, "toolgate,pods,events");
            support::dump(
                RELEASE_NS,
                "deployments,pods,services,endpointslices,events",
            );
            kubectl(
                &[
                    "logs",
                    "-n",
                    RELEASE_NS,
                    "-l",
                    "app.kubernetes.io/name=toolgate",
                    "--tail=40",
                ],
                None,
            )
            .1
            .lines()
            .for_each(|l| eprintln!("operator: {l}"));
        }
        let (_, out) = helm(&["uninstall", RELEASE, "-n", RELEASE_NS, "--wait"]);
        eprintln!("helm uninstall: {}", out.trim());
    }
}

fn values(ns: &str, store: (&str, u16)) -> String {
    let operator = node::operator_image();
    let (repository, tag) = operator.rsplit_once(':').expect("image:tag");
    let (host, port) = store;
    format!(
        "image: {{repository: {repository}, tag: \"{tag}\", pullPolicy: IfNotPresent}}\n\
         executorImage: {executor}\n\
         replicaCount: 1\n\
         watchNamespace: {ns}\n\
         logLevel: info\n\
         artifacts:\n  bucket: {BUCKET}\n  endpoint: \"http://{host}:{port}\"\n  \
         egressCidrs: [\"{host}/32\"]\n  credentialsSecret: toolgate-artifacts\n\
         nodeSelector: {{toolgate.dev/test-node: \"true\"}}\n\
         tolerations: [{{key: toolgate.dev/test-node, operator: Exists, effect: NoSchedule}}]\n",
        executor = node::executor_image(),
    )
}

fn artifact_keys(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: toolgate-artifacts, namespace: {ns}}}\n\
         stringData: {{AWS_ACCESS_KEY_ID: testing, AWS_SECRET_ACCESS_KEY: testing}}\n"
    )
}

/// The operator's Service address (ClusterIP:port), routed to the node from this machine.
fn service_address() -> String {
    let ip = kubectl(
        &[
            "get",
            "service",
            "toolgate-operator",
            "-n",
            RELEASE_NS,
            "-o",
            "jsonpath={.spec.clusterIP}:{.spec.ports[?(@.name==\"grpc\")].port}",
        ],
        None,
    )
    .1;
    assert!(ip.contains(':') && !ip.ends_with(':'), "{ip:?}");
    ip
}

fn toolgate(ca: &std::path::Path, server: &str, args: &[&str]) -> std::process::Output {
    Command::new(support::toolgate_cli())
        .args(args)
        .env("TOOLGATE_SERVER", format!("https://{server}"))
        .env("TOOLGATE_TOKEN", support::token_of("agent"))
        .env("TOOLGATE_CA", ca)
        .env(
            "TOOLGATE_TLS_SERVER_NAME",
            format!("toolgate-operator.{RELEASE_NS}.svc"),
        )
        .output()
        .expect("toolgate runs")
}

#[test]
fn the_operator_installed_by_helm_runs_calls_from_kubectl_and_grpc_in_pods_on_the_node() {
    if !have_cluster() || !node::have_node() {
        return;
    }
    let ns = prepare("tg-helm");
    node::install_runtime_class();
    support::apply_agent_access(&ns);
    let host = node::host_ip();
    let store = Moto::start(&host);
    store.create_bucket(BUCKET);
    let tools = [
        ("helm.echo", "[echo, \"{{msg}}\"]"),
        ("helm.whoami", "[id, -u]"),
    ];
    let mut docs = vec![
        node::sandbox_policy(&ns, "on-node"),
        artifact_keys(&ns),
        artifact_keys(RELEASE_NS),
    ];
    for (name, argv) in tools {
        docs.push(
            Tool::test(name)
                .argv(argv)
                .policy("on-node")
                .summary("A tool run by the operator Helm installed.")
                .yaml(&ns),
        );
    }
    docs.push(fixtures::grant(
        &ns,
        "helm-tools",
        &["helm.echo", "helm.whoami"],
    ));
    ok(&["apply", "-f", "-"], Some(&docs.join("\n---\n")));

    let values_file = tempfile::NamedTempFile::new().expect("values");
    std::fs::write(values_file.path(), values(&ns, (&host, store.port))).expect("values");
    let release = Release { ns: ns.clone() };
    let (installed, out) = helm(&[
        "install",
        RELEASE,
        "charts/toolgate",
        "-n",
        RELEASE_NS,
        "--take-ownership",
        "--skip-crds",
        "--wait",
        "--timeout",
        "4m",
        "-f",
        &values_file.path().display().to_string(),
    ]);
    assert!(installed, "helm install: {out}");

    // One replica, Ready (its /readyz), on the node, the leader.
    let pod = kubectl(
        &[
            "get",
            "pods",
            "-n",
            RELEASE_NS,
            "-l",
            "app.kubernetes.io/name=toolgate",
            "-o",
            "jsonpath={.items[0].metadata.name} {.items[0].spec.nodeName} {.items[0].status.conditions[?(@.type==\"Ready\")].status} {.items[0].spec.containers[0].image}",
        ],
        None,
    )
    .1;
    let fields: Vec<&str> = pod.split_whitespace().collect();
    assert_eq!(fields.len(), 4, "{pod:?}");
    assert_eq!(fields[1], node::NODE, "{pod}");
    assert_eq!(fields[2], "True", "{pod}");
    assert_eq!(fields[3], node::operator_image(), "{pod}");
    let holder = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let h = jsonpath(
                RELEASE_NS,
                "lease/toolgate-operator",
                "{.spec.holderIdentity}",
            );
            if !h.is_empty() || Instant::now() > deadline {
                break h;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    assert_eq!(holder, fields[0], "the one replica leads");

    // Through kubectl: a call in a pod of its own, on the node, its output in the bucket.
    ok(
        &["apply", "-f", "-"],
        Some(&fixtures::call(
            &ns,
            "from-kubectl",
            "helm.echo",
            "{msg: hello-from-helm}",
            "team-a",
        )),
    );
    wait_for(
        &ns,
        "toolcall/from-kubectl",
        "{.status.phase}",
        &["Succeeded"],
    );
    assert_eq!(
        jsonpath(
            &ns,
            "toolcall/from-kubectl",
            "{.status.result.outputPreview}"
        ),
        "hello-from-helm\n"
    );
    let scheduled = kubectl(
        &[
            "get",
            "events",
            "-n",
            &ns,
            "--field-selector",
            "involvedObject.name=tg-from-kubectl,reason=Scheduled",
            "-o",
            "jsonpath={.items[*].message}",
        ],
        None,
    )
    .1;
    assert!(scheduled.contains(node::NODE), "{scheduled:?}");
    let uri = jsonpath(
        &ns,
        "toolcall/from-kubectl",
        "{.status.result.artifacts[?(@.artifactId==\"stdout\")].uri}",
    );
    let hash = jsonpath(
        &ns,
        "toolcall/from-kubectl",
        "{.status.result.artifacts[?(@.artifactId==\"stdout\")].contentHash}",
    );
    let key = uri
        .strip_prefix(&format!("s3://{BUCKET}/"))
        .unwrap_or_else(|| panic!("an s3 artifact: {uri:?}"));
    let body = store.object(BUCKET, key);
    assert_eq!(body, b"hello-from-helm\n");
    assert_eq!(
        hash,
        format!("sha256:{}", hex::encode(Sha256::digest(&body)))
    );

    // Through gRPC, against the operator's Service, verified with the chart's certificate.
    let ca_pem = kubectl(
        &[
            "get",
            "secret",
            "toolgate-operator-grpc-tls",
            "-n",
            RELEASE_NS,
            "-o",
            "jsonpath={.data.tls\\.crt}",
        ],
        None,
    )
    .1;
    let ca = tempfile::NamedTempFile::new().expect("ca");
    {
        use base64::Engine;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca_pem.trim())
            .expect("the chart's certificate");
        std::fs::write(ca.path(), pem).expect("ca");
    }
    let server = service_address();
    let proposed = toolgate(
        ca.path(),
        &server,
        &[
            "call",
            "helm.whoami",
            "--namespace",
            &ns,
            "--args",
            "{}",
            "--action",
            "execute",
            "--task",
            "helm-suite",
            "--watch",
        ],
    );
    let stdout = String::from_utf8_lossy(&proposed.stdout).into_owned();
    assert!(
        proposed.status.success(),
        "toolgate call: {stdout}{}",
        String::from_utf8_lossy(&proposed.stderr)
    );
    assert!(stdout.contains("phase=Succeeded"), "{stdout}");
    let whoami = kubectl(
        &[
            "get",
            "toolcalls",
            "-n",
            &ns,
            "-o",
            "jsonpath={range .items[?(@.spec.toolRef.name==\"helm.whoami\")]}{.status.result.outputPreview}{end}",
        ],
        None,
    )
    .1;
    assert_eq!(
        whoami.trim(),
        "65532",
        "the executor image's user: {stdout}"
    );

    // `toolgate artifact` through the operator, which reads the bucket.
    let fetched = toolgate(
        ca.path(),
        &server,
        &["artifact", &format!("{ns}/from-kubectl"), "stdout"],
    );
    assert!(
        fetched.status.success(),
        "{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    assert_eq!(fetched.stdout, body);
    drop(release);
}
