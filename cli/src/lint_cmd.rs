//! `toolgate lint PATH...`: check manifests the way the API server would, and more.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use toolgate_core::lint::{Finding, LintReport, Linter, Severity, parse_yaml};
use toolgate_core::manifest::{Origin, RawManifest};

/// Output format of lint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per problem.
    Text,
    /// A JSON array of findings.
    Json,
}

/// A linter over the generated CRD schemas.
pub fn linter() -> anyhow::Result<Linter> {
    let crds = toolgate_crds::all_crds();
    let schemas: Vec<(String, serde_json::Value)> = crds
        .iter()
        .map(|crd| {
            let schema = toolgate_crds::openapi_schema(crd)
                .ok_or_else(|| anyhow::anyhow!("CRD {:?} has no schema", crd.metadata.name))?;
            Ok((crd.spec.names.kind.clone(), schema))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Linter::new(schemas.iter().map(|(k, s)| (k.as_str(), s)))?)
}

/// Every `.yaml`/`.yml` file under the paths, in a stable order. A missing path is a finding.
pub fn collect_files(paths: &[PathBuf], findings: &mut Vec<Finding>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut stack = vec![p.clone()];
            while let Some(dir) = stack.pop() {
                let entries = match std::fs::read_dir(&dir) {
                    Ok(e) => e,
                    Err(e) => {
                        findings.push(io_finding(&dir, format!("cannot read folder: {e}")));
                        continue;
                    }
                };
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if is_yaml(&path) {
                        files.push(path);
                    }
                }
            }
        } else if p.exists() {
            files.push(p.clone());
        } else {
            findings.push(io_finding(p, "no such file or folder".into()));
        }
    }
    files.sort();
    // The same file named twice (a folder and a file in it) is read once.
    let mut seen = std::collections::BTreeSet::new();
    files.retain(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())));
    files
}

fn is_yaml(p: &Path) -> bool {
    matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
}

fn io_finding(p: &Path, message: String) -> Finding {
    Finding {
        severity: Severity::Error,
        origin: Origin {
            source: p.display().to_string(),
            document: 0,
        },
        object: None,
        path: String::new(),
        code: "io",
        message,
    }
}

/// Read and parse every manifest under the paths.
pub fn load(paths: &[PathBuf]) -> (Vec<RawManifest>, Vec<Finding>) {
    let mut findings = Vec::new();
    let mut docs = Vec::new();
    for file in collect_files(paths, &mut findings) {
        match std::fs::read_to_string(&file) {
            Ok(text) => {
                let (d, f) = parse_yaml(&file.display().to_string(), &text);
                docs.extend(d);
                findings.extend(f);
            }
            Err(e) => findings.push(io_finding(&file, format!("cannot read: {e}"))),
        }
    }
    (docs, findings)
}

/// Lint the manifests under the paths as one set.
pub fn lint_paths(linter: &Linter, paths: &[PathBuf], now: jiff::Timestamp) -> LintReport {
    let (docs, mut load_findings) = load(paths);
    let mut report = linter.lint(docs, now);
    load_findings.append(&mut report.findings);
    report.findings = load_findings;
    report
}

pub fn run(paths: &[PathBuf], format: Format) -> anyhow::Result<ExitCode> {
    let linter = linter()?;
    let report = lint_paths(&linter, paths, jiff::Timestamp::now());
    match format {
        Format::Text => {
            for f in &report.findings {
                println!("{f}");
            }
            println!(
                "{} documents, {} objects: {} errors, {} warnings",
                report.documents,
                report.objects.len(),
                report.errors(),
                report.warnings()
            );
        }
        Format::Json => {
            let items: Vec<serde_json::Value> = report
                .findings
                .iter()
                .map(|f| {
                    serde_json::json!({
                        "severity": f.severity.to_string(),
                        "file": f.origin.source,
                        "document": f.origin.document + 1,
                        "object": f.object,
                        "path": f.path,
                        "code": f.code,
                        "message": f.message,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&items)?);
        }
    }
    Ok(if report.errors() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
