//! The Helm chart: it lints, renders with the defaults and with every option, the API server
//! accepts everything it renders (server-side dry run), and its admission policies are
//! `crds/admission/identity.yaml` with the release's service account.

mod support;

use std::process::Command;

use support::{have_cluster, helm, helm_template, kubectl, root};

fn documents(yaml: &str) -> Vec<serde_json::Value> {
    yaml.split("\n---")
        .filter_map(|d| serde_norway::from_str::<serde_json::Value>(d).ok())
        .filter(|v| v.is_object())
        .collect()
}

/// The operator container's arguments in rendered documents.
fn args_of(docs: &[serde_json::Value]) -> Vec<String> {
    docs.iter()
        .find(|d| d["kind"] == "Deployment")
        .and_then(|d| d["spec"]["template"]["spec"]["containers"][0]["args"].as_array())
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect()
}

#[test]
fn the_chart_lints_renders_and_the_api_server_accepts_it() {
    if !have_cluster() {
        return;
    }
    let out = Command::new(helm())
        .arg("lint")
        .arg(root().join("charts/toolgate"))
        .args(["--kube-version", "1.37.2", "--strict"])
        .output()
        .expect("helm lint");
    assert!(
        out.status.success(),
        "helm lint: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let ns = "toolgate-chart-test";
    let _ = kubectl(&["create", "namespace", ns], None);
    for values in [
        vec![],
        vec![
            "--set",
            "watchNamespace=team-a",
            "--set",
            "artifacts.endpoint=http://minio.storage:9000",
            "--set",
            "artifacts.credentialsSecret=toolgate-artifacts",
            "--set",
            "artifacts.egressCidrs={10.96.40.0/24}",
            "--set",
            "credentials.secretsFileSecret=toolgate-secrets",
            "--set",
            "grpc.enabled=false",
            "--set",
            "admissionPolicies.enabled=false",
            "--set",
            "egressGate.timeoutMs=45000",
            "--set",
            "egressGate.probes={10.96.0.7:6443}",
            "--set",
            "egressProxy.enabled=true",
            "--set",
            "egressProxy.nameservers={10.96.0.10:53}",
        ],
    ] {
        let mut args = vec!["--namespace", ns, "--include-crds"];
        args.extend(values.iter().copied());
        let rendered = helm_template(&args);
        let docs = documents(&rendered);
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert!(
            kinds.contains(&"Deployment") && kinds.contains(&"ClusterRole"),
            "{kinds:?}"
        );
        assert_eq!(
            kinds
                .iter()
                .filter(|k| **k == "CustomResourceDefinition")
                .count(),
            9
        );
        let (applied, out, err) = kubectl(
            &[
                "apply",
                "--dry-run=server",
                "--server-side",
                "--force-conflicts",
                "--field-manager=toolgate-chart-test",
                "-f",
                "-",
            ],
            Some(&rendered),
        );
        assert!(
            applied,
            "the API server refused the rendered chart ({values:?}): {err}\n{out}"
        );
        let deployment = docs
            .iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("deployment");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
        let args: Vec<&str> = container["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        assert!(
            args.iter().any(|a| a.starts_with("--artifacts-bucket=")),
            "{args:?}"
        );
        if !values.is_empty() {
            assert!(
                args.contains(&"--artifacts-egress-cidr=10.96.40.0/24"),
                "{args:?}"
            );
            assert!(args.contains(&"--namespace=team-a"), "{args:?}");
            assert!(args.contains(&"--egress-gate-ms=45000"), "{args:?}");
            assert!(args.contains(&"--egress-probe=10.96.0.7:6443"), "{args:?}");
            assert!(
                args.contains(&"--egress-proxy-address=$(POD_IP)")
                    && args.contains(&"--egress-nameserver=10.96.0.10:53"),
                "{args:?}"
            );
            let np = docs
                .iter()
                .find(|d| d["kind"] == "NetworkPolicy")
                .expect("the operator's NetworkPolicy");
            assert_eq!(
                np["spec"]["ingress"][1]["ports"][0]["endPort"], 60999,
                "{np}"
            );
        } else {
            // The gate is on by default, probing the API server the operator reaches.
            assert!(args.contains(&"--egress-gate-ms=30000"), "{args:?}");
            assert!(
                !args.iter().any(|a| a.starts_with("--egress-proxy")),
                "no egress proxy unless asked: {args:?}"
            );
            assert!(
                !args.iter().any(|a| a.starts_with("--egress-probe")),
                "{args:?}"
            );
        }
    }

    // The admission policies are identity.yaml with this release's service account.
    let sorted = |mut d: Vec<serde_json::Value>| {
        d.sort_by_key(|v| (v["kind"].to_string(), v["metadata"]["name"].to_string()));
        d
    };
    let rendered = documents(&helm_template(&[
        "--namespace",
        "toolgate-system",
        "--show-only",
        "templates/admission.yaml",
    ]));
    let source = documents(
        &std::fs::read_to_string(root().join("crds/admission/identity.yaml"))
            .expect("identity.yaml"),
    );
    assert_eq!(
        sorted(rendered),
        sorted(source),
        "charts/toolgate/templates/admission.yaml drifted from crds/admission/identity.yaml"
    );
}

/// The agent API serves TLS by default: the chart generates a self-signed certificate the
/// operator accepts, or uses the Secret it is given.
#[test]
fn the_chart_serves_the_agent_api_over_tls_by_default() {
    if !have_cluster() {
        return;
    }
    let docs = documents(&helm_template(&["--namespace", "toolgate-system"]));
    let args = args_of(&docs);
    assert!(
        args.contains(&"--grpc-tls-cert=/etc/toolgate/grpc-tls/tls.crt".to_string()),
        "{args:?}"
    );
    let secret = docs
        .iter()
        .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == "toolgate-operator-grpc-tls")
        .expect("a generated certificate");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    // What the chart generated is what the operator loads.
    use base64::Engine as _;
    let dir = tempfile::tempdir().expect("tmp");
    let decode = |k: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(secret["data"][k].as_str().expect("field"))
            .expect("base64")
    };
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, decode("tls.crt")).expect("cert");
    std::fs::write(&key, decode("tls.key")).expect("key");
    let pem = String::from_utf8(decode("tls.crt")).expect("pem");
    assert!(pem.contains("BEGIN CERTIFICATE"), "{pem}");
    toolgate_api::TlsFiles {
        cert,
        key,
        client_ca: None,
    }
    .server_config()
    .expect("the operator accepts the generated certificate");

    // A certificate of one's own (cert-manager): no generated Secret, the volume names it.
    let docs = documents(&helm_template(&[
        "--namespace",
        "toolgate-system",
        "--set",
        "grpc.tls.secretName=toolgate-api-cert",
        "--set",
        "grpc.tls.clientCaSecretName=agents-ca",
    ]));
    assert!(!docs
        .iter()
        .any(|d| d["kind"] == "Secret" && d["metadata"]["name"] == "toolgate-operator-grpc-tls"));
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("deployment");
    let volumes = deployment["spec"]["template"]["spec"]["volumes"].to_string();
    assert!(
        volumes.contains("toolgate-api-cert") && volumes.contains("agents-ca"),
        "{volumes}"
    );
    assert!(
        args_of(&docs)
            .contains(&"--grpc-tls-client-ca=/etc/toolgate/grpc-client-ca/ca.crt".to_string())
    );
    // Switched off (behind a TLS-terminating proxy): plain, and nothing mounted for it.
    let docs = documents(&helm_template(&[
        "--namespace",
        "toolgate-system",
        "--set",
        "grpc.tls.enabled=false",
    ]));
    assert!(!args_of(&docs).iter().any(|a| a.starts_with("--grpc-tls")));
}

/// With `credentials.vault.address` the operator brokers from Vault: it logs in with a projected
/// token of its own service account for Vault's audience, and the operator accepts the flags.
#[test]
fn the_chart_points_the_operator_at_vault_with_a_projected_token() {
    if !have_cluster() {
        return;
    }
    let docs = documents(&helm_template(&[
        "--namespace",
        "toolgate-system",
        "--set",
        "credentials.vault.address=https://vault.vault.svc:8200",
        "--set",
        "credentials.vault.caSecretName=vault-ca",
        "--set",
        "credentials.secretsFileSecret=ignored-when-vault-is-set",
    ]));
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("deployment");
    let spec = &deployment["spec"]["template"]["spec"];
    let args: Vec<String> = spec["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    for want in [
        "--vault-addr=https://vault.vault.svc:8200",
        "--vault-role=toolgate-operator",
        "--vault-token-file=/var/run/secrets/toolgate/vault/token",
        "--vault-ca=/etc/toolgate/vault-ca/ca.crt",
    ] {
        assert!(args.contains(&want.to_string()), "{want} in {args:?}");
    }
    assert!(!args.iter().any(|a| a.starts_with("--secrets")), "{args:?}");
    let volumes = spec["volumes"].to_string();
    assert!(
        volumes.contains(r#""audience":"vault""#) && volumes.contains("serviceAccountToken"),
        "{volumes}"
    );
    // The operator parses what the chart renders (it stops later, at the missing context).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate-operator"))
        .args(&args)
        .args(["--context", "no-such-context"])
        .output()
        .expect("operator");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(2),
        "clap refused the chart's flags: {err}"
    );
}

/// `helm` with `args` on the chart: (success, stdout, stderr).
fn helm_on_chart(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(helm()).args(args).output().expect("helm runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What teams expect of an operator chart: values checked by `values.schema.json` with the field
/// named, a PodDisruptionBudget, an optional ServiceMonitor, tracing, and NOTES.txt.
#[test]
fn the_chart_checks_its_values_and_has_what_an_operator_chart_needs() {
    if !have_cluster() {
        return;
    }
    let chart = root().join("charts/toolgate");
    let chart = chart.to_str().expect("path");
    for (set, says) in [
        (
            "replicaCount=two",
            "at '/replicaCount': got string, want integer",
        ),
        (
            "tracing.otlpEndpoint=collector:4317",
            "at '/tracing/otlpEndpoint': 'collector:4317' does not match pattern",
        ),
        ("replicas=2", "additional properties 'replicas' not allowed"),
        ("grpc.port=70000", "at '/grpc/port'"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
    ] {
        let (ok, out, err) = helm_on_chart(&[
            "template",
            "toolgate",
            chart,
            "--kube-version",
            "1.37.2",
            "--set",
            set,
        ]);
        assert!(!ok, "{set} accepted: {out}");
        assert!(err.contains(says), "{set}: {err}");
    }

    // Two replicas (the default): a PodDisruptionBudget keeps one; one replica: none.
    let docs = documents(&helm_template(&["--namespace", "toolgate-system"]));
    let pdb = docs
        .iter()
        .find(|d| d["kind"] == "PodDisruptionBudget")
        .expect("a PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("deployment");
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert!(!docs.iter().any(|d| d["kind"] == "ServiceMonitor"));
    let one = documents(&helm_template(&["--set", "replicaCount=1"]));
    assert!(!one.iter().any(|d| d["kind"] == "PodDisruptionBudget"));

    // The ServiceMonitor scrapes the Service's metrics port; tracing reaches the operator's args.
    let docs = documents(&helm_template(&[
        "--namespace",
        "toolgate-system",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "serviceMonitor.labels.release=kube-prometheus-stack",
        "--set",
        "tracing.otlpEndpoint=http://otel-collector.observability:4317",
    ]));
    let monitor = docs
        .iter()
        .find(|d| d["kind"] == "ServiceMonitor")
        .expect("ServiceMonitor");
    let service = docs
        .iter()
        .find(|d| d["kind"] == "Service")
        .expect("Service");
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    assert!(
        service["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["name"] == "metrics")
    );
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("selector")
    {
        assert_eq!(&service["metadata"]["labels"][k], v, "{k}");
    }
    assert!(
        args_of(&docs).contains(&"--otlp-endpoint=http://otel-collector.observability:4317".into()),
        "{:?}",
        args_of(&docs)
    );

    // NOTES.txt, as `helm install` prints it (a server-side dry run on the test API server).
    let kubeconfig = std::env::var("TOOLGATE_KUBECONFIG").expect("kubeconfig");
    let (ok, out, err) = helm_on_chart(&[
        "install",
        "toolgate",
        chart,
        "--dry-run=server",
        // Other suites own the cluster-scoped RBAC objects; a dry run changes nothing.
        "--take-ownership",
        "--namespace",
        "toolgate-notes-test",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert!(ok, "helm install --dry-run: {err}");
    let notes = out.split("NOTES:").nth(1).expect("NOTES in the output");
    for want in [
        "toolgate-operator.toolgate-notes-test.svc:7443",
        "over TLS",
        "get secret toolgate-operator-grpc-tls",
        "No credential source is set",
        "kubectl explain toolcall.spec",
    ] {
        assert!(notes.contains(want), "{want:?} in NOTES:\n{notes}");
    }
}

/// With `prometheusRule.enabled` and `grafanaDashboard.enabled` the chart carries exactly the
/// alert rules and dashboard the metrics suite checks with promtool (files/).
#[test]
fn the_chart_ships_the_alert_rules_and_dashboard_the_suite_checks() {
    let files = root().join("charts/toolgate/files");
    let rule = documents(&helm_template(&[
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "prometheusRule.labels.release=kube-prometheus-stack",
        "--show-only",
        "templates/prometheusrule.yaml",
    ]));
    let alerts: serde_json::Value = serde_norway::from_str(
        &std::fs::read_to_string(files.join("alerts.yaml")).expect("alerts.yaml"),
    )
    .expect("alerts.yaml is YAML");
    assert_eq!(rule[0]["kind"], "PrometheusRule");
    assert_eq!(
        rule[0]["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_eq!(rule[0]["spec"]["groups"], alerts["groups"]);
    let dashboard = documents(&helm_template(&[
        "--set",
        "grafanaDashboard.enabled=true",
        "--show-only",
        "templates/grafana-dashboard.yaml",
    ]));
    assert_eq!(dashboard[0]["metadata"]["labels"]["grafana_dashboard"], "1");
    let carried: serde_json::Value = serde_json::from_str(
        dashboard[0]["data"]["toolgate.json"]
            .as_str()
            .expect("the dashboard"),
    )
    .expect("JSON");
    let file: serde_json::Value = serde_json::from_slice(
        &std::fs::read(files.join("dashboard.json")).expect("dashboard.json"),
    )
    .expect("JSON");
    assert_eq!(carried, file);
    // Off by default.
    let defaults = helm_template(&[]);
    assert!(!defaults.contains("kind: PrometheusRule") && !defaults.contains("grafana_dashboard"));
}

/// The examples are a kustomize base (`kubectl apply -k examples`) naming every manifest
/// `toolgate local --manifests examples` reads (calls/ aside: what agents create), and their
/// cluster overlay changes one thing only: the GitHub API's policy runs under gVisor, which the
/// embedded runtime refuses rather than run weaker.
#[test]
fn the_examples_build_with_kustomize_and_the_cluster_overlay_adds_only_gvisor() {
    if !have_cluster() {
        return;
    }
    let build = |dir: &str| -> Vec<serde_json::Value> {
        let (built, out, err) = kubectl(
            &["kustomize", &root().join(dir).display().to_string()],
            None,
        );
        assert!(built, "kubectl kustomize {dir}: {err}");
        documents(&out)
    };
    let key = |d: &serde_json::Value| {
        format!(
            "{}/{}/{}",
            d["kind"].as_str().unwrap_or_default(),
            d["metadata"]["namespace"].as_str().unwrap_or_default(),
            d["metadata"]["name"].as_str().unwrap_or_default()
        )
    };
    // What the embedded runtime reads: every manifest under examples/ but calls/, skill folders
    // (their Skill object names them) and the kustomization file.
    let mut files = Vec::new();
    let mut stack = vec![root().join("examples")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("examples").flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !["calls", "cluster"].contains(&name.as_str())
                    && !path.join("SKILL.md").is_file()
                {
                    stack.push(path);
                }
            } else if name.ends_with(".yaml")
                && name != "kustomization.yaml"
                && !name.ends_with(".policytest.yaml")
            {
                files.extend(documents(&std::fs::read_to_string(&path).expect("a file")));
            }
        }
    }
    let mut read: Vec<String> = files.iter().map(key).collect();
    read.sort();
    let base = build("examples");
    let mut built: Vec<String> = base.iter().map(key).collect();
    built.sort();
    assert_eq!(
        built, read,
        "examples/kustomization.yaml names what toolgate local reads"
    );
    let overlay = build("examples-cluster");
    let mut changed = Vec::new();
    for o in &overlay {
        let b = base
            .iter()
            .find(|b| key(b) == key(o))
            .expect("the same objects");
        if b != o {
            changed.push(key(o));
            assert_eq!(o["spec"]["runtimeClassName"], "gvisor", "{o}");
            let mut without = o.clone();
            without["spec"]
                .as_object_mut()
                .expect("spec")
                .remove("runtimeClassName");
            assert_eq!(&without, b, "the overlay changes the runtime class only");
        }
    }
    assert_eq!(changed, ["SandboxPolicy/team-a/github-api"]);
}
