//! Shapes of credentials that must never appear in manifests or model-visible text.
//!
//! Known values are redacted exactly by the redactor; these patterns catch the common token
//! shapes nobody told us about (a token pasted into a manifest, a key echoed by a tool).

use std::sync::LazyLock;

use regex::bytes::Regex;

/// A recognised credential shape.
#[derive(Debug, Clone, Copy)]
pub struct SecretShape {
    /// Stable name (`github-token`).
    pub name: &'static str,
    pattern: &'static str,
    /// A check the pattern alone cannot express (a mix of character classes); `None` accepts
    /// every match.
    accept: Option<fn(&[u8]) -> bool>,
}

/// Shapes are the same when their names are: each name is declared once.
impl PartialEq for SecretShape {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for SecretShape {}

impl SecretShape {
    const fn new(name: &'static str, pattern: &'static str) -> Self {
        SecretShape {
            name,
            pattern,
            accept: None,
        }
    }

    /// The ranges of `bytes` this shape matches.
    pub(crate) fn find_iter<'a>(
        &self,
        re: &'a Regex,
        bytes: &'a [u8],
    ) -> impl Iterator<Item = std::ops::Range<usize>> + 'a {
        let accept = self.accept;
        re.find_iter(bytes)
            .filter(move |m| accept.is_none_or(|f| f(m.as_bytes())))
            .map(|m| m.range())
    }
}

/// An AWS secret access key: exactly 40 characters of base64's alphabet, with upper and lower
/// case letters and digits (which a git hash, a path or a word does not have all of).
fn is_aws_secret_key(m: &[u8]) -> bool {
    m.len() == 40
        && m.iter().any(u8::is_ascii_uppercase)
        && m.iter().any(u8::is_ascii_lowercase)
        && m.iter().any(u8::is_ascii_digit)
}

const SHAPES: &[SecretShape] = &[
    SecretShape::new(
        "github-token",
        r"\b(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b",
    ),
    SecretShape::new("aws-access-key-id", r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    SecretShape::new("slack-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    SecretShape::new("vault-token", r"\bhv[sbr]\.[A-Za-z0-9_-]{20,}\b"),
    SecretShape::new("private-key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    SecretShape::new(
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ),
    SecretShape::new("openai-key", r"\bsk-(proj-)?[A-Za-z0-9_-]{32,}\b"),
    SecretShape::new("google-api-key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    SecretShape::new(
        "bearer-credential",
        r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{20,}=*",
    ),
    SecretShape::new("gitlab-token", r"\bglpat-[A-Za-z0-9_-]{20,}\b"),
    SecretShape::new("stripe-key", r"\b[rs]k_(live|test)_[A-Za-z0-9]{24,}\b"),
    SecretShape::new("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    SecretShape::new("pypi-token", r"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    SecretShape::new("huggingface-token", r"\bhf_[A-Za-z0-9]{34,}\b"),
    // Maximal runs of base64's alphabet; the check keeps the 40-character mixed ones.
    SecretShape {
        name: "aws-secret-access-key",
        pattern: r"[A-Za-z0-9/+]{40,}",
        accept: Some(is_aws_secret_key),
    },
];

/// The shapes compiled once per process, as byte regexes (text is matched as its UTF-8 bytes,
/// so ranges are byte ranges either way): compiling them costs about 2 ms, and the redactor a
/// runtime makes for every call uses them too.
static COMPILED: LazyLock<Vec<(SecretShape, Regex)>> = LazyLock::new(|| {
    SHAPES
        .iter()
        .filter_map(|s| Regex::new(s.pattern).ok().map(|r| (*s, r)))
        .collect()
});

/// Every shape with its compiled regex (compiled at the first call).
pub(crate) fn compiled_shapes() -> &'static [(SecretShape, Regex)] {
    &COMPILED
}

/// The first credential shape found in `text`, with its byte range.
pub fn find_secret_shape(text: &str) -> Option<(SecretShape, std::ops::Range<usize>)> {
    COMPILED
        .iter()
        .filter_map(|(shape, re)| {
            shape
                .find_iter(re, text.as_bytes())
                .next()
                .map(|r| (*shape, r))
        })
        .min_by_key(|(_, r)| r.start)
}

/// Every credential-shaped range in `text`, merged and sorted.
pub fn secret_ranges(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut ranges: Vec<_> = COMPILED
        .iter()
        .flat_map(|(shape, re)| shape.find_iter(re, text.as_bytes()))
        .collect();
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<std::ops::Range<usize>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// Field names that only ever hold a secret value (`password`, `token`, `apiKey`).
pub fn is_secret_field_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase().replace(['_', '-'], "");
    matches!(
        lower.as_str(),
        "value"
            | "secret"
            | "secretvalue"
            | "password"
            | "passwd"
            | "token"
            | "accesstoken"
            | "apikey"
            | "apitoken"
            | "privatekey"
            | "clientsecret"
            | "secretaccesskey"
            | "bearertoken"
            | "data"
            | "stringdata"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_shape() {
        let samples = [
            (
                "github-token",
                "token ghp_0123456789abcdefghijABCDEFGHIJ0123456789 end",
            ),
            ("aws-access-key-id", "AKIAIOSFODNN7EXAMPLE"),
            ("slack-token", "xoxb-1234567890-abcdefghij"),
            ("vault-token", "hvs.CAESIJ0123456789abcdefghijklmnop"),
            ("private-key", "-----BEGIN RSA PRIVATE KEY-----\nMII"),
            (
                "jwt",
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            ),
            ("openai-key", "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"),
            ("google-api-key", "AIzaSyA0123456789abcdefghijklmnopqrstuv"),
            (
                "bearer-credential",
                "Authorization: Bearer abcdefghijklmnopqrstuvwxyz",
            ),
            ("gitlab-token", "glpat-abcdefghij0123456789"),
            ("stripe-key", "sk_live_0123456789abcdefghijABCD"),
            ("npm-token", "npm_0123456789abcdefghijABCDEFGHIJ012345"),
            ("huggingface-token", "hf_0123456789abcdefghijABCDEFGHIJ0123"),
            (
                "aws-secret-access-key",
                "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
            ),
        ];
        for (name, text) in samples {
            let (shape, _) = find_secret_shape(text).unwrap_or_else(|| panic!("{name} not found"));
            assert_eq!(shape.name, name, "{text}");
        }
    }

    #[test]
    fn ordinary_text_is_not_a_secret() {
        for text in [
            "secret/data/team-a/github",
            "ghp_short",
            "Bearer {{token}}",
            "the quick brown fox",
            "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            // A git commit, a path and a long base64 blob are not AWS secret keys.
            "commit 6b599ad0c1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6",
            "/usr/lib/x86_64-linux-gnu/libLLVM17/Abc1/file",
            "dGhlIHF1aWNrIGJyb3duIGZveCBqdW1wcyBvdmVyIHRoZSBsYXp5IGRvZyB0d2ljZQ==",
        ] {
            assert_eq!(find_secret_shape(text), None, "{text}");
        }
    }

    #[test]
    fn ranges_merge() {
        let text = "a AKIAIOSFODNN7EXAMPLE b ghp_0123456789abcdefghijABCDEFGHIJ0123456789";
        let r = secret_ranges(text);
        assert_eq!(r.len(), 2);
        assert_eq!(&text[r[0].clone()], "AKIAIOSFODNN7EXAMPLE");
    }

    #[test]
    fn secret_field_names() {
        assert!(is_secret_field_name("apiKey"));
        assert!(is_secret_field_name("client_secret"));
        assert!(!is_secret_field_name("path"));
        assert!(!is_secret_field_name("field"));
    }
}
