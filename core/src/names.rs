//! The Kubernetes name shapes toolgate's identifiers take. A namespace, a call id or a tool name
//! becomes a folder, a store key or an API path; checking its shape here, once, is what keeps
//! `../` or `/tmp/x` from ever reaching a filesystem or a URL.

/// Longest DNS-1123 label (a namespace).
pub const MAX_LABEL: usize = 63;
/// Longest DNS-1123 subdomain (an object name).
pub const MAX_SUBDOMAIN: usize = 253;

/// A DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or
/// digit, at most 63 characters (a namespace).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LABEL
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: labels joined by '.', at most 253 characters (an object name). Never
/// `.`, `..`, empty, or containing '/'.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_SUBDOMAIN
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// What a label must look like, for error messages.
pub const LABEL_RULE: &str = "a DNS label (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)";
/// What a subdomain must look like, for error messages.
pub const SUBDOMAIN_RULE: &str = "a DNS subdomain name (lowercase letters, digits, '-' and '.', each part starting and ending with a letter or digit, at most 253 characters)";

/// A provider-safe name (`^[a-zA-Z0-9_-]{1,64}$`): dots become `__`; a name that is too long
/// or already taken gets a short digest suffix. [`ToolView::resolve`] maps it back.
pub fn provider_name(canonical: &str, used: &mut std::collections::BTreeSet<String>) -> String {
    let mut name: String = canonical
        .replace('.', "__")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.len() > 64 || used.contains(&name) {
        let suffix = &crate::digest::sha256(canonical.as_bytes())[7..15];
        name.truncate(55);
        name = format!("{name}_{suffix}");
    }
    used.insert(name.clone());
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        assert!(is_dns_label("team-a"));
        assert!(!is_dns_label("team.a"));
        assert!(!is_dns_label(""));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("file.read"));
        assert!(is_dns_subdomain("call-20261201-082600-4f2a9c"));
        for bad in [
            "", ".", "..", "a..b", "../x", "/tmp/x", "a/b", "A", "a\0b", "a.", ".a",
        ] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
        assert!(!is_dns_subdomain(&"a".repeat(254)));
    }
}
