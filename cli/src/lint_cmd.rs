//! `toolgate lint PATH...`: check manifests the way the API server would, and more.

use crate::outln;
use std::path::PathBuf;
use std::process::ExitCode;

pub use toolgate_local::manifests::{lint_paths, lint_paths_with, linter};

/// Output of lint: a line per problem (`text`), or the findings as `json` or `yaml`.
pub use crate::client::out::Format;

pub fn run(paths: &[PathBuf], format: Format, review: bool) -> anyhow::Result<ExitCode> {
    let linter = linter()?;
    let report = lint_paths(&linter, paths, jiff::Timestamp::now());
    let unreviewed = if review {
        toolgate_core::lint::poisoning::unreviewed(&report.objects)
    } else {
        Vec::new()
    };
    match format {
        Format::Text => {
            for f in &report.findings {
                outln!("{f}");
            }
            for u in &unreviewed {
                outln!(
                    "{}: review: ToolDescriptor/{} ({}) is {}, reviewed {}: read its description and schemas, then annotate {}: \"{}\"",
                    u.source,
                    u.name,
                    u.namespace,
                    u.digest,
                    u.reviewed.as_deref().unwrap_or("never"),
                    toolgate_core::lint::poisoning::REVIEWED_ANNOTATION,
                    u.digest
                );
            }
            if review {
                outln!("{} descriptor(s) to review", unreviewed.len());
            }
            outln!(
                "{} documents, {} objects: {} errors, {} warnings",
                report.documents,
                report.objects.len(),
                report.errors(),
                report.warnings()
            );
        }
        Format::Json | Format::Yaml => {
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
            if review {
                let listed: Vec<serde_json::Value> = unreviewed
                    .iter()
                    .map(|u| {
                        serde_json::json!({
                            "file": u.source, "namespace": u.namespace, "name": u.name,
                            "digest": u.digest, "reviewed": u.reviewed,
                        })
                    })
                    .collect();
                crate::client::out::object(
                    &serde_json::json!({"findings": items, "review": listed}),
                    format,
                );
            } else {
                crate::client::out::object(&serde_json::Value::Array(items), format);
            }
        }
    }
    Ok(if report.errors() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
