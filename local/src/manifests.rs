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
                    // A skill's folder holds its own files (toolgate.yaml is not a manifest):
                    // its Skill manifest reads it.
                    if path.is_dir() && !path.join(toolgate_core::skill::SKILL_FILE).is_file() {
                        stack.push(path);
                    } else if toolgate_core::manifest::is_manifest_file(&path) {
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
    lint_paths_with(linter, paths, Vec::new(), now)
}

/// Lint the manifests under the paths and `extra` ones (made by a command, not read from a
/// file) as one set.
pub fn lint_paths_with(
    linter: &Linter,
    paths: &[PathBuf],
    extra: Vec<RawManifest>,
    now: jiff::Timestamp,
) -> LintReport {
    let (mut docs, mut load_findings) = load(paths);
    docs.extend(extra);
    expand_skills(&mut docs, &mut load_findings);
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
    /// Folders no sandbox may see: the skills' (a skill's script reaches its sandbox only as
    /// its descriptor's content, never its siblings).
    pub hidden: Vec<PathBuf>,
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
    let mut fingerprint = fingerprint(dir, &[]);
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
            // Every descriptor so far (the files', and earlier servers'): none is replaced.
            let taken: std::collections::BTreeSet<String> = docs
                .iter()
                .filter(|d| {
                    d.value["kind"] == "ToolDescriptor"
                        && d.value["metadata"]["namespace"]
                            .as_str()
                            .unwrap_or(toolgate_core::manifest::DEFAULT_NAMESPACE)
                            == ns
                })
                .filter_map(|d| d.value["metadata"]["name"].as_str().map(str::to_string))
                .collect();
            let (manifests, _, bad) = toolgate_core::mcp::server_manifests(
                &ns,
                &name,
                &spec,
                &found.tools,
                found.version.as_deref(),
                &|tool| taken.contains(tool),
            );
            docs.extend(manifests);
            refused.extend(
                bad.into_iter()
                    .map(|r| format!("McpServer {ns}/{name}: refused {r}")),
            );
        }
    }
    let skills = expand_skills(&mut docs, &mut findings);
    fingerprint.push_str(&skills.stats);
    let mut report = linter.lint(docs, now);
    findings.append(&mut report.findings);
    // What a server says is not the platform team's manifest: a discovered tool that does not
    // lint (a schema that does not compile, a bad name) stays out of the view with its
    // lifecycle saying why, and refuses nothing else.
    let discovered =
        |f: &Finding| f.origin.source.starts_with("mcp:") || f.holds_back_its_tool_only();
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
        policies: toolgate_core::lifecycle::Policies::new(report.objects)
            .with_skills(skills.entries),
        fingerprint,
        warnings,
        hidden: skills.folders,
    })
}

/// What the Skills of a set of manifests are, once read.
#[derive(Debug, Default)]
pub struct Skills {
    /// What the API serves.
    pub entries: Vec<toolgate_core::skill::SkillEntry>,
    /// Their folders.
    pub folders: Vec<PathBuf>,
    /// The [`fingerprint`] part of their folders, taken before they were read.
    pub stats: String,
}

/// Read the folder of every Skill of `docs` and add the descriptors of its scripts to `docs`
/// (a skill that cannot be read is a finding).
pub fn expand_skills(docs: &mut Vec<RawManifest>, findings: &mut Vec<Finding>) -> Skills {
    let mut out = Skills::default();
    for (folder, stats, entry, loaded) in read_skills(docs, findings) {
        out.stats.push_str(&stats);
        docs.extend(loaded.manifests);
        out.folders.push(folder);
        out.entries.push(entry);
    }
    out
}

/// Every Skill of the manifests, read from its folder: the folder, what the API serves and the
/// descriptors of its scripts; or a finding saying what is wrong, where.
/// A Skill read from its folder: the folder, its [`fingerprint`] part, what the API serves and
/// the descriptors of its scripts.
type ReadSkill = (
    PathBuf,
    String,
    toolgate_core::skill::SkillEntry,
    toolgate_core::skill::LoadedSkill,
);

fn read_skills(docs: &[RawManifest], findings: &mut Vec<Finding>) -> Vec<ReadSkill> {
    let mut out = Vec::new();
    for d in docs.iter().filter(|d| d.value["kind"] == "Skill") {
        let Ok(spec) = serde_json::from_value::<toolgate_crds::SkillSpec>(d.value["spec"].clone())
        else {
            continue; // the lint says what is wrong with the spec
        };
        let meta = &d.value["metadata"];
        let (Some(name), Some(path)) = (meta["name"].as_str(), spec.path.as_deref()) else {
            continue;
        };
        let ns = meta["namespace"]
            .as_str()
            .unwrap_or(toolgate_core::manifest::DEFAULT_NAMESPACE);
        let finding = |path: &str, message: String| Finding {
            severity: Severity::Error,
            origin: d.origin.clone(),
            object: Some(format!("Skill {ns}/{name}")),
            path: path.into(),
            code: "skill",
            message,
        };
        let beside = Path::new(&d.origin.source)
            .parent()
            .unwrap_or(Path::new("."));
        let folder = match std::fs::canonicalize(beside.join(path)) {
            Ok(f) if f.is_dir() => f,
            Ok(f) => {
                findings.push(finding(
                    "spec.path",
                    format!("expected the skill's folder, found a file: {}", f.display()),
                ));
                continue;
            }
            Err(e) => {
                findings.push(finding(
                    "spec.path",
                    format!("expected the skill's folder at {} (relative to the manifest's folder), found {e}", beside.join(path).display()),
                ));
                continue;
            }
        };
        // Taken before the files are read: a change while reading is a change next time.
        let stats = skill_fingerprint(&folder);
        let files = match skill_files(&folder) {
            Ok(f) => f,
            Err(e) => {
                findings.push(finding("spec.path", e));
                continue;
            }
        };
        match toolgate_core::skill::load(ns, name, &spec, &files) {
            Ok(loaded) => {
                let entry = toolgate_core::skill::SkillEntry::from_loaded(ns, name, &loaded);
                out.push((folder, stats, entry, loaded));
            }
            Err(errors) => findings.extend(
                errors
                    .into_iter()
                    .map(|e| finding("spec.path", format!("{}/{e}", folder.display()))),
            ),
        }
    }
    out
}

/// The most files and bytes a skill folder may hold (a folder that holds more is not a skill).
const SKILL_MAX_FILES: usize = 512;
const SKILL_MAX_BYTES: u64 = 16 << 20;

/// A skill folder's files by their path in it. A symbolic link is refused: it could carry a file
/// from anywhere on the machine into a descriptor.
fn skill_files(folder: &Path) -> Result<toolgate_core::skill::Files, String> {
    let mut files = std::collections::BTreeMap::new();
    let mut total = 0u64;
    let mut stack = vec![folder.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
            let path = entry.path();
            let kind = entry
                .file_type()
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            if kind.is_symlink() {
                return Err(format!(
                    "{} is a symbolic link: a skill's files are its own (copy the file in)",
                    path.display()
                ));
            }
            if kind.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(folder)
                .map_err(|_| format!("{} is outside the skill", path.display()))?
                .to_string_lossy()
                .into_owned();
            let bytes =
                std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            total += bytes.len() as u64;
            files.insert(rel, bytes);
            if files.len() > SKILL_MAX_FILES || total > SKILL_MAX_BYTES {
                return Err(format!(
                    "expected a skill of at most {SKILL_MAX_FILES} files and {SKILL_MAX_BYTES} bytes, found more"
                ));
            }
        }
    }
    Ok(toolgate_core::skill::Files { files, flat: false })
}

/// A digest of the YAML files under a folder and of every file of the skill folders: names,
/// sizes and modification times. Cheap enough to poll every second; a change means "read the
/// folder again".
pub fn fingerprint(dir: &Path, skills: &[PathBuf]) -> String {
    let mut ignored = Vec::new();
    let mut out = stat_digest(&collect_files(&[dir.to_path_buf()], &mut ignored));
    for folder in skills {
        out.push_str(&skill_fingerprint(folder));
    }
    out
}

/// The [`fingerprint`] part of one skill folder.
fn skill_fingerprint(folder: &Path) -> String {
    let mut files = Vec::new();
    let mut stack = vec![folder.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    stat_digest(&files)
}

fn stat_digest(files: &[PathBuf]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for f in files {
        h.update(f.display().to_string().as_bytes());
        if let Ok(m) = std::fs::symlink_metadata(f) {
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
