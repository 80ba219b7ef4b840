//! `toolgate`: the command line. An agent's shell starts a process for every call, so the API's
//! client commands (`call`, `get`, `watch`, `approve`, …) run here, in a binary that holds only
//! the client and starts in a fraction of the time of the whole runtime. Every other command —
//! and help, the version, and any command line these commands do not parse — is run by the
//! `toolgate-full` binary beside this one, in this process's place (exec: same process id, same
//! arguments, its output and exit code), so `toolgate` behaves as one command.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use clap::Parser;

#[allow(
    dead_code,
    reason = "the full binary uses more of the client commands' helpers (the demo's) than this one"
)]
mod client;

/// The binary holding every command, installed beside this one.
const FULL: &str = "toolgate-full";

/// The client commands, as `toolgate-full` parses them too.
#[derive(Parser)]
#[command(name = "toolgate")]
struct ClientCli {
    #[command(subcommand)]
    command: client::ClientCommand,
    #[command(flatten)]
    conn: client::Conn,
}

fn main() -> ExitCode {
    match ClientCli::try_parse() {
        Ok(cli) => match client::run(&cli.conn, cli.command) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("toolgate: {}", toolgate_client::error_line(e.as_ref()));
                ExitCode::from(1)
            }
        },
        // Not a client command, or a help or error text to print: the full binary's.
        Err(_) => run_full(),
    }
}

/// Replace this process with `toolgate-full` and the same arguments; returns only when that
/// cannot be done.
fn run_full() -> ExitCode {
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("toolgate"));
    let full = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name(FULL),
        Err(e) => {
            eprintln!("toolgate: cannot locate this binary to find {FULL} beside it: {e}");
            return ExitCode::from(1);
        }
    };
    let err = std::process::Command::new(&full)
        .arg0(arg0)
        .args(args)
        .exec();
    eprintln!(
        "toolgate: this command is run by {FULL}, expected beside this binary at {}: {err} \
         (`cargo build -p toolgate` and `cargo install --path cli` build both)",
        full.display()
    );
    ExitCode::from(1)
}
