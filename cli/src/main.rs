//! `toolgate-full`: every command of the command line. The `toolgate` binary runs the API's
//! client commands itself and this one, in its place, for the rest (see `client_main.rs`); run
//! directly (`cargo run -p toolgate`), it does everything, the client commands too.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod client;
mod crds_cmd;
mod demo;
mod eval_cmd;
mod gitops;
mod init_cmd;
mod lint_cmd;
mod local_cmd;
mod mcp_cmd;
mod mcp_config;
mod mcp_http;
mod mcp_serve;
mod policy_cmds;
mod recorded;
mod reference;

/// toolgate: governed, auditable, isolated actions for AI agents.
#[derive(Parser)]
#[command(name = "toolgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    conn: client::Conn,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions as YAML, or write one file per kind with --out.
    Crds {
        /// Write `<plural>.toolgate.dev.yaml` files into this folder instead of printing.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Output when printing: YAML documents (`text`, `yaml`), or `{"items": [...]}` as
        /// `json`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: client::out::Format,
    },
    /// Print a shell completion script for every command and flag: `source <(toolgate
    /// completion bash)`, or save it where the shell loads completions from.
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the reference pages generated from the code (every CRD field, command and flag,
    /// the gRPC API, condition types and reasons, exit codes) into a folder.
    Reference {
        /// The folder (the repository keeps them in `docs/reference`).
        #[arg(long)]
        out: PathBuf,
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
        /// Also list the first-party and workspace ToolDescriptors changed since their last
        /// review (their `toolgate.dev/description-reviewed` annotation is not their digest),
        /// with the digest to set once a person has read them. With `-o json` the output is
        /// `{findings, review}`.
        #[arg(long)]
        review: bool,
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
    /// Compile the tool view a principal would get for an intent: offline over a folder of
    /// manifests (--manifests, --principal), or as the caller against a running server.
    View {
        /// Folder of manifests (offline). Without it, ask the server.
        #[arg(long, requires = "principal")]
        manifests: Option<PathBuf>,
        /// The principal (`system:serviceaccount:team-a:fixer`, a user name); offline only.
        #[arg(long)]
        principal: Option<String>,
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
        /// Output: the payload as `json` (also for `text`) or `yaml`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: policy_cmds::Output,
    },
    /// Run the embedded runtime: manifests from a folder, the gRPC API on loopback, every call
    /// in a Linux sandbox.
    Local(Box<local_cmd::LocalArgs>),
    /// Regression-test the tool metadata: prompts (and every descriptor's examples) against the
    /// view compiler — precision and recall at k, unsafe exposure, approval trigger rate; exits
    /// 1 under the thresholds or, with --baseline, when a metric got worse.
    Eval(eval_cmd::EvalArgs),
    /// Scaffold a working namespace in a new folder: two tools, their sandbox policies, a grant
    /// for one agent, tokens for the agent and a reviewer, a workspace; then print how to run it.
    Init(init_cmd::InitArgs),
    /// Play "an agent fixes a failing test" through the gRPC API of a fresh embedded runtime.
    Demo {
        /// Keep the demo's temporary folder (store, event logs, artifacts, workspace).
        #[arg(long)]
        keep: bool,
    },
    /// Run one call from its spec (what the runtimes start inside each sandbox).
    #[command(hide = true)]
    Executor(toolgate_executor::cli::Args),
    #[command(flatten)]
    Client(client::ClientCommand),
    /// Show how effective permissions and ToolPolicy rules change between two versions of a
    /// policy folder; with --replay, which recorded calls would be decided differently.
    Diff {
        /// The folder before the change.
        old: PathBuf,
        /// The folder after the change.
        new: PathBuf,
        /// Decide these recorded calls again under both folders: a `toolgate local` data folder,
        /// or ToolCall exports (`kubectl get toolcalls -o yaml`), a file or a folder of them.
        #[arg(long, value_name = "CALLS")]
        replay: Option<PathBuf>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "markdown")]
        output: policy_cmds::DiffOutput,
        /// Evaluate at this time (RFC 3339) instead of now.
        #[arg(long)]
        now: Option<String>,
    },
    /// Policy tests for CI.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Tools of MCP servers, governed like any other.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Print the ToolDescriptors that tool definitions written for a model provider's API
    /// (OpenAI Chat Completions or Responses, Anthropic) become, for review in a pull request:
    /// each an `http` tool that POSTs its args to `<url-base>/<name>`, its schema kept byte for
    /// byte, its name kept where valid, an approval on every call (definitions say nothing of
    /// risk: edit the descriptor to say more). Exits 1 when a definition is refused (each named
    /// with why), 2 when the file cannot be read.
    Import {
        /// A JSON file: an array of definitions, `{"tools": [...]}`, or one definition.
        file: PathBuf,
        /// The application's endpoint the functions are served at.
        #[arg(long)]
        url_base: String,
        /// The SandboxPolicy the calls run under (its egress must allow the endpoint's host).
        #[arg(long)]
        sandbox_policy: String,
        /// Namespace of the descriptors.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// A prefix for every name (`app` gives `app.get-weather`).
        #[arg(long)]
        prefix: Option<String>,
        /// The CredentialBinding sent to the endpoint as `Authorization: Bearer`.
        #[arg(long)]
        credential_binding: Option<String>,
        /// How far the definitions are believed.
        #[arg(long, value_enum, default_value = "first-party")]
        trust: mcp_cmd::Trust,
        /// Output: the descriptors as YAML manifests (`text`, `yaml`), or `{"items": [...]}` as
        /// `json`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: client::out::Format,
    },
}

#[derive(Subcommand)]
enum McpCommand {
    /// Print the ToolDescriptors a saved `tools/list` answer (`{"tools": [...]}`, a JSON-RPC
    /// response, or a bare array) would register, for review in a pull request: names
    /// namespaced, annotations believed as far as --trust says, each tool `discovered` until a
    /// reviewer enables its exact digest. Offline: nothing is started. Exits 1 when a tool is
    /// refused (each is named with why), 2 when the file cannot be read.
    Normalize {
        /// The server's name: the first part of each tool's name.
        #[arg(long)]
        server: String,
        /// How far the server's annotations are believed.
        #[arg(long, value_enum, default_value = "third-party")]
        trust: mcp_cmd::Trust,
        /// Namespace of the descriptors.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// The SandboxPolicy its tools run under.
        #[arg(long)]
        sandbox_policy: String,
        /// The server's version (`serverInfo.version`), if semantic; else 0.0.0.
        #[arg(long)]
        server_version: Option<String>,
        /// The saved tools/list answer.
        file: PathBuf,
        /// The server's streamable HTTP endpoint, for an HTTP server (instead of a command).
        #[arg(long, conflicts_with = "command")]
        url: Option<String>,
        /// The CredentialBinding sent as an HTTP server's bearer token.
        #[arg(long, requires = "url")]
        credential_binding: Option<String>,
        /// The image a stdio server's pods run on a cluster (the McpServer's spec.image).
        #[arg(long, conflicts_with = "url")]
        image: Option<String>,
        /// The command that starts the server (stdio), run inside each call's sandbox.
        #[arg(last = true, required_unless_present = "url")]
        command: Vec<String>,
        /// Output: the descriptors as YAML manifests (`text`, `yaml`), or `{"items": [...]}` as
        /// `json`.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: client::out::Format,
    },
    /// Serve the caller's governed tools to an MCP client over stdio (the client starts
    /// `toolgate mcp serve --server … --token …`): tools/list is the caller's tool view,
    /// tools/call proposes a call through the chain and waits for it, at most --wait-seconds.
    Serve(mcp_serve::ServeArgs),
    /// Print the configuration snippet an MCP client (Claude Desktop, Claude Code, VS Code,
    /// Cursor) reads to start `toolgate mcp serve` as one of its servers, and where it goes.
    Config(mcp_config::ConfigArgs),
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Run the policy table tests (`*.policytest.yaml`) under a folder against its manifests:
    /// each case a call and the decision it must get. 0 all pass, 1 one fails, 2 unreadable.
    Test {
        /// A folder of manifests with its `*.policytest.yaml` tables.
        dir: PathBuf,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: policy_cmds::Output,
        /// Decide at this time (RFC 3339) unless a table says; default now.
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

/// Logs for the long-running commands: `RUST_LOG` filters, JSON when `TOOLGATE_LOG_FORMAT=json`.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Parse the command line and run the command: one arm per command (its length is the number of
/// commands; each arm calls the command's own module).
/// The commands by who runs them, as `toolgate --help` lists them.
const GROUPS: &[(&str, &[&str])] = &[
    (
        "Agents: views and governed calls",
        &[
            "view",
            "call",
            "get",
            "list",
            "watch",
            "explain",
            "artifact",
            "skill",
            "delegation-token",
            "complete-delegation",
        ],
    ),
    (
        "Reviewers: answering for calls",
        &["approve", "deny", "cancel"],
    ),
    (
        "Platform teams: manifests and policy in Git",
        &["lint", "check", "diff", "policy", "eval", "import", "mcp"],
    ),
    (
        "Running toolgate",
        &["init", "local", "demo", "crds", "completion", "reference"],
    ),
];

/// What `toolgate --help` ends with.
const EXAMPLES: &str = "Examples:
  toolgate local --manifests examples --workspace . --tokens tokens.yaml   # the embedded runtime
  toolgate view --intent 'read the failing test' --format openai           # what a model may see
  toolgate call file.read --args '{\"path\": \"src/a.ts\"}' --task 'read it' --watch
  toolgate approve ID                                                      # as a reviewer
  toolgate list -o yaml                                                    # any object: -o json|yaml
  toolgate lint examples/ && toolgate policy test examples/                # in CI

`toolgate COMMAND --help` says more of each; the reference is docs/reference/cli.md.";

/// The command line, its help listing the commands by [`GROUPS`] with [`EXAMPLES`].
fn command() -> clap::Command {
    let cmd = Cli::command();
    let mut listing = String::new();
    for (title, names) in GROUPS {
        listing.push_str(&format!("{title}:\n"));
        for name in *names {
            let about = cmd
                .find_subcommand(name)
                .and_then(clap::Command::get_about)
                .map(|a| a.to_string())
                .unwrap_or_default();
            // The first sentence, or its start: a line of the listing.
            let sentence = about.split(". ").next().unwrap_or_default();
            let short = match sentence.char_indices().nth(88) {
                Some((cut, _)) => {
                    let at = sentence[..cut].rfind(' ').unwrap_or(cut);
                    format!("{}…", &sentence[..at])
                }
                None => sentence.trim_end_matches('.').to_string(),
            };
            listing.push_str(&format!("  {name:<20} {short}\n"));
        }
        listing.push('\n');
    }
    cmd.help_template(format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{listing}Options:\n{{options}}\n\n{{after-help}}"
    ))
    .after_help(EXAMPLES)
}

fn main() -> ExitCode {
    let cli = match Cli::from_arg_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Crds { out, output } => crds_cmd::run(out.as_deref(), output),
        Command::Reference { out } => reference::run(&Cli::command(), &out),
        Command::Completion { shell } => {
            // Into a buffer first: the generator panics on a closed pipe, `write_raw` does not.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "toolgate", &mut script);
            client::out::write_raw(&script);
            Ok(ExitCode::SUCCESS)
        }
        Command::Lint {
            paths,
            output,
            review,
        } => lint_cmd::run(&paths, output, review),
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
            output,
        } => match (manifests, principal) {
            (Some(manifests), Some(principal)) => policy_cmds::view(&policy_cmds::ViewArgs {
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
                output,
            }),
            _ => policy_cmds::view_remote(
                &cli.conn,
                &policy_cmds::RemoteView {
                    namespace: namespace.as_deref(),
                    intent: &intent,
                    action_type,
                    max_tools: usize::from(max_tools),
                    format,
                    explain,
                    output,
                },
            ),
        },
        Command::Local(args) => local_cmd::run(&args),
        Command::Eval(args) => eval_cmd::run(&args),
        Command::Demo { keep } => demo::run(keep),
        Command::Init(args) => init_cmd::run(&args),
        Command::Executor(args) => Ok(toolgate_executor::cli::main(&args)),
        Command::Client(cmd) => client::run(&cli.conn, cmd),
        Command::Diff {
            old,
            new,
            replay,
            output,
            now,
        } => policy_cmds::diff(&old, &new, replay.as_deref(), output, now.as_deref()),
        Command::Policy(PolicyCommand::Test { dir, output, now }) => {
            gitops::policy_test(&dir, output, now.as_deref())
        }
        Command::Mcp(McpCommand::Serve(args)) => match args.listen {
            Some(listen) => mcp_http::run(&cli.conn, args, listen),
            None => mcp_serve::run_stdio(&cli.conn, args),
        },
        Command::Mcp(McpCommand::Config(args)) => mcp_config::run(&cli.conn, &args),
        Command::Import {
            file,
            url_base,
            sandbox_policy,
            namespace,
            prefix,
            credential_binding,
            trust,
            output,
        } => mcp_cmd::import(
            &toolgate_review::import::ImportConfig {
                namespace: &namespace,
                prefix: prefix.as_deref(),
                url_base: &url_base,
                sandbox_policy: &sandbox_policy,
                credential_binding: credential_binding.as_deref(),
                trust: trust.into(),
            },
            &file,
            output,
        ),
        Command::Mcp(McpCommand::Normalize {
            server,
            trust,
            namespace,
            sandbox_policy,
            server_version,
            file,
            url,
            credential_binding,
            image,
            command,
            output,
        }) => mcp_cmd::normalize(
            &toolgate_core::mcp::ServerConfig {
                name: &server,
                trust: trust.into(),
                namespace: &namespace,
                command: &command,
                url: url.as_deref(),
                credential_binding: credential_binding.as_deref(),
                image: image.as_deref(),
                sandbox_policy: &sandbox_policy,
                version: server_version.as_deref(),
            },
            &file,
            output,
        ),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolgate: {}", toolgate_client::error_line(e.as_ref()));
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Commands that print no object, and why.
    const PRINT_NO_OBJECT: &[(&str, &str)] = &[
        ("completion", "a shell script"),
        ("reference", "writes pages into a folder"),
        ("local", "runs the embedded runtime"),
        ("demo", "a story for people"),
        ("init", "writes a folder and says how to run it"),
        ("executor", "the sandbox's own entry point"),
        ("artifact", "an artifact's bytes, as stored"),
        ("mcp serve", "an MCP server on stdio"),
    ];

    /// `toolgate --help` lists every command once, in the group of who runs it.
    #[test]
    fn help_lists_every_command_once_by_who_runs_it() {
        let cmd = super::Cli::command();
        let listed: Vec<&str> = super::GROUPS
            .iter()
            .flat_map(|(_, names)| names.iter().copied())
            .collect();
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let n = listed.iter().filter(|l| **l == sub.get_name()).count();
            assert_eq!(n, 1, "{} is listed {n} times in GROUPS", sub.get_name());
        }
        for name in &listed {
            assert!(
                cmd.find_subcommand(name).is_some(),
                "GROUPS names {name}, no command"
            );
        }
        let help = super::command().render_help().to_string();
        assert!(
            help.contains("Reviewers: answering for calls:\n  approve"),
            "{help}"
        );
        assert!(help.contains("Examples:"), "{help}");
    }

    /// Every command that prints an object takes kubectl's `-o json` and `-o yaml`.
    #[test]
    fn every_command_that_prints_an_object_takes_o_json_and_yaml() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let subs: Vec<&clap::Command> = cmd.get_subcommands().collect();
            if subs.is_empty() {
                if PRINT_NO_OBJECT.iter().any(|(name, _)| *name == path) {
                    return;
                }
                let output = cmd.get_arguments().find(|a| a.get_id() == "output");
                let values: Vec<String> = output
                    .map(|a| {
                        a.get_possible_values()
                            .iter()
                            .map(|v| v.get_name().to_string())
                            .collect()
                    })
                    .unwrap_or_default();
                let short = output.and_then(clap::Arg::get_short);
                if !(values.iter().any(|v| v == "json")
                    && values.iter().any(|v| v == "yaml")
                    && short == Some('o'))
                {
                    missing.push(format!("{path} (-o: {values:?})"));
                }
                return;
            }
            for sub in subs {
                let name = if path.is_empty() {
                    sub.get_name().to_string()
                } else {
                    format!("{path} {}", sub.get_name())
                };
                walk(sub, &name, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "", &mut missing);
        assert!(
            missing.is_empty(),
            "commands without -o json|yaml: {missing:?}"
        );
        // The exemptions are commands that exist.
        for (name, _) in PRINT_NO_OBJECT {
            let mut cmd = super::Cli::command();
            for part in name.split(' ') {
                cmd = cmd
                    .find_subcommand(part)
                    .unwrap_or_else(|| panic!("no command {name}"))
                    .clone();
            }
        }
    }
}
