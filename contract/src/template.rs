//! `{{name}}` placeholders in argv, stdin and URL templates. `{{name?}}` marks an optional arg:
//! an argv element that names an absent optional arg is dropped, so optional flags are written
//! `--flag={{name?}}`. The parser is shared so lint and execution agree on what a template names.

/// A template that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{` without a closing `}}`.
    #[error("unclosed placeholder at byte {0}: expected `}}}}`")]
    Unclosed(usize),
    /// A placeholder whose name is not an identifier.
    #[error(
        "placeholder {0:?} is not an arg name: expected letters, digits and '_', optionally followed by '?'"
    )]
    BadName(String),
}

/// A piece of a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Text copied as is.
    Literal(&'a str),
    /// An arg.
    Arg {
        /// The arg name.
        name: &'a str,
        /// Whether the arg may be absent.
        optional: bool,
    },
}

/// Split a template into literal text and placeholders.
pub fn parse(template: &str) -> Result<Vec<Segment<'_>>, TemplateError> {
    let mut out = Vec::new();
    let mut rest = template;
    let mut offset = 0;
    while let Some(start) = rest.find("{{") {
        if start > 0 {
            out.push(Segment::Literal(&rest[..start]));
        }
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or(TemplateError::Unclosed(offset + start))?;
        let raw = after[..end].trim();
        let (name, optional) = match raw.strip_suffix('?') {
            Some(n) => (n, true),
            None => (raw, false),
        };
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(TemplateError::BadName(raw.to_string()));
        }
        out.push(Segment::Arg { name, optional });
        let consumed = start + 2 + end + 2;
        offset += consumed;
        rest = &rest[consumed..];
    }
    if !rest.is_empty() {
        out.push(Segment::Literal(rest));
    }
    Ok(out)
}

/// The arg names a template refers to, in order.
pub fn placeholders(template: &str) -> Result<Vec<&str>, TemplateError> {
    Ok(parse(template)?
        .into_iter()
        .filter_map(|s| match s {
            Segment::Arg { name, .. } => Some(name),
            Segment::Literal(_) => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_names() {
        assert_eq!(
            placeholders("--path={{path}} {{ mode? }}").unwrap(),
            vec!["path", "mode"]
        );
        assert_eq!(placeholders("plain").unwrap(), Vec::<&str>::new());
        assert_eq!(
            parse("a{{b?}}c").unwrap(),
            vec![
                Segment::Literal("a"),
                Segment::Arg {
                    name: "b",
                    optional: true
                },
                Segment::Literal("c")
            ]
        );
    }

    #[test]
    fn rejects_bad_templates() {
        assert_eq!(placeholders("{{path"), Err(TemplateError::Unclosed(0)));
        assert!(matches!(
            placeholders("{{a b}}"),
            Err(TemplateError::BadName(_))
        ));
        assert!(matches!(
            placeholders("{{}}"),
            Err(TemplateError::BadName(_))
        ));
        assert!(matches!(
            placeholders("{{?}}"),
            Err(TemplateError::BadName(_))
        ));
    }
}
