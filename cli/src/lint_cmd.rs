//! `toolgate lint PATH...`: check manifests the way the API server would, and more.

use std::path::PathBuf;
use std::process::ExitCode;
use toolgate_client::outln;

pub use toolgate_local::manifests::{lint_paths, linter};

/// Output format of lint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per problem.
    Text,
    /// A JSON array of findings.
    Json,
}

pub fn run(paths: &[PathBuf], format: Format) -> anyhow::Result<ExitCode> {
    let linter = linter()?;
    let report = lint_paths(&linter, paths, jiff::Timestamp::now());
    match format {
        Format::Text => {
            for f in &report.findings {
                outln!("{f}");
            }
            outln!(
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
            outln!("{}", serde_json::to_string_pretty(&items)?);
        }
    }
    Ok(if report.errors() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
