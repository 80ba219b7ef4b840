//! Manifests from files and folders: read every YAML document, lint them as one set the way the
//! API server and toolgate would, and build the registry the runtime decides with.

use std::path::{Path, PathBuf};

use toolgate_core::lint::{Finding, LintReport, Linter, Severity, parse_yaml};
use toolgate_core::manifest::{Origin, RawManifest};

/// Errors building the linter (a bug in the generated schemas, never input).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LinterError(String);

/// A linter over the generated CRD schemas.
pub fn linter() -> Result<Linter, LinterError> {
    let crds = toolgate_crds::all_crds();
    let schemas: Vec<(String, serde_json::Value)> = crds
        .iter()
        .map(|crd| {
            let schema = toolgate_crds::openapi_schema(crd)
                .ok_or_else(|| LinterError(format!("CRD {:?} has no schema", crd.metadata.name)))?;
            Ok((crd.spec.names.kind.clone(), schema))
        })
        .collect::<Result<_, LinterError>>()?;
    Linter::new(schemas.iter().map(|(k, s)| (k.as_str(), s)))
        .map_err(|e| LinterError(e.to_string()))
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
                    } else if is_yaml(&path) && !is_policy_test(&path) {
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

/// A policy test table (`toolgate policy test`), not a manifest.
fn is_policy_test(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(toolgate_core::policy_test::SUFFIX))
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

/// The manifests of a folder, linted and registered.
#[derive(Debug)]
pub struct Loaded {
    /// The objects and the registry built from them.
    pub policies: toolgate_core::lifecycle::Policies,
    /// What the folder looked like when read ([`fingerprint`]).
    pub fingerprint: String,
    /// Warnings, one line each.
    pub warnings: Vec<String>,
}

/// What the MCP servers of the manifests answered to `tools/list`, by (namespace, server).
pub type Discovered = std::collections::BTreeMap<(String, String), ServerTools>;

/// One server's answer (what `toolgate_executor::discover` lists).
pub type ServerTools = toolgate_executor::discover::Listed;

/// Lint a folder and register what it holds, with the descriptors the discovered tools of its
/// McpServers become (linted with the files). Every error is returned, one line each; a single
/// error refuses the whole folder (a half-loaded policy is worse than the previous one). A tool
/// a server lists that cannot be normalized is a warning: the server's other tools still load.
pub fn load_folder(
    linter: &Linter,
    dir: &Path,
    now: jiff::Timestamp,
    discovered: &Discovered,
) -> Result<Loaded, Vec<String>> {
    let fingerprint = fingerprint(dir);
    let (mut docs, mut findings) = load(&[dir.to_path_buf()]);
    let mut refused = Vec::new();
    let servers: Vec<(String, String, toolgate_crds::McpServerSpec)> = docs
        .iter()
        .filter(|d| d.value["kind"] == "McpServer")
        .filter_map(|d| {
            let spec = serde_json::from_value(d.value["spec"].clone()).ok()?;
            let meta = &d.value["metadata"];
            let name = meta["name"].as_str()?.to_string();
            let ns = meta["namespace"]
                .as_str()
                .unwrap_or(toolgate_core::manifest::DEFAULT_NAMESPACE)
                .to_string();
            Some((ns, name, spec))
        })
        .collect();
    for (ns, name, spec) in servers {
        if let Some(found) = discovered.get(&(ns.clone(), name.clone())) {
            let (manifests, _, bad) = toolgate_core::mcp::server_manifests(
                &ns,
                &name,
                &spec,
                &found.tools,
                found.version.as_deref(),
            );
            docs.extend(manifests);
            refused.extend(
                bad.into_iter()
                    .map(|r| format!("McpServer {ns}/{name}: refused {r}")),
            );
        }
    }
    let mut report = linter.lint(docs, now);
    findings.append(&mut report.findings);
    // What a server says is not the platform team's manifest: a discovered tool that does not
    // lint (a schema that does not compile, a bad name) stays out of the view with its
    // lifecycle saying why, and refuses nothing else.
    let discovered = |f: &Finding| f.origin.source.starts_with("mcp:");
    let errors: Vec<String> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error && !discovered(f))
        .map(ToString::to_string)
        .collect();
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut warnings: Vec<String> = findings
        .iter()
        .filter(|f| f.severity != Severity::Error || discovered(f))
        .map(ToString::to_string)
        .collect();
    warnings.extend(refused);
    Ok(Loaded {
        policies: toolgate_core::lifecycle::Policies::new(report.objects),
        fingerprint,
        warnings,
    })
}

/// A digest of the YAML files under a folder: names, sizes and modification times. Cheap enough
/// to poll every second; a change means "read the folder again".
pub fn fingerprint(dir: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut ignored = Vec::new();
    let mut h = Sha256::new();
    for f in collect_files(&[dir.to_path_buf()], &mut ignored) {
        h.update(f.display().to_string().as_bytes());
        if let Ok(m) = std::fs::metadata(&f) {
            h.update(m.len().to_le_bytes());
            if let Ok(t) = m.modified()
                && let Ok(d) = t.duration_since(std::time::UNIX_EPOCH)
            {
                h.update(d.as_nanos().to_le_bytes());
            }
        }
    }
    hex::encode(h.finalize())
}
