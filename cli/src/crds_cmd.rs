//! `toolgate crds`: the generated CRDs.

use std::path::Path;
use std::process::ExitCode;

use crate::client::out::Format;
use crate::{out, outln};
use anyhow::Context;

/// Render every CRD as one YAML document, with the header the committed files carry.
pub fn render_all() -> anyhow::Result<Vec<(String, String)>> {
    toolgate_crds::all_crds()
        .iter()
        .map(|crd| {
            let text = toolgate_crds::render_crd_yaml(crd).context("serializing a CRD")?;
            Ok((toolgate_crds::crd_file_name(crd), text))
        })
        .collect()
}

pub fn run(out: Option<&Path>, output: Format) -> anyhow::Result<ExitCode> {
    if out.is_none() && output == Format::Json {
        let items = toolgate_crds::all_crds()
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<_>, _>>()
            .context("serializing a CRD")?;
        crate::client::out::object(&serde_json::json!({"items": items}), output);
        return Ok(ExitCode::SUCCESS);
    }
    let rendered = render_all()?;
    match out {
        None => {
            for (i, (_, text)) in rendered.iter().enumerate() {
                if i > 0 {
                    outln!("---");
                }
                out!("{text}");
            }
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, text) in &rendered {
                let path = dir.join(name);
                std::fs::write(&path, text)
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
