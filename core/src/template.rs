//! `{{name}}` placeholders in argv, stdin and URL templates. Rendering belongs to the executor;
//! the parser is shared so lint and execution agree on what a template names.

/// A template that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{` without a closing `}}`.
    #[error("unclosed placeholder at byte {0}: expected `}}}}`")]
    Unclosed(usize),
    /// A placeholder whose name is not an identifier.
    #[error("placeholder {0:?} is not an arg name: expected letters, digits and '_'")]
    BadName(String),
}

/// The arg names a template refers to, in order.
pub fn placeholders(template: &str) -> Result<Vec<&str>, TemplateError> {
    let mut names = Vec::new();
    let mut rest = template;
    let mut offset = 0;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or(TemplateError::Unclosed(offset + start))?;
        let name = after[..end].trim();
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(TemplateError::BadName(name.to_string()));
        }
        names.push(name);
        let consumed = start + 2 + end + 2;
        offset += consumed;
        rest = &rest[consumed..];
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_names() {
        assert_eq!(
            placeholders("--path={{path}} {{ mode }}").unwrap(),
            vec!["path", "mode"]
        );
        assert_eq!(placeholders("plain").unwrap(), Vec::<&str>::new());
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
    }
}
