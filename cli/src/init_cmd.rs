//! `toolgate init DIR`: a working namespace in one command — two tools, the sandbox policies
//! they run under, a grant for one agent, tokens for the agent and a reviewer, a workspace — and
//! the commands that run it. The tools and policies are the repository's examples (the ones the
//! test suite lints and runs), moved into the chosen namespace.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::outln;

const FILE_READ: &str = include_str!("../../examples/tools/file-read.yaml");
const FILE_WRITE: &str = include_str!("../../examples/tools/file-write.yaml");
const POLICIES: &str = include_str!("../../examples/sandbox-policies.yaml");
/// The example policies the two tools run under.
const POLICIES_USED: &[&str] = &["read-only", "workspace-write"];

/// What `toolgate init` was asked for.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The folder to create (it must not exist, or be empty).
    pub dir: PathBuf,
    /// The namespace of the manifests.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// The agent's service-account name: it gets the grant and a token.
    #[arg(long, default_value = "agent")]
    pub agent: String,
    /// The reviewer (a user name) who may approve calls in the namespace.
    #[arg(long, default_value = "reviewer@example.com")]
    pub reviewer: String,
}

/// Write the namespace into `a.dir`, then say how to run it.
pub fn run(a: &InitArgs) -> anyhow::Result<ExitCode> {
    for (what, value) in [("--namespace", &a.namespace), ("--agent", &a.agent)] {
        if !toolgate_core::names::is_dns_label(value) {
            bail!("{what}: expected a DNS label (lowercase letters, digits, '-'), got {value:?}");
        }
    }
    if a.reviewer.trim().is_empty() || a.reviewer.contains(['"', '\n', '\\']) {
        bail!("--reviewer: expected a user name, got {:?}", a.reviewer);
    }
    if a.dir.exists()
        && std::fs::read_dir(&a.dir)
            .with_context(|| format!("{}: not a folder", a.dir.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{}: exists and is not empty; init writes only into a new or empty folder",
            a.dir.display()
        );
    }
    let ns = &a.namespace;
    let in_namespace = |text: &str| text.replace("namespace: team-a", &format!("namespace: {ns}"));
    let policies: Vec<String> = POLICIES
        .split("\n---\n")
        .filter(|doc| {
            POLICIES_USED
                .iter()
                .any(|name| doc.contains(&format!("metadata: {{name: {name}, ")))
        })
        .map(in_namespace)
        .collect();
    let grant = format!(
        "# {agent} may read the workspace, and write it (a write of risk above low waits for a reviewer).
apiVersion: toolgate.dev/v1alpha1
kind: ToolGrant
metadata: {{name: {agent}, namespace: {ns}}}
spec:
  subjects:
  - {{kind: ServiceAccount, name: {agent}, namespace: {ns}}}
  tools: {{names: [file.read, file.write]}}
  scopes: [\"workspace:read\", \"workspace:write\"]
  budget: {{maxCallsPerHour: 600}}
  reason: scaffolded by toolgate init
",
        agent = a.agent
    );
    let agent_token = token()?;
    let reviewer_token = token()?;
    let principal = format!("system:serviceaccount:{ns}:{}", a.agent);
    let tokens = format!(
        "# Bearer tokens of `toolgate local --tokens`: keep this file private (mode 600).
- {{token: {agent_token}, principal: \"{principal}\"}}
- {{token: {reviewer_token}, principal: \"{reviewer}\", approverIn: [{ns}]}}
",
        reviewer = a.reviewer
    );
    let dir = &a.dir;
    let m = dir.join("manifests");
    write(
        &m.join("sandbox-policies.yaml"),
        &policies.join("\n---\n"),
        0o644,
    )?;
    write(
        &m.join("tools/file-read.yaml"),
        &in_namespace(FILE_READ),
        0o644,
    )?;
    write(
        &m.join("tools/file-write.yaml"),
        &in_namespace(FILE_WRITE),
        0o644,
    )?;
    write(&m.join("grant.yaml"), &grant, 0o644)?;
    write(&dir.join("tokens.yaml"), &tokens, 0o600)?;
    let server = "http://127.0.0.1:7070";
    write(
        &dir.join("agent.env"),
        &format!("TOOLGATE_SERVER={server}\nTOOLGATE_TOKEN={agent_token}\n"),
        0o600,
    )?;
    write(
        &dir.join("reviewer.env"),
        &format!("TOOLGATE_SERVER={server}\nTOOLGATE_TOKEN={reviewer_token}\n"),
        0o600,
    )?;
    write(
        &dir.join("workspace/README.md"),
        "# A workspace\n\nWhat the agent's tools read and write.\n",
        0o644,
    )?;
    let d = dir.display();
    outln!(
        "wrote {d}: manifests/ (2 tools, 2 sandbox policies, a grant), tokens.yaml, agent.env, reviewer.env, workspace/"
    );
    outln!();
    outln!("Run it:");
    outln!(
        "  toolgate local --manifests {d}/manifests --workspace {d}/workspace --tokens {d}/tokens.yaml --data {d}/data"
    );
    outln!("Then, as the agent, in another shell:");
    outln!("  set -a; . {d}/agent.env; set +a");
    outln!(
        "  toolgate call file.read --args '{{\"path\": \"README.md\"}}' --task 'read the README' --watch"
    );
    outln!(
        "And as the reviewer, to approve what waits: set -a; . {d}/reviewer.env; set +a; toolgate approve ID"
    );
    Ok(ExitCode::SUCCESS)
}

/// A new bearer token: 32 random bytes in hex.
fn token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no random bytes for a token: {e}"))?;
    Ok(hex::encode(bytes))
}

/// Create `path` (and its folders) with `text`, never over an existing file.
fn write(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}
