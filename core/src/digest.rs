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
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
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
