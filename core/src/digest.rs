//! Canonical JSON (RFC 8785 / JCS) and SHA-256 digests: what versions a tool and what an
//! approval binds.

use sha2::{Digest, Sha256};
use toolgate_crds::ToolDescriptorSpec;

/// A value could not be canonicalized (a float that is not finite, say).
#[derive(Debug, thiserror::Error)]
#[error("cannot canonicalize JSON: {0}")]
pub struct CanonicalizeError(#[from] serde_json::Error);

/// The RFC 8785 canonical form of a JSON value.
pub fn canonical_json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, CanonicalizeError> {
    Ok(serde_json_canonicalizer::to_vec(value)?)
}

/// `sha256:<hex>` of bytes.
pub fn sha256(bytes: &[u8]) -> String {
    prefixed_hex(&Sha256::digest(bytes))
}

/// `sha256:` and the hex of a digest, in one allocation (digests are made on every decision).
fn prefixed_hex(digest: &[u8]) -> String {
    const PREFIX: &str = "sha256:";
    let mut out = String::with_capacity(PREFIX.len() + digest.len() * 2);
    out.push_str(PREFIX);
    for b in digest {
        out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(b & 0xf)]));
    }
    out
}

/// `sha256:` digest of the canonical form of a JSON value (args, specs).
pub fn json_digest<T: serde::Serialize>(value: &T) -> Result<String, CanonicalizeError> {
    Ok(sha256(&canonical_json(value)?))
}

/// The content digest that versions a tool: the canonical descriptor spec's SHA-256.
pub fn descriptor_digest(spec: &ToolDescriptorSpec) -> Result<String, CanonicalizeError> {
    json_digest(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn digests_are_prefixed_lowercase_hex() {
        assert_eq!(
            sha256(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": [1, 2]}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{ "a":[1,2],"b":1 }"#).unwrap();
        assert_eq!(json_digest(&a).unwrap(), json_digest(&b).unwrap());
        assert_ne!(
            json_digest(&a).unwrap(),
            json_digest(&json!({"a": [2, 1], "b": 1})).unwrap()
        );
    }

    #[test]
    fn canonical_form_follows_rfc8785() {
        let v = json!({"b": 1.0, "a": "\u{20ac}", "c": 1e21});
        assert_eq!(
            String::from_utf8(canonical_json(&v).unwrap()).unwrap(),
            r#"{"a":"€","b":1,"c":1e+21}"#
        );
    }
}
