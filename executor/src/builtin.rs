//! Built-in operations: file writes and deletes under the write roots, which a CLI could only do
//! through a shell. Paths are relative to the working directory, may not climb out with `..`, and
//! must resolve inside a write root without crossing a symlink on the way or at the last step.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;
use toolgate_contract::exec::ExecSpec;
use toolgate_crds::BuiltinOperation;

/// Why a built-in operation was refused or failed. Reported as the tool's error, not the
/// executor's: the call ran and was refused.
#[derive(Debug, thiserror::Error)]
pub enum BuiltinError {
    /// An arg is missing or of the wrong type.
    #[error("args.{0}: {1}")]
    Arg(&'static str, String),
    /// The path leaves the write roots.
    #[error("args.path {0:?}: {1}")]
    Path(String, String),
    /// The filesystem said no.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

impl BuiltinError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            BuiltinError::Arg(..) => "builtin-args",
            BuiltinError::Path(..) => "path-outside-write-roots",
            BuiltinError::Io(..) => "io",
        }
    }
}

fn arg<'a>(args: &'a Value, name: &'static str) -> Result<&'a str, BuiltinError> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| BuiltinError::Arg(name, "expected a string".into()))
}

/// Resolve `path` (relative to the working directory) to a location inside a write root.
fn resolve(spec: &ExecSpec, path: &str) -> Result<PathBuf, BuiltinError> {
    let bad = |why: &str| BuiltinError::Path(path.into(), why.into());
    let rel = Path::new(path);
    if path.is_empty() || rel.is_absolute() {
        return Err(bad("expected a relative path"));
    }
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(bad("'..' is not allowed"));
    }
    let base = PathBuf::from(spec.working_dir.as_deref().unwrap_or("."));
    let full = base.join(rel);
    let name = full
        .file_name()
        .ok_or_else(|| bad("expected a file name"))?
        .to_owned();
    let parent = full
        .parent()
        .ok_or_else(|| bad("expected a parent folder"))?;
    // The parent must exist (or be creatable) inside a root; canonicalize the deepest existing
    // ancestor so a symlinked folder cannot lead outside.
    let mut existing = parent.to_path_buf();
    while !existing.exists() {
        existing = existing
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| bad("no existing parent folder"))?;
    }
    let real = std::fs::canonicalize(&existing)
        .map_err(|e| BuiltinError::Io(existing.display().to_string(), e))?;
    // The folder must be the one the path names: a symlinked folder on the way (`src/ci ->
    // ../ci`) would put the file under another prefix than the one a policy decided on.
    let named = std::fs::canonicalize(&base)
        .map_err(|e| BuiltinError::Io(base.display().to_string(), e))?
        .join(
            existing
                .strip_prefix(&base)
                .unwrap_or(Path::new(""))
                .components()
                .filter(|c| matches!(c, Component::Normal(_)))
                .collect::<PathBuf>(),
        );
    if real != named {
        return Err(bad(
            "goes through a symlinked folder to another place; refusing to follow it",
        ));
    }
    let roots: Vec<PathBuf> = spec
        .write_roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .collect();
    if !roots.iter().any(|r| real.starts_with(r)) {
        return Err(bad("resolves outside the sandbox's write roots"));
    }
    let target = parent.join(name);
    if std::fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(bad("is a symlink; refusing to follow it"));
    }
    Ok(target)
}

/// Run a built-in operation; returns what it did (or would do), for stdout.
pub fn run(spec: &ExecSpec, op: BuiltinOperation) -> Result<String, BuiltinError> {
    let path = arg(&spec.args, "path")?;
    let target = resolve(spec, path)?;
    let existed = std::fs::symlink_metadata(&target).ok();
    match op {
        BuiltinOperation::FsWrite => {
            let content = arg(&spec.args, "content")?;
            let verb = if existed.is_some() {
                "replace"
            } else {
                "create"
            };
            if spec.dry_run {
                return Ok(format!(
                    "dry run: would {verb} {path} with {} bytes",
                    content.len()
                ));
            }
            if let Some(dir) = target.parent() {
                std::fs::create_dir_all(dir).map_err(|e| BuiltinError::Io(path.into(), e))?;
            }
            std::fs::write(&target, content).map_err(|e| BuiltinError::Io(path.into(), e))?;
            Ok(format!("{verb}d {path} ({} bytes)", content.len()))
        }
        BuiltinOperation::FsDelete => {
            let Some(meta) = existed else {
                return Err(BuiltinError::Io(
                    path.into(),
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ));
            };
            if !meta.is_file() {
                return Err(BuiltinError::Path(
                    path.into(),
                    "is not a regular file".into(),
                ));
            }
            if spec.dry_run {
                return Ok(format!(
                    "dry run: would delete {path} ({} bytes)",
                    meta.len()
                ));
            }
            std::fs::remove_file(&target).map_err(|e| BuiltinError::Io(path.into(), e))?;
            Ok(format!("deleted {path} ({} bytes)", meta.len()))
        }
    }
}
