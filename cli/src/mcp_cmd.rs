//! `toolgate mcp normalize`: a saved `tools/list` answer as the ToolDescriptors toolgate would
//! register, through the same normalization as the runtimes (`toolgate_core::mcp`); and
//! `toolgate import`: a model provider's tool definitions as ToolDescriptors
//! (`toolgate_review::import`).

use std::path::Path;
use std::process::ExitCode;

use crate::client::out::Format;
use crate::out;
use toolgate_core::mcp::{ServerConfig, normalize as normalize_tools, parse_list, to_yaml};

/// The server's trust level, as the command line spells it.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Trust {
    /// Run by the team that runs toolgate: its annotations set effects and risk.
    FirstParty,
    /// Part of the team's workspace: as first party.
    Workspace,
    /// Someone else's: only annotations that raise risk count.
    ThirdParty,
    /// Registered as blocked.
    Untrusted,
}

impl From<Trust> for toolgate_crds::TrustLevel {
    fn from(t: Trust) -> Self {
        match t {
            Trust::FirstParty => toolgate_crds::TrustLevel::FirstParty,
            Trust::Workspace => toolgate_crds::TrustLevel::Workspace,
            Trust::ThirdParty => toolgate_crds::TrustLevel::ThirdParty,
            Trust::Untrusted => toolgate_crds::TrustLevel::Untrusted,
        }
    }
}

/// Manifests as they are written for review (`text` and `yaml`: multi-document YAML), or as
/// `{"items": [...]}` in JSON.
fn print_manifests(yaml: &str, output: Format) -> anyhow::Result<()> {
    if output != Format::Json {
        out!("{yaml}");
        return Ok(());
    }
    let mut items = Vec::new();
    for doc in serde_norway::Deserializer::from_str(yaml) {
        let value: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if !value.is_null() {
            items.push(value);
        }
    }
    crate::client::out::object(&serde_json::json!({"items": items}), output);
    Ok(())
}

/// Print the descriptors; refused tools go to stderr with their reason (exit 1).
pub fn normalize(
    server: &ServerConfig<'_>,
    file: &Path,
    output: Format,
) -> anyhow::Result<ExitCode> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("toolgate: {}: {e}", file.display());
            return Ok(ExitCode::from(crate::client::exit::EXIT_BAD_MANIFESTS));
        }
    };
    let tools = match parse_list(&text) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("toolgate: {}: {e}", file.display());
            return Ok(ExitCode::from(crate::client::exit::EXIT_BAD_MANIFESTS));
        }
    };
    // The version the server announced, when the saved answer carries it and none was given.
    let saved = toolgate_core::mcp::saved_server_version(&text);
    let server = &ServerConfig {
        version: server.version.or(saved.as_deref()),
        ..*server
    };
    let (normalized, refused) = normalize_tools(server, &tools);
    print_manifests(
        &to_yaml(server, &normalized).map_err(anyhow::Error::msg)?,
        output,
    )?;
    for r in &refused {
        eprintln!("toolgate: {}: refused {r}", file.display());
    }
    Ok(if refused.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `toolgate import`: print the descriptors; refused definitions go to stderr with their reason
/// (exit 1).
pub fn import(
    config: &toolgate_review::import::ImportConfig<'_>,
    file: &Path,
    output: Format,
) -> anyhow::Result<ExitCode> {
    let parsed = std::fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|text| {
            toolgate_review::import::parse_definitions(&text).map_err(|e| e.to_string())
        });
    let parsed = match parsed {
        Ok(p) => p,
        Err(e) => {
            eprintln!("toolgate: {}: {e}", file.display());
            return Ok(ExitCode::from(crate::client::exit::EXIT_BAD_MANIFESTS));
        }
    };
    let mut refused = Vec::new();
    let mut definitions = Vec::new();
    // Where each definition is in the file, to name a refused one by its place there.
    let mut at = Vec::new();
    for (i, p) in parsed.into_iter().enumerate() {
        match p {
            Ok(d) => {
                definitions.push(d);
                at.push(i);
            }
            Err(r) => refused.push(r),
        }
    }
    let (tools, bad) = toolgate_review::import::import(config, &definitions);
    refused.extend(bad.into_iter().map(|mut r| {
        r.index = at.get(r.index).copied().unwrap_or(r.index);
        r
    }));
    refused.sort_by_key(|r| r.index);
    print_manifests(
        &toolgate_review::import::to_yaml(config, &tools).map_err(anyhow::Error::msg)?,
        output,
    )?;
    for r in &refused {
        eprintln!("toolgate: {}: refused {r}", file.display());
    }
    Ok(if refused.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
