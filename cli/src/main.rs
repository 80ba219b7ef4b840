//! `toolgate`: the command line.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod crds_cmd;
mod lint_cmd;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crds { out } => crds_cmd::run(out.as_deref()),
        Command::Lint { paths, output } => lint_cmd::run(&paths, output),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolgate: {e:#}");
            ExitCode::from(1)
        }
    }
}
