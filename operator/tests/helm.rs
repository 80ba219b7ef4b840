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

use sha2::{Digest, Sha256};
use support::helm;
use support::node;
use support::{have_cluster, jsonpath, kubectl, ok, prepare, wait_for};
use toolgate_testkit::fixtures::{self, Tool};
use toolgate_testkit::moto::Moto;

const BUCKET: &str = "helm-artifacts";

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
    let mut docs = vec![node::sandbox_policy(&ns, "on-node")];
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

    // One replica, Ready (its /readyz), on the node, the leader.
    let release = helm::install(&ns, &store, BUCKET, "");

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
    node::ran_on_the_node(&ns, &["from-kubectl"], &[]);
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
    let ca = helm::grpc_ca();
    let proposed = helm::toolgate(
        ca.path(),
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
    let fetched = helm::toolgate(
        ca.path(),
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
