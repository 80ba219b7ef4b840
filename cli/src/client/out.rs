//! Standard output for every command. Text shows escape sequences and characters that hide or
//! reorder text instead of passing them to the terminal (a tool's output, an agent's intent and a
//! descriptor are not the operator's to repaint the screen with); JSON goes out as data. A reader
//! that stops early (`toolgate view … | head`) closes the pipe; then the command ends quietly
//! with success, as ripgrep does, instead of panicking the way `println!` does on a broken pipe.

use std::io::Write;

/// Write formatted text to stdout, neutralised ([`toolgate_contract::text::neutralise`]); see the
/// module doc for a closed pipe.
pub fn write(args: std::fmt::Arguments<'_>) {
    let text = args.to_string();
    write_raw(toolgate_contract::text::neutralise(&text).as_bytes());
}

/// Write data (JSON: its string escapes already keep control characters out) to stdout as is.
pub fn write_raw(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("toolgate: cannot write to standard output: {e}");
        std::process::exit(74);
    }
}

/// `print!` through [`write`].
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::client::out::write(format_args!($($t)*)) };
}

/// How a command prints what it shows (kubectl's `-o`): `text` for people, `json` and `yaml` the
/// same object for programs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people.
    #[default]
    Text,
    /// The object as JSON.
    Json,
    /// The object as YAML.
    Yaml,
}

/// A value as JSON or YAML, as `format` says (text is each command's own); JSON for text.
pub fn object(value: &serde_json::Value, format: Format) {
    match format {
        Format::Yaml => {
            let text = serde_norway::to_string(value).unwrap_or_else(|e| format!("{e}\n"));
            write_raw(text.as_bytes());
        }
        Format::Json | Format::Text => json(value),
    }
}

/// A JSON value, pretty, through [`write_raw`].
pub fn json(value: &serde_json::Value) {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{e}"));
    text.push('\n');
    write_raw(text.as_bytes());
}

/// `println!` through [`write`].
#[macro_export]
macro_rules! outln {
    () => { $crate::client::out::write(format_args!("\n")) };
    ($($t:tt)*) => { $crate::client::out::write(format_args!("{}\n", format_args!($($t)*))) };
}
