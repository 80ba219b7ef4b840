//! What is wrong with one object, below the registry that registers tools by it and the folder
//! linter that reports it: how bad a finding is, each object's rules ([`descriptor`]) and
//! instruction-like text where a model would read it ([`poisoning`]).

use std::fmt;

pub mod descriptor;
pub mod poisoning;

pub use descriptor::descriptor_findings;

/// How bad a finding is. Errors fail `toolgate lint`; warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Must be fixed: the object is rejected or unsafe.
    Error,
    /// Worth a look.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One finding of an object: severity, field path, code, message.
pub type Local = (Severity, String, &'static str, String);

/// Append a field name to a path.
pub fn join_path(base: &str, field: &str) -> String {
    let simple = !field.is_empty()
        && field
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let seg = if simple {
        field.to_string()
    } else {
        format!("[{field:?}]")
    };
    match (base.is_empty(), simple) {
        (true, _) => seg,
        (false, true) => format!("{base}.{seg}"),
        (false, false) => format!("{base}{seg}"),
    }
}

/// The ways `args` break `schema`, as findings coded `code` at the field each names under
/// `base` (`spec.args.path`): a call's args and a descriptor's example args are checked alike.
pub fn args_findings(
    schema: &serde_json::Value,
    args: &serde_json::Value,
    base: &str,
    code: &'static str,
) -> Vec<Local> {
    crate::args::validate_args(schema, args, &crate::args::ArgsLimits::default())
        .violations
        .into_iter()
        .map(|v| {
            let field = v.pointer.trim_start_matches('/').replace('/', ".");
            let at = if field.is_empty() {
                base.to_string()
            } else {
                join_path(base, &field)
            };
            (Severity::Error, at, code, v.message)
        })
        .collect()
}
