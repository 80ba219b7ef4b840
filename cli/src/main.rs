//! `toolgate`: the command line.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod crds_cmd;
mod lint_cmd;
mod policy_cmds;

/// toolgate: governed, auditable, isolated actions for AI agents.
#[derive(Parser)]
#[command(name = "toolgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions as YAML, or write one file per kind with --out.
    Crds {
        /// Write `<plural>.toolgate.dev.yaml` files into this folder instead of printing.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Check manifests (files or folders, multi-document YAML) against the CRD schemas and
    /// toolgate's rules. Reports every problem; exits 1 if any is an error.
    Lint {
        /// Files or folders to check as one set (references resolve across them).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: lint_cmd::Format,
    },
    /// Decide a ToolCall offline against a folder of manifests. Exits 0 allow, 3 approval
    /// needed, 4 deny, 2 when the manifests do not lint.
    Check {
        /// Folder of manifests (tools, grants, policies, approvals).
        #[arg(long)]
        manifests: PathBuf,
        /// A file holding the ToolCall(s) to decide.
        #[arg(long)]
        call: PathBuf,
        /// Decide as this principal instead of the call's spec.principal.
        #[arg(long)]
        principal: Option<String>,
        /// Groups of the principal (repeatable).
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: policy_cmds::Output,
        /// Decide at this time (RFC 3339) instead of now.
        #[arg(long)]
        now: Option<String>,
    },
    /// Compile the tool view a principal would get for an intent.
    View {
        /// Folder of manifests.
        #[arg(long)]
        manifests: PathBuf,
        /// The principal (`system:serviceaccount:team-a:fixer`, a user name).
        #[arg(long)]
        principal: String,
        /// Groups of the principal (repeatable).
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Namespace (defaults to a service account's own).
        #[arg(long)]
        namespace: Option<String>,
        /// The intent in words.
        #[arg(long)]
        intent: String,
        /// Only tools that declare this action type (`read`, `write`, `external_send`, …).
        #[arg(long, value_parser = parse_action_type)]
        action_type: Option<toolgate_crds::ActionType>,
        /// Only tools in this domain (repeatable).
        #[arg(long = "domain")]
        domains: Vec<String>,
        /// At most this many tools.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
        max_tools: u16,
        /// Payload format.
        #[arg(long, value_enum, default_value = "canonical")]
        format: policy_cmds::Format,
        /// Also list every hidden tool and why.
        #[arg(long)]
        explain: bool,
        /// Compile at this time (RFC 3339) instead of now.
        #[arg(long)]
        now: Option<String>,
    },
    /// Show how effective permissions change between two versions of a policy folder.
    Diff {
        /// The folder before the change.
        old: PathBuf,
        /// The folder after the change.
        new: PathBuf,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "markdown")]
        output: policy_cmds::DiffOutput,
        /// Evaluate at this time (RFC 3339) instead of now.
        #[arg(long)]
        now: Option<String>,
    },
}

fn parse_action_type(s: &str) -> Result<toolgate_crds::ActionType, String> {
    toolgate_crds::ActionType::ALL
        .into_iter()
        .find(|a| a.as_str() == s)
        .ok_or_else(|| {
            let all: Vec<&str> = toolgate_crds::ActionType::ALL
                .iter()
                .map(|a| a.as_str())
                .collect();
            format!("expected one of {}, found {s:?}", all.join(", "))
        })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crds { out } => crds_cmd::run(out.as_deref()),
        Command::Lint { paths, output } => lint_cmd::run(&paths, output),
        Command::Check {
            manifests,
            call,
            principal,
            groups,
            output,
            now,
        } => policy_cmds::check(
            &manifests,
            &call,
            principal.as_deref(),
            &groups,
            output,
            now.as_deref(),
        ),
        Command::View {
            manifests,
            principal,
            groups,
            namespace,
            intent,
            action_type,
            domains,
            max_tools,
            format,
            explain,
            now,
        } => policy_cmds::view(&policy_cmds::ViewArgs {
            manifests: &manifests,
            principal: &principal,
            groups: &groups,
            namespace: namespace.as_deref(),
            intent: &intent,
            action_type,
            domains: &domains,
            max_tools: usize::from(max_tools),
            format,
            explain,
            now: now.as_deref(),
        }),
        Command::Diff {
            old,
            new,
            output,
            now,
        } => policy_cmds::diff(&old, &new, output, now.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolgate: {e:#}");
            ExitCode::from(1)
        }
    }
}
