//! `toolgate crds`: the generated CRDs.

use std::path::Path;
use std::process::ExitCode;

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

pub fn run(out: Option<&Path>) -> anyhow::Result<ExitCode> {
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
