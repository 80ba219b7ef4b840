//! Fixtures shared by the core's integration tests: the linter over the committed CRDs and the
//! example manifests.
#![allow(
    dead_code,
    reason = "each test binary uses a different part of the fixtures"
)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;
use toolgate_core::lint::{Linter, parse_yaml};
use toolgate_core::manifest::{ObjectSet, RawManifest};
use toolgate_core::registry::Registry;

pub fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The linter over the committed generated CRDs (the crds drift test keeps them current).
pub fn linter() -> &'static Linter {
    static L: OnceLock<Linter> = OnceLock::new();
    L.get_or_init(|| {
        let mut schemas = Vec::new();
        for entry in std::fs::read_dir(root().join("crds/generated")).expect("crds/generated") {
            let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read crd");
            let crd: Value = serde_norway::from_str(&text).expect("crd yaml");
            let kind = crd["spec"]["names"]["kind"]
                .as_str()
                .expect("kind")
                .to_string();
            schemas.push((
                kind,
                crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone(),
            ));
        }
        Linter::new(schemas.iter().map(|(k, s)| (k.as_str(), s))).expect("schemas compile")
    })
}

/// Every YAML file under a folder, sorted.
pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("entry").path();
            if p.is_dir() {
                // A skill's folder is read through its Skill manifest.
                if !p.join(toolgate_core::skill::SKILL_FILE).is_file() {
                    stack.push(p);
                }
            } else if toolgate_core::manifest::is_manifest_file(&p) {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// The documents of every YAML file under a folder (relative to the repository root).
pub fn documents(dir: &str) -> Vec<RawManifest> {
    let mut docs = Vec::new();
    for f in yaml_files(&root().join(dir)) {
        let (d, findings) = parse_yaml(
            &f.display().to_string(),
            &std::fs::read_to_string(&f).expect("read"),
        );
        assert!(findings.is_empty(), "{findings:?}");
        docs.extend(d);
    }
    let skills: Vec<RawManifest> = docs
        .iter()
        .filter(|d| d.value["kind"] == "Skill")
        .flat_map(skill_descriptors)
        .collect();
    docs.extend(skills);
    docs
}

/// The descriptors a Skill manifest's folder declares (what the runtimes register).
fn skill_descriptors(doc: &RawManifest) -> Vec<RawManifest> {
    let spec: toolgate_crds::SkillSpec =
        serde_json::from_value(doc.value["spec"].clone()).expect("Skill spec");
    let folder = Path::new(&doc.origin.source)
        .parent()
        .expect("folder")
        .join(spec.path.as_deref().expect("spec.path"));
    let mut files = toolgate_core::skill::Files::default();
    let mut stack = vec![folder.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("skill folder") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(&folder)
                    .expect("inside")
                    .display()
                    .to_string();
                files.files.insert(rel, std::fs::read(&p).expect("read"));
            }
        }
    }
    let meta = &doc.value["metadata"];
    toolgate_core::skill::load(
        meta["namespace"].as_str().unwrap_or("default"),
        meta["name"].as_str().expect("name"),
        &spec,
        &files,
    )
    .expect("the skill loads")
    .manifests
}

/// The example manifests.
pub fn examples() -> Vec<RawManifest> {
    documents("examples")
}

pub fn now() -> jiff::Timestamp {
    "2026-11-30T00:00:00Z".parse().expect("time")
}

/// The checked objects of a folder; panics on lint errors.
pub fn objects(docs: Vec<RawManifest>) -> ObjectSet {
    let report = linter().lint(docs, now());
    assert_eq!(report.errors(), 0, "{:#?}", report.findings);
    report.objects
}

/// The registry of the examples.
pub fn example_registry() -> Registry {
    Registry::from_objects(&objects(examples()))
}
