//! The executor's command line, shared by `toolgate-executor` and `toolgate executor` (the embedded
//! runtime runs the latter inside its sandbox, so one binary is all a new user builds).

use std::path::PathBuf;
use std::process::ExitCode;

use toolgate_crds::{CallError, CallResult, ResultStatus};

use crate::run::{ExecError, execute, load_credentials, load_spec};

/// Run one tool call and write its result (at most 4 KiB of JSON).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The call specification (JSON, apiVersion toolgate.dev/exec/v1).
    #[arg(long)]
    pub spec: PathBuf,
    /// Folder holding the credential files the spec names (default: the spec's folder).
    #[arg(long)]
    pub credentials: Option<PathBuf>,
    /// Where to write the result (in a pod: /dev/termination-log). Always printed to stdout too.
    #[arg(long)]
    pub result: Option<PathBuf>,
}

fn write_result(args: &Args, result: &CallResult) {
    let json = serde_json::to_string(result).unwrap_or_else(|e| format!("{{\"status\":\"error\",\"error\":{{\"code\":\"internal\",\"message\":\"{e}\",\"retryable\":false}}}}"));
    println!("{json}");
    if let Some(path) = &args.result
        && let Err(e) = std::fs::write(path, &json)
    {
        eprintln!(
            "toolgate-executor: cannot write the result to {}: {e}",
            path.display()
        );
    }
}

/// Run the call described by `args`; the exit code says how it ended (README).
pub fn main(args: &Args) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolgate-executor: cannot start the runtime: {e}");
            return ExitCode::from(70);
        }
    };
    let outcome: Result<CallResult, ExecError> = runtime.block_on(async {
        let spec = load_spec(&args.spec)?;
        let dir = args
            .credentials
            .clone()
            .unwrap_or_else(|| args.spec.parent().map(PathBuf::from).unwrap_or_default());
        let credentials = load_credentials(&spec, &dir)?;
        execute(&spec, &credentials, &dir).await
    });
    match outcome {
        Ok(result) => {
            write_result(args, &result);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toolgate-executor: {e}");
            let result = CallResult {
                status: ResultStatus::Error,
                exit_code: None,
                output_preview: None,
                structured_output: None,
                artifacts: vec![],
                effects_observed: None,
                verifier: None,
                error: Some(CallError {
                    code: e.code().into(),
                    message: crate::result::cut(&e.to_string(), 1024),
                    retryable: false,
                    safe_to_show_user: false,
                }),
                usage: None,
            };
            write_result(args, &result);
            ExitCode::from(e.exit_code())
        }
    }
}
