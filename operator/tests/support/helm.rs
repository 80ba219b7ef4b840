//! The operator as `helm install` puts it in the test cluster: the release of `charts/toolgate`
//! in `toolgate-system`, its pod on the real node, its gRPC Service reached from this machine
//! (kube-proxy on the node routes the Service's address). One release at a time: the chart's
//! cluster-wide objects carry fixed names (test binaries run one after another; a suite that
//! installs one holds [`Release`] until it is done).

use std::process::Command;
use std::time::{Duration, Instant};

use super::{jsonpath, kubectl, node};

/// The release's name and namespace (the ones the chart's cluster-wide objects name).
pub const RELEASE: &str = "toolgate";
pub const RELEASE_NS: &str = "toolgate-system";

/// helm against the test cluster, from the repository root.
pub fn helm(args: &[&str]) -> (bool, String) {
    let out = Command::new(super::helm())
        .args(args)
        .arg("--kubeconfig")
        .arg(std::env::var_os("TOOLGATE_KUBECONFIG").expect("kubeconfig"))
        .current_dir(super::root())
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

/// An installed release, uninstalled when dropped (its operator pod with it); on a panic, what
/// it and the calls' namespace show is printed first.
pub struct Release {
    ns: String,
    /// The name of the operator's pod.
    pub pod: String,
    _values: tempfile::NamedTempFile,
}

impl Drop for Release {
    fn drop(&mut self) {
        if std::thread::panicking() {
            super::dump(&self.ns, "toolgate,pods,events");
            super::dump(
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

/// The keys of the artifact store (moto takes any) as the chart's `artifacts.credentialsSecret`.
pub fn artifact_keys(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: toolgate-artifacts, namespace: {ns}}}\n\
         stringData: {{AWS_ACCESS_KEY_ID: testing, AWS_SECRET_ACCESS_KEY: testing}}\n"
    )
}

/// Install the release watching `ns`: this build's operator image on the node, calls in the
/// executor image, artifacts in `bucket` of `store` (its keys applied in `ns` and the release's
/// namespace), `extra` appended to the values (YAML). Waits until the one replica is Ready and
/// leads.
pub fn install(
    ns: &str,
    store: &toolgate_testkit::moto::Moto,
    bucket: &str,
    extra: &str,
) -> Release {
    node::install_runtime_class();
    super::ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "{}\n---\n{}",
            artifact_keys(ns),
            artifact_keys(RELEASE_NS)
        )),
    );
    let operator = node::operator_image();
    let (repository, tag) = operator.rsplit_once(':').expect("image:tag");
    let values = format!(
        "image: {{repository: {repository}, tag: \"{tag}\", pullPolicy: IfNotPresent}}\n\
         executorImage: {executor}\n\
         replicaCount: 1\n\
         watchNamespace: {ns}\n\
         logLevel: info\n\
         artifacts:\n  bucket: {bucket}\n  endpoint: \"http://{host}:{port}\"\n  \
         egressCidrs: [\"{host}/32\"]\n  credentialsSecret: toolgate-artifacts\n\
         nodeSelector: {{toolgate.dev/test-node: \"true\"}}\n\
         tolerations: [{{key: toolgate.dev/test-node, operator: Exists, effect: NoSchedule}}]\n\
         {extra}",
        executor = node::executor_image(),
        host = store.host,
        port = store.port,
    );
    let values_file = tempfile::NamedTempFile::new().expect("values");
    std::fs::write(values_file.path(), values).expect("values");
    let mut release = Release {
        ns: ns.to_string(),
        pod: String::new(),
        _values: values_file,
    };
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
        &release._values.path().display().to_string(),
    ]);
    assert!(installed, "helm install: {out}");
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
    release.pod = fields[0].to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let holder = jsonpath(
            RELEASE_NS,
            "lease/toolgate-operator",
            "{.spec.holderIdentity}",
        );
        if holder == release.pod {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the one replica does not lead: {holder:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    release
}

/// The operator's Service address (ClusterIP:port), routed to the node from this machine.
pub fn service_address() -> String {
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

/// The name the Service's certificate is for.
pub fn service_name() -> String {
    format!("toolgate-operator.{RELEASE_NS}.svc")
}

/// The chart's self-signed certificate of the gRPC Service, in a file (what a client trusts).
pub fn grpc_ca() -> tempfile::NamedTempFile {
    use base64::Engine;
    let encoded = kubectl(
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
    let pem = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .expect("the chart's certificate");
    let ca = tempfile::NamedTempFile::new().expect("ca");
    std::fs::write(ca.path(), pem).expect("ca");
    ca
}

/// The `toolgate` CLI against the release's Service, as the agent.
pub fn toolgate(ca: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(super::toolgate_cli())
        .args(args)
        .env("TOOLGATE_SERVER", format!("https://{}", service_address()))
        .env("TOOLGATE_TOKEN", super::token_of("agent"))
        .env("TOOLGATE_CA", ca)
        .env("TOOLGATE_TLS_SERVER_NAME", service_name())
        .output()
        .expect("toolgate runs")
}

/// A gRPC client of the release's Service, trusting the chart's certificate.
pub async fn grpc_client(
    ca: &std::path::Path,
) -> toolgate_proto::v1::toolgate_client::ToolgateClient<tonic::transport::Channel> {
    let pem = std::fs::read(ca).expect("ca");
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(pem))
        .domain_name(service_name());
    let channel = tonic::transport::Endpoint::from_shared(format!("https://{}", service_address()))
        .expect("endpoint")
        .tls_config(tls)
        .expect("tls")
        .connect()
        .await
        .expect("connect to the operator's Service");
    toolgate_proto::v1::toolgate_client::ToolgateClient::new(channel)
}
