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
            7
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
