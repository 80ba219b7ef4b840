//! The committed CRDs are exactly what the types generate, and carry the rules the API server
//! must enforce. Regenerate with `cargo run -p toolgate -- crds --out crds/generated`.

use std::path::Path;

use toolgate_crds::{all_crds, crd_file_name, openapi_schema, render_crd_yaml};

fn generated_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/generated"))
}

/// Both committed copies: `crds/generated` (kubectl apply) and the Helm chart's `crds/`.
#[test]
fn committed_crds_match_the_types() {
    let chart = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/toolgate/crds"
    ));
    for (dir, shown) in [
        (generated_dir(), "crds/generated"),
        (chart, "charts/toolgate/crds"),
    ] {
        let mut drifted = Vec::new();
        for crd in all_crds() {
            let name = crd_file_name(&crd);
            let want = render_crd_yaml(&crd).expect("render");
            let have = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            if have != want {
                drifted.push(name);
            }
        }
        assert!(
            drifted.is_empty(),
            "{shown} drifted from the types: {drifted:?}; run `cargo run -p toolgate -- crds --out {shown}` and commit"
        );
        let files = std::fs::read_dir(dir).expect("read the CRD folder").count();
        assert_eq!(files, 9, "{shown} holds exactly one file per kind");
    }
}

#[test]
fn nine_namespaced_kinds_in_one_category_with_status() {
    let crds = all_crds();
    assert_eq!(crds.len(), 9);
    for crd in &crds {
        assert_eq!(crd.spec.group, "toolgate.dev");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["toolgate".to_string()][..])
        );
        assert!(
            crd.spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty())
        );
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{} has a status subresource",
            crd.spec.names.kind
        );
        let cols: Vec<&str> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert!(cols.contains(&"Age"), "{}: {cols:?}", crd.spec.names.kind);
    }
}

fn schema_of(kind: &str) -> serde_json::Value {
    let crd = all_crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .expect("kind");
    openapi_schema(&crd).expect("schema")
}

fn rules(node: &serde_json::Value) -> Vec<String> {
    node["x-kubernetes-validations"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| r["rule"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn schema_snapshot_of_the_rules_that_matter() {
    let call = schema_of("ToolCall");
    assert!(rules(&call["properties"]["spec"]).contains(&"self == oldSelf".to_string()));
    let conditions = &call["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
    for f in [
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    ] {
        assert!(
            conditions["items"]["properties"][f].is_object(),
            "condition field {f}"
        );
    }
    assert_eq!(
        call["properties"]["spec"]["properties"]["args"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    let phases = &call["properties"]["status"]["properties"]["phase"]["enum"];
    assert!(
        phases
            .as_array()
            .is_some_and(|p| p.contains(&"AwaitingApproval".into()))
    );

    let approval = schema_of("ToolApproval");
    assert!(rules(&approval["properties"]["spec"]).contains(&"self == oldSelf".to_string()));

    let descriptor = schema_of("ToolDescriptor");
    let spec = &descriptor["properties"]["spec"];
    assert!(
        rules(spec)
            .iter()
            .any(|r| r.contains("self.risk.destructive")
                && r.contains("dryRunSupported")
                && r.contains("'always'"))
    );
    assert_eq!(
        spec["properties"]["risk"]["properties"]["level"]["enum"],
        serde_json::json!(["low", "medium", "high", "critical"])
    );
    assert_eq!(
        spec["properties"]["execution"]["properties"]["timeoutMs"]["maximum"],
        3600000.0
    );
    let effects = spec["properties"]["effects"]["required"]
        .as_array()
        .expect("required effects")
        .len();
    assert_eq!(effects, 8, "every effect but deletes is required");

    let grant = schema_of("ToolGrant");
    assert!(
        rules(&grant["properties"]["spec"])
            .iter()
            .any(|r| r.contains("self.expiresAt > self.notBefore"))
    );
}

#[test]
fn every_field_has_a_description() {
    fn walk(path: &str, node: &serde_json::Value, missing: &mut Vec<String>) {
        if let Some(props) = node["properties"].as_object() {
            for (k, v) in props {
                let p = format!("{path}.{k}");
                if v.get("description").is_none() && !path.is_empty() {
                    missing.push(p.clone());
                }
                walk(&p, v, missing);
            }
        }
        if node["items"].is_object() {
            walk(&format!("{path}[]"), &node["items"], missing);
        }
    }
    for crd in all_crds() {
        let mut missing = Vec::new();
        walk("", &openapi_schema(&crd).expect("schema"), &mut missing);
        assert!(
            missing.is_empty(),
            "{}: fields without a doc comment (kubectl explain shows nothing): {missing:?}",
            crd.spec.names.kind
        );
    }
}
