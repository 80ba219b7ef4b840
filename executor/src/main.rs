//! `toolgate-executor --spec FILE [--credentials DIR] [--result FILE]`

use std::process::ExitCode;

use clap::Parser;

/// Run one tool call and write its result (at most 4 KiB of JSON).
#[derive(Parser)]
#[command(name = "toolgate-executor", version = toolgate_executor::VERSION, about)]
struct Cli {
    #[command(flatten)]
    args: toolgate_executor::cli::Args,
}

fn main() -> ExitCode {
    toolgate_executor::cli::main(&Cli::parse().args)
}
