//! The command a pull request runs for table tests of decisions: `toolgate policy test DIR`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use toolgate_core::registry::Registry;
use toolgate_review::policy_test::{self, CaseResult, PolicyTestFile};

use crate::client::exit::EXIT_BAD_MANIFESTS;
use crate::outln;
use crate::policy_cmds::{Output, load, parse_now};

/// The policy test tables under a folder (`*.policytest.yaml`), in a stable order.
fn test_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(policy_test::SUFFIX))
            {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// Read a table, naming the field at fault.
fn read_table(path: &Path) -> anyhow::Result<PolicyTestFile> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let value: serde_json::Value =
        serde_norway::from_str(&text).with_context(|| format!("{}: not YAML", path.display()))?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        anyhow::anyhow!(
            "{}: {}: {}",
            path.display(),
            match e.path().to_string().as_str() {
                "." => "(top level)".to_string(),
                p => p.to_string(),
            },
            e.inner()
        )
    })
}

/// `toolgate policy test DIR`: lint DIR's manifests, run every table under it, report each case;
/// 0 when all pass, 1 when one fails, 2 when the manifests or a table cannot be read.
pub fn policy_test(dir: &Path, output: Output, now: Option<&str>) -> anyhow::Result<ExitCode> {
    let now = parse_now(now)?;
    if !dir.is_dir() {
        bail!(
            "{}: expected a folder of manifests and *{} tables",
            dir.display(),
            policy_test::SUFFIX
        );
    }
    let report = match load(&[dir.to_path_buf()], None, now)? {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let registry = Registry::from_objects(&report.objects);
    let files = test_files(dir);
    if files.is_empty() {
        bail!(
            "{}: no policy tests (files named *{})",
            dir.display(),
            policy_test::SUFFIX
        );
    }
    let mut all: Vec<(String, CaseResult)> = Vec::new();
    for f in &files {
        let table = match read_table(f) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("toolgate: {e}");
                return Ok(ExitCode::from(EXIT_BAD_MANIFESTS));
            }
        };
        match policy_test::run(&registry, &table, now) {
            Ok(results) => all.extend(results.into_iter().map(|r| (f.display().to_string(), r))),
            Err(e) => {
                eprintln!("toolgate: {}: {e}", f.display());
                return Ok(ExitCode::from(EXIT_BAD_MANIFESTS));
            }
        }
    }
    let failed = all.iter().filter(|(_, r)| !r.passed).count();
    match output {
        Output::Json | Output::Yaml => {
            let items: Vec<serde_json::Value> = all
                .iter()
                .map(|(file, r)| serde_json::json!({"file": file, "case": r}))
                .collect();
            crate::client::out::object(&serde_json::Value::Array(items), output);
        }
        Output::Text => {
            for (file, r) in &all {
                let got = policy_test::outcome_name(r.decision.outcome);
                let why = r
                    .decision
                    .reasons
                    .last()
                    .map(|x| format!("{} ({})", x.message, x.code))
                    .unwrap_or_default();
                if r.passed {
                    outln!("PASS {file}: {} ({got})", r.name);
                } else {
                    outln!(
                        "FAIL {file}: {}: expected {}, got {got}: {why}",
                        r.name,
                        r.expected
                    );
                }
            }
            outln!(
                "{} case(s) in {} table(s): {} passed, {failed} failed",
                all.len(),
                files.len(),
                all.len() - failed
            );
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
