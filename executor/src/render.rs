//! Rendering templates from validated args. No shell, ever: each argv element becomes exactly
//! one or, for an array arg, several arguments of `execve`; a value can never become a flag.

use serde_json::Value;
use toolgate_contract::template::{Segment, TemplateError, parse};

/// A template that cannot be rendered from the args.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The template does not parse.
    #[error("{field}: {source}")]
    Template {
        /// Where (`execution.argv[2]`).
        field: String,
        /// Why.
        source: TemplateError,
    },
    /// A required arg is absent.
    #[error("{field}: the template needs arg {name:?}, which the call does not have")]
    MissingArg {
        /// Where.
        field: String,
        /// The arg.
        name: String,
    },
    /// An object where a scalar is needed, or an array inside a larger element.
    #[error("{field}: arg {name:?} must be a string, number or boolean{hint}")]
    NotScalar {
        /// Where.
        field: String,
        /// The arg.
        name: String,
        /// How to fix it.
        hint: &'static str,
    },
    /// A value that would be read as an option.
    #[error(
        "{field}: arg {name:?} starts with '-' and would be read as an option; put `--` before it in the argv template (or pass it as an option's argument: `-e`, `{{{{{name}}}}}`)"
    )]
    LeadingDash {
        /// Where.
        field: String,
        /// The arg.
        name: String,
    },
    /// `.` or `..` as a URL path segment would navigate the URL.
    #[error("{field}: arg {name:?} is {value:?}, which would navigate the URL path")]
    DotSegment {
        /// Where.
        field: String,
        /// The arg.
        name: String,
        /// The value.
        value: String,
    },
    /// A NUL byte cannot be passed in argv.
    #[error("{field}: arg {name:?} contains a NUL byte")]
    Nul {
        /// Where.
        field: String,
        /// The arg.
        name: String,
    },
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn present<'a>(args: &'a Value, name: &str) -> Option<&'a Value> {
    args.get(name).filter(|v| !v.is_null())
}

/// Render an argv template.
///
/// - an element that is exactly `{{name}}` becomes the value, or one element per item of an
///   array; an absent optional (`{{name?}}`) drops it;
/// - an element that mixes text and placeholders is interpolated; if it names an absent
///   optional arg the whole element is dropped (so optional flags are `--flag={{name?}}`);
/// - a value may start with '-' only after a literal `--` element, inside an element that
///   itself starts with a literal option (`--path={{path}}`), or as the one value right after a
///   literal option element (`-e {{text}}`, `--path {{path}}`): that option takes it as its
///   argument. A positional value goes after `--`.
pub fn render_argv(template: &[String], args: &Value) -> Result<Vec<String>, RenderError> {
    let mut out = Vec::with_capacity(template.len());
    let mut options_ended = false;
    // The previous element was a literal option (`-e`, `--path`) waiting for its argument.
    let mut option_argument = false;
    for (i, element) in template.iter().enumerate() {
        let field = format!("execution.argv[{i}]");
        let segments = parse(element).map_err(|source| RenderError::Template {
            field: field.clone(),
            source,
        })?;
        let after_option = std::mem::take(&mut option_argument);
        match segments.as_slice() {
            [] => out.push(String::new()),
            [Segment::Literal(l)] => {
                if *l == "--" {
                    options_ended = true;
                } else if !options_ended && l.starts_with('-') && l.len() > 1 && !l.contains('=') {
                    option_argument = true;
                }
                out.push((*l).to_string());
            }
            [Segment::Arg { name, optional }] => {
                let Some(v) = present(args, name) else {
                    if *optional {
                        continue;
                    }
                    return Err(RenderError::MissingArg {
                        field,
                        name: (*name).into(),
                    });
                };
                let items: Vec<&Value> = match v {
                    Value::Array(a) => a.iter().collect(),
                    other => vec![other],
                };
                for (n, item) in items.into_iter().enumerate() {
                    let s = scalar(item).ok_or_else(|| RenderError::NotScalar {
                        field: field.clone(),
                        name: (*name).into(),
                        hint: " (or an array of them)",
                    })?;
                    // Only the first value is the option's argument; the rest are operands.
                    check_value(&field, name, &s, options_ended || (after_option && n == 0))?;
                    out.push(s);
                }
            }
            segments => {
                let mut s = String::new();
                let mut dropped = false;
                for seg in segments {
                    match seg {
                        Segment::Literal(l) => s.push_str(l),
                        Segment::Arg { name, optional } => match present(args, name) {
                            None if *optional => dropped = true,
                            None => {
                                return Err(RenderError::MissingArg {
                                    field,
                                    name: (*name).into(),
                                });
                            }
                            Some(v) => {
                                let value = scalar(v).ok_or_else(|| RenderError::NotScalar {
                                    field: field.clone(),
                                    name: (*name).into(),
                                    hint: "; arrays only expand as a whole element",
                                })?;
                                if value.contains('\0') {
                                    return Err(RenderError::Nul {
                                        field,
                                        name: (*name).into(),
                                    });
                                }
                                s.push_str(&value);
                            }
                        },
                    }
                }
                if dropped {
                    continue;
                }
                // A template that does not itself start with '-' must not render into an option.
                let template_is_option =
                    matches!(segments.first(), Some(Segment::Literal(l)) if l.starts_with('-'));
                if !options_ended && !template_is_option && s.starts_with('-') {
                    let name = segments
                        .iter()
                        .find_map(|g| match g {
                            Segment::Arg { name, .. } => Some(*name),
                            _ => None,
                        })
                        .unwrap_or("");
                    return Err(RenderError::LeadingDash {
                        field,
                        name: name.into(),
                    });
                }
                out.push(s);
            }
        }
    }
    Ok(out)
}

fn check_value(
    field: &str,
    name: &str,
    value: &str,
    options_ended: bool,
) -> Result<(), RenderError> {
    if value.contains('\0') {
        return Err(RenderError::Nul {
            field: field.into(),
            name: name.into(),
        });
    }
    if value.starts_with('-') && !options_ended {
        return Err(RenderError::LeadingDash {
            field: field.into(),
            name: name.into(),
        });
    }
    Ok(())
}

/// Interpolate a whole-string template, turning each present arg into text with `value`;
/// absent optional args render as nothing, absent required ones are an error.
fn interpolate(
    template: &str,
    field: &str,
    args: &Value,
    value: impl Fn(&str, &Value) -> Result<String, RenderError>,
) -> Result<String, RenderError> {
    let mut s = String::new();
    let segments = parse(template).map_err(|source| RenderError::Template {
        field: field.into(),
        source,
    })?;
    for seg in segments {
        match seg {
            Segment::Literal(l) => s.push_str(l),
            Segment::Arg { name, optional } => match present(args, name) {
                None if optional => {}
                None => {
                    return Err(RenderError::MissingArg {
                        field: field.into(),
                        name: name.into(),
                    });
                }
                Some(v) => s.push_str(&value(name, v)?),
            },
        }
    }
    Ok(s)
}

/// Render a text template (stdin, header values): strings as they are, other values as JSON.
pub fn render_text(template: &str, field: &str, args: &Value) -> Result<String, RenderError> {
    interpolate(template, field, args, |_, v| {
        Ok(match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    })
}

/// Render a URL template: every value is percent-encoded as one path segment or query value, so
/// `../` or `?` in an arg cannot change the URL's structure.
pub fn render_url(template: &str, args: &Value) -> Result<String, RenderError> {
    let field = "execution.http.urlTemplate";
    interpolate(template, field, args, |name, v| {
        let value = scalar(v).ok_or_else(|| RenderError::NotScalar {
            field: field.into(),
            name: name.into(),
            hint: "",
        })?;
        if value == "." || value == ".." {
            return Err(RenderError::DotSegment {
                field: field.into(),
                name: name.into(),
                value,
            });
        }
        Ok(percent_encode(&value))
    })
}

pub use toolgate_contract::text::percent_encode;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn argv(t: &[&str], args: Value) -> Result<Vec<String>, RenderError> {
        render_argv(&t.iter().map(|s| s.to_string()).collect::<Vec<_>>(), &args)
    }

    #[test]
    fn each_value_is_one_element() {
        let r = argv(
            &["grep", "-e", "{{text}}", "--", "{{path}}"],
            json!({"text": "a b; rm -rf /", "path": "$(id)"}),
        )
        .unwrap();
        assert_eq!(r, vec!["grep", "-e", "a b; rm -rf /", "--", "$(id)"]);
    }

    #[test]
    fn arrays_expand_and_optionals_drop() {
        let r = argv(
            &["git", "add", "--", "{{files}}", "--x={{opt?}}", "{{more?}}"],
            json!({"files": ["a", "b"]}),
        )
        .unwrap();
        assert_eq!(r, vec!["git", "add", "--", "a", "b"]);
        let r = argv(&["ls", "--color={{c?}}"], json!({"c": "never"})).unwrap();
        assert_eq!(r, vec!["ls", "--color=never"]);
    }

    #[test]
    fn values_never_become_flags() {
        let e = argv(&["cat", "{{path}}"], json!({"path": "--output=/tmp/x"})).unwrap_err();
        assert!(matches!(e, RenderError::LeadingDash { .. }), "{e}");
        let e = argv(&["cat", "{{a}}{{b}}"], json!({"a": "-r", "b": "x"})).unwrap_err();
        assert!(matches!(e, RenderError::LeadingDash { .. }), "{e}");
        // After `--` the same value is a plain operand.
        assert_eq!(
            argv(
                &["cat", "--", "{{path}}"],
                json!({"path": "--output=/tmp/x"})
            )
            .unwrap(),
            vec!["cat", "--", "--output=/tmp/x"]
        );
        // A literal option prefix keeps it an option value.
        assert_eq!(
            argv(&["x", "--path={{p}}"], json!({"p": "-y"})).unwrap(),
            vec!["x", "--path=-y"]
        );
    }

    #[test]
    fn a_value_right_after_a_literal_option_is_its_argument() {
        // `grep -e {{text}}`: grep takes `-rf` as the pattern, not as options.
        assert_eq!(
            argv(
                &["grep", "-e", "{{text}}", "--", "{{path}}"],
                json!({"text": "-rf", "path": "."})
            )
            .unwrap(),
            vec!["grep", "-e", "-rf", "--", "."]
        );
        assert_eq!(
            argv(&["x", "--path", "{{p}}"], json!({"p": "-y"})).unwrap(),
            vec!["x", "--path", "-y"]
        );
        // Only one value: the second item of an array is an operand again.
        let e = argv(&["x", "-e", "{{p}}"], json!({"p": ["-a", "-b"]})).unwrap_err();
        assert!(matches!(e, RenderError::LeadingDash { .. }), "{e}");
        // Not after an element that merely ends with a value, nor two elements later.
        let e = argv(&["x", "-e", "a", "{{p}}"], json!({"p": "-y"})).unwrap_err();
        assert!(matches!(e, RenderError::LeadingDash { .. }), "{e}");
        let e = argv(&["x", "--opt=1", "{{p}}"], json!({"p": "-y"})).unwrap_err();
        assert!(matches!(e, RenderError::LeadingDash { .. }), "{e}");
        let e = argv(&["x", "-", "{{p}}"], json!({"p": "-y"})).unwrap_err();
        assert!(matches!(e, RenderError::LeadingDash { .. }), "{e}");
    }

    #[test]
    fn bad_inputs_say_where() {
        let e = argv(&["cat", "{{path}}"], json!({})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "execution.argv[1]: the template needs arg \"path\", which the call does not have"
        );
        assert!(matches!(
            argv(&["x", "{{o}}"], json!({"o": {"a": 1}})),
            Err(RenderError::NotScalar { .. })
        ));
        assert!(matches!(
            argv(&["x", "a{{o}}"], json!({"o": [1]})),
            Err(RenderError::NotScalar { .. })
        ));
        assert!(matches!(
            argv(&["x", "{{o}}"], json!({"o": "a\u{0}b"})),
            Err(RenderError::Nul { .. })
        ));
        assert!(matches!(
            argv(&["x", "{{o"], json!({})),
            Err(RenderError::Template { .. })
        ));
    }

    #[test]
    fn urls_encode_each_value() {
        let u = render_url(
            "https://api.example.com/repos/{{owner}}/{{repo}}/issues",
            &json!({"owner": "a..", "repo": "a/b?c=1#x"}),
        )
        .unwrap();
        assert_eq!(
            u,
            "https://api.example.com/repos/a../a%2Fb%3Fc%3D1%23x/issues"
        );
        for dots in [".", ".."] {
            let e = render_url("https://x/{{p}}/y", &json!({"p": dots})).unwrap_err();
            assert!(matches!(e, RenderError::DotSegment { .. }), "{e}");
        }
    }

    #[test]
    fn text_templates() {
        assert_eq!(
            render_text("{{content}}", "stdin", &json!({"content": "line\n"})).unwrap(),
            "line\n"
        );
        assert_eq!(
            render_text("n={{n}}", "stdin", &json!({"n": 3})).unwrap(),
            "n=3"
        );
    }
}
