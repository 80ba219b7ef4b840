//! The command line's reference, walked from its clap definitions.

use std::fmt::Write as _;

use super::cell;

/// One section per visible command, depth first, each with its usage and its own options;
/// the options every command takes are listed once, at the top.
pub fn page(cli: &clap::Command) -> String {
    let mut cli = cli.clone();
    cli.build();
    let mut s = String::from(
        "# Command line\n\n\
         For everyone who types `toolgate`: every command and flag. `toolgate --help` and \
         `toolgate COMMAND --help` print the same text.\n\n",
    );
    s.push_str("## Global options\n\nTaken by every command that talks to a server.\n\n");
    options(&mut s, cli.get_arguments().filter(|a| a.is_global_set()));
    s.push_str("\n## Commands\n\n");
    for sub in visible(&cli) {
        let _ = writeln!(
            s,
            "- [`toolgate {}`](#{}) — {}",
            sub.get_name(),
            anchor(&format!("toolgate {}", sub.get_name())),
            about(sub, false)
        );
    }
    for sub in visible(&cli) {
        command(&mut s, sub, "toolgate");
    }
    s
}

fn command(s: &mut String, cmd: &clap::Command, parent: &str) {
    let path = format!("{parent} {}", cmd.get_name());
    let _ = writeln!(s, "\n### {path}\n\n{}\n", about(cmd, true));
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ").trim();
    let _ = writeln!(s, "```text\n{usage}\n```\n");
    let own: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_global_set() && !a.is_hide_set() && !is_help(a))
        .collect();
    if !own.is_empty() {
        options(s, own.into_iter());
    }
    for sub in visible(cmd) {
        command(s, sub, &path);
    }
}

/// The subcommands a user sees (not the hidden ones, nor clap's own `help`).
fn visible(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
}

fn is_help(a: &clap::Arg) -> bool {
    matches!(a.get_id().as_str(), "help" | "version")
}

fn about(cmd: &clap::Command, long: bool) -> String {
    let text = if long {
        cmd.get_long_about().or(cmd.get_about())
    } else {
        cmd.get_about()
    };
    sentence(&text.map(|t| t.to_string()).unwrap_or_default())
}

/// Help text as a sentence: clap drops a one-line help's final period.
fn sentence(text: &str) -> String {
    let text = text.trim();
    match text.chars().last() {
        None => String::new(),
        Some('.' | '!' | '?' | ':' | ')') if !text.ends_with("e.g.)") => text.to_string(),
        Some(_) => format!("{text}."),
    }
}

fn options<'a>(s: &mut String, args: impl Iterator<Item = &'a clap::Arg>) {
    s.push_str("| option | default | description |\n| --- | --- | --- |\n");
    for a in args.filter(|a| !is_help(a)) {
        let name = match (a.get_short(), a.get_long()) {
            (_, None) => format!("`<{}>`", value_name(a)),
            (Some(short), Some(long)) => format!("`-{short}`, `--{long}{}`", takes(a)),
            (None, Some(long)) => format!("`--{long}{}`", takes(a)),
        };
        let default = a
            .get_default_values()
            .iter()
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(", ");
        let mut help = sentence(
            &a.get_long_help()
                .or(a.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default(),
        );
        let values: Vec<String> = a
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if !values.is_empty() && a.get_action().takes_values() {
            let _ = write!(help, " One of {}.", values.join(", "));
        }
        if let Some(env) = a.get_env() {
            let _ = write!(help, " Environment: `{}`.", env.to_string_lossy());
        }
        if a.is_required_set() {
            help.push_str(" Required.");
        }
        let _ = writeln!(s, "| {name} | {default} | {} |", cell(help.trim()));
    }
}

fn takes(a: &clap::Arg) -> String {
    if a.get_action().takes_values() {
        format!(" <{}>", value_name(a))
    } else {
        String::new()
    }
}

fn value_name(a: &clap::Arg) -> String {
    a.get_value_names()
        .and_then(|n| n.first())
        .map(|n| n.to_string())
        .unwrap_or_else(|| a.get_id().as_str().to_uppercase())
}

/// The anchor GitHub gives a heading.
pub fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
